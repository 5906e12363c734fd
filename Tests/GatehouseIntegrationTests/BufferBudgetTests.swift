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

  /// 128 HTTP/1.1 connections with a 4 KiB receive buffer that never read. The allowance:
  /// per connection, its write queue's high watermark and one upstream read.
  @Test func nonReadingConnectionsHoldNoMoreThanTheBudget() throws {
    try Self.expectBounded(["h1", "128", "/big/{i}"], requests: 129, allowance: 128 * (192 << 10))
  }
}
