import Foundation
import Testing

/// Secrets never leak (Docs/behaviour.md and Docs/logs.md): canary values for a static token, an oauth2 client
/// secret, the fetched tokens and a value set through the admin API go through traffic,
/// rejections, refreshes, failing logins (whose errors echo the secret back), invalidations,
/// reloads and admin listings, and then appear nowhere the gateway writes to or answers
/// with: its stdout and stderr, client answers (heads and bodies), `/metrics`, the admin API,
/// and `gatehouse check` errors.
@Suite struct SecretLeakTests {
  static let staticCanary = "CANARYSTATICe41d"
  static let secretCanary = "CANARYSECRET77c0"
  static let fetchedCanary = "CANARYFETCHED5b9a"
  static let putCanary = "CANARYPUT3f6e"
  static var canaries: [String] { [staticCanary, secretCanary, fetchedCanary, putCanary] }

  /// Everything a client or an operator received, for scanning.
  final class Transcript {
    private(set) var entries: [(label: String, bytes: [UInt8])] = []

    @discardableResult
    func record(_ label: String, _ answer: ReceivedAnswer) -> ReceivedAnswer {
      entries.append((label, answer.head.raw + answer.body))
      return answer
    }

    /// The labels of the entries that contain `canary`.
    func leaks(of canary: String) -> [String] {
      entries.filter { String(decoding: $0.bytes, as: UTF8.self).contains(canary) }.map(\.label)
    }
  }

  @Test func canariesAppearNowhereTheGatewayWritesOrAnswers() throws {
    let oauth = try OAuth2TestServer(clientSecret: Self.secretCanary, tokenPrefix: Self.fetchedCanary)
    let backend = try TestBackend { request in
      if request.path.hasPrefix("/p/reject") {
        return .respond(
          BackendAnswer(
            status: 401, reason: "Unauthorized", headers: [("Content-Type", "application/json")],
            body: .bytes(Array(#"{"error":"invalid_token"}"#.utf8))))
      }
      return .respond(
        BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array(#"{"ok":true}"#.utf8))))
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port,
      tokens: [
        "api": ["type": "static", "value": "${GH_ITEST_LEAK_TOKEN}"],
        "partner": oauth.tokenConfig(refreshBeforeS: 1),
      ],
      routes: [
        TestConfig.tokenRoute("static", match: "/s/*", token: "api", extra: ["envelope": ["enabled": true]]),
        TestConfig.tokenRoute("oauth", match: "/p/*", token: "partner"),
      ], logLevel: "debug")
    let gateway = try GatewayProcess(config: config, environment: ["GH_ITEST_LEAK_TOKEN": Self.staticCanary])
    let admin = try gateway.admin()
    #expect(admin.waitForState("api", "valid"))
    let transcript = Transcript()
    func client(_ method: String, _ path: String, body: [UInt8]? = nil) throws -> ReceivedAnswer {
      transcript.record("\(method) \(path)", try send(method, path, to: gateway.port, body: body))
    }
    func operator_(_ method: String, _ path: String, body: String? = nil) throws -> ReceivedAnswer {
      transcript.record("admin \(method) \(path)", try admin.request(method, path, body: body.map { Array($0.utf8) }))
    }

    // Traffic on both tokens, and a rejection that forces a refresh and a retry.
    #expect(try client("GET", "/s/one").status == 200)
    #expect(try client("GET", "/p/one").status == 200)
    #expect(try client("POST", "/p/two", body: Array("payload".utf8)).status == 200)
    #expect(try client("GET", "/p/reject").status == 401)
    // Failing logins whose errors echo the secret and the tokens in use back.
    // (The refresh after the second rejection settles first, so the echoed token is the current one.)
    let settled = waitUntil(timeout: 10) {
      let state = try? admin.token("partner")
      return state?["state"] as? String == "valid"
        && state?["fingerprint"] as? String == SHA256Digest.fingerprint(oauth.token(oauth.issuedCount))
    }
    #expect(settled)
    let current = oauth.token(oauth.issuedCount)
    oauth.setMode(
      .fail(description: "client secret \(Self.secretCanary) is not valid for \(current) or \(Self.staticCanary)"))
    #expect(try operator_("POST", "/admin/tokens/partner/refresh").status == 502)
    #expect(try operator_("GET", "/admin/tokens").status == 200)
    oauth.setMode(.garbage)
    #expect(try operator_("POST", "/admin/tokens/partner/refresh").status == 502)
    oauth.setMode(.close)
    #expect(try operator_("POST", "/admin/tokens/partner/refresh").status == 502)
    // Invalidations: the oauth2 login fails, the static token is refused.
    oauth.setMode(.fail(description: "still \(Self.secretCanary)"))
    #expect(try operator_("POST", "/admin/tokens/partner/invalidate").status == 200)
    #expect(try client("GET", "/p/after-invalidate").status == 401)
    #expect(try operator_("POST", "/admin/tokens/api/invalidate").status == 200)
    #expect(try client("GET", "/s/after-invalidate").status == 401)
    // Values set by an operator, good and bad.
    #expect(
      try operator_("PUT", "/admin/tokens/partner", body: #"{"value":"\#(Self.putCanary)","expires_in":60}"#).status
        == 200)
    #expect(try operator_("PUT", "/admin/tokens/api", body: #"{"value":"\#(Self.putCanary)\r\nX: 1"}"#).status == 400)
    #expect(try operator_("PUT", "/admin/tokens/api", body: "{\"value\":\"\(Self.putCanary)\nraw\"}").status == 400)
    #expect(try operator_("PUT", "/admin/tokens/api", body: #"{"value":"\#(Self.putCanary)","bogus":1}"#).status == 400)
    #expect(try operator_("PUT", "/admin/tokens/nope", body: #"{"value":"x-value"}"#).status == 404)
    #expect(try client("GET", "/p/after-put").status == 200)
    // Back to normal, with a reload that reads the environment value again.
    oauth.setMode(.issue)
    #expect(try operator_("POST", "/admin/tokens/partner/refresh").status == 200)
    #expect(try operator_("POST", "/admin/reload").status == 200)
    #expect(try client("GET", "/s/after-reload").status == 200)
    #expect(try client("GET", "/p/after-reload").status == 200)
    let metrics = try operator_("GET", "/metrics")
    for path in ["/admin/tokens", "/admin/status", "/admin/routes", "/admin/upstreams", "/healthz"] {
      #expect(try operator_("GET", path).status == 200, "\(path)")
    }
    gateway.stopExpectingCleanExit()

    // The canaries were really in play.
    let sentTokens = Set(backend.requests.compactMap(bearerToken))
    #expect(sentTokens.contains(Self.staticCanary))
    #expect(sentTokens.contains(oauth.token(1)))
    #expect(sentTokens.contains(Self.putCanary))
    #expect(oauth.problems.isEmpty, "\(oauth.problems)")
    #expect(metrics.status == 200 && metrics.text.contains("gatehouse_requests_total"))
    #expect(gateway.logLines().contains { $0["msg"] as? String == "token refresh failed" })
    // And went nowhere else.
    let output = gateway.stdoutText + gateway.stderrText
    for canary in Self.canaries {
      #expect(!output.contains(canary), "gateway output contains \(canary)")
      #expect(transcript.leaks(of: canary).isEmpty, "\(canary) in: \(transcript.leaks(of: canary))")
    }
  }

  @Test func checkErrorsNeverQuoteSecrets() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-leak-check-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let configURL = directory.appendingPathComponent("check.json")
    let config = TestConfig.withTokens(
      upstreamPort: 9,
      tokens: [
        "api": ["type": "static", "value": "\(Self.staticCanary)\u{7}"],
        "partner": [
          "type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:9/token", "client_id": "gw",
          "client_secret": "\(Self.secretCanary) ", "client_secert": Self.secretCanary, "refresh_before_s": "soon",
        ],
      ],
      routes: [TestConfig.tokenRoute("all", match: "/*", token: "api")])
    try JSONSerialization.data(withJSONObject: config).write(to: configURL)

    let check = try GatewayProcess(
      arguments: ["check", "--config", configURL.path], directory: directory, startTimeout: nil)
    let outcome = check.waitForExit(timeout: 30)

    #expect(outcome == ExitOutcome(code: 1, bySignal: false))
    let output = check.stdoutText + check.stderrText
    #expect(output.contains("tokens.api.value"), "\(output)")
    #expect(output.contains("tokens.partner.client_secret"), "\(output)")
    #expect(output.contains("client_secert"), "\(output)")
    for canary in Self.canaries { #expect(!output.contains(canary), "check output contains \(canary): \(output)") }
  }
}
