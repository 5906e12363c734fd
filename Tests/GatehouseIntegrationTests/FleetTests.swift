import Foundation
import Testing

/// Upstreams of several endpoints (`servers`, Docs/fleets.md) with real backend processes:
/// requests spread by weight, a stopped endpoint costs no failed request (the try goes again
/// to another), a reset after sending is retried for a GET and not for a POST, failing
/// endpoints are ejected and come back, the retry budget holds in a total outage, stored
/// answers still stand in when every endpoint is down, and `/admin/upstreams` and the
/// metrics show each endpoint. One worker: each loop keeps its own view of the endpoints.
@Suite struct FleetTests {
  /// A gateway in front of `backends` as one upstream `api` (`servers` in their order, with
  /// `weights`), with `fleet` merged into the upstream and `cache` on the route.
  static func gateway(
    _ backends: [ModalBackend], weights: [Int]? = nil, fleet: [String: Any] = [:], cache: [String: Any]? = nil
  ) throws -> GatewayProcess {
    var upstream = TestConfig.upstream(port: backends[0].port, answerTimeoutMs: 5000)
    upstream["servers"] = backends.enumerated().map { index, backend in
      ["address": "127.0.0.1:\(backend.port)", "weight": weights?[index] ?? 1] as [String: Any]
    }
    for (key, value) in fleet { upstream[key] = value }
    var extra: [String: Any] = [:]
    if let cache { extra["cache"] = cache }
    return try GatewayProcess(
      config: TestConfig.withAdmin(
        TestConfig.make(routes: [TestConfig.route("api", match: "/*", extra: extra)], upstreams: ["api": upstream])))
  }

  static func endpoints(_ admin: AdminClient) throws -> [[String: Any]] {
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    return upstreams.first { $0["name"] as? String == "api" }?["endpoints"] as? [[String: Any]] ?? []
  }

  /// Smooth weighted round robin gives each endpoint exactly its weight's share per cycle.
  @Test func requestsSpreadOverTheServersByWeight() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    let gateway = try Self.gateway(backends, weights: [1, 2, 1], fleet: ["balance": "round_robin"])
    defer { gateway.stopExpectingCleanExit() }
    for index in 0..<40 {
      #expect(try send("GET", "/spread/\(index)", to: gateway.port).status == 200)
    }
    #expect(backends.map(\.requests.count) == [10, 20, 10])

    let admin = try gateway.admin(token: TestConfig.adminToken)
    let listed = try Self.endpoints(admin)
    #expect(listed.map { $0["address"] as? String } == backends.map { "127.0.0.1:\($0.port)" })
    #expect(listed.map { $0["weight"] as? Int } == [1, 2, 1])
    #expect(listed.map { $0["state"] as? String } == ["healthy", "healthy", "healthy"])
    #expect(listed.map { $0["requests"] as? Int } == [10, 20, 10])
    #expect(listed.allSatisfy { $0["in_flight"] as? Int == 0 && $0["failures"] as? Int == 0 })
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_endpoints", ["upstream": "api", "state": "healthy"]) == 3)
    #expect(metrics.value("gatehouse_upstream_endpoints", ["upstream": "api", "state": "ejected"]) == 0)
    #expect(
      metrics.value(
        "gatehouse_upstream_endpoint_requests_total",
        ["upstream": "api", "endpoint": "127.0.0.1:\(backends[1].port)", "outcome": "success"]) == 20)
  }

  /// A stopped endpoint refuses connections: each try that picks it goes again to another,
  /// so no request fails; after `outlier.failures` of them in a row it is ejected, and the
  /// upstream's circuit never opens (the upstream as a whole works).
  @Test func aStoppedServerCostsNoFailedRequestAndIsEjected() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    let gateway = try Self.gateway(backends, fleet: ["outlier": ["failures": 3, "eject_ms": 60_000]])
    defer { gateway.stopExpectingCleanExit() }
    // Stopped before any request, so that no kept connection to it is in play: every try
    // on it is a refused connect.
    backends[1].server.stop()
    let answers = try (0..<60).map { try send("GET", "/during/\($0)", to: gateway.port) }
    #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.map(\.status))")

    let admin = try gateway.admin(token: TestConfig.adminToken)
    let listed = try Self.endpoints(admin)
    #expect(listed.map { $0["state"] as? String } == ["healthy", "ejected", "healthy"])
    #expect(listed[1]["ejected_until"] as? String != nil)
    #expect((listed[1]["last_error"] as? String ?? "").contains("connect"))
    #expect(listed[1]["failures"] as? Int == 3)
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    #expect(upstreams.first?["circuit"] as? String == "closed")
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "connect"]) == 3)
    #expect(metrics.value("gatehouse_upstream_endpoints", ["upstream": "api", "state": "ejected"]) == 1)
    #expect(
      gateway.waitForLogLine {
        ($0["msg"] as? String ?? "").hasPrefix("upstream endpoint ejected")
          && $0["endpoint"] as? String == "127.0.0.1:\(backends[1].port)"
      })
  }

  /// A reset after the request went out: the endpoint may have acted on it, so only a
  /// replayable request (a GET) is tried again; a POST gets the error.
  @Test func aResetAfterSendingIsRetriedForAGetButNotForAPost() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[0].mode.value = .resetting
    // Smooth round robin by 100 : 1: the first try of each request goes to the resetting
    // endpoint, the retry (which avoids it) to the other.
    let gateway = try Self.gateway(
      backends, weights: [100, 1], fleet: ["balance": "round_robin", "outlier": ["max_ejected_percent": 0]])
    defer { gateway.stopExpectingCleanExit() }
    let get = try send("GET", "/read", to: gateway.port)
    #expect(get.status == 200)
    #expect(backends.map(\.requests.count) == [1, 1])
    let post = try send("POST", "/write", to: gateway.port, body: Array(#"{"a":1}"#.utf8))
    #expect(isErrorEnvelope(post, status: 502, message: "upstream unavailable"))
    #expect(backends.map(\.requests.count) == [2, 1])
    let metrics = try MetricsPage(try gateway.admin(token: TestConfig.adminToken).request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "reset"]) == 1)
  }

  /// An ejected endpoint takes requests again when its ejection ends, and the return is
  /// logged.
  @Test func anEjectedServerComesBack() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[1].mode.value = .resetting
    let gateway = try Self.gateway(
      backends, fleet: ["balance": "round_robin", "outlier": ["failures": 2, "eject_ms": 3000]])
    defer { gateway.stopExpectingCleanExit() }
    for index in 0..<6 { _ = try send("GET", "/x/\(index)", to: gateway.port) }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(try Self.endpoints(admin).map { $0["state"] as? String } == ["healthy", "ejected"])
    backends[1].mode.value = .healthy
    let before = backends[1].requests.count
    #expect(
      waitUntil(timeout: 15) {
        _ = try? send("GET", "/later", to: gateway.port)
        return backends[1].requests.count > before
      })
    #expect(gateway.waitForLogLine { ($0["msg"] as? String ?? "").hasPrefix("upstream endpoint back from ejection") })
    #expect(try Self.endpoints(admin).map { $0["state"] as? String } == ["healthy", "healthy"])
  }

  /// Active health checks ask every endpoint: one whose check fails gets no requests while
  /// the upstream stays healthy (another endpoint is); when it passes again it takes its
  /// share again.
  @Test func anEndpointWhoseHealthCheckFailsGetsNoRequests() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[1].mode.value = .failing
    let gateway = try Self.gateway(
      backends,
      fleet: [
        "balance": "round_robin",
        "health": ["path": "/health", "interval_ms": 200, "unhealthy_after": 1, "healthy_after": 1],
      ])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    try #require(waitUntil { (try? Self.endpoints(admin).map { $0["state"] as? String }) == ["healthy", "unhealthy"] })
    func served(_ backend: ModalBackend) -> Int { backend.requests.filter { $0.target.hasPrefix("/work") }.count }
    for index in 0..<10 { #expect(try send("GET", "/work/\(index)", to: gateway.port).status == 200) }
    #expect(served(backends[0]) == 10 && served(backends[1]) == 0)
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    #expect(upstreams.first?["health"] as? String == "healthy")

    backends[1].mode.value = .healthy
    try #require(waitUntil { (try? Self.endpoints(admin).map { $0["state"] as? String }) == ["healthy", "healthy"] })
    for index in 10..<20 { #expect(try send("GET", "/work/\(index)", to: gateway.port).status == 200) }
    #expect(served(backends[1]) == 5)
  }

  /// Every endpoint down: tries fail over to the others within `attempts` and the retry
  /// budget, then the stored answer stands in.
  @Test func everyServerDownStillServesTheStoredAnswerWithinTheRetryBudget() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    // No circuit and no ejection: only the budget keeps the tries down.
    let gateway = try Self.gateway(
      backends, fleet: ["retry": ["attempts": 3], "outlier": ["max_ejected_percent": 0], "circuit": ["failures": 0]],
      cache: ["stale_if_error_s": 600])
    defer { gateway.stopExpectingCleanExit() }
    #expect(try send("GET", "/kept", to: gateway.port).status == 200)
    for backend in backends { backend.server.stop() }
    let answers = try (0..<100).map { _ in try send("GET", "/kept", to: gateway.port) }
    #expect(answers.allSatisfy { $0.status == 200 && $0.head.value("x-gatehouse-cache") == "STALE" })
    let metrics = try MetricsPage(try gateway.admin(token: TestConfig.adminToken).request("GET", "/metrics").text)
    let retries = metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "connect"])
    // Without a budget each request would have made two retries (200). The budget: 20 %
    // of the tries over 10 s, and at least 3 a second.
    #expect(retries >= 3)
    #expect(retries < 60, "\(retries) retries")
  }
}
