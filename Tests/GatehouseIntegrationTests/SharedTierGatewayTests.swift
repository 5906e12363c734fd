import Foundation
import Glibc
import Testing

/// The shared tier (Docs/shared-tier.md) with several gateways and one real `redis-server` on a free
/// loopback port: stale answers pooled across replicas, and a tier that is down, killed or
/// stopped never failing or holding up a request. Skipped when `redis-server` is missing.
@Suite(.enabled(if: SharedTierRedis.isAvailable, "redis-server is not installed"))
struct SharedTierGatewayTests {
  /// A gateway with its own store, a cached route to `backend`, and `shared` on `redis`.
  static func gateway(backend: UInt16, redis: UInt16, timeoutMs: Int = 50) throws -> GatewayProcess {
    var config = StoreTests.config(port: backend, cache: ["stale_if_error_s": 3600], answerTimeoutMs: 1000)
    config["shared"] = ["url": "redis://127.0.0.1:\(redis)/0", "prefix": "test:", "timeout_ms": timeoutMs]
    return try GatewayProcess(config: config)
  }

  static func metrics(_ gateway: GatewayProcess) throws -> MetricsPage {
    try MetricsPage(try gateway.admin(token: TestConfig.adminToken).request("GET", "/metrics").text)
  }

  static func sharedUp(_ gateway: GatewayProcess) -> Double? {
    (try? metrics(gateway))?.value("gatehouse_shared_up")
  }

  @Test func aSecondGatewayServesTheFirstsAnswerStale() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let first = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { first.stopExpectingCleanExit() }
    let second = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { second.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { Self.sharedUp(first) == 1 && Self.sharedUp(second) == 1 })

    let stored = try send("GET", "/items/7", to: first.port)
    #expect(stored.status == 200 && StoreTests.cacheHeader(stored) == "MISS")
    // Written behind, after the answer: wait for the SET's reply.
    #expect(
      waitUntil(timeout: 10) {
        (try? Self.metrics(first))?.value("gatehouse_shared_requests_total", ["op": "set", "result": "ok"]) == 1
      })
    backend.stop()

    let stale = try send("GET", "/items/7", to: second.port)
    StoreTests.expectStale(stale, body: stored.text)
    // Kept in the second gateway's own store: served again without asking the tier.
    let again = try send("GET", "/items/7", to: second.port)
    StoreTests.expectStale(again, body: stored.text)
    let page = try Self.metrics(second)
    #expect(page.value("gatehouse_shared_requests_total", ["op": "get", "result": "ok"]) == 1)
    // A key nobody stored: the usual 502 after the tier's miss.
    let never = try send("GET", "/items/8", to: second.port)
    #expect(never.status == 502)
    #expect(
      try Self.metrics(second).value("gatehouse_shared_requests_total", ["op": "get", "result": "miss"]) == 1)

    let status = try second.admin(token: TestConfig.adminToken).json("/admin/status")
    let shared = try #require(status["shared"] as? [String: Any])
    #expect(shared["url"] as? String == "redis://127.0.0.1:\(redis.port)/0")
    #expect(shared["up"] as? Bool == true)
  }

  /// The tier's records carry the stored headers, so a sibling serves a pass-through answer
  /// with the backend's `ETag` and meets a client's `If-None-Match` with it, as the gateway
  /// that stored it does; a body that gateway kept decoded (gzip sent unasked) keeps the
  /// gateway's tag on the sibling too, the store's note on it travelling in the record.
  @Test func aSiblingServesAPassThroughAnswerWithTheBackendsTag() throws {
    let redis = try SharedTierRedis()
    let item = Array(#"{"id":7}"#.utf8)
    let plain = Array(#"{"note":"zipped"}"#.utf8)
    let zipped = try ExternalTool.gzip(plain)
    let backend = try TestBackend { request in
      let json = ("Content-Type", "application/json")
      if request.target.hasPrefix("/zipped") {
        return .respond(
          BackendAnswer(headers: [json, ("Content-Encoding", "gzip"), ("ETag", "\"z1\"")], body: .bytes(zipped)))
      }
      return .respond(BackendAnswer(headers: [json, ("ETag", "\"v1\"")], body: .bytes(item)))
    }
    defer { backend.stop() }
    func gateway() throws -> GatewayProcess {
      var config = StoreTests.config(
        port: backend.port, cache: ["stale_if_error_s": 3600], envelope: ["enabled": false], answerTimeoutMs: 1000)
      config["shared"] = ["url": "redis://127.0.0.1:\(redis.port)/0", "prefix": "test:", "timeout_ms": 50]
      return try GatewayProcess(config: config)
    }
    let first = try gateway()
    defer { first.stopExpectingCleanExit() }
    let second = try gateway()
    defer { second.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { Self.sharedUp(first) == 1 && Self.sharedUp(second) == 1 })

    let miss = try send("GET", "/items/7", to: first.port)
    _ = try send("GET", "/zipped", to: first.port)
    #expect(
      waitUntil(timeout: 10) {
        (try? Self.metrics(first))?.value("gatehouse_shared_requests_total", ["op": "set", "result": "ok"]) == 2
      })
    backend.stop()

    let stale = try send("GET", "/items/7", to: second.port)
    let notModified = try send("GET", "/items/7", to: second.port, headers: [("If-None-Match", "\"v1\"")])
    let zippedStale = try send("GET", "/zipped", to: second.port)
    #expect(miss.head.value("ETag") == "\"v1\"")
    #expect(StoreTests.cacheHeader(stale) == "STALE" && stale.body == item && stale.head.values("ETag") == ["\"v1\""])
    #expect(notModified.status == 304 && notModified.head.value("ETag") == "\"v1\"")
    #expect(StoreTests.cacheHeader(zippedStale) == "STALE" && zippedStale.body == plain)
    #expect(ConditionalRequestTests.isGatewayTag(zippedStale.head.value("ETag")))
    #expect(zippedStale.head.value("X-Gatehouse-Decoded") == nil)
  }

  @Test func aStoppedOrKilledTierNeverFailsARequest() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let gateway = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { gateway.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { Self.sharedUp(gateway) == 1 })

    // SIGSTOP: commands time out; requests get what the backend gives, then the usual 502.
    redis.signal(SIGSTOP)
    for index in 0..<5 {
      #expect(try send("GET", "/up/\(index)", to: gateway.port).status == 200)
    }
    backend.stop()
    for index in 0..<5 {
      let answer = try send("GET", "/down/\(index)", to: gateway.port, timeout: 5)
      #expect(answer.status == 502)
    }
    #expect(
      try Self.metrics(gateway).value("gatehouse_shared_requests_total", ["op": "get", "result": "timeout"]) >= 1)

    // Killed: still answered (only gatehouse_shared_up changes).
    redis.kill()
    #expect(waitUntil(timeout: 10) { Self.sharedUp(gateway) == 0 })
    let answer = try send("GET", "/down/9", to: gateway.port, timeout: 5)
    #expect(answer.status == 502)
    StoreTests.expectStale(
      try send("GET", "/up/1", to: gateway.port, timeout: 5), body: #"{"target":"/up/1","version":1,"lang":""}"#)
  }

  /// How many commands of `op` ended with `result` so far, on `gateway`.
  static func commands(_ gateway: GatewayProcess, op: String, result: String) -> Double {
    (try? metrics(gateway))?.value("gatehouse_shared_requests_total", ["op": op, "result": result]) ?? 0
  }

  /// A hung tier (`SIGSTOP`): the link is not lost, each command just times out. After three
  /// timeouts in a row — here the writes behind three requests, all well within the two
  /// seconds of silence that reset a connection, and nothing after them — the tier reads as
  /// down: `gatehouse_shared_up 0`, `/admin/status` `up: false` with a `last_problem` about
  /// the replies that did not come, and one warning. After `SIGCONT` the first command
  /// answered in time makes it up again, with an info line.
  @Test func aHungTierReadsAsDownAndUpAgainWhenItAnswers() throws {
    let redis = try SharedTierRedis()
    // SIGCONT, then SIGKILL, however the test ends.
    defer { redis.kill() }
    let backend = try ModalBackend()
    let gateway = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(waitUntil(timeout: 10) { Self.sharedUp(gateway) == 1 })
    func shared() throws -> [String: Any] {
      try #require(try admin.json("/admin/status")["shared"] as? [String: Any])
    }
    func lines(_ message: String) -> Int {
      gateway.logLines().filter { $0["msg"] as? String == message }.count
    }

    redis.signal(SIGSTOP)
    // Each stored answer's `SET` (with its `ZADD`) times out before the next request.
    for index in 1...3 {
      #expect(try send("GET", "/hung/\(index)", to: gateway.port).status == 200)
      #expect(waitUntil(timeout: 10) { Self.commands(gateway, op: "set", result: "timeout") >= Double(index) })
    }
    #expect(waitUntil(timeout: 10) { Self.sharedUp(gateway) == 0 })
    let down = try shared()
    #expect(down["up"] as? Bool == false)
    let problem = try #require(down["last_problem"] as? String)
    #expect(problem.contains("no reply"), "\(problem)")
    print("a hung tier's last_problem: \(problem)")
    #expect(gateway.waitForLogLine { $0["level"] as? String == "warn" && $0["msg"] as? String == Self.tierDown })
    // Requests are still answered meanwhile.
    #expect(try send("GET", "/hung/4", to: gateway.port).status == 200)

    redis.signal(SIGCONT)
    // Up at the first command answered in time: requests give the tier commands to answer.
    var next = 4
    let backUp = waitUntil(timeout: 30, interval: .milliseconds(100)) {
      next += 1
      _ = try? send("GET", "/hung/\(next)", to: gateway.port)
      return Self.sharedUp(gateway) == 1
    }
    #expect(backUp)
    let up = try shared()
    #expect(up["up"] as? Bool == true && up["last_problem"] == nil)
    #expect(gateway.waitForLogLine { $0["level"] as? String == "info" && $0["msg"] as? String == Self.tierUp })
    #expect(lines(Self.tierDown) == 1 && lines(Self.tierUp) == 1)
  }

  static let tierDown = "shared tier down; lookups miss and rate limits use the local buckets until it answers"
  static let tierUp = "shared tier up again"

  /// Flushed, full (every write refused for want of memory) and restarted under load: the
  /// gateway answers every request as it would without the tier, and counts the errors.
  @Test func aFlushedFullOrRestartedTierNeverFailsARequest() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let first = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { first.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { Self.sharedUp(first) == 1 })
    func load(_ gateway: GatewayProcess, _ prefix: String, _ count: Int) throws -> [Int] {
      try (0..<count).map { try send("GET", "/\(prefix)/\($0)", to: gateway.port, timeout: 5).status }
    }

    #expect(try load(first, "a", 10).allSatisfy { $0 == 200 })
    #expect(
      waitUntil(timeout: 10) {
        (try? Self.metrics(first))?.value("gatehouse_shared_requests_total", ["op": "set", "result": "ok"]) == 10
      })
    // Flushed: what it held is gone, nothing else changes.
    try redis.command(["FLUSHALL"])
    #expect(try load(first, "b", 10).allSatisfy { $0 == 200 })
    // Full: every write is refused (an error reply), every request still answered.
    try redis.command(["CONFIG", "SET", "maxmemory-policy", "noeviction"])
    try redis.command(["CONFIG", "SET", "maxmemory", "1"])
    #expect(try load(first, "c", 10).allSatisfy { $0 == 200 })
    #expect(
      waitUntil(timeout: 10) {
        ((try? Self.metrics(first))?.value("gatehouse_shared_requests_total", ["op": "set", "result": "error"]) ?? 0)
          >= 10
      })
    // Restarted on its port while requests come: each is answered, and the tier is back.
    redis.kill()
    #expect(try load(first, "d", 10).allSatisfy { $0 == 200 })
    let restarted = try SharedTierRedis(port: redis.port)
    #expect(try load(first, "e", 10).allSatisfy { $0 == 200 })
    #expect(waitUntil(timeout: 30) { Self.sharedUp(first) == 1 })
    #expect(try load(first, "f", 5).allSatisfy { $0 == 200 })
    #expect(
      waitUntil(timeout: 10) {
        ((try? Self.metrics(first))?.value("gatehouse_shared_requests_total", ["op": "set", "result": "ok"]) ?? 0)
          >= 15
      })

    // A sibling after the flush: the tier no longer has `/a/…` (a miss, then the usual 502);
    // `/f/…`, written after the restart, is there.
    backend.stop()
    let second = try Self.gateway(backend: backend.port, redis: restarted.port)
    defer { second.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { Self.sharedUp(second) == 1 })
    #expect(try send("GET", "/a/1", to: second.port, timeout: 5).status == 502)
    #expect(StoreTests.cacheHeader(try send("GET", "/f/1", to: second.port, timeout: 5)) == "STALE")
    // The first gateway's own store still has everything it answered.
    #expect(StoreTests.cacheHeader(try send("GET", "/c/1", to: first.port, timeout: 5)) == "STALE")
  }
}

/// A `redis-server` without persistence, killed when the test ends.
final class SharedTierRedis: @unchecked Sendable {
  static let binary = "/usr/bin/redis-server"
  static var isAvailable: Bool { access(binary, X_OK) == 0 }
  let port: UInt16
  private let process = Process()

  /// `arguments` are added to the server's (a memory limit, say); `port` reuses a port (a
  /// restart of a server the gateways know).
  init(arguments: [String] = [], port reused: UInt16? = nil) throws {
    port = try reused ?? TestSocket.unusedPort()
    process.executableURL = URL(fileURLWithPath: Self.binary)
    process.arguments = ["--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"] + arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    let port = self.port
    guard waitUntil(timeout: 15, { (try? TestSocket.connect(port: port))?.close() != nil }) else {
      throw TestSocketError.malformed("redis-server did not listen on \(port)")
    }
  }

  deinit { kill() }

  func signal(_ number: Int32) {
    if process.isRunning { Glibc.kill(process.processIdentifier, number) }
  }

  /// Runs `redis-cli` against this server (FLUSHALL, CONFIG SET…); its output.
  @discardableResult
  func command(_ arguments: [String]) throws -> String {
    String(
      decoding: try ExternalTool.run("/usr/bin/redis-cli", ["-p", "\(port)"] + arguments, input: []), as: UTF8.self)
  }

  func kill() {
    guard process.isRunning else { return }
    Glibc.kill(process.processIdentifier, SIGCONT)
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }
}
