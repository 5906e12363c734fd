import Dispatch
import Glibc
import Synchronization
import Testing

@testable import GatehouseNet

/// TLS through `BufferedConnection` on 127.0.0.1 port 0, with certificates made at test time. Serialized so
/// descriptor counts are not disturbed; every wait is bounded and nothing asserts on timing.
@Suite(.serialized, .timeLimit(.minutes(3))) struct TLSTests {
  let certificates: TestCertificates

  init() throws {
    certificates = try TestCertificates.get()
  }

  func serverContext(
    certificate: String? = nil, clientCA: String? = nil, serverNames: [String: TLSContext] = [:],
    handshakeTimeout: Duration = .seconds(10)
  ) throws -> TLSContext {
    try TLSContext(
      server: TLSServerConfiguration(
        certificateChainPath: certificate ?? certificates.serverCertificatePath,
        privateKeyPath: certificates.serverKeyPath, clientCAPath: clientCA, handshakeTimeout: handshakeTimeout),
      serverNames: serverNames)
  }

  func clientOptions(
    serverName: String = "localhost", verify: Bool = true, clientCertificate: Bool = false,
    handshakeTimeout: Duration = .seconds(10)
  ) throws -> TLSClientOptions {
    let context = try TLSContext(
      client: TLSClientConfiguration(
        caPath: certificates.caPath, verify: verify,
        certificateChainPath: clientCertificate ? certificates.clientCertificatePath : nil,
        privateKeyPath: clientCertificate ? certificates.clientKeyPath : nil))
    return TLSClientOptions(context: context, serverName: serverName, handshakeTimeout: handshakeTimeout)
  }

  /// Runs one client against `serverContext` and returns both logs once the client has closed.
  func exchange(
    server context: TLSContext, client options: TLSClientOptions, payload: [UInt8] = Array("hello".utf8),
    keepBytes: Bool = true
  ) throws -> (server: EventLog, client: EventLog) {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let clientLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: context, log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    try startTLSClient(
      on: group.loops[1], port: server.port, options: options, log: clientLog, payload: payload,
      expectedBack: payload.count, keepBytes: keepBytes)
    #expect(waitUntil(timeout: .seconds(30)) { clientLog.count(prefix: "close:") == 1 })
    #expect(waitUntil { serverLog.count(prefix: "close:") == serverLog.count("accept") })
    return (serverLog, clientLog)
  }

  // MARK: Data

  @Test func smallEchoWithALPNAndTLS13() throws {
    let logs = try exchange(server: try serverContext(), client: try clientOptions())
    #expect(logs.client.receivedBytes == Array("hello".utf8))
    #expect(logs.client.all == ["connect", "info:http/1.1|localhost|/CN=localhost|TLSv1.3", "close:owner"])
    #expect(logs.server.all.contains("info:http/1.1|localhost|-|TLSv1.3"))
    // The client's close_notify reaches the server as EOF; it then closes (and sends its own).
    #expect(logs.server.all.suffix(2) == ["eof", "close:owner"])
  }

  @Test func oneMegabyteBothWays() throws {
    let payload = pattern(1 << 20)
    let logs = try exchange(server: try serverContext(), client: try clientOptions(), payload: payload)
    #expect(logs.client.receivedCount == payload.count)
    #expect(logs.client.receivedBytes == payload)
    #expect(logs.client.all.last == "close:owner")
  }

  @Test func manyConcurrentConnectionsAcrossLoops() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let clientLog = EventLog()
    // What this test checks is that every one of 40 concurrent sessions across two loops gets its whole
    // echo, not how fast handshakes are (the timeout tests below check the deadlines). With the default 10 s
    // handshake deadlines, a machine loaded enough to hold a loop off the CPU for seconds fails a session
    // (a timed-out handshake closes it before any echo), so the deadlines here
    // are far beyond anything a working handshake needs; a session that stalls for good still fails below.
    let server = try startTLSEchoServer(
      on: group.loops[0], context: try serverContext(handshakeTimeout: .seconds(100)), log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let options = try clientOptions(handshakeTimeout: .seconds(100))
    let payload = pattern(20_000)
    let count = 40
    for _ in 0..<count {
      try startTLSClient(
        on: group.loops[1], port: server.port, options: options, log: clientLog, payload: payload,
        expectedBack: payload.count, keepBytes: false)
    }
    #expect(waitUntil(timeout: .seconds(120)) { clientLog.count(prefix: "close:") == count })
    // On failure, say how sessions ended on both sides: a stall, a timeout and a reset look different.
    let endings =
      "client: \(clientLog.count("connect")) connected, \(clientLog.count("eof")) EOF before the echo, "
      + "\(clientLog.all.filter { $0.hasPrefix("close:") && $0 != "close:owner" }); server: "
      + "\(serverLog.count("accept")) accepted, \(serverLog.all.filter { $0.hasPrefix("close:") && $0 != "close:owner" })"
    #expect(clientLog.count("close:owner") == count, "\(endings)")
    #expect(clientLog.receivedCount == count * payload.count, "\(endings)")
  }

  @Test func applicationDataArrivingWithTheClientFinishedIsDelivered() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let clientLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    // Small enough that the server's read-ahead takes all of it with the Finished: nothing is left in the
    // kernel for epoll to report.
    let payload = pattern(2_000)
    let relay = try CoalescingRelay(to: server.port, holdUntil: payload.count)
    try startTLSClient(
      on: group.loops[1], port: relay.port, options: try clientOptions(), log: clientLog, payload: payload,
      expectedBack: payload.count, keepBytes: true)
    // Without the check the session stalls until the relay gives up (30 s without traffic) and closes.
    #expect(waitUntil(timeout: .seconds(60)) { clientLog.count(prefix: "close:") == 1 })
    #expect(clientLog.receivedBytes == payload, "\(clientLog.all) \(serverLog.all)")
  }

  @Test func writesAndCloseBeforeTheHandshakeWaitForIt() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let clientLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog) {
      delegate in
      delegate.echo = false
      delegate.keepBytes = true
    }
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let options = LoopConfined(try clientOptions())
    let payload = pattern(200_000)
    try onLoop(group.loops[1]) {
      let connection = try BufferedConnection.connect(
        to: .loopback(port: server.port), on: group.loops[1], timeout: .seconds(10),
        delegate: RecordingDelegate(log: clientLog), tls: options.value)
      // Queued while connecting, sent after the handshake; the close waits for the queue, then close_notify.
      #expect(connection.write(payload))
      #expect(connection.isConnecting)
      connection.close()
    }
    #expect(waitUntil { clientLog.count(prefix: "close:") == 1 })
    #expect(clientLog.all.filter { $0 != "high" && $0 != "drain" } == ["connect", "close:owner"])
    #expect(waitUntil { serverLog.count(prefix: "close:") == 1 })
    let received = serverLog.receivedBytes
    #expect(received.count == payload.count)
    let firstDifference = zip(received, payload).enumerated().first { $0.element.0 != $0.element.1 }?.offset
    #expect(firstDifference == nil)
    #expect(serverLog.all.suffix(2) == ["eof", "close:owner"])
  }

  @Test func backpressureCountsPlaintextAndPausedReadingResumes() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let clientLog = EventLog()
    // The server stops reading after its first record and resumes a little later: what OpenSSL read ahead
    // meanwhile must still be delivered after the resume, though epoll has nothing new to report for it.
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog) {
      delegate in
      delegate.echo = false
      var paused = false
      delegate.onRead = { connection, _ in
        guard !paused else { return }
        paused = true
        connection.pauseReading()
        serverLog.append("paused")
        connection.loop.scheduleTimer(after: .milliseconds(300)) { connection.resumeReading() }
      }
    }
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    // Far more than loopback socket buffers hold, so the plaintext queue must pass the high watermark.
    let payload = pattern(16 << 20)
    let options = LoopConfined(try clientOptions())
    let client = LoopConfined<BufferedConnection?>(nil)
    let queuedAtHigh = Counter()
    try onLoop(group.loops[1]) {
      let delegate = RecordingDelegate(log: clientLog)
      delegate.keepBytes = false
      delegate.onConnect = { connection in
        connection.write(payload)
        queuedAtHigh.increment(by: connection.queuedByteCount)
        connection.closeOutputAfterFlush()
      }
      client.value = try BufferedConnection.connect(
        to: .loopback(port: server.port), on: group.loops[1], timeout: .seconds(10), delegate: delegate,
        tls: options.value)
    }
    #expect(waitUntil { clientLog.count("high") == 1 })
    #expect(queuedAtHigh.value > WriteWatermarks().high)
    #expect(waitUntil(timeout: .seconds(60)) { clientLog.count("drain") == 1 })
    #expect(waitUntil(timeout: .seconds(60)) { serverLog.receivedCount == payload.count })
    // The half-close sent close_notify after the last byte: EOF, and the server's close reaches the client.
    #expect(waitUntil { serverLog.count("eof") == 1 })
    #expect(serverLog.count("paused") == 1)
    #expect(waitUntil { clientLog.count(prefix: "close:") == 1 })
    #expect(clientLog.all.contains("eof"))
    try onLoop(group.loops[1]) { client.value = nil }
  }

  // MARK: Verification

  @Test(arguments: [
    ("unknown CA", "unable to get local issuer certificate"),
    ("expired", "certificate has expired"),
    ("wrong host", "hostname mismatch"),
  ])
  func verificationFailuresAreTLSFailuresOnTheClient(_ situation: String, _ reason: String) throws {
    let certificate =
      switch situation {
      case "unknown CA": certificates.unknownCACertificatePath
      case "expired": certificates.expiredCertificatePath
      default: certificates.wrongHostCertificatePath
      }
    let logs = try exchange(server: try serverContext(certificate: certificate), client: try clientOptions())
    let closes = logs.client.all.filter { $0.hasPrefix("close:") }
    #expect(closes.count == 1)
    #expect(closes.first?.hasPrefix("close:tls=TLS certificate rejected: certificate verification failed") == true)
    #expect(closes.first?.contains(reason) == true, "\(closes)")
    #expect(!logs.client.all.contains("connect"))
    // The server sees the client's alert as a failed handshake, not as data.
    #expect(logs.server.count(prefix: "close:tls=") == 1)
    #expect(logs.server.receivedCount == 0)
  }

  @Test func verifyFalseAcceptsAWrongHostCertificate() throws {
    let logs = try exchange(
      server: try serverContext(certificate: certificates.wrongHostCertificatePath),
      client: try clientOptions(verify: false))
    #expect(logs.client.receivedBytes == Array("hello".utf8))
    #expect(logs.client.all.last == "close:owner")
  }

  @Test func ipAddressesAreCheckedAgainstIPSubjectAltNames() throws {
    let good = try exchange(server: try serverContext(), client: try clientOptions(serverName: "127.0.0.1"))
    #expect(good.client.all.last == "close:owner")
    #expect(good.client.receivedBytes == Array("hello".utf8))
    let bad = try exchange(server: try serverContext(), client: try clientOptions(serverName: "127.0.0.2"))
    #expect(bad.client.count(prefix: "close:tls=TLS certificate rejected") == 1)
  }

  @Test func mutualTLSRejectsAClientWithoutACertificateAndAcceptsOneWithIt() throws {
    let context = try serverContext(clientCA: certificates.caPath)
    let refused = try exchange(server: context, client: try clientOptions())
    // With TLS 1.3 the client finishes its side before the server checks; the server's alert then ends it.
    #expect(refused.client.count(prefix: "close:tls=") == 1)
    #expect(refused.client.receivedCount == 0)
    #expect(refused.server.count(prefix: "close:tls=TLS certificate rejected") == 1)
    #expect(refused.server.receivedCount == 0)

    let accepted = try exchange(server: context, client: try clientOptions(clientCertificate: true))
    #expect(accepted.client.receivedBytes == Array("hello".utf8))
    #expect(accepted.server.all.contains("info:http/1.1|localhost|/CN=test-client|TLSv1.3"))
  }

  @Test func sniSelectsTheCertificateForTheName() throws {
    let names = [
      "wrong.example": try serverContext(certificate: certificates.wrongHostCertificatePath),
      "*.sni.test": try serverContext(certificate: certificates.wildcardCertificatePath),
    ]
    let context = try serverContext(serverNames: names)
    // Each client verifies against its own name, so it only succeeds if that name's certificate was sent.
    for name in ["wrong.example", "WRONG.example", "api.sni.test", "localhost", "unknown.example"] {
      let logs = try exchange(server: context, client: try clientOptions(serverName: name, verify: true))
      if name == "unknown.example" {
        // An unknown name gets the default (localhost) certificate, which does not match it.
        #expect(logs.client.count(prefix: "close:tls=TLS certificate rejected") == 1)
      } else {
        #expect(logs.client.all.last == "close:owner", "\(name): \(logs.client.all)")
        #expect(logs.client.receivedBytes == Array("hello".utf8))
        #expect(logs.server.all.contains { $0.hasPrefix("info:http/1.1|\(name)|") })
      }
    }
  }

  // MARK: Failures on the server side

  @Test func plaintextHTTPToATLSListenerIsClosedAndOthersCarryOn() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let plain = try BlockingClient(port: server.port)
    try plain.send(Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8))
    let answer = plain.drainUntilEOF()
    #expect(answer.count < 64)  // at most an alert, never an echo
    #expect(waitUntil { serverLog.count(prefix: "close:tls=TLS handshake failed") == 1 })
    #expect(serverLog.all.contains { $0.contains("http request") })

    let clientLog = EventLog()
    try startTLSClient(
      on: group.loops[1], port: server.port, options: try clientOptions(), log: clientLog,
      payload: Array("after".utf8), expectedBack: 5)
    #expect(waitUntil { clientLog.count(prefix: "close:") == 1 })
    #expect(clientLog.receivedBytes == Array("after".utf8))
  }

  @Test func serverHandshakeTimesOutForASilentClient() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let context = try serverContext(handshakeTimeout: .milliseconds(200))
    let server = try startTLSEchoServer(on: group.loops[0], context: context, log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let silent = try BlockingClient(port: server.port)
    #expect(waitUntil { serverLog.count(prefix: "close:tls=TLS handshake timed out") == 1 })
    #expect(silent.drainUntilEOF().count == 0)
  }

  @Test func clientHandshakeTimesOutAgainstASilentServer() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    // A listener that never accepts: the kernel completes TCP, nobody answers the ClientHello.
    let listener = try TCPListener(address: .loopback(port: 0))
    let clientLog = EventLog()
    try startTLSClient(
      on: group.loops[0], port: listener.localPort,
      options: try clientOptions(handshakeTimeout: .milliseconds(200)), log: clientLog, payload: [1],
      expectedBack: 1)
    #expect(waitUntil { clientLog.count(prefix: "close:") == 1 })
    #expect(clientLog.all == ["close:tls=TLS handshake timed out: no TLS handshake within 0.2 seconds"])
    listener.close()
  }

  @Test func tlsToAClosedPortIsStillRefused() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let port = try TCPListener(address: .loopback(port: 0)).localPort
    let clientLog = EventLog()
    try startTLSClient(
      on: group.loops[0], port: port, options: try clientOptions(), log: clientLog, payload: [1],
      expectedBack: 1)
    #expect(waitUntil { clientLog.count(prefix: "close:") == 1 })
    #expect(clientLog.all == ["close:errno=\(ECONNREFUSED)"])
  }

  @Test func badConfigurationsAreClearErrors() throws {
    #expect {
      try serverContext(certificate: certificates.directory + "/missing.pem")
    } throws: { error in
      let error = error as? TLSError
      return error?.kind == .configuration && error?.message.contains("missing.pem") == true
    }
    // A certificate with someone else's key.
    #expect {
      try TLSContext(
        server: TLSServerConfiguration(
          certificateChainPath: certificates.serverCertificatePath, privateKeyPath: certificates.clientKeyPath))
    } throws: { error in
      (error as? TLSError)?.message.contains("mismatch") == true
    }
    #expect {
      try TLSContext(client: TLSClientConfiguration(certificateChainPath: certificates.clientCertificatePath))
    } throws: { error in
      (error as? TLSError)?.kind == .configuration
    }
  }

  // MARK: Interoperability with the openssl command line

  @Test func opensslClientOverTLS12GetsECDHEAndALPN() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let (status, output) = runShell(
      "(printf ping; sleep 1) | timeout -s KILL 20 openssl s_client -connect 127.0.0.1:\(server.port) -tls1_2 "
        + "-alpn h2,http/1.1 -servername localhost -CAfile '\(certificates.caPath)' -verify_return_error -msg 2>&1")
    #expect(status == 0, "\(output)")
    #expect(output.contains("ALPN protocol: http/1.1"))
    #expect(output.contains("Cipher is ECDHE-ECDSA-AES128-GCM-SHA256"))
    #expect(output.contains("Verify return code: 0 (ok)"))
    #expect(output.contains("ping"))  // the echo
    // On stdin EOF s_client sends close_notify, which the server reads as EOF.
    #expect(output.contains(">>> TLS 1.2, Alert [length 0002], warning close_notify"))
    #expect(waitUntil { serverLog.count("eof") == 1 })
  }

  @Test func closeSendsCloseNotify() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog) {
      delegate in
      delegate.onRead = { connection, _ in connection.close() }  // after echoing the first bytes
    }
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    let (_, output) = runShell(
      "(printf ping; sleep 2) | timeout -s KILL 20 openssl s_client -connect 127.0.0.1:\(server.port) "
        + "-tls1_2 -msg 2>&1")
    #expect(output.contains("<<< TLS 1.2, Alert [length 0002], warning close_notify"), "\(output)")
    #expect(waitUntil { serverLog.count("close:owner") == 1 })
  }

  @Test func opensslClientWithoutModernCiphersOrProtocolsIsRefused() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    for flags in ["-tls1_2 -cipher AES128-SHA", "-tls1_1 -cipher DEFAULT@SECLEVEL=0", "-tls1_2 -alpn h2"] {
      let (status, output) = runShell(
        "timeout -s KILL 20 openssl s_client -connect 127.0.0.1:\(server.port) \(flags) </dev/null 2>&1")
      #expect(status != 0, "\(flags): \(output)")
    }
    #expect(waitUntil { serverLog.count(prefix: "close:tls=TLS handshake failed") == 3 })
    #expect(serverLog.receivedCount == 0)
  }

  @Test func renegotiationIsRefused() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let server = try startTLSEchoServer(on: group.loops[0], context: try serverContext(), log: serverLog)
    defer { _ = try? onLoop(group.loops[0]) { server.listener.value.close() } }
    // "R" on its own line makes s_client request a renegotiation (TLS 1.2 only).
    let (_, output) = runShell(
      "(printf 'R\\n'; sleep 1; printf after; sleep 1) | timeout -s KILL 20 openssl s_client "
        + "-connect 127.0.0.1:\(server.port) -tls1_2 -msg 2>&1")
    #expect(output.contains("RENEGOTIATING"), "\(output)")
    #expect(output.contains("no_renegotiation"), "\(output)")
    #expect(waitUntil { serverLog.count(prefix: "close:") == 1 })
    #expect(serverLog.count(prefix: "close:tls=") <= 1)
  }

  // MARK: Resources

  @Test func everyDescriptorIsClosedAfterwards() throws {
    let before = openFileDescriptorCount()
    do {
      _ = try exchange(server: try serverContext(), client: try clientOptions(), payload: pattern(100_000))
      _ = try exchange(
        server: try serverContext(certificate: certificates.expiredCertificatePath), client: try clientOptions())
      _ = try exchange(server: try serverContext(clientCA: certificates.caPath), client: try clientOptions())
    }
    // Other suites open and close descriptors in parallel: no more than before is the check.
    #expect(waitUntil { openFileDescriptorCount() <= before })
  }
}
