import Foundation
import Testing

/// Token injection (Config/README.md and Docs/behaviour.md) and the admin token endpoints (Docs/admin-openapi.json): static, `${ENV}`
/// and file tokens reach the backend in the configured header and format, replacing what
/// the client sent; the admin API sets, refreshes and invalidates tokens, shows fingerprints
/// and never a value.
@Suite struct TokenTests {
  static let okBackend: BackendAction = .respond(.text("ok"))

  // MARK: Injection

  @Test func staticTokenFromTheEnvironmentReplacesTheClientsAuthorization() throws {
    let backend = try TestBackend(always: Self.okBackend)
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": "${GH_ITEST_API_TOKEN}"]],
      routes: [TestConfig.tokenRoute("all", match: "/*", token: "api")])
    let gateway = try GatewayProcess(config: config, environment: ["GH_ITEST_API_TOKEN": "env-static-token-81f2"])
    defer { gateway.stopExpectingCleanExit() }
    #expect(try gateway.waitForValidTokens(["api"]))

    let answer = try send(
      "GET", "/users/1", to: gateway.port,
      headers: [("Authorization", "Bearer the-clients-own"), ("authorization", "Basic Y2xpZW50OnBhc3M=")])

    #expect(answer.status == 200)
    let request = try #require(backend.requests.first)
    #expect(request.head.values("Authorization") == ["Bearer env-static-token-81f2"])
    #expect(!String(decoding: request.raw, as: UTF8.self).contains("the-clients-own"))
    #expect(!String(decoding: request.raw, as: UTF8.self).contains("Y2xpZW50OnBhc3M="))
  }

  @Test func customHeaderAndFormatCarryTheToken() throws {
    let backend = try TestBackend(always: Self.okBackend)
    defer { backend.stop() }
    let route = TestConfig.tokenRoute(
      "all", match: "/*", token: "api", extra: ["token_header": "X-Backend-Key", "token_format": "Token {token};v=1"])
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": "literal-token-3a"]], routes: [route])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    #expect(try gateway.waitForValidTokens(["api"]))

    let answer = try send(
      "GET", "/items", to: gateway.port, headers: [("X-Backend-Key", "client-supplied"), ("x-backend-key", "again")])

    #expect(answer.status == 200)
    let request = try #require(backend.requests.first)
    #expect(request.head.values("X-Backend-Key") == ["Token literal-token-3a;v=1"])
    #expect(!request.head.values("Authorization").contains { $0.contains("literal-token-3a") })
  }

  /// A top-level `headers.set` of the token's header used to reach the backend next to the
  /// injected token (two Authorization fields). On a token route the token replaces it; on
  /// a route without a token the configured value holds.
  @Test func topLevelSetOfTheTokenHeaderGivesWayToTheToken() throws {
    let backend = try TestBackend(always: Self.okBackend)
    defer { backend.stop() }
    var config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": "only-token-5c1"]],
      routes: [
        TestConfig.tokenRoute("tokened", match: "/t/*", token: "api"),
        TestConfig.route("plain", match: "/*"),
      ])
    config["headers"] = ["set": ["Authorization": "Basic Z2F0ZXdheTpwYXNz"]]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    #expect(try gateway.waitForValidTokens(["api"]))

    _ = try send("GET", "/t/x", to: gateway.port, headers: [("Authorization", "Bearer from-client")])
    _ = try send("GET", "/plain", to: gateway.port)

    try #require(backend.requests.count == 2)
    #expect(backend.requests[0].head.values("Authorization") == ["Bearer only-token-5c1"])
    #expect(backend.requests[1].head.values("Authorization") == ["Basic Z2F0ZXdheTpwYXNz"])
  }

  /// A client's `X_Backend_Key` used to reach the backend next to the injected
  /// `X-Backend-Key`; CGI, WSGI and PHP backends read both as HTTP_X_BACKEND_KEY and may
  /// take the client's. Underscore look-alikes of the token header are dropped.
  @Test func underscoreLookAlikeOfTheTokenHeaderIsNotForwarded() throws {
    let backend = try TestBackend(always: Self.okBackend)
    defer { backend.stop() }
    let route = TestConfig.tokenRoute(
      "all", match: "/*", token: "api", extra: ["token_header": "X-Backend-Key", "token_format": "{token}"])
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": "real-token-7d2"]], routes: [route])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    #expect(try gateway.waitForValidTokens(["api"]))

    let answer = try send(
      "GET", "/items", to: gateway.port,
      headers: [("X_Backend_Key", "forged-one"), ("x_backend_KEY", "forged-two"), ("X_Other_Thing", "kept")])

    #expect(answer.status == 200)
    let request = try #require(backend.requests.first)
    #expect(request.head.values("X-Backend-Key") == ["real-token-7d2"])
    #expect(!String(decoding: request.raw, as: UTF8.self).contains("forged"))
    #expect(request.head.values("X_Other_Thing") == ["kept"])
  }

  @Test func fileTokenIsReadAtStartAndAgainWhenTheFileChanges() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-file-token-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("legacy_token")
    try Data("file-token-one\n".utf8).write(to: file, options: .atomic)
    let backend = try TestBackend(always: Self.okBackend)
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["legacy": ["type": "file", "path": file.path]],
      routes: [TestConfig.tokenRoute("all", match: "/*", token: "legacy")])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(admin.waitForState("legacy", "valid"))

    #expect(try send("GET", "/first", to: gateway.port).status == 200)
    #expect(backend.requests.last.flatMap(bearerToken) == "file-token-one")  // the newline is trimmed

    try Data("file-token-two\n".utf8).write(to: file, options: .atomic)
    var statuses: [Int] = []
    let switched = try waitUntil(timeout: 15, interval: .milliseconds(200)) {
      statuses.append(try send("GET", "/poll", to: gateway.port).status)
      return backend.requests.last.flatMap(bearerToken) == "file-token-two"
    }

    #expect(switched, "the new file content was not used within 15 s")
    #expect(statuses.allSatisfy { $0 == 200 })
    // Once the new value is used, the old one never comes back.
    let tokens = backend.requests.compactMap(bearerToken)
    let firstNew = try #require(tokens.firstIndex(of: "file-token-two"))
    #expect(tokens[firstNew...].allSatisfy { $0 == "file-token-two" })
    #expect(tokens[..<firstNew].allSatisfy { $0 == "file-token-one" })
    let state = try #require(try admin.token("legacy"))
    #expect(state["fingerprint"] as? String == SHA256Digest.fingerprint("file-token-two"))
    #expect(state["type"] as? String == "file")
  }

  // MARK: Admin token endpoints

  /// A gateway with a static, an oauth2 and a file token, each on its own route.
  struct ThreeTokens {
    let backend: TestBackend
    let oauth: OAuth2TestServer
    let directory: URL
    let gateway: GatewayProcess
    let admin: AdminClient

    static let staticValue = "static-admin-value-0c7"
    static let fileValue = "file-admin-value-55d"

    init() throws {
      backend = try TestBackend(always: TokenTests.okBackend)
      oauth = try OAuth2TestServer(tokenPrefix: "admin-oauth")
      directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-admin-tokens-\(UUID())")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      let file = directory.appendingPathComponent("token")
      try Data(Self.fileValue.utf8).write(to: file)
      let config = TestConfig.withTokens(
        upstreamPort: backend.port,
        tokens: [
          "api": ["type": "static", "value": Self.staticValue], "partner": oauth.tokenConfig(),
          "legacy": ["type": "file", "path": file.path],
        ],
        routes: [
          TestConfig.tokenRoute("static", match: "/s/*", token: "api"),
          TestConfig.tokenRoute("oauth", match: "/p/*", token: "partner"),
          TestConfig.tokenRoute("file", match: "/f/*", token: "legacy"),
        ])
      gateway = try GatewayProcess(config: config)
      admin = try gateway.admin()
      _ = try gateway.waitForValidTokens(["api", "legacy"])
    }

    func stop() {
      gateway.stopExpectingCleanExit()
      backend.stop()
      oauth.stop()
      try? FileManager.default.removeItem(at: directory)
    }

    /// Every value the gateway holds in this setup; none may appear in an admin answer.
    var values: [String] { [Self.staticValue, Self.fileValue, oauth.tokenPrefix, oauth.clientSecret] }
  }

  @Test func listingShowsEveryTokenWithFingerprintsAndNoValues() throws {
    let setup = try ThreeTokens()
    defer { setup.stop() }
    #expect(try send("GET", "/p/warm", to: setup.gateway.port).status == 200)

    let unauthorized = try AdminClient(port: setup.admin.port, token: nil).request("GET", "/admin/tokens")
    let wrong = try AdminClient(port: setup.admin.port, token: "not-the-admin-token").request("GET", "/admin/tokens")
    let answer = try setup.admin.request("GET", "/admin/tokens")

    #expect(unauthorized.status == 401)
    #expect(wrong.status == 401)
    #expect(!unauthorized.text.contains("api") && !unauthorized.text.contains(ThreeTokens.staticValue))
    #expect(answer.status == 200)
    #expect(answer.head.value("Content-Type")?.hasPrefix("application/json") == true)
    let object = try answer.jsonObject()
    #expect(Set(object.keys) == ["tokens"])
    let tokens = try #require(object["tokens"] as? [[String: Any]])
    #expect(Set(tokens.compactMap { $0["name"] as? String }) == ["api", "partner", "legacy"])
    // Docs/admin-openapi.json's members, and the rejections per route (none yet).
    let members: Set = [
      "name", "type", "state", "fingerprint", "expires_at", "refreshed_at", "last_error", "rejections",
    ]
    for token in tokens {
      #expect(Set(token.keys) == members, "members of \(token)")
      #expect((token["rejections"] as? [String: Any])?.isEmpty == true)
    }
    let byName = Dictionary(uniqueKeysWithValues: tokens.map { ($0["name"] as? String ?? "", $0) })
    let api = try #require(byName["api"])
    #expect(api["type"] as? String == "static")
    #expect(api["state"] as? String == "valid")
    #expect(api["fingerprint"] as? String == SHA256Digest.fingerprint(ThreeTokens.staticValue))
    #expect(api["expires_at"] is NSNull)
    #expect(api["last_error"] is NSNull)
    let partner = try #require(byName["partner"])
    #expect(partner["type"] as? String == "oauth2_client_credentials")
    #expect(partner["state"] as? String == "valid")
    #expect(partner["fingerprint"] as? String == SHA256Digest.fingerprint(setup.oauth.token(1)))
    #expect((partner["expires_at"] as? String)?.hasSuffix("Z") == true)
    #expect((partner["refreshed_at"] as? String)?.hasSuffix("Z") == true)
    let legacy = try #require(byName["legacy"])
    #expect(legacy["type"] as? String == "file")
    #expect(legacy["fingerprint"] as? String == SHA256Digest.fingerprint(ThreeTokens.fileValue))
    for value in setup.values { #expect(!answer.text.contains(value), "admin listing shows \(value)") }
  }

  @Test func putSetsAValueThatRequestsUseAndRefusesBadBodies() throws {
    let setup = try ThreeTokens()
    defer { setup.stop() }
    let newValue = "operator-set-value-9e0"

    let set = try setup.admin.setToken("api", value: newValue, expiresIn: 3600)
    #expect(set.status == 200)
    let state = try set.jsonObject()
    #expect(state["name"] as? String == "api")
    #expect(state["state"] as? String == "valid")
    #expect(state["fingerprint"] as? String == SHA256Digest.fingerprint(newValue))
    #expect(state["expires_at"] is String)
    #expect(!set.text.contains(newValue))
    #expect(try send("GET", "/s/after-put", to: setup.gateway.port).status == 200)
    #expect(setup.backend.requests.last.flatMap(bearerToken) == newValue)

    let badBodies: [(String, String)] = [
      ("CR LF in the value", #"{"value":"bad\r\nX-Injected: 1"}"#),
      ("LF in the value", #"{"value":"bad\nvalue"}"#),
      ("NUL in the value", #"{"value":"bad\u0000value"}"#),
      ("not JSON", "value=plain"),
      ("raw newline inside the JSON string", "{\"value\":\"raw\nnewline\"}"),
      ("no value", #"{"expires_in":60}"#),
      ("empty value", #"{"value":""}"#),
      ("unknown member", #"{"value":"fine-value","ttl":5}"#),
      ("zero expires_in", #"{"value":"fine-value","expires_in":0}"#),
      ("an array", #"["fine-value"]"#),
    ]
    for (label, body) in badBodies {
      let answer = try setup.admin.request("PUT", "/admin/tokens/api", body: Array(body.utf8))
      #expect(answer.status == 400, "\(label): \(answer.status) \(answer.text)")
      #expect((try? answer.jsonObject()) != nil, "\(label): the 400 is JSON")
    }
    let unknown = try setup.admin.setToken("nope", value: "whatever-value")
    #expect(unknown.status == 404)
    // None of the refused bodies changed the token.
    #expect(try setup.admin.token("api")?["fingerprint"] as? String == SHA256Digest.fingerprint(newValue))
    #expect(try send("GET", "/s/still", to: setup.gateway.port).status == 200)
    #expect(setup.backend.requests.last.flatMap(bearerToken) == newValue)
  }

  @Test func refreshAnswers409ForStatic200ForOAuth2And502WithLastError() throws {
    let setup = try ThreeTokens()
    defer { setup.stop() }
    #expect(setup.admin.waitForState("partner", "valid"))

    let staticRefresh = try setup.admin.refresh("api")
    let unknown = try setup.admin.refresh("nope")
    let fileRefresh = try setup.admin.refresh("legacy")
    let refreshed = try setup.admin.refresh("partner")

    #expect(staticRefresh.status == 409)
    #expect(unknown.status == 404)
    #expect(fileRefresh.status == 200)
    #expect(try fileRefresh.jsonObject()["fingerprint"] as? String == SHA256Digest.fingerprint(ThreeTokens.fileValue))
    #expect(refreshed.status == 200)
    let state = try refreshed.jsonObject()
    #expect(state["fingerprint"] as? String == SHA256Digest.fingerprint(setup.oauth.token(2)))
    #expect(state["state"] as? String == "valid")
    #expect(setup.oauth.requestCount == 2)
    #expect(try send("GET", "/p/after-refresh", to: setup.gateway.port).status == 200)
    #expect(setup.backend.requests.last.flatMap(bearerToken) == setup.oauth.token(2))

    setup.oauth.setMode(.fail(description: "client is disabled"))
    let failed = try setup.admin.refresh("partner")
    #expect(failed.status == 502)
    let failure = try failed.jsonObject()
    let lastError = try #require(failure["last_error"] as? String)
    #expect(lastError.contains("invalid_client"))
    #expect(lastError.contains("client is disabled"))
    let listed = try #require(try setup.admin.token("partner"))
    #expect(listed["state"] as? String == "error")
    #expect(listed["last_error"] as? String == lastError)
    // The last value that has not expired keeps being used.
    #expect(try send("GET", "/p/after-failure", to: setup.gateway.port).status == 200)
    #expect(setup.backend.requests.last.flatMap(bearerToken) == setup.oauth.token(2))
    #expect(setup.oauth.problems.isEmpty, "\(setup.oauth.problems)")
    for answer in [staticRefresh, unknown, fileRefresh, refreshed, failed] {
      for value in setup.values { #expect(!answer.text.contains(value), "refresh answer shows \(value)") }
    }
  }

  @Test func invalidateMakesStaticTokensUnusableAndOAuth2TokensRefreshOnNextUse() throws {
    let setup = try ThreeTokens()
    defer { setup.stop() }
    #expect(try send("GET", "/p/warm", to: setup.gateway.port).status == 200)
    #expect(setup.oauth.requestCount == 1)

    let unknown = try setup.admin.invalidate("nope")
    let staticInvalid = try setup.admin.invalidate("api")
    let oauthInvalid = try setup.admin.invalidate("partner")

    #expect(unknown.status == 404)
    #expect(staticInvalid.status == 200)
    #expect(try staticInvalid.jsonObject()["state"] as? String == "invalid")
    #expect(oauthInvalid.status == 200)
    #expect(try oauthInvalid.jsonObject()["state"] as? String == "invalid")
    let backendBefore = setup.backend.requests.count
    let refused = try send("GET", "/s/after-invalidate", to: setup.gateway.port)
    #expect(isErrorEnvelope(refused, status: 401, message: "upstream token unavailable"), "\(refused.text)")
    #expect(setup.backend.requests.count == backendBefore)
    #expect(ErrorTests.loggedReason(setup.gateway, path: "/s/after-invalidate") == "token_unavailable")
    // An oauth2 token refreshes on next use, not before.
    #expect(setup.oauth.requestCount == 1)
    #expect(try send("GET", "/p/after-invalidate", to: setup.gateway.port).status == 200)
    #expect(setup.oauth.requestCount == 2)
    #expect(setup.backend.requests.last.flatMap(bearerToken) == setup.oauth.token(2))
    // A static token comes back with a new value.
    #expect(try setup.admin.setToken("api", value: "replacement-value-4b").status == 200)
    #expect(try send("GET", "/s/after-set", to: setup.gateway.port).status == 200)
    #expect(setup.backend.requests.last.flatMap(bearerToken) == "replacement-value-4b")
    for answer in [unknown, staticInvalid, oauthInvalid] {
      for value in setup.values { #expect(!answer.text.contains(value), "invalidate answer shows \(value)") }
    }
  }

  // MARK: Rejection of a value that cannot be refreshed

  /// One endpoint that answers 401 must not stop every route using a static token: the
  /// client gets that endpoint's own answer, other requests still carry the token, and the
  /// operator's token stays `valid`; the rejection is counted for its route (in the metrics
  /// and in the token's listing).
  @Test func aStaticTokenRefusedByOneEndpointStaysValidAndCountsTheRejectionPerRoute() throws {
    let backend = try TestBackend { request in
      request.path.hasSuffix("/forbidden")
        ? jsonAnswer(#"{"message":"not for this client"}"#, status: 401, reason: "Unauthorized")
        : .respond(.text("ok"))
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": "static-value-77c1"]],
      routes: [
        TestConfig.tokenRoute("strict", match: "/s/*", token: "api", extra: ["envelope": ["enabled": true]]),
        TestConfig.tokenRoute("all", match: "/*", token: "api", extra: ["envelope": ["enabled": true]]),
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    #expect(try gateway.waitForValidTokens(["api"]))
    let admin = try gateway.admin()

    let refused = try send("GET", "/s/forbidden", to: gateway.port)
    let again = try send("GET", "/s/forbidden", to: gateway.port)
    let elsewhere = try send("GET", "/forbidden", to: gateway.port)
    var others: [Int] = []
    for _ in 0..<3 { others.append(try send("GET", "/other", to: gateway.port).status) }
    var page: MetricsPage?
    let counted = waitUntil(timeout: 10, interval: .milliseconds(100)) {
      page = try? MetricsPage(try admin.request("GET", "/metrics").text)
      return page?.value("gatehouse_token_rejections_total", ["token": "api", "route": "strict"]) == 2
    }

    #expect(isErrorEnvelope(refused, status: 401, message: "not for this client"), "\(refused.text)")
    #expect(isErrorEnvelope(again, status: 401, message: "not for this client"), "\(again.text)")
    #expect(isErrorEnvelope(elsewhere, status: 401, message: "not for this client"), "\(elsewhere.text)")
    #expect(others == [200, 200, 200])
    #expect(try admin.token("api")?["state"] as? String == "valid")
    let rejections = page?.samples("gatehouse_token_rejections_total")
    #expect(counted, "\(String(describing: rejections))")
    #expect(page?.value("gatehouse_token_rejections_total", ["token": "api", "route": "all"]) == 1)
    #expect(page?.types["gatehouse_token_rejections_total"] == "counter")
    #expect(page?.value("gatehouse_token_state", ["token": "api", "state": "invalid"]) == 0)
    // The listing shows the same counts, per route.
    let listed = try admin.token("api")
    #expect(listed?["rejections"] as? [String: Int] == ["strict": 2, "all": 1], "\(String(describing: listed))")
    // A refused request is not sent again with the same value; the others all went out.
    #expect(backend.requests.count == 6)
    #expect(backend.requests.allSatisfy { bearerToken(of: $0) == "static-value-77c1" })
  }
}
