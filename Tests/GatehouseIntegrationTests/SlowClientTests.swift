import Foundation
import Synchronization
import Testing

/// Slow clients (slowloris heads, trickled bodies, clients that never read their answers)
/// must be cut at `header_timeout_ms` / `idle_timeout_ms` while normal traffic goes on
/// unharmed, and the gateway's memory and descriptors stay bounded.
@Suite(.serialized) struct SlowClientTests {
  static let headerTimeoutMs = 800
  static let idleTimeoutMs = 800
  /// Time allowed past a timeout for the cut to be seen on this shared machine.
  static let slack = 4.0

  /// What one slow peer saw: when (seconds after it connected) the gateway cut it, and the
  /// status of an answer it got first, if any.
  final class PeerOutcome: Sendable {
    private let state = Mutex<(cut: Double?, status: Int?)>((nil, nil))
    func record(cut: Double, status: Int?) { state.withLock { $0 = (cut, status) } }
    var cut: Double? { state.withLock { $0.cut } }
    var status: Int? { state.withLock { $0.status } }
  }

  /// How a slow peer misbehaves.
  enum Kind: Sendable {
    /// Sends a head one byte every 100 ms, never finishing it.
    case slowHead
    /// Sends a head and then body bytes 1.5 s apart (gaps longer than the idle timeout).
    case slowBody
    /// Pipelines requests for big answers and never reads.
    case nonReader
  }

  /// Runs one slow peer on its own thread until the gateway cuts it or `limit` passes; the
  /// socket stays open (from this side) until `release` opens, so only the gateway's cuts
  /// free its descriptors.
  static func startPeer(_ kind: Kind, port: UInt16, limit: Double, release: Gate, ended: SharedCounter) -> PeerOutcome {
    let outcome = PeerOutcome()
    let thread = Thread {
      defer { ended.increment() }
      guard let client = try? RawClient(port: port, receiveBufferSize: kind == .nonReader ? 16 * 1024 : nil) else {
        return
      }
      let start = ContinuousClock.now
      var lastByte = start
      var status: Int?
      var buffer = [UInt8](repeating: 0, count: 4096)
      var received: [UInt8] = []
      switch kind {
      case .slowHead:
        try? client.send("GET /slow HTTP/1.1\r\nHost: x\r\nX-Slow: ")
      case .slowBody:
        try? client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nb")
      case .nonReader:
        try? client.send(Array(repeating: httpRequest("GET", "/big"), count: 20).flatMap { $0 })
      }
      while secondsSince(start) < limit && kind != .nonReader {
        let pace: Duration = kind == .slowHead ? .milliseconds(100) : .milliseconds(1500)
        if ContinuousClock.now - lastByte >= pace {
          lastByte = .now
          if (try? client.send(kind == .slowHead ? "a" : "b")) == nil {
            outcome.record(cut: secondsSince(start), status: status)
            break
          }
        }
        let count = try? buffer.withUnsafeMutableBytes {
          try client.socket.receive(into: $0, deadline: Deadline(seconds: 0.05))
        }
        if count == 0 {
          outcome.record(cut: secondsSince(start), status: status)
          break
        }
        if let count, count > 0 {
          received += buffer[0..<count]
          if status == nil, let line = String(decoding: received, as: UTF8.self).split(separator: "\r\n").first {
            status = line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
          }
        }
      }
      if kind == .nonReader {
        // Never reads until released; then what is left must end (the gateway cut it).
        release.wait(timeout: limit)
        let end = client.readUntilEnd(timeout: 5).end
        if end != .stillOpen { outcome.record(cut: secondsSince(start), status: nil) }
      } else {
        release.wait(timeout: 60)
      }
      client.close()
    }
    thread.start()
    return outcome
  }

  @Test func slowClientsAreCutWhileNormalTrafficIsServed() throws {
    let backend = try TestBackend { request in
      request.path == "/big"
        ? .respond(BackendResponse(body: .generated(length: 256 * 1024, chunked: false)))
        : .respond(.text("ok \(request.path)"))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(
        to: backend.port, limits: ["header_timeout_ms": Self.headerTimeoutMs, "idle_timeout_ms": Self.idleTimeoutMs],
        access: "off"))
    defer { gateway.stopExpectingCleanExit() }
    #expect(try send("GET", "/warm", to: gateway.port).status == 200)
    let baseline = try #require(settledDescriptorCount(pid: gateway.pid))
    let sampler = MemoryTests.ResidentSampler(gateway)

    let release = Gate()
    defer { release.open() }
    let ended = SharedCounter()
    let limit = 12.0
    var peers: [(Kind, PeerOutcome)] = []
    for (kind, count) in [(Kind.slowHead, 20), (.slowBody, 15), (.nonReader, 15)] {
      for _ in 0..<count {
        peers.append((kind, Self.startPeer(kind, port: gateway.port, limit: limit, release: release, ended: ended)))
      }
    }

    // Normal traffic meanwhile: requests one after another for 5 s (bounded in count too).
    var attempted = 0
    var served = 0
    let trafficStart = ContinuousClock.now
    while secondsSince(trafficStart) < 5 && attempted < 2000 {
      attempted += 1
      if let response = try? send("GET", "/normal/\(attempted)", to: gateway.port, timeout: 10),
        response.status == 200, response.text == "ok /normal/\(attempted)"
      {
        served += 1
      }
    }

    // Every slow head and body is cut in time; the gateway gives back the descriptors
    // while the peers still hold theirs open.
    waitUntil(timeout: limit + 5, interval: .milliseconds(100)) {
      peers.allSatisfy { $0.0 == .nonReader || $0.1.cut != nil }
    }
    let descriptorsBack = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      (openDescriptorCount(pid: gateway.pid) ?? .max) <= baseline + 3
    }
    let descriptors = openDescriptorCount(pid: gateway.pid) ?? -1
    release.open()
    waitUntil(timeout: 20) { ended.count == peers.count }
    let peak = sampler.finish()

    #expect(attempted >= 20)
    #expect(served == attempted, "normal requests served: \(served) of \(attempted)")
    for (kind, outcome) in peers {
      switch kind {
      case .slowHead:
        let cut = outcome.cut
        #expect(cut != nil && cut! < Double(Self.headerTimeoutMs) / 1000 + Self.slack, "slow head cut at \(cut ?? -1)")
        #expect(outcome.status == nil || outcome.status == 408)
      case .slowBody:
        // First byte gap is 1.5 s; the idle timeout must cut it soon after the gap starts.
        let cut = outcome.cut
        #expect(cut != nil && cut! < Double(Self.idleTimeoutMs) / 1000 + Self.slack, "slow body cut at \(cut ?? -1)")
      case .nonReader:
        #expect(outcome.cut != nil, "a client that never read was not cut")
      }
    }
    #expect(descriptorsBack, "gateway holds \(descriptors) descriptors, baseline \(baseline)")
    #expect(peak > 0)
    #expect(peak < 150 * 1024 * 1024, "gateway resident memory peaked at \(peak / 1024 / 1024) MB")
    #expect(gateway.isRunning)
  }
}
