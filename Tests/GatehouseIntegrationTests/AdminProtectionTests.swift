import Foundation
import Testing

/// What protects the admin API beyond its token: the headers on every answer that keep a
/// browser from sniffing, framing or leaking it (the dashboard's Content-Security-Policy
/// among them).
@Suite struct AdminProtectionTests {
  static func gateway() throws -> GatewayProcess {
    let stub = TestConfig.route(
      "stub", match: "/stub", upstream: nil, extra: ["stub": ["mode": "always", "status": 200, "body": ["ok": true]]])
    return try GatewayProcess(config: TestConfig.withAdmin(TestConfig.make(routes: [stub], access: "off")))
  }

  static func expectProtectionHeaders(
    _ response: ReceivedResponse, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    #expect(response.head.values("X-Content-Type-Options") == ["nosniff"], "\(what)", sourceLocation: sourceLocation)
    #expect(response.head.values("X-Frame-Options") == ["DENY"], "\(what)", sourceLocation: sourceLocation)
    #expect(response.head.values("Referrer-Policy") == ["no-referrer"], "\(what)", sourceLocation: sourceLocation)
  }

  @Test func everyAdminAnswerCarriesTheProtectionHeaders() throws {
    let gateway = try Self.gateway()
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()

    let status = try admin.request("GET", "/admin/status")
    #expect(status.status == 200)
    Self.expectProtectionHeaders(status, "JSON answer")
    let refused = try admin.request("GET", "/admin/status", credential: .none)
    #expect(refused.status == 401)
    Self.expectProtectionHeaders(refused, "401")
    let missing = try admin.request("GET", "/admin/nothing")
    #expect(missing.status == 404)
    Self.expectProtectionHeaders(missing, "404")
    let metrics = try admin.request("GET", "/metrics")
    #expect(metrics.status == 200)
    Self.expectProtectionHeaders(metrics, "/metrics")
    let page = try admin.request("GET", "/admin/", credential: .none)
    #expect(page.status == 200)
    Self.expectProtectionHeaders(page, "dashboard")

    // The page's policy comes as a header too: `frame-ancestors` works only there, and its
    // script runs by hash, never as any inline script.
    let policies = page.head.values("Content-Security-Policy")
    #expect(policies.count == 1)
    let directives = (policies.first ?? "").split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
    #expect(directives.contains("frame-ancestors 'none'"))
    #expect(directives.contains("default-src 'none'"))
    let scriptSources = try #require(directives.first { $0.hasPrefix("script-src ") })
    #expect(scriptSources.range(of: #"^script-src 'sha256-[A-Za-z0-9+/]{43}='$"#, options: .regularExpression) != nil)
    #expect(!scriptSources.contains("unsafe-inline"))
    // JSON answers are not pages: no policy needed beyond nosniff and DENY.
    #expect(!status.head.has("Content-Security-Policy"))
  }
}
