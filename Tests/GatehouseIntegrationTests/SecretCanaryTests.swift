import Foundation
import Testing

/// Canary secrets (the admin token, a static upstream token, an OAuth2 client secret and the
/// access token it fetches, a token set through the admin API, a client key and the store
/// key) must never show up anywhere but where they belong: not in stdout/stderr, answers,
/// admin answers, `/metrics`, nor the store file and its WAL (tokens are encrypted there).
@Suite struct SecretCanaryTests {
  static let adminToken = "CANARY-ADMIN-TOKEN-7d1e"
  static let upstreamToken = "CANARY-UPSTREAM-TOKEN-3b9f"
  static let clientSecret = "CANARY-OAUTH-SECRET-55aa"
  static let accessToken = "CANARY-OAUTH-ACCESS-81c0"
  static let putToken = "CANARY-PUT-TOKEN-0f3d"
  static let clientKey = "CANARY-CLIENT-KEY-9c2e41"
  /// SHA-256 of `clientKey`, as `clients.keys[].sha256` wants it.
  static let clientKeySHA256 = "74154a6185819d06d2328bc1889acd9e7105620ff47ce1c134f2803569377752"
  static let storeKey = "CANARY-STORE-KEY-e0f1"

  /// Every canary, and the forms they travel in (HTTP Basic of the client credentials).
  static var canaries: [String] {
    let basic = Data("gw:\(clientSecret)".utf8).base64EncodedString()
    return [adminToken, upstreamToken, clientSecret, accessToken, putToken, clientKey, storeKey, basic]
      + ["CANARY-ADMIN", "CANARY-UPSTREAM", "CANARY-OAUTH", "CANARY-PUT", "CANARY-CLIENT", "CANARY-STORE"]
  }

  /// The canaries found in `bytes`.
  static func leaks(in bytes: [UInt8]) -> [String] {
    canaries.filter { BackendWire.find(Array($0.utf8), in: bytes, from: 0) != nil }
  }

  @Test func canarySecretsNeverLeak() throws {
    let backend = try FaultBackend { request in
      .json(#"{"path":"\#(request.path)","items":[1,2,3]}"#)
    }
    defer { backend.stop() }
    // The token endpoint hands out a canary access token, once it has seen the canary secret.
    let tokenServer = try FaultBackend { request in
      .json(#"{"access_token":"\#(Self.accessToken)","token_type":"Bearer","expires_in":3600}"#)
    }
    defer { tokenServer.stop() }

    var config = TestConfig.make(
      routes: [
        TestConfig.route(
          "api", match: "/api/*",
          extra: ["token": "api", "envelope": ["enabled": true], "cache": ["stale_if_error_s": 3600]]),
        TestConfig.route(
          "partner", match: "/partner/*",
          extra: ["token": "partner", "envelope": ["enabled": true], "cache": ["stale_if_error_s": 3600]]),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    config["admin"] = ["listen": "127.0.0.1:0", "token": Self.adminToken]
    config["store"] = ["path": "store.sqlite", "secret_key": Self.storeKey]
    config["tokens"] = [
      "api": ["type": "static", "value": Self.upstreamToken],
      "partner": [
        "type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:\(tokenServer.port)/oauth/token",
        "client_id": "gw", "client_secret": Self.clientSecret, "scope": "read",
      ],
    ]
    config["clients"] = [
      "required": true, "keys": [["id": "canary-app", "sha256": Self.clientKeySHA256, "rate_per_s": 1000]],
    ]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try AdminAccess(gateway, token: Self.adminToken)

    var answers: [ReceivedAnswer] = []
    for index in 0..<5 {
      answers.append(try send("GET", "/api/items/\(index)", to: gateway.port, headers: [("X-Api-Key", Self.clientKey)]))
      answers.append(
        try send(
          "GET", "/partner/items/\(index)", to: gateway.port, headers: [("Authorization", "ApiKey \(Self.clientKey)")]))
    }
    // A missing and a wrong key, and a client trying to send its own upstream token.
    answers.append(try send("GET", "/api/items/0", to: gateway.port))
    answers.append(try send("GET", "/api/items/0", to: gateway.port, headers: [("X-Api-Key", Self.clientKey + "x")]))
    // The admin API, every read and the token verbs.
    for path in [
      "/admin/status", "/admin/tokens", "/admin/routes", "/admin/upstreams", "/admin/cache", "/admin/cache/entries",
      "/metrics", "/admin/openapi.json", "/admin/", "/healthz", "/readyz",
    ] {
      answers.append(try admin.call("GET", path))
    }
    for entry in try admin.cacheEntries() {
      if let id = entry["id"] as? String { answers.append(try admin.call("GET", "/admin/cache/entries/\(id)")) }
    }
    answers.append(try admin.call("POST", "/admin/tokens/partner/refresh"))
    answers.append(try admin.call("POST", "/admin/tokens/api/invalidate"))
    answers.append(
      try admin.call("PUT", "/admin/tokens/api", body: Array(#"{"value":"\#(Self.putToken)","expires_in":600}"#.utf8)))
    answers.append(try send("GET", "/api/items/9", to: gateway.port, headers: [("X-Api-Key", Self.clientKey)]))
    answers.append(try admin.call("POST", "/admin/reload"))
    answers.append(try admin.call("GET", "/admin/tokens"))
    answers.append(try send("GET", "/admin/tokens", to: admin.port, headers: [("Authorization", "Bearer wrong")]))
    // The backend down: stale answers and errors carry no secret either.
    backend.setHandler { _ in FaultAnswer([], toxics: [.resetPeer]) }
    answers.append(try send("GET", "/api/items/1", to: gateway.port, headers: [("X-Api-Key", Self.clientKey)]))
    answers.append(try send("GET", "/api/items/77", to: gateway.port, headers: [("X-Api-Key", Self.clientKey)]))
    answers.append(try admin.call("GET", "/metrics"))
    answers.append(try admin.call("GET", "/admin/upstreams"))

    // The canaries did their job: the backend got the tokens, the token server the secret.
    let upstreamAuth = backend.requests.compactMap { $0.head.value("Authorization") }
    #expect(upstreamAuth.contains("Bearer \(Self.upstreamToken)"))
    #expect(upstreamAuth.contains("Bearer \(Self.accessToken)"))
    #expect(upstreamAuth.contains("Bearer \(Self.putToken)"))
    #expect(!tokenServer.requests.isEmpty)
    #expect(answers.contains { $0.status == 200 && envelopeDatas($0)?["path"] as? String == "/api/items/0" })
    #expect(answers.contains { $0.head.value("X-Gatehouse-Cache") == "STALE" })

    for answer in answers {
      #expect(Self.leaks(in: answer.head.raw + answer.body).isEmpty, "answer \(answer.status): \(answer.text)")
    }
    // The store and its WAL while running (tokens were saved), then after a clean stop.
    let storePath = gateway.directory.appendingPathComponent("store.sqlite").path
    #expect(
      waitUntil(timeout: 10) {
        (try? admin.json("/admin/tokens")["tokens"] as? [[String: Any]])?.count == 2
      })
    sleep(for: .milliseconds(300))
    for suffix in ["", "-wal"] {
      let bytes = Array((try? Data(contentsOf: URL(fileURLWithPath: storePath + suffix))) ?? Data())
      #expect(Self.leaks(in: bytes).isEmpty, "store\(suffix) holds \(Self.leaks(in: bytes))")
    }
    #expect(gateway.stop() == .success)
    let stored = ["", "-wal"].flatMap {
      Array((try? Data(contentsOf: URL(fileURLWithPath: storePath + $0))) ?? Data())
    }
    #expect(stored.count > 0)
    #expect(Self.leaks(in: stored).isEmpty, "store holds \(Self.leaks(in: stored))")
    let output = Array((gateway.stdoutText + gateway.stderrText).utf8)
    #expect(!gateway.stdoutText.isEmpty)
    #expect(Self.leaks(in: output).isEmpty, "output holds \(Self.leaks(in: output))")
  }
}
