import Foundation
import Testing

/// Clients that ask for large enveloped answers and never read them: every byte the gateway
/// holds for them counts against `limits.buffered_bytes`, so its resident memory stays
/// within that budget plus a small allowance per connection, and other clients are served
/// meanwhile. Serialized: each test measures the gateway's memory, which a neighbour's
/// transfers would not disturb, but two of these at once would compete for the two cores.
@Suite(.serialized) struct BufferBudgetTests {
  static let budget = 16 * 1024 * 1024
  /// Each answer: a JSON document of 8 MB, under the route's `envelope.max_bytes`, so the
  /// gateway holds it whole to wrap it while the budget lasts, and streams it after.
  static let answerLength = 8_000_000
  static let nonreader = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Tools/nonreader.py").path

  static func bigJSON() -> [UInt8] {
    Array(#"{"items":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: answerLength - 13) + Array(#""}"#.utf8)
  }

  static func config(backend: UInt16) -> [String: Any] {
    var config = TestConfig.make(
      routes: [
        TestConfig.route(
          "stored", match: "/stored", extra: ["envelope": ["enabled": true], "cache": ["fresh_s": 600]]),
        TestConfig.route(
          "large", match: "/large",
          extra: ["envelope": ["enabled": true, "max_bytes": 16 * 1024 * 1024], "cache": ["fresh_s": 600]]),
        TestConfig.route(
          "big", match: "/*", extra: ["envelope": ["enabled": true, "max_bytes": 16 * 1024 * 1024]]),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend)], limits: ["buffered_bytes": budget], access: "off")
    config["listen"] = [["address": "127.0.0.1:0", "h2c": true]]
    return config
  }

  /// Runs the non-reading clients in `arguments` against the gateway until they have sent
  /// every request and the backend has seen `requests` of them; then samples the gateway's
  /// resident memory for two seconds while a well-behaved client asks for a small answer.
  /// Returns the peak, and how long the small answer took.
  static func hold(
    _ arguments: [String], requests: Int, gateway: GatewayProcess, backend: TestBackend
  ) throws -> (peak: Int, smallAnswerSeconds: Double) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: HTTP2Client.python)
    process.arguments = [nonreader, String(gateway.port)] + arguments
    let input = Pipe()
    let output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try DescriptorCreation.lock.withLock { _ in try process.run() }
    defer {
      // Closing its stdin ends the clients; they close their connections as they go.
      try? input.fileHandleForWriting.close()
      if !waitUntil(timeout: 10, { !process.isRunning }) { process.terminate() }
    }
    let ready = output.fileHandleForReading.readData(ofLength: 6)
    #expect(String(decoding: ready, as: UTF8.self) == "ready\n")
    #expect(waitUntil(timeout: 30) { backend.requests.count >= requests }, "backend saw \(backend.requests.count)")
    let sampler = MemoryTests.ResidentSampler(gateway)
    let started = ContinuousClock.now
    let small = try send("GET", "/small", to: gateway.port)
    let elapsed = ContinuousClock.now - started
    #expect(small.status == 200)
    // The peak over a while after every request reached the backend: the answers have had
    // time to fill whatever the gateway would hold for them.
    _ = waitUntil(timeout: 2, interval: .milliseconds(100)) { false }
    let peak = sampler.finish()
    return (peak, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
  }

  static func startGateway() throws -> (TestBackend, GatewayProcess, Int) {
    let big = bigJSON()
    // Under 64 KiB: below a stream's watermark, so only the budget holds many of them back.
    let middling =
      Array(#"{"items":""#.utf8) + [UInt8](repeating: UInt8(ascii: "y"), count: 60_000) + Array(#""}"#.utf8)
    let backend = try TestBackend { request in
      if request.target.hasPrefix("/stored") || request.target.hasPrefix("/middling") {
        return .respond(BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(middling)))
      }
      if request.target.hasPrefix("/small") {
        return .respond(
          BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array(#"{"ok":1}"#.utf8))))
      }
      return .respond(BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(big)))
    }
    let gateway = try GatewayProcess(config: config(backend: backend.port))
    // Settled: one answer through, so the baseline includes what any first request sets up.
    #expect(try send("GET", "/small", to: gateway.port).status == 200)
    let baseline = try #require(gateway.residentBytes)
    return (backend, gateway, baseline)
  }

  /// Starts a gateway, warms `warm` when given, runs the clients of `arguments` and expects
  /// the resident memory to grow by at most the budget plus `allowance`, and a small answer
  /// within 1 s meanwhile.
  static func expectBounded(
    _ arguments: [String], requests: Int, allowance: Int, warm: String? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    let (backend, gateway, baseline) = try startGateway()
    defer {
      gateway.stopExpectingCleanExit()
      backend.stop()
    }
    if let warm { #expect(try send("GET", warm, to: gateway.port).status == 200, sourceLocation: sourceLocation) }
    let (peak, seconds) = try hold(arguments, requests: requests, gateway: gateway, backend: backend)
    #expect(
      peak - baseline <= budget + allowance,
      "resident memory grew by \((peak - baseline) >> 20) MiB over a budget of \(budget >> 20) MiB",
      sourceLocation: sourceLocation)
    #expect(seconds < 1, "a small answer took \(seconds) s", sourceLocation: sourceLocation)
  }

  /// One HTTP/2 connection with a zero window opens 128 streams of 8 MB answers: without a
  /// bound the gateway held about 800 MB for it. The allowance: per stream at most its
  /// queue's high watermark and one upstream read.
  @Test func zeroWindowStreamsHoldNoMoreThanTheBudget() throws {
    try Self.expectBounded(["h2", "1", "128", "/big/{i}"], requests: 129, allowance: 24 << 20)
  }

  /// Eight HTTP/2 connections with zero windows, 128 streams each, asking for a stored
  /// answer of 60 KB: each copy is under a stream's watermark, yet every one is held.
  @Test func zeroWindowStreamsOfStoredAnswersHoldNoMoreThanTheBudget() throws {
    try Self.expectBounded(["h2", "8", "128", "/stored"], requests: 0, allowance: 8 * (2 << 20), warm: "/stored")
  }

  /// Four HTTP/2 connections with zero windows, 128 streams each, of 60 KB enveloped answers
  /// read whole from the backend: once the budget is spent the rest stream, and a stream
  /// holds up to its watermark (64 KiB) outside the budget, the documented allowance.
  @Test func zeroWindowStreamsOfEnvelopedAnswersHoldNoMoreThanTheBudget() throws {
    try Self.expectBounded(["h2", "4", "128", "/middling/{i}"], requests: 4 * 128, allowance: 4 * 128 * (64 << 10))
  }

  /// The gateway's CPU time once it has settled: polled until it stops growing (every
  /// answer or refusal of a burst made), at most a minute.
  static func settledCPUSeconds(_ gateway: GatewayProcess) -> Double? {
    var last = -1.0
    _ = waitUntil(timeout: 60, interval: .milliseconds(500)) {
      let now = cpuSeconds(gateway) ?? 0
      defer { last = now }
      return now - last < 0.05
    }
    return cpuSeconds(gateway)
  }

  /// The gateway's CPU time so far (user and system), in seconds, from `/proc/<pid>/stat`.
  static func cpuSeconds(_ gateway: GatewayProcess) -> Double? {
    guard let text = try? String(contentsOfFile: "/proc/\(gateway.pid)/stat", encoding: .utf8),
      let end = text.lastIndex(of: ")")
    else { return nil }
    // After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    let fields = text[text.index(after: end)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
  }

  /// 512 zero-window streams ask for an 8 MB stored answer: two fit the budget, and the rest
  /// are refused before the entry is read from the file again (each read costs the loop
  /// milliseconds; refused after it, a burst of small frames bought seconds of work).
  @Test func largeStoredAnswersPastTheBudgetAreRefusedBeforeTheyAreRead() throws {
    let (backend, gateway, _) = try Self.startGateway()
    defer {
      gateway.stopExpectingCleanExit()
      backend.stop()
    }
    #expect(try send("GET", "/large", to: gateway.port).status == 200)
    let before = try #require(Self.cpuSeconds(gateway))
    _ = try Self.hold(["h2", "4", "128", "/large"], requests: 0, gateway: gateway, backend: backend)
    // Settled: the CPU time stops growing once every stream has its answer or refusal.
    let spent = try #require(Self.settledCPUSeconds(gateway)) - before
    // Read 510 more times, the entry cost over 10 s of CPU in a debug build; refused first,
    // well under a second. The bound sits far from both.
    #expect(spent < 4, "the burst cost \(spent) s of CPU")
    // Refused, never sent on to the backend instead.
    #expect(backend.requests.filter { $0.target == "/large" }.count == 1)
  }

  /// HEADs of a large stored answer, and GETs whose `If-None-Match` it meets, carry no body:
  /// after the first answer of each kind the gateway reads only the row's head and the
  /// shape it served the body in, not the 8 MB body, its envelope, gzip and tag (read for
  /// each, 120 of them cost a debug build about a minute of CPU). What they say is what the
  /// whole answer says.
  @Test func headsAndMetConditionsOfALargeStoredAnswerDoNotReadItsBody() throws {
    let (backend, gateway, _) = try Self.startGateway()
    defer {
      gateway.stopExpectingCleanExit()
      backend.stop()
    }
    #expect(try send("GET", "/large", to: gateway.port).status == 200)
    let gzip = [("Accept-Encoding", "gzip")]
    // Answers from the store, whole: what a HEAD and a met condition must repeat.
    var whole: [Bool: ReceivedAnswer] = [:]
    for coded in [false, true] {
      let answer = try send("GET", "/large", to: gateway.port, headers: coded ? gzip : [])
      #expect(answer.status == 200 && answer.head.value("x-gatehouse-cache") == "HIT")
      #expect(answer.head.value("etag") != nil)
      #expect(answer.head.value("content-encoding") == (coded ? "gzip" : nil))
      whole[coded] = answer
    }
    let before = try #require(Self.cpuSeconds(gateway))
    for round in 0..<40 {
      for coded in [false, true] {
        let expected = try #require(whole[coded])
        let etag = try #require(expected.head.value("etag"))
        let head = try send("HEAD", "/large", to: gateway.port, headers: coded ? gzip : [])
        #expect(head.status == 200 && head.body.isEmpty, "round \(round)")
        for field in ["content-length", "etag", "content-type", "content-encoding", "vary", "x-gatehouse-cache"] {
          #expect(head.head.value(field) == expected.head.value(field), "\(field), round \(round)")
        }
        let met = try send("GET", "/large", to: gateway.port, headers: (coded ? gzip : []) + [("If-None-Match", etag)])
        #expect(met.status == 304 && met.head.value("etag") == etag && met.body.isEmpty, "round \(round)")
      }
      // One GET whose condition is not met still gets the whole body.
      if round == 20 {
        let unmet = try send("GET", "/large", to: gateway.port, headers: [("If-None-Match", "\"other\"")])
        #expect(unmet.status == 200 && unmet.body == whole[false]?.body)
      }
    }
    let spent = try #require(Self.cpuSeconds(gateway)) - before
    // The one whole answer among them costs a fraction of a second; 160 bodiless ones next
    // to nothing. The bound sits far from both that and a read per request.
    #expect(spent < 5, "160 bodiless answers cost \(spent) s of CPU")
    #expect(backend.requests.filter { $0.target == "/large" }.count == 1)
  }

  /// Clients that ask for a large stored answer and reset at once: each answer is made and
  /// thrown away. Once a loop has served the answer it keeps it as sent, so each costs a
  /// copy, not a read of 8 MB from the file with its digest, envelope and tag (about 0.3 s of
  /// CPU each in a debug build: 100 of them kept both loops busy for half a minute).
  @Test func askingForALargeStoredAnswerAndResettingCostsLittle() throws {
    let (backend, gateway, _) = try Self.startGateway()
    defer {
      gateway.stopExpectingCleanExit()
      backend.stop()
    }
    // Stored, then served from the store on each loop (connections go round the loops).
    for _ in 0..<4 { #expect(try send("GET", "/large", to: gateway.port).status == 200) }
    let before = try #require(Self.cpuSeconds(gateway))
    for _ in 0..<100 {
      let socket = try TestSocket.connect(port: gateway.port)
      try socket.send(httpRequest("GET", "/large"), deadline: Deadline(seconds: 5))
      socket.setLingerZero()
      socket.close()
    }
    let spent = try #require(Self.settledCPUSeconds(gateway)) - before
    #expect(spent < 5, "100 reset requests cost \(spent) s of CPU")
    let started = ContinuousClock.now
    #expect(try send("GET", "/small", to: gateway.port).status == 200)
    #expect(ContinuousClock.now - started < .seconds(1))
    #expect(backend.requests.filter { $0.target == "/large" }.count == 1)
  }

  /// 128 HTTP/1.1 connections with a 4 KiB receive buffer that never read. The allowance:
  /// per connection, its write queue's high watermark and one upstream read.
  @Test func nonReadingConnectionsHoldNoMoreThanTheBudget() throws {
    try Self.expectBounded(["h1", "128", "/big/{i}"], requests: 129, allowance: 128 * (192 << 10))
  }
}
