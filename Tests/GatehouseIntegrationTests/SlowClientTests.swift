import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
  import Glibc
#endif

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
        ? .respond(BackendAnswer(body: .generated(length: 256 * 1024, chunked: false)))
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
      if let answer = try? send("GET", "/normal/\(attempted)", to: gateway.port, timeout: 10),
        answer.status == 200, answer.text == "ok /normal/\(attempted)"
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

  /// A gateway with an enveloped route whose answers (`bytes` of JSON) are read whole before
  /// they go out, so a client that does not read leaves them queued in the gateway.
  static func bufferedAnswerGateway(bytes: Int) throws -> (TestBackend, GatewayProcess) {
    let body = #"{"d":""# + String(repeating: "x", count: bytes) + #""}"#
    let backend = try TestBackend(options: TestBackend.Options(noDelay: true), always: jsonAnswer(body))
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("all", match: "/*", envelope: ["max_bytes": 8 << 20])],
      upstreams: ["api": TestConfig.upstream(port: backend.port)],
      limits: ["idle_timeout_ms": idleTimeoutMs, "header_timeout_ms": headerTimeoutMs])
    return (backend, try GatewayProcess(config: config))
  }

  /// The whole answer is queued in the gateway and the client takes none of it: cut after
  /// the idle timeout, the queued answer dropped (nginx's `send_timeout`), instead of the
  /// connection staying as long as the client likes.
  @Test func aClientThatTakesNoneOfAQueuedAnswerIsCut() throws {
    let (backend, gateway) = try Self.bufferedAnswerGateway(bytes: 4 << 20)
    defer { backend.stop() }
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port, receiveBufferSize: 4096)
    try client.send(httpRequest("GET", "/big"))
    #expect(backend.waitForRequests(1))
    sleep(for: .milliseconds(Self.idleTimeoutMs) + .seconds(Self.slack))
    let outcome = client.readUntilEnd(timeout: 10)

    #expect(outcome.end != .stillOpen)
    #expect(outcome.bytes.count < 4 << 20, "the whole answer came: the connection was not cut")
  }

  /// A client that keeps taking its queued answer, slowly (longer in all than the idle
  /// timeout, never silent for as long), gets all of it.
  @Test func aSlowClientThatKeepsReadingGetsTheWholeAnswer() throws {
    let length = 256 * 1024
    let (backend, gateway) = try Self.bufferedAnswerGateway(bytes: length)
    defer { backend.stop() }
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port, receiveBufferSize: 4096)
    try client.send(httpRequest("GET", "/slow"))
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    let start = ContinuousClock.now
    // 4 KiB every 50 ms: about 3 s for the answer, 16 reads in every idle timeout.
    while received.count < length + 40, ContinuousClock.now - start < .seconds(60) {
      let count = try? buffer.withUnsafeMutableBytes {
        try client.socket.receive(into: $0, deadline: Deadline(seconds: 1))
      }
      guard let count, count > 0 else { break }
      received += buffer[0..<count]
      sleep(for: .milliseconds(50))
    }

    #expect(ContinuousClock.now - start > .milliseconds(Self.idleTimeoutMs), "the answer came too fast to tell")
    #expect(received.count > length, "got \(received.count) bytes")
    #expect(String(decoding: received.suffix(40), as: UTF8.self).hasSuffix(#"xxx"},"message":""}"#))
  }

  /// A request the gateway answers itself (here no route) that declares a body and sends
  /// none: the connection ends after the idle timeout instead of waiting for the body.
  @Test func aLocalAnswerDoesNotWaitForeverForTheBody() throws {
    let backend = try TestBackend(always: .respond(.text("unused")))
    defer { backend.stop() }
    var config = TestConfig.passThrough(to: backend.port, limits: ["idle_timeout_ms": Self.idleTimeoutMs])
    config["routes"] = [TestConfig.route("only", match: "/only")]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port)
    try client.send("POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")

    let answer = try client.readAnswer()
    #expect(answer.status == 404)
    #expect(client.waitForEnd(timeout: Double(Self.idleTimeoutMs) / 1000 + Self.slack + 5) != .stillOpen)
  }

}

/// Clients that pipeline many requests and never read: the gateway must hold the backend
/// back once a client's write queue is full, not read every pipelined answer into its own
/// memory. Checked on the debug build the suite runs, and on the release build when one
/// was built.
@Suite(.serialized) struct PipelinedNonReaderTests {
  static let answerLength = 256 * 1024
  static let clients = 10
  static let pipelined = 50

  /// Sends the pipelined requests on `clients` connections to the gateway on `port`
  /// (process `pid`), reads nothing, and checks how much the backend was asked and the
  /// gateway's memory grew by the time the backend's progress stopped.
  static func check(port: UInt16, pid: Int32, asked: () -> Int, path: String = "/big") throws {
    let before = try #require(GatewayProcess.residentBytes(pid: pid))
    let requests = Array(repeating: httpRequest("GET", path), count: pipelined).flatMap { $0 }
    var connections: [RawClient] = []
    defer { for connection in connections { connection.close() } }
    for _ in 0..<clients {
      let client = try RawClient(port: port)
      // Shrunk after the handshake (the window was offered for the default size).
      client.socket.setReceiveBufferSize(4096)
      try client.send(requests)
      connections.append(client)
    }
    // Read nothing; wait until the backend's progress stops (or everything was asked).
    var last = -1
    var stable = 0
    var peak = before
    waitUntil(timeout: 60, interval: .milliseconds(100)) {
      peak = max(peak, GatewayProcess.residentBytes(pid: pid) ?? 0)
      let asked = asked()
      stable = asked == last ? stable + 1 : 0
      last = asked
      return stable >= 20 || asked > clients * pipelined
    }
    // Kernel socket buffers (not counted in RSS) hold a few answers per client; the gateway
    // itself should hold about one write queue and one read buffer per client.
    let grown = peak - before
    #expect(grown < 40 * 1024 * 1024, "gateway RSS grew by \(grown / 1024 / 1024) MiB for \(clients) clients")
    #expect(asked() < clients * pipelined / 2, "the backend was asked \(asked()) of \(clients * pipelined) times")
  }

  /// Each answer leaves the backend in one write and ends its connection, as a simple
  /// HTTP/1.0 file server's does.
  static func makeBackend() throws -> FaultBackend {
    let head = "HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: \(answerLength)\r\n\r\n"
    let answer = FaultAnswer.raw(Array(head.utf8) + BodyPattern.bytes(answerLength))
    return try FaultBackend { _ in answer }
  }

  static func config(backend: FaultBackend) -> [String: Any] {
    TestConfig.make(
      routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: backend.port)],
      limits: ["idle_timeout_ms": 60_000], access: "off", workers: 0)
  }

  @Test func pipelinedAnswersToAClientThatNeverReadsAreHeldBack() throws {
    let backend = try Self.makeBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(backend: backend))
    defer { gateway.stopExpectingCleanExit() }
    #expect(try send("GET", "/warm", to: gateway.port).bodyLength == Int64(Self.answerLength))
    try Self.check(port: gateway.port, pid: gateway.pid, asked: { backend.requests.count })
  }

  @Test(.enabled(if: releaseGatewayExecutable() != nil, "needs a release build (swift build -c release)"))
  func pipelinedAnswersAreHeldBackByTheReleaseBuild() throws {
    let executable = try #require(releaseGatewayExecutable())
    let backend = try Self.makeBackend()
    defer { backend.stop() }
    let gateway = try ExternalGateway(
      executable: executable,
      config: Self.config(backend: backend))
    #expect(try send("GET", "/warm", to: gateway.port).bodyLength == Int64(Self.answerLength))
    try Self.check(port: gateway.port, pid: gateway.pid, asked: { backend.requests.count })
  }

  /// Python's `http.server` as the backend: HTTP/1.0, a thread per connection, the file
  /// sent in 64 KiB writes, then the connection closed.
  @Test
  func pipelinedAnswersFromAnHTTP10FileServerAreHeldBack() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-www-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    try Data(BodyPattern.bytes(Self.answerLength)).write(to: directory.appendingPathComponent("big"))
    let log = directory.appendingPathComponent("server.log")
    _ = FileManager.default.createFile(atPath: log.path, contents: nil)
    let logHandle = try FileHandle(forWritingTo: log)
    defer { try? logHandle.close() }
    let server = Process()
    server.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    server.arguments = [
      "python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", directory.path,
    ]
    server.standardOutput = logHandle
    server.standardError = logHandle
    try DescriptorCreation.lock.withLock { _ in try server.run() }
    defer {
      // SIGKILL: a child of the test runner inherits its blocked signals, SIGTERM included.
      _ = Glibc.kill(server.processIdentifier, SIGKILL)
      waitUntil(timeout: 10) { !server.isRunning }
    }
    var port: UInt16 = 0
    let logText = { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
    waitUntil(timeout: 20) {
      guard let range = logText().range(of: #"port [0-9]+"#, options: .regularExpression) else { return false }
      port = UInt16(logText()[range].dropFirst(5)) ?? 0
      return port != 0
    }
    try #require(port != 0, "python3 http.server did not start: \(logText())")
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: port)],
        limits: ["idle_timeout_ms": 60_000], access: "off", workers: 0))
    defer { gateway.stopExpectingCleanExit() }
    let asked = { logText().components(separatedBy: "\"GET /big").count - 1 }

    try Self.check(port: gateway.port, pid: gateway.pid, asked: asked, path: "/big")
  }
}
