import Foundation
import Testing

/// Collapsed forwarding: concurrent GETs for one cache key share one upstream exchange;
/// waiters get the leader's answer, its failure, or ask the upstream themselves.
@Suite struct CollapseTests {
  /// Sends `GET path` with its own request id on a new connection, without reading.
  static func start(_ path: String, id: String, port: UInt16, headers: [(String, String)] = []) throws -> RawClient {
    let client = try RawClient(port: port)
    try client.send(httpRequest("GET", path, headers: [("X-Request-Id", id)] + headers))
    return client
  }

  static func collapsedCount(_ admin: AdminClient) -> Double {
    guard let text = try? admin.request("GET", "/metrics").text, let page = try? MetricsPage(text) else { return -1 }
    return page.value("gatehouse_cache_collapsed_total")
  }

  /// Waits until `count` requests wait for another's exchange.
  static func waitForWaiters(_ count: Int, admin: AdminClient) -> Bool {
    waitUntil(timeout: 15, interval: .milliseconds(20)) { collapsedCount(admin) >= Double(count) }
  }

  /// Starts a GET for `path` (id c0) and, once the backend has it (its `backendRequests`-th
  /// request), `count` more (c1, c2, …) that wait for it. Returns the clients, leader first.
  static func leaderAndWaiters(
    _ path: String, count: Int, gateway: GatewayProcess, backend: ModalBackend, admin: AdminClient,
    backendRequests: Int = 1
  ) throws -> [RawClient] {
    let leader = try start(path, id: "c0", port: gateway.port)
    #expect(backend.server.waitForRequests(backendRequests))
    let waiters = try (1...count).map { try start(path, id: "c\($0)", port: gateway.port) }
    try #require(waitForWaiters(count, admin: admin))
    return [leader] + waiters
  }

  @Test func concurrentGetsForOneKeyShareOneUpstreamExchange() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, envelope: ["enabled": true]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let leader = try Self.start("/items/7?b=2&a=1", id: "client-0", port: gateway.port)
    #expect(backend.server.waitForRequests(1))
    var clients = [leader]
    for index in 1..<5 { clients.append(try Self.start("/items/7?a=1&b=2", id: "client-\(index)", port: gateway.port)) }
    try #require(Self.waitForWaiters(4, admin: admin))
    hold.open()
    let answers = try clients.map { try $0.readAnswer() }

    #expect(backend.requests.count == 1)
    let expected = #"{"code":0,"datas":{"target":"/items/7?b=2&a=1","version":1,"lang":""},"message":""}"#
    for (index, answer) in answers.enumerated() {
      #expect(answer.status == 200)
      #expect(answer.text == expected)
      #expect(answer.head.value("X-Request-Id") == "client-\(index)")
      #expect(answer.head.value("X-Gatehouse-Cache") == "MISS")
      #expect(answer.head.contentLength == Int64(answer.body.count))
    }
    // The shared answer is stored once, and the next request leads a new exchange.
    #expect(admin.waitForStoredEntries(1))
    backend.version.value = 2
    let next = try send("GET", "/items/7?a=1&b=2", to: gateway.port)
    #expect(next.text.contains(#""version":2"#))
    #expect(backend.requests.count == 2)
  }

  @Test func collapseOffSendsEveryRequest() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["collapse": false]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let clients = try (0..<3).map { try Self.start("/same", id: "c\($0)", port: gateway.port) }
    #expect(backend.server.waitForRequests(3))
    hold.open()
    let answers = try clients.map { try $0.readAnswer() }

    #expect(answers.allSatisfy { $0.status == 200 })
    #expect(backend.requests.count == 3)
    #expect(Self.collapsedCount(admin) == 0)
  }

  @Test func waitersAskThemselvesWhenTheAnswerMayNotBeShared() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    backend.extraHeaders.value = [("Cache-Control", "no-store")]
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let clients = try Self.leaderAndWaiters("/private", count: 2, gateway: gateway, backend: backend, admin: admin)
    hold.open()
    let answers = try clients.map { try $0.readAnswer() }

    #expect(answers.allSatisfy { $0.status == 200 && $0.text.contains(#""target":"/private""#) })
    #expect(answers.map { $0.head.value("X-Request-Id") } == ["c0", "c1", "c2"])
    // A no-store answer is not shared: each waiter got its own from the backend.
    #expect(backend.requests.count == 3)
    #expect(try admin.cacheEntryCount() == 0)
  }

  @Test func waitersShareTheLeadersFailureAndGetTheStaleAnswer() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, answerTimeoutMs: 2000))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try StoreTests.prime("/slow", gateway: gateway, admin: admin)
    backend.mode.value = .hanging
    let clients = try Self.leaderAndWaiters(
      "/slow", count: 2, gateway: gateway, backend: backend, admin: admin, backendRequests: 2)
    let answers = try clients.map { try $0.readAnswer(timeout: 20) }
    backend.gate.open()

    for answer in answers { StoreTests.expectStale(answer, body: first.text) }
    // The waiters did not try the hanging backend again.
    #expect(backend.requests.count == 2)
  }

  @Test func waitersShareTheLeadersTimeoutWhenNothingIsStored() throws {
    let backend = try ModalBackend()
    backend.mode.value = .hanging
    let gateway = try GatewayProcess(
      config: StoreTests.config(port: backend.port, envelope: ["enabled": true], answerTimeoutMs: 2000))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let clients = try Self.leaderAndWaiters("/never", count: 2, gateway: gateway, backend: backend, admin: admin)
    let answers = try clients.map { try $0.readAnswer(timeout: 20) }
    backend.gate.open()

    for answer in answers { #expect(isErrorEnvelope(answer, status: 504, message: "upstream timed out")) }
    #expect(backend.requests.count == 1)
  }

  @Test func waitersAreAnsweredWhenTheLeadersClientLeaves() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let clients = try Self.leaderAndWaiters("/left", count: 2, gateway: gateway, backend: backend, admin: admin)
    // A reset, not a FIN: a half-closed client still gets its answer.
    clients[0].socket.setLingerZero()
    clients[0].close()
    // The waiters now ask the backend themselves.
    #expect(backend.server.waitForRequests(3))
    hold.open()
    let answers = try clients.dropFirst().map { try $0.readAnswer() }

    #expect(answers.map(\.status) == [200, 200])
    #expect(answers.map { $0.head.value("X-Request-Id") } == ["c1", "c2"])
    #expect(answers.allSatisfy { $0.text == #"{"target":"/left","version":1,"lang":""}"# })
  }

  /// A reload while they wait (here with the same file) leaves the waiters a pool to go to
  /// when they must ask the backend themselves.
  @Test func waitersThatOutliveAReloadStillReachTheBackend() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let clients = try Self.leaderAndWaiters("/reloaded", count: 2, gateway: gateway, backend: backend, admin: admin)
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    clients[0].socket.setLingerZero()
    clients[0].close()
    #expect(backend.server.waitForRequests(3))
    hold.open()
    let answers = try clients.dropFirst().map { try $0.readAnswer() }

    #expect(answers.map(\.status) == [200, 200], "\(answers.map(\.text))")
    #expect(answers.allSatisfy { $0.text == #"{"target":"/reloaded","version":1,"lang":""}"# })
  }

  @Test func requestsWithDifferentVaryValuesDoNotShare() throws {
    let backend = try ModalBackend()
    let hold = Gate()
    backend.holdHealthy.value = hold
    let gateway = try GatewayProcess(
      config: StoreTests.config(port: backend.port, cache: ["vary": ["Accept-Language"]]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let english = try Self.start("/greeting", id: "en", port: gateway.port, headers: [("Accept-Language", "en")])
    let french = try Self.start("/greeting", id: "fr", port: gateway.port, headers: [("Accept-Language", "fr")])
    #expect(backend.server.waitForRequests(2))
    hold.open()

    #expect(try english.readAnswer().text.contains(#""lang":"en""#))
    #expect(try french.readAnswer().text.contains(#""lang":"fr""#))
    #expect(backend.requests.count == 2)
    #expect(Self.collapsedCount(admin) == 0)
  }

  /// During an outage the circuit's half-open trial may hang; requests for its key get the
  /// stale answer at once instead of waiting for it.
  @Test func nobodyWaitsForACircuitTrial() throws {
    let backend = try ModalBackend()
    let config = StoreTests.config(
      port: backend.port, answerTimeoutMs: 30_000, upstreamExtra: ["circuit": ["failures": 1, "open_ms": 200]])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try StoreTests.prime("/k", gateway: gateway, admin: admin)
    backend.mode.value = .resetting
    StoreTests.expectStale(try send("GET", "/k", to: gateway.port), body: first.text)
    let received = backend.requests.count
    backend.mode.value = .hanging
    sleep(for: .milliseconds(400))  // past open_ms: the next request is the trial
    let trial = try Self.start("/k", id: "trial", port: gateway.port)
    #expect(backend.server.waitForRequests(received + 1))
    let other = try send("GET", "/k", to: gateway.port, timeout: 15)
    backend.gate.open()

    StoreTests.expectStale(other, body: first.text)
    #expect(try trial.readAnswer(timeout: 15).status == 200)
    #expect(Self.collapsedCount(admin) == 0)
  }
}
