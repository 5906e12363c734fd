import Foundation
import Testing

/// Active health checks as an operator sees them: the path they ask, and one story in the
/// admin API, the metrics and the logs while an upstream is down and after it recovers.
@Suite struct HealthCheckTests {
  /// A backend under `/api/v1` that answers 401 outside it, as real APIs behind auth do,
  /// and `healthStatus` on its health endpoints.
  static func apiBackend(healthStatus: Shared<Int> = Shared(200)) throws -> TestBackend {
    try TestBackend { request in
      if request.path == "/api/v1/health" || request.path == "/ping" {
        return .respond(.text("ok", status: healthStatus.value))
      }
      guard request.path.hasPrefix("/api/v1/") else { return .respond(.text("no credentials", status: 401)) }
      return .respond(.text("data"))
    }
  }

  static func upstream(port: UInt16, healthPath: String) -> [String: Any] {
    var upstream = TestConfig.upstream(port: port, basePath: "/api/v1")
    upstream["health"] = ["path": healthPath, "interval_ms": 200, "unhealthy_after": 1, "healthy_after": 1]
    return upstream
  }

  static func upstreams(_ admin: AdminClient) -> [String: [String: Any]] {
    let list = (try? admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]]) ?? []
    var byName: [String: [String: Any]] = [:]
    for upstream in list { if let name = upstream["name"] as? String { byName[name] = upstream } }
    return byName
  }

  /// `health.path` is joined to the upstream url's base path like a route's path; `~/` asks
  /// from the host's root.
  @Test func theHealthPathIsJoinedToTheUpstreamBasePath() throws {
    let backend = try Self.apiBackend()
    defer { backend.stop() }
    let config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")],
        upstreams: [
          "api": Self.upstream(port: backend.port, healthPath: "/health"),
          "rooted": Self.upstream(port: backend.port, healthPath: "~/ping"),
        ]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    try #require(
      waitUntil {
        let upstreams = Self.upstreams(admin)
        return ["api", "rooted"].allSatisfy { (upstreams[$0]?["last_check"] as? [String: Any])?["ok"] as? Bool == true }
      })
    let targets = Set(backend.requests.map(\.target))
    #expect(targets.contains("/api/v1/health"))
    #expect(targets.contains("/ping"))
    #expect(!targets.contains("/health"))
    let api = try #require(Self.upstreams(admin)["api"])
    #expect(api["health"] as? String == "healthy")
    #expect((api["last_check"] as? [String: Any])?["status"] as? Int == 200)
    #expect(try send("GET", "/users", to: gateway.port).status == 200)
    #expect(!gateway.logLines().contains { $0["msg"] as? String == "upstream unhealthy" })
  }

  /// While the checks call the upstream down, requests are refused as `unhealthy` (not as an
  /// open circuit), the health gauge says 0, the circuit gauge and the admin API agree that
  /// the circuit is closed, and the admin API tells when it changed and what the checks
  /// got. The recovery is an info line with no error.
  @Test func anUnhealthyUpstreamIsOneStoryEverywhere() throws {
    let healthStatus = Shared(503)
    let backend = try Self.apiBackend(healthStatus: healthStatus)
    defer { backend.stop() }
    let config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")],
        upstreams: ["api": Self.upstream(port: backend.port, healthPath: "/health")]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    try #require(waitUntil { Self.upstreams(admin)["api"]?["health"] as? String == "unhealthy" })

    let refused = try send("GET", "/users", to: gateway.port)
    #expect(isErrorEnvelope(refused, status: 502, message: "upstream unavailable"))
    #expect(!backend.requests.contains { $0.path == "/api/v1/users" })
    #expect(waitUntil { gateway.accessLines().count >= 1 })
    let line = try #require(gateway.accessLines().last)
    #expect(line["reason"] as? String == "unhealthy")
    #expect(line["upstream"] as? String == "api")
    #expect(line["upstream_status"] is NSNull)

    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "unhealthy"]) == 1)
    #expect(metrics.samples("gatehouse_upstream_requests_total", ["outcome": "circuit_open"]).isEmpty)
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "all", "reason": "unhealthy"]) == 1)
    #expect(metrics.samples("gatehouse_upstream_healthy", ["upstream": "api"]).first?.value == 0)
    #expect(metrics.types["gatehouse_upstream_healthy"] == "gauge")
    #expect(metrics.value("gatehouse_circuit_open", ["upstream": "api"]) == 0)

    let down = try #require(Self.upstreams(admin)["api"])
    #expect(down["circuit"] as? String == "closed")
    #expect((down["since"] as? String)?.hasSuffix("Z") == true)
    let check = try #require(down["last_check"] as? [String: Any])
    #expect(check["ok"] as? Bool == false)
    #expect(check["status"] as? Int == 503)
    #expect(check["error"] as? String == "status 503")
    #expect((check["at"] as? String)?.hasSuffix("Z") == true)
    #expect(down["last_error"] as? String == "status 503")
    #expect((down["last_error_at"] as? String)?.hasSuffix("Z") == true)
    let warning = try #require(gateway.logLines().first { $0["msg"] as? String == "upstream unhealthy" })
    #expect(warning["level"] as? String == "warn")
    #expect(warning["status"] as? Int == 503)
    #expect(warning["path"] as? String == "/api/v1/health")

    healthStatus.value = 200
    try #require(waitUntil { Self.upstreams(admin)["api"]?["health"] as? String == "healthy" })
    #expect(try send("GET", "/users", to: gateway.port).status == 200)
    let recovery = try #require(gateway.logLines().first { $0["msg"] as? String == "upstream healthy" })
    #expect(recovery["level"] as? String == "info")
    #expect(recovery["error"] == nil)
    let up = try #require(Self.upstreams(admin)["api"])
    #expect((up["last_check"] as? [String: Any])?["ok"] as? Bool == true)
    #expect((up["last_check"] as? [String: Any])?["error"] is NSNull)
    #expect(up["since"] as? String != nil)
    // The outage's error stays, with its time.
    #expect(up["last_error"] as? String == "status 503")
    #expect(up["last_error_at"] as? String == down["last_error_at"] as? String)
    let after = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(after.samples("gatehouse_upstream_healthy", ["upstream": "api"]).first?.value == 1)
  }

  /// Without health checks an upstream has no verdict: no health sample, and the admin API
  /// says `unknown` with null check fields.
  @Test func anUncheckedUpstreamHasNoVerdict() throws {
    let backend = try Self.apiBackend()
    defer { backend.stop() }
    let config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")],
        upstreams: ["api": TestConfig.upstream(port: backend.port, basePath: "/api/v1")]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let api = try #require(Self.upstreams(admin)["api"])
    #expect(api["health"] as? String == "unknown")
    for key in ["since", "last_check", "last_error", "last_error_at"] {
      #expect(api[key] is NSNull, "\(key)")
    }
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.samples("gatehouse_upstream_healthy").isEmpty)
    #expect(metrics.types["gatehouse_upstream_healthy"] == "gauge")
  }
}
