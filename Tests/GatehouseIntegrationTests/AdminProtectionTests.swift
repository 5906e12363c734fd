import Foundation
import Testing

/// What protects the admin API beyond its token: the headers on every answer that keep a
/// browser from sniffing, framing or leaking it (the dashboard's Content-Security-Policy
/// among them), and the throttled warning and the counter for failed authentications.
@Suite struct AdminProtectionTests {
  static func gateway() throws -> GatewayProcess {
    let stub = TestConfig.route(
      "stub", match: "/stub", upstream: nil, extra: ["stub": ["mode": "always", "status": 200, "body": ["ok": true]]])
    return try GatewayProcess(config: TestConfig.withAdmin(TestConfig.make(routes: [stub], access: "off")))
  }

  static func expectProtectionHeaders(
    _ answer: ReceivedAnswer, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    #expect(answer.head.values("X-Content-Type-Options") == ["nosniff"], "\(what)", sourceLocation: sourceLocation)
    #expect(answer.head.values("X-Frame-Options") == ["DENY"], "\(what)", sourceLocation: sourceLocation)
    #expect(answer.head.values("Referrer-Policy") == ["no-referrer"], "\(what)", sourceLocation: sourceLocation)
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

  /// Wrong tokens (and none) are counted in `gatehouse_admin_auth_failures_total` and
  /// logged as `admin authentication failed` with the peer, at most once per 10 s: the
  /// first at once, the rest as a count once the 10 s are over. No presented value is
  /// ever logged.
  @Test func failedAuthenticationsAreCountedAndLoggedThrottled() throws {
    let gateway = try Self.gateway()
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    let wrong = (1...3).map { "wrong-admin-token-CANARY-\($0)" }
    func failureLines() -> [[String: Any]] {
      gateway.logLines().filter { $0["msg"] as? String == "admin authentication failed" }
    }

    for value in wrong {
      #expect(try admin.request("GET", "/admin/status", credential: .header("Bearer \(value)")).status == 401)
    }
    #expect(try admin.request("POST", "/admin/reload", credential: .none).status == 401)

    #expect(gateway.waitForLogLine { $0["msg"] as? String == "admin authentication failed" })
    let first = try #require(failureLines().first)
    #expect(first["level"] as? String == "warn")
    #expect(first["failures"] as? Int == 1)
    #expect((first["peer"] as? String)?.hasPrefix("127.0.0.1:") == true)
    let metrics = try admin.request("GET", "/metrics").text
    #expect(metrics.contains("# TYPE gatehouse_admin_auth_failures_total counter"))
    #expect(metrics.contains("\ngatehouse_admin_auth_failures_total 4\n"))

    // The three held back are reported by the admin sweep once the 10 s are over.
    #expect(
      gateway.waitForLogLine(timeout: 20) {
        $0["msg"] as? String == "admin authentication failed" && $0["failures"] as? Int == 3
      })
    #expect(failureLines().count == 2)
    let log = gateway.stdoutText
    for value in wrong + [TestConfig.adminToken] { #expect(!log.contains(value)) }
  }
}
