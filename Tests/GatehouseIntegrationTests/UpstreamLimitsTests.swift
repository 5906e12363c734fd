import Foundation
import Testing

/// Slow or greedy clients cannot hold the upstream's connections: an upstream's
/// `max_connections` bounds them (a request that finds them all busy waits its turn up to
/// `queue_timeout_ms`, then gets a 503), a request body is read ahead before a connection
/// is leased (`limits.body_buffer_bytes`), and the whole body must arrive within
/// `limits.body_timeout_ms`.
@Suite struct UpstreamLimitsTests {
  static func config(port: UInt16, upstream extra: [String: Any] = [:], limits: [String: Any]? = nil)
    -> [String: Any]
  {
    var upstream = TestConfig.upstream(port: port, answerTimeoutMs: 20_000)
    for (key, value) in extra { upstream[key] = value }
    return TestConfig.withAdmin(
      TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": upstream], limits: limits, workers: 1))
  }

  @Test func busyConnectionsMakeRequestsWaitThenAnswer503() throws {
    let backend = try ModalBackend()
    backend.mode.value = .hanging
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, upstream: ["max_connections": 2, "queue_timeout_ms": 300]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let held = try ["a", "b"].map { try CollapseTests.start("/held-\($0)", id: $0, port: gateway.port) }
    #expect(backend.server.waitForRequests(2))
    let refused = try send("GET", "/third", to: gateway.port)

    #expect(isErrorEnvelope(refused, status: 503, message: "upstream busy"), "\(refused.text)")
    #expect(backend.server.connectionCount == 2)
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "busy"]) == 1)
    #expect(ErrorTests.loggedReason(gateway, path: "/third") == "upstream_busy")
    backend.gate.open()
    #expect(try held.map { try $0.readAnswer().status } == [200, 200])
  }

  @Test func aQueuedRequestTakesTheFirstConnectionThatComesFree() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, upstream: ["max_connections": 1, "queue_timeout_ms": 15_000]))
    defer { gateway.stopExpectingCleanExit() }

    let first = try CollapseTests.start("/first", id: "first", port: gateway.port)
    #expect(backend.server.waitForRequests(1))
    let second = try CollapseTests.start("/second", id: "second", port: gateway.port)
    sleep(for: .milliseconds(300))
    #expect(backend.requests.count == 1, "the second waits for the only connection")
    hold.open()

    #expect(try first.readAnswer().status == 200)
    let answer = try second.readAnswer(timeout: 15)
    #expect(answer.status == 200)
    #expect(answer.text.contains("/second"))
    #expect(backend.server.connectionCount == 1)
  }

  /// Clients that stop reading large answers hold their upstream connections (reading the
  /// upstream pauses with them); when others queue for one, the longest stalled is cut.
  @Test func clientsThatStopReadingCannotHoldEveryConnection() throws {
    let backend = try TestBackend { request in
      if request.target == "/big" {
        return .respond(
          BackendAnswer(
            headers: [("Content-Type", "application/octet-stream")],
            body: .generated(length: 64 << 20, chunked: false)))
      }
      return jsonAnswer(#"{"ok":true}"#)
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, upstream: ["max_connections": 2, "queue_timeout_ms": 10_000]))
    defer { gateway.stopExpectingCleanExit() }

    let stalled = try (0..<2).map { _ in
      let client = try RawClient(port: gateway.port, receiveBufferSize: 4096)
      try client.send(httpRequest("GET", "/big"))
      return client
    }
    defer { stalled.forEach { $0.close() } }
    #expect(backend.waitForRequests(2))
    sleep(for: .milliseconds(300))
    let other = try send("GET", "/small", to: gateway.port, timeout: 15)

    #expect(other.status == 200, "\(other.text)")
    // One of the clients that read nothing was cut to make room.
    let ends = stalled.map { $0.readUntilEnd(timeout: 3).end }
    #expect(ends.contains { $0 != .stillOpen }, "\(ends)")
  }

  /// 20 clients that send 3 bytes of a 100 kB body hold no upstream connection.
  @Test func clientsSendingBodiesSlowlyHoldNoUpstreamConnection() throws {
    let backend = try TestBackend { _ in jsonAnswer(#"{"ok":true}"#) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let slow = try (0..<20).map { _ in
      let client = try RawClient(port: gateway.port)
      try client.send(httpRequest("POST", "/upload", headers: [("Content-Length", "100000")]) + Array("abc".utf8))
      return client
    }
    defer { slow.forEach { $0.close() } }
    sleep(for: .milliseconds(500))
    let other = try send("GET", "/other", to: gateway.port)

    #expect(other.status == 200)
    #expect(backend.connectionCount == 1, "only the GET reached the upstream")
    // A small body comes whole: the upstream gets it in one piece.
    let small = try send("POST", "/small", to: gateway.port, body: Array(repeating: 0x61, count: 2000))
    #expect(small.status == 200)
    #expect(backend.requests.last?.body.count == 2000)
  }

  /// A body dripped a byte at a time keeps each read within the idle timeout, but not the
  /// whole body within `body_timeout_ms`.
  @Test func aDrippedBodyEndsAtTheBodyTimeout() throws {
    let backend = try TestBackend { _ in jsonAnswer(#"{"ok":true}"#) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, limits: ["body_timeout_ms": 1500, "idle_timeout_ms": 30_000]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    defer { client.close() }
    try client.send(httpRequest("POST", "/upload", headers: [("Content-Length", "1000")]))
    let started = Date()
    let stop = Shared(false)
    let drip = Thread { [socket = client.socket] in
      for _ in 0..<60 where !stop.value {
        try? socket.send(Array("x".utf8), deadline: Deadline(seconds: 5))
        Thread.sleep(forTimeInterval: 0.25)
      }
    }
    drip.start()
    defer { stop.value = true }
    let answer = try client.readAnswer(timeout: 20)

    #expect(answer.status == 408)
    #expect(Date().timeIntervalSince(started) < 12, "well before the 30 s idle timeout")
    #expect(backend.requests.isEmpty)
    #expect(ErrorTests.loggedReason(gateway, path: "/upload") == "request_timeout")
  }
}

/// `limits.buffered_bytes` bounds the answers held whole to be wrapped, across all
/// exchanges: past it a large JSON success streams wrapped, an answer that cannot stream
/// gets a 503, and the budget comes back once the held answers are delivered.
@Suite struct BufferedAnswerBudgetTests {
  @Test func pastTheBudgetAnswersStreamOrGet503AndTheBudgetComesBack() throws {
    let document = JSONArrayDocument(approximateBytes: 700_000)
    var bytes: [UInt8] = []
    document.stream { bytes += $0 }
    let json = bytes
    let gate = Gate()
    let backend = try TestBackend { request in
      if request.target == "/held" {
        // Half the document, then nothing until the test opens the gate.
        var answer = BackendAnswer(
          headers: [("Content-Type", "application/json")],
          body: .chunked([Array(json[0..<400_000]), Array(json[400_000...])]))
        answer.pauseAfterFirstPiece = gate
        return .respond(answer)
      }
      return .respond(BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(json)))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [
          TestConfig.envelopedRoute("picked", match: "/kp/*", envelope: ["key_path": "0"]),
          TestConfig.envelopedRoute("all", match: "/*", envelope: [:]),
        ],
        upstreams: ["api": TestConfig.upstream(port: backend.port, answerTimeoutMs: 20_000)],
        limits: ["buffered_bytes": 1_000_000], workers: 1))
    defer { gateway.stopExpectingCleanExit() }

    let held = try CollapseTests.start("/held", id: "held", port: gateway.port)
    #expect(backend.waitForRequests(1))
    sleep(for: .milliseconds(500))  // the first 400 kB are held by the gateway
    let streamed = try send("GET", "/big", to: gateway.port, timeout: 20)
    let refused = try send("GET", "/kp/big", to: gateway.port, timeout: 20)
    gate.open()
    let whole = try held.readAnswer(timeout: 20)
    let after = try send("GET", "/big", to: gateway.port, timeout: 20)

    #expect(streamed.status == 200)
    #expect(streamed.head.isChunked, "wrapped as it streamed")
    #expect(streamed.text.hasPrefix(#"{"code":0,"datas":["#) && streamed.body.count > 700_000)
    #expect(isErrorEnvelope(refused, status: 503, message: "gateway overloaded"), "\(refused.text.prefix(200))")
    #expect(ErrorTests.loggedReason(gateway, path: "/kp/big") == "overloaded")
    for answer in [whole, after] {
      #expect(answer.status == 200)
      #expect(answer.head.contentLength != nil, "wrapped whole")
      #expect(answer.text.hasPrefix(#"{"code":0,"datas":["#) && answer.body.count > 700_000)
    }
  }
}

extension BufferedAnswerBudgetTests {
  /// Answers from the store are written whole, a copy per client: a client that does not
  /// read keeps its copy against the budget, and past it the next large hit is a 503
  /// until that client has gone.
  @Test func storeHitsForClientsThatDoNotReadCountAgainstTheBudget() throws {
    let document = JSONArrayDocument(approximateBytes: 7_000_000)
    var bytes: [UInt8] = []
    document.stream { bytes += $0 }
    let json = bytes
    let backend = try TestBackend { _ in
      .respond(BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(json)))
    }
    defer { backend.stop() }
    var config = TestConfig.make(
      routes: [
        TestConfig.envelopedRoute(
          "all", match: "/*", envelope: ["max_bytes": 16 << 20], extra: ["cache": ["fresh_s": 600]])
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port, answerTimeoutMs: 20_000)],
      limits: ["buffered_bytes": 8_000_000], workers: 1)
    config = TestConfig.withAdmin(config)
    config["store"] = ["path": "var/store.sqlite"]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/doc", to: gateway.port, timeout: 30)
    #expect(StoreTests.cacheHeader(first) == "MISS")
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(admin.waitForStoredEntries(1))
    // A client that asks and never reads: its copy stays queued in the gateway.
    let stalled = try RawClient(port: gateway.port, receiveBufferSize: 4096)
    try stalled.send(httpRequest("GET", "/doc"))
    sleep(for: .milliseconds(500))
    let refused = try send("GET", "/doc", to: gateway.port, timeout: 30)
    stalled.close()
    var after: ReceivedAnswer?
    let served = try waitUntil(timeout: 20, interval: .milliseconds(200)) {
      after = try send("GET", "/doc", to: gateway.port, timeout: 30)
      return after?.status == 200
    }

    #expect(isErrorEnvelope(refused, status: 503, message: "gateway overloaded"), "\(refused.text.prefix(200))")
    #expect(served, "\(after?.text.prefix(200) ?? "")")
    #expect(after.map(StoreTests.cacheHeader) == "HIT")
  }
}

extension BufferedAnswerBudgetTests {
  /// A background refresh holds its body whole to store it: past the budget it stores
  /// nothing, and the answer already stored stays.
  @Test func aRefreshOverTheBudgetLeavesTheStoredAnswer() throws {
    let size = Shared(2_000)
    let backend = try TestBackend { _ in
      let body = "{\"pad\":\"" + String(repeating: "x", count: size.value) + "\"}"
      return jsonAnswer(body)
    }
    defer { backend.stop() }
    var config = StoreTests.config(port: backend.port, cache: ["fresh_s": 0, "stale_while_revalidate_s": 600])
    config["limits"] = ["buffered_bytes": 100_000]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try send("GET", "/swr", to: gateway.port)
    #expect(admin.waitForStoredEntries(1))
    size.value = 300_000
    let stale = try send("GET", "/swr", to: gateway.port)
    #expect(backend.waitForRequests(2))
    // Past the loop's one-second memory of recent store answers.
    sleep(for: .milliseconds(1500))
    let again = try send("GET", "/swr", to: gateway.port)

    #expect(first.body.count < 3_000)
    #expect(StoreTests.cacheHeader(stale) == "STALE")
    #expect(again.text == first.text, "the refresh over the budget stored nothing")
  }
}
