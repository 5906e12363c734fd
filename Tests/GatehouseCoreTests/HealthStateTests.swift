import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

@Suite struct HealthStateTests {
  @Test func turnsUnhealthyAfterConsecutiveFailuresAndBackAfterSuccesses() {
    var health = HealthState(unhealthyAfter: 3, healthyAfter: 2)
    #expect(health.healthy)
    let changed1 = health.record(success: false, error: "refused")
    #expect(!changed1)
    let changed2 = health.record(success: false, error: "refused")
    #expect(!changed2)
    let changed3 = health.record(success: false, error: "timeout")
    #expect(changed3)
    #expect(!health.healthy)
    #expect(health.lastError == "timeout")
    let changed4 = health.record(success: true)
    #expect(!changed4)
    let changed5 = health.record(success: true)
    #expect(changed5)
    #expect(health.healthy)
  }

  @Test func aGoodCheckBreaksAFailureStreak() {
    var health = HealthState(unhealthyAfter: 2, healthyAfter: 1)
    _ = health.record(success: false)
    _ = health.record(success: true)
    let changed6 = health.record(success: false)
    #expect(!changed6)
    #expect(health.healthy)
  }
}

@Suite struct HealthStateTimesTests {
  @Test func keepsTheLastCheckTheLastErrorWithItsTimeAndWhenHealthChanged() {
    var health = HealthState(unhealthyAfter: 2, healthyAfter: 1)
    #expect(health.lastCheck == nil)
    #expect(health.sinceMs == nil)
    _ = health.record(success: true, status: 200, atMs: 1_000)
    #expect(health.lastCheck == HealthState.Check(atMs: 1_000, ok: true, status: 200, error: nil))
    #expect(health.sinceMs == nil)
    _ = health.record(success: false, status: 401, error: "status 401", atMs: 2_000)
    #expect(health.sinceMs == nil)
    _ = health.record(success: false, error: "connection refused", atMs: 3_000)
    #expect(!health.healthy)
    #expect(health.sinceMs == 3_000)
    #expect(health.lastCheck == HealthState.Check(atMs: 3_000, ok: false, status: nil, error: "connection refused"))
    #expect(health.lastErrorAtMs == 3_000)
    _ = health.record(success: true, status: 204, error: "ignored for a good check", atMs: 4_000)
    #expect(health.healthy)
    #expect(health.sinceMs == 4_000)
    #expect(health.lastCheck == HealthState.Check(atMs: 4_000, ok: true, status: 204, error: nil))
    // The last outage's error stays, with its time, after the recovery.
    #expect(health.lastError == "connection refused")
    #expect(health.lastErrorAtMs == 3_000)
  }

  @Test func theHealthPathIsJoinedToTheBasePathUnlessRooted() {
    func target(_ path: String, _ base: String) -> String {
      HealthCheckConfig(path: path, interval: .seconds(1), unhealthyAfter: 1, healthyAfter: 1).target(basePath: base)
    }
    #expect(target("/health", "/api/v1") == "/api/v1/health")
    #expect(target("/health", "") == "/health")
    #expect(target("~/health", "/api/v1") == "/health")
    #expect(target("~/", "/api/v1") == "/")
  }

  @Test func aRootedHealthPathIsValidConfig() {
    let upstream =
      #""upstreams": { "api": { "url": "http://127.0.0.1:3000/api/v1", "health": { "path": "~/healthz" } } }"#
    let json = """
      {\(upstream), "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "api" } ] }
      """
    #expect(issueLines(json) == ["loaded"])
    let bad = json.replacingOccurrences(of: "~/healthz", with: "~healthz")
    #expect(issueLines(bad) == ["upstreams.api.health.path: must start with '/'"])
  }
}

@Suite struct UpstreamLastErrorTests {
  static func figures(_ error: String?, at: Int64?) -> PoolFigures {
    PoolFigures(
      open: 0, idle: 0, circuitOpen: false, openRoutes: [], lastError: error, lastErrorAtMs: at, endpoints: [])
  }

  /// `/admin/upstreams` shows the latest error, whether a health check or a request on
  /// some loop met it, with its time.
  @Test func theLatestErrorWinsWhereverItWasSeen() {
    var health = HealthState(unhealthyAfter: 1, healthyAfter: 1)
    _ = health.record(success: false, status: 401, error: "status 401", atMs: 5_000)
    let loops = [Self.figures("reset", at: 4_000), Self.figures(nil, at: nil), Self.figures("timeout", at: 6_000)]
    #expect(GatewayAdministration.latestError(health: health, figures: loops)?.text == "timeout")
    #expect(GatewayAdministration.latestError(health: health, figures: loops)?.atMs == 6_000)
    #expect(GatewayAdministration.latestError(health: health, figures: Array(loops.prefix(2)))?.text == "status 401")
    #expect(GatewayAdministration.latestError(health: nil, figures: Array(loops.prefix(1)))?.atMs == 4_000)
    #expect(
      GatewayAdministration.latestError(health: HealthState(unhealthyAfter: 1, healthyAfter: 1), figures: []) == nil)
  }
}
