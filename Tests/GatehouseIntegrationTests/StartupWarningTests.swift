import Foundation
import Testing

/// Settings that leave a secret less protected than it looks are named at start, as
/// warnings: the gateway still runs.
@Suite struct StartupWarningTests {
  static let unencrypted = "store.secret_key is not set: token values are stored unencrypted"
  static let shortKey = "store.secret_key is short; use 32 random characters or more"

  /// A stub-only gateway with these tokens and `store` settings (the store file in the
  /// gateway's own directory).
  static func config(tokens: [String: Any], store: [String: Any] = [:]) -> [String: Any] {
    var config = TestConfig.make(routes: [["name": "r", "match": ["path": "/"], "stub": ["mode": "always"]]])
    config["tokens"] = tokens
    config["store"] = store
    return config
  }

  static func warnings(_ gateway: GatewayProcess) -> [String] {
    gateway.logLines().filter { $0["level"] as? String == "warn" }.compactMap { $0["msg"] as? String }
  }

  @Test func tokensStoredWithoutAKeyAndASecretSentOverHTTPAreWarnedAbout() throws {
    let oauth = try OAuth2TestServer()
    defer { oauth.stop() }
    // TEST-NET-1 (RFC 5737): nothing answers there; the warning is all this test needs.
    var remote = oauth.tokenConfig()
    remote["token_url"] = "http://192.0.2.1:9/oauth/token"
    let gateway = try GatewayProcess(config: Self.config(tokens: ["local": oauth.tokenConfig(), "partner": remote]))
    defer { gateway.stopExpectingCleanExit() }

    let partnerLine = "tokens.partner.token_url is http://: the client secret travels unencrypted"
    #expect(gateway.waitForLogLine { $0["level"] as? String == "warn" && $0["msg"] as? String == partnerLine })
    #expect(gateway.waitForLogLine { $0["level"] as? String == "warn" && $0["msg"] as? String == Self.unencrypted })
    // Logged before `listening`, so every start-up line is in by now.
    let warnings = Self.warnings(gateway)
    #expect(warnings.filter { $0 == Self.unencrypted }.count == 1, "\(warnings)")
    // The loopback endpoint's secret never leaves the machine.
    #expect(!warnings.contains { $0.contains("tokens.local") }, "\(warnings)")
    #expect(!warnings.contains(Self.shortKey), "\(warnings)")
  }

  @Test func aShortSecretKeyIsWarnedAbout() throws {
    let oauth = try OAuth2TestServer()
    defer { oauth.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(tokens: ["local": oauth.tokenConfig()], store: ["secret_key": "too-short-a-key"]))
    defer { gateway.stopExpectingCleanExit() }

    #expect(gateway.waitForLogLine { $0["level"] as? String == "warn" && $0["msg"] as? String == Self.shortKey })
    let warnings = Self.warnings(gateway)
    #expect(!warnings.contains(Self.unencrypted), "\(warnings)")
    #expect(!warnings.contains { $0.contains("token_url") }, "\(warnings)")
  }
}
