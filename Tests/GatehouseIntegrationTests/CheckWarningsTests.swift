import Foundation
import Testing

/// `gatehouse check` says everything `serve` would warn about, and what can never work as
/// written, while still exiting 0 (1 with `--strict`); a valid config gets a summary.
@Suite struct CheckWarningsTests {
  static func runCheck(_ arguments: [String], config: String) throws -> (status: Int32, out: String, err: String) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "gatehouse-check-warnings-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    try Data(config.utf8).write(to: directory.appendingPathComponent("config.json"))
    let process = try GatewayProcess(arguments: ["check"] + arguments, directory: directory, startTimeout: nil)
    let outcome = try #require(process.waitForExit(timeout: 30))
    return (outcome.bySignal ? -1 : outcome.code, process.stdoutText, process.stderrText)
  }

  /// What the operator saw: `check` said `ok`, then `serve` warned about a 3-character
  /// `secret_key` and `verify: false`; and a `/*` route hid the `/users` route after it.
  static let config = #"""
    { "listen": [{ "address": "127.0.0.1:0" }],
      "admin": { "listen": "127.0.0.1:0", "token": "an-admin-token-that-is-long-enough" },
      "store": { "secret_key": "abc" },
      "upstreams": {
        "api": { "url": "https://127.0.0.1:3000/api/v1", "tls": { "verify": false },
                 "health": { "path": "/api/v1/health" } } },
      "tokens": { "partner": { "type": "oauth2_client_credentials", "token_url": "https://auth.example/token",
                               "client_id": "gw", "client_secret": "s" } },
      "routes": [
        { "name": "demo", "match": { "path": "/demo" }, "stub": { "mode": "always", "body": { "items": [] } },
          "envelope": { "key_path": "data.items" } },
        { "name": "all", "match": { "path": "/*" }, "upstream": "api", "token": "partner" },
        { "name": "users", "match": { "path": "/users", "methods": ["GET"] }, "upstream": "api",
          "cache": { "fresh_s": 5 } }
      ] }
    """#

  @Test func warningsArePrintedWithTheirPathsAndTheExitStatusStaysZero() throws {
    let result = try Self.runCheck(["--config", "config.json"], config: Self.config)
    #expect(result.status == 0, "\(result.err)")
    let lines = result.out.split(separator: "\n").map(String.init)
    #expect(lines.first == "ok")
    let warnings = lines.filter { $0.contains(": warning: ") }
    let paths = warnings.map { String($0.prefix { $0 != ":" }) }
    #expect(
      paths == [
        "upstreams.api.tls.verify", "store.secret_key", "routes[2]", "upstreams.api.health.path",
        "routes[0].envelope.key_path",
      ], "\(warnings)")
    #expect(warnings.contains("store.secret_key: warning: is short; use 32 random characters or more"))
    #expect(warnings.contains { $0.hasPrefix("routes[2]: warning: route \"users\" (/users) never matches") })
    #expect(warnings.contains { $0.contains("/api/v1/api/v1/health") })
  }

  /// `serve` says the same at start, for configs that never went through `check`.
  @Test func serveLogsWhatCheckFindsAtStart() throws {
    let config = TestConfig.make(
      routes: [
        TestConfig.route("all", match: "/*", upstream: nil, extra: ["stub": ["mode": "always"]]),
        TestConfig.route("users", match: "/users", upstream: nil, extra: ["stub": ["mode": "always"]]),
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let warning = gateway.logLines().first { $0["msg"] as? String == "config warning" }
    #expect(warning?["level"] as? String == "warn")
    #expect(warning?["path"] as? String == "routes[1]")
    #expect((warning?["warning"] as? String)?.hasPrefix("route \"users\" (/users) never matches") == true)
  }

  @Test func strictMakesWarningsErrors() throws {
    let result = try Self.runCheck(["--config", "config.json", "--strict"], config: Self.config)
    #expect(result.status == 1)
    #expect(!result.out.contains("ok"))
    #expect(result.err.contains("store.secret_key: error: is short"))
    #expect(!result.err.contains("warning:"))
  }

  @Test func aQuietConfigPassesStrictAndPrintsASummary() throws {
    let config = #"""
      { "listen": [{ "address": "127.0.0.1:0" }],
        "admin": { "listen": "127.0.0.1:0", "token": "an-admin-token-that-is-long-enough" },
        "store": { "secret_key": "0123456789abcdef0123456789abcdef" },
        "upstreams": { "api": { "url": "http://127.0.0.1:3000/api/v1" } },
        "tokens": { "api": { "type": "static", "value": "v" } },
        "routes": [
          { "name": "users", "match": { "path": "/users/:id", "methods": ["GET"] }, "upstream": "api", "token": "api",
            "cache": { "fresh_s": 5, "stale_if_error_s": 600 } },
          { "name": "rest", "match": { "path": "/*" }, "upstream": "api" } ] }
      """#
    let result = try Self.runCheck(["--config", "config.json", "--strict"], config: config)
    #expect(result.status == 0, "\(result.err)")
    #expect(result.err.isEmpty)
    let lines = result.out.split(separator: "\n").map(String.init)
    #expect(lines.first == "ok")
    #expect(!lines.contains { $0.contains("warning") })
    #expect(lines.contains { $0.hasPrefix("listen:") && $0.contains("127.0.0.1:0") })
    let users = lines.first { $0.contains("users") && $0.contains("->") }
    #expect(users?.contains("GET /users/:id -> api /api/v1/users/:id") == true, "\(lines)")
    #expect(users?.contains("token api") == true)
    #expect(users?.contains("cache fresh 5s, stale-if-error 600s") == true)
    #expect(lines.contains { $0.hasPrefix("tokens:") && $0.contains("api (static)") })
    #expect(!result.out.contains("\"v\""))
  }
}
