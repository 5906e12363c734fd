import Foundation
import Glibc
import Testing

@testable import GatehouseNet

/// Rough numbers, not assertions: run with `GATEHOUSE_TLS_BENCH=1 swift test --filter TLSBenchmarks`.
/// Echo throughput plain vs TLS through `BufferedConnection`, and full handshakes per second from
/// `openssl s_time` against our TLS echo server and against `openssl s_server` with the same certificate.
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["GATEHOUSE_TLS_BENCH"] != nil))
struct TLSBenchmarks {
  static let echoBytes = (Int(ProcessInfo.processInfo.environment["GATEHOUSE_TLS_BENCH_MB"] ?? "") ?? 64) << 20

  /// Seconds to send `echoBytes` to an echo server and read them all back, on two loops.
  func echoSeconds(server: TLSContext?, client: TLSClientOptions?) throws -> Double {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let clientLog = EventLog()
    let port: UInt16
    let listener: LoopConfined<TCPListener>
    if let server {
      (port, listener) = try startTLSEchoServer(on: group.loops[0], context: server, log: serverLog)
    } else {
      (port, listener) = try startEchoServer(on: group.loops[0], log: serverLog)
    }
    defer { _ = try? onLoop(group.loops[0]) { listener.value.close() } }
    let payload = [UInt8](repeating: 0x5A, count: TLSBenchmarks.echoBytes)
    let start = ContinuousClock.now
    if let client {
      try startTLSClient(
        on: group.loops[1], port: port, options: client, log: clientLog, payload: payload,
        expectedBack: payload.count, keepBytes: false)
    } else {
      try onLoop(group.loops[1]) {
        let delegate = RecordingDelegate(log: clientLog)
        delegate.keepBytes = false
        delegate.onConnect = { connection in connection.write(payload) }
        delegate.onRead = { connection, total in
          if total >= payload.count { connection.close() }
        }
        _ = try BufferedConnection.connect(
          to: .loopback(port: port), on: group.loops[1], timeout: .seconds(10), delegate: delegate)
      }
    }
    #expect(waitUntil(timeout: .seconds(120)) { clientLog.count(prefix: "close:") == 1 })
    let elapsed = ContinuousClock.now - start
    #expect(clientLog.receivedCount == payload.count)
    let (seconds, attoseconds) = elapsed.components
    return Double(seconds) + Double(attoseconds) / 1e18
  }

  @Test func echoThroughputPlainVersusTLS() throws {
    let certificates = try TestCertificates.get()
    let server = try TLSContext(
      server: TLSServerConfiguration(
        certificateChainPath: certificates.serverCertificatePath, privateKeyPath: certificates.serverKeyPath))
    let client = TLSClientOptions(
      context: try TLSContext(client: TLSClientConfiguration(caPath: certificates.caPath)), serverName: "localhost")
    let megabytes = Double(TLSBenchmarks.echoBytes >> 20)
    for round in 1...3 {
      let plain = try echoSeconds(server: nil, client: nil)
      let tls = try echoSeconds(server: server, client: client)
      print(
        "echo round \(round): plain \(Int(megabytes / plain)) MB/s, TLS \(Int(megabytes / tls)) MB/s "
          + "(\(Int(megabytes)) MB each way)")
    }
  }

  @Test func handshakesPerSecondVersusOpenSSLServer() throws {
    let certificates = try TestCertificates.get()
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let log = EventLog()
    let context = try TLSContext(
      server: TLSServerConfiguration(
        certificateChainPath: certificates.serverCertificatePath, privateKeyPath: certificates.serverKeyPath))
    let server = try startTLSEchoServer(on: group.loops[0], context: context, log: log)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let freePort = try TCPListener(address: .loopback(port: 0)).localPort  // closed again at once
    for version in ["-tls1_3", "-tls1_2"] {
      let ours = runShell(
        "timeout -s KILL 30 openssl s_time -connect 127.0.0.1:\(server.port) -new -time 5 \(version) 2>&1 "
          + "| grep connections")
      let reference = runShell(
        """
        openssl s_server -accept \(freePort) -cert '\(certificates.serverCertificatePath)' \
          -key '\(certificates.serverKeyPath)' -quiet >/dev/null 2>&1 &
        PID=$!
        sleep 0.5
        timeout -s KILL 30 openssl s_time -connect 127.0.0.1:\(freePort) -new -time 5 \(version) 2>&1 | grep connections
        kill -9 $PID
        """)
      print("handshakes \(version) gatehouse: \(ours.output)")
      print("handshakes \(version) s_server:  \(reference.output)")
    }
    #expect(waitUntil { log.count(prefix: "close:") == log.count("accept") })
  }
}
