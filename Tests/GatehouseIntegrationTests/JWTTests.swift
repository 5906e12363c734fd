import Foundation
import Testing

/// Bearer JWTs verified at the door (Docs/jwt.md): claims forwarded, the client's credentials
/// never reaching the backend, refusals as envelopes with RFC 6750 challenges, and the
/// attacks on verifiers refused. Keys and tokens are made at test time (`JWTMinter`).
@Suite struct JWTTests {
  /// A backend that answers with what it was sent: the user the gateway forwarded, the
  /// `Authorization` it got, and the target.
  static func echoBackend() throws -> TestBackend {
    try TestBackend { request in
      let user = request.head.value("X-User-Id") ?? ""
      let authorization = request.head.value("Authorization") ?? ""
      return jsonAnswer(#"{"user":"\#(user)","authorization":"\#(authorization)","target":"\#(request.target)"}"#)
    }
  }

  /// A gateway whose provider `app` holds `keys` inline (or fetches `jwksURL`); routes:
  /// `/me` (scope `profile:read`, the backend token injected), `/adm` (scope `admin`),
  /// `/open` (token optional), and `extraRoutes`.
  static func config(
    backendPort: UInt16, keys: [[String: Any]]? = nil, jwksURL: String? = nil, provider: [String: Any] = [:],
    extraRoutes: [[String: Any]] = []
  ) -> [String: Any] {
    var app: [String: Any] = [
      "issuer": "https://id.test/", "audiences": ["mobile"], "leeway_s": 30,
      "forward_claims": ["sub": "X-User-Id", "email": "X-User-Email", "note": "X-User-Note"],
    ]
    if let keys { app["keys"] = JWTMinter.jwks(keys) }
    if let jwksURL { app["jwks_url"] = jwksURL }
    for (key, value) in provider { app[key] = value }
    let routes: [[String: Any]] =
      [
        TestConfig.route(
          "me", match: "/me", extra: ["jwt": ["provider": "app", "scopes": ["profile:read"]], "token": "backend"]),
        TestConfig.route("adm", match: "/adm", extra: ["jwt": ["provider": "app", "scopes": ["admin"]]]),
        TestConfig.route("open", match: "/open", extra: ["jwt": ["provider": "app", "required": false]]),
      ] + extraRoutes
    var config = TestConfig.withAdmin(
      TestConfig.make(routes: routes, upstreams: ["api": TestConfig.upstream(port: backendPort)]))
    config["tokens"] = ["backend": ["type": "static", "value": "backend-secret"]]
    config["jwt"] = ["providers": ["app": app]]
    config["store"] = ["path": "var/store.sqlite"]
    return config
  }

  static var profile: [String: Any] { ["scope": "profile:read openid", "email": "alice@example.test"] }

  @Test func aVerifiedTokenReachesTheBackendAsClaimsNeverAsItself() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(config: Self.config(backendPort: backend.port, keys: [key]))
    defer { gateway.stopExpectingCleanExit() }
    let token = try minter.sign(
      kid: "k1", alg: "ES256", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))

    let answer = try send(
      "GET", "/me", to: gateway.port,
      headers: [
        ("Authorization", "Bearer " + token), ("X-User-Id", "mallory"), ("X_User_Id", "mallory"),
        ("x-user-email", "mallory@example.test"),
      ])

    #expect(answer.status == 200, "\(answer.text)")
    let seen = try #require(backend.requests.first)
    #expect(seen.head.values("X-User-Id") == ["alice"])
    #expect(seen.head.values("X-User-Email") == ["alice@example.test"])
    #expect(seen.head.values("X_User_Id").isEmpty)
    // The route's backend token replaced the client's JWT.
    #expect(seen.head.values("Authorization") == ["Bearer backend-secret"])
    #expect(!String(decoding: seen.raw, as: UTF8.self).contains(token))
    // A route without a backend token sends no Authorization at all.
    let open = try send("GET", "/open", to: gateway.port, headers: [("Authorization", "Bearer " + token)])
    #expect(open.status == 200)
    #expect(backend.requests.last?.head.values("Authorization") == [])
    #expect(backend.requests.last?.head.values("X-User-Id") == ["alice"])
    // Token text never reaches the log.
    #expect(!gateway.stdoutText.contains(token) && !gateway.stderrText.contains(token))
  }

  @Test func refusalsAreEnvelopesWithBearerChallenges() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    _ = try minter.key("ec256", kid: "other")
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(config: Self.config(backendPort: backend.port, keys: [key]))
    defer { gateway.stopExpectingCleanExit() }
    let now = Int(Date().timeIntervalSince1970)
    let good = JWTMinter.claims(subject: "alice", extra: Self.profile)
    var expired = good
    expired["exp"] = now - 120
    var wrongIssuer = good
    wrongIssuer["iss"] = "https://evil.test/"
    var wrongAudience = good
    wrongAudience["aud"] = "web"
    let invalid: [(String, String)] = [
      ("expired", try minter.sign(kid: "k1", alg: "ES256", claims: expired)),
      ("wrong issuer", try minter.sign(kid: "k1", alg: "ES256", claims: wrongIssuer)),
      ("wrong audience", try minter.sign(kid: "k1", alg: "ES256", claims: wrongAudience)),
      // Signed by another key under k1's id.
      ("bad signature", try minter.sign(kid: "other", alg: "ES256", claims: good, headerKid: "k1")),
      ("malformed", "not.a.jwt"),
    ]

    let missing = try send("GET", "/me", to: gateway.port)
    #expect(isErrorEnvelope(missing, status: 401, message: "bearer token required"), "\(missing.text)")
    #expect(missing.head.values("WWW-Authenticate") == ["Bearer"])
    for (name, token) in invalid {
      let answer = try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + token)])
      #expect(isErrorEnvelope(answer, status: 401, message: "invalid bearer token"), "\(name): \(answer.text)")
      #expect(answer.head.values("WWW-Authenticate") == [#"Bearer error="invalid_token""#], "\(name)")
    }
    let good1 = try minter.sign(kid: "k1", alg: "ES256", claims: good)
    let scope = try send("GET", "/adm", to: gateway.port, headers: [("Authorization", "Bearer " + good1)])
    #expect(isErrorEnvelope(scope, status: 403, message: "insufficient scope"), "\(scope.text)")
    #expect(scope.head.values("WWW-Authenticate") == [#"Bearer error="insufficient_scope", scope="admin""#])
    #expect(backend.requests.isEmpty)
    // The reason is logged, never the token (access lines are written in batches: wait for
    // the last one).
    #expect(gateway.waitForLogLine { $0["reason"] as? String == "jwt_insufficient_scope" })
    let lines = gateway.accessLines()
    let reasons = lines.compactMap { $0["reason"] as? String }
    #expect(reasons.filter { $0 == "jwt_invalid" }.count == invalid.count)
    #expect(reasons.contains("jwt_missing") && reasons.contains("jwt_insufficient_scope"))
    let errors = lines.compactMap { $0["jwt_error"] as? String }
    #expect(errors.contains { $0.contains("expired") } && errors.contains { $0.contains("issuer") })
    for (_, token) in invalid where token.count > 20 { #expect(!gateway.stdoutText.contains(token)) }
    // An optional route still refuses a bad token; it only lets a missing one through.
    let optionalBad = try send("GET", "/open", to: gateway.port, headers: [("Authorization", "Bearer " + invalid[0].1)])
    #expect(optionalBad.status == 401)
    let anonymous = try send("GET", "/open", to: gateway.port)
    #expect(anonymous.status == 200)
  }

  @Test func everyAlgorithmVerifiesWithItsKeyType() throws {
    let minter = try JWTMinter()
    let keys = [
      try minter.key("rsa", kid: "rsa"), try minter.key("ec256", kid: "p256"), try minter.key("ec384", kid: "p384"),
      try minter.key("ed25519", kid: "ed"),
    ]
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(config: Self.config(backendPort: backend.port, keys: keys))
    defer { gateway.stopExpectingCleanExit() }
    let claims = JWTMinter.claims(subject: "alice", extra: Self.profile)
    let cases: [(kid: String, alg: String)] = [
      ("rsa", "RS256"), ("rsa", "RS384"), ("rsa", "RS512"), ("rsa", "PS256"), ("p256", "ES256"), ("p384", "ES384"),
      ("ed", "EdDSA"),
    ]
    for (kid, alg) in cases {
      let token = try minter.sign(kid: kid, alg: alg, claims: claims)
      let answer = try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + token)])
      #expect(answer.status == 200, "\(alg): \(answer.text)")
    }
    // A key without `kid` in the token is found among the keys of its type.
    let noKid = try minter.sign(kid: "ed", alg: "EdDSA", claims: claims, headerKid: .some(nil))
    #expect(try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + noKid)]).status == 200)
  }

  @Test func attacksOnTheVerifierAreRefused() throws {
    let minter = try JWTMinter()
    let key = try minter.key("rsa", kid: "k1")
    let attacker = try minter.key("ec256", kid: "attacker")
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(
      config: Self.config(backendPort: backend.port, keys: [key], provider: ["algorithms": ["RS256"]]))
    defer { gateway.stopExpectingCleanExit() }
    let claims = JWTMinter.claims(subject: "alice", extra: Self.profile)
    func encoded(_ object: [String: Any]) throws -> String {
      try JSONSerialization.data(withJSONObject: object).base64EncodedString().replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
    let now = Int(Date().timeIntervalSince1970)
    var skewed = claims
    skewed["exp"] = now - 31 - 60  // past the 30 s leeway
    var early = claims
    early["nbf"] = now + 120
    let attacks: [(String, String)] = [
      ("alg none", try encoded(["alg": "none", "typ": "JWT"]) + "." + (try encoded(claims)) + "."),
      ("HS256 with the RSA public key as secret", try minter.confusedHS256(kid: "k1", claims: claims)),
      (
        "embedded jwk of the attacker",
        try minter.sign(kid: "attacker", alg: "ES256", claims: claims, headerKid: .some(nil), header: ["jwk": attacker])
      ),
      (
        "jku pointing elsewhere",
        try minter.sign(
          kid: "attacker", alg: "ES256", claims: claims, headerKid: "attacker",
          header: ["jku": "http://127.0.0.1:1/jwks.json", "x5u": "http://127.0.0.1:1/cert.pem"])
      ),
      ("kid with a path", try minter.sign(kid: "k1", alg: "RS256", claims: claims, headerKid: "../../etc/passwd")),
      ("kid with SQL", try minter.sign(kid: "k1", alg: "RS256", claims: claims, headerKid: "' OR 1=1 --")),
      (
        "over 8 KiB",
        try minter.sign(
          kid: "k1", alg: "RS256", claims: claims.merging(["pad": String(repeating: "a", count: 9000)]) { $1 })
      ),
      ("expired beyond the leeway", try minter.sign(kid: "k1", alg: "RS256", claims: skewed)),
      ("not yet valid beyond the leeway", try minter.sign(kid: "k1", alg: "RS256", claims: early)),
      ("ES256 where only RS256 is allowed", try minter.sign(kid: "attacker", alg: "ES256", claims: claims)),
    ]
    for (name, token) in attacks {
      let answer = try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + token)])
      // Over 8 KiB the field line is past the parser's line limit already (431, on HTTP/2
      // too: its heads go through the same parser); the verifier's own bound stands behind.
      let refused = name == "over 8 KiB" ? [401, 431] : [401]
      #expect(refused.contains(answer.status), "\(name): \(answer.status) \(answer.text)")
    }
    #expect(backend.requests.isEmpty)
    // The keys were not fetched from anywhere the token named, and the gateway still serves.
    let good = try minter.sign(kid: "k1", alg: "RS256", claims: claims)
    #expect(try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + good)]).status == 200)
  }

  /// Claim values become header values: control characters or values over 1 KiB refuse the
  /// request (a header injection or a flood), two `Authorization` fields are ambiguous.
  @Test func claimsThatCannotBeHeadersRefuseTheRequest() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ed25519", kid: "k1")
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(config: Self.config(backendPort: backend.port, keys: [key]))
    defer { gateway.stopExpectingCleanExit() }
    let injected = try minter.sign(
      kid: "k1", alg: "EdDSA",
      claims: JWTMinter.claims(subject: "alice", extra: Self.profile.merging(["note": "a\r\nX-Admin: yes"]) { $1 }))
    let long = try minter.sign(
      kid: "k1", alg: "EdDSA",
      claims: JWTMinter.claims(
        subject: "alice", extra: Self.profile.merging(["note": String(repeating: "n", count: 1025)]) { $1 }))
    let good = try minter.sign(kid: "k1", alg: "EdDSA", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))

    for token in [injected, long] {
      let answer = try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + token)])
      #expect(answer.status == 401 && answer.head.value("WWW-Authenticate") == #"Bearer error="invalid_token""#)
    }
    let twice = try send(
      "GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + good), ("Authorization", "Bearer x")])
    #expect(twice.status == 401)
    #expect(backend.requests.isEmpty)
    #expect(try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + good)]).status == 200)
  }

  /// `gatehouse_jwt_total{provider,result}` counts every check; a token seen again is
  /// answered from the loop's cache of verified tokens, and counted too.
  @Test func checksAreCountedByProviderAndResult() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(config: Self.config(backendPort: backend.port, keys: [key]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    let token = try minter.sign(
      kid: "k1", alg: "ES256", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))
    for _ in 0..<3 { _ = try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + token)]) }
    _ = try send("GET", "/me", to: gateway.port)
    _ = try send("GET", "/adm", to: gateway.port, headers: [("Authorization", "Bearer " + token)])

    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_jwt_total", ["provider": "app", "result": "valid"]) == 3)
    #expect(metrics.value("gatehouse_jwt_total", ["provider": "app", "result": "missing"]) == 1)
    #expect(metrics.value("gatehouse_jwt_total", ["provider": "app", "result": "insufficient_scope"]) == 1)
  }

  /// An empty or white-space-only `sub` names nobody: on a route that keeps answers per
  /// user, two such tokens are two users (each keys by itself, as a token without `sub`
  /// does), never one, and the backend is sent no `X-User-Id` for them.
  @Test func tokensWithAnEmptySubDoNotShareAStoredAnswer() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let served = Shared(0)
    let backend = try TestBackend { request in
      let count = served.update { value -> Int in
        value += 1
        return value
      }
      let user = request.head.values("X-User-Id").map { "[\($0)]" }.joined()
      return jsonAnswer(#"{"n":\#(count),"user":"\#(user)"}"#)
    }
    let gateway = try GatewayProcess(
      config: Self.config(
        backendPort: backend.port, keys: [key],
        extraRoutes: [
          TestConfig.route("kept", match: "/kept/*", extra: ["jwt": ["provider": "app"], "cache": ["fresh_s": 600]])
        ]))
    defer { gateway.stopExpectingCleanExit() }
    // The same claims but `jti`, which is not forwarded: only `sub` could tell them apart.
    func bearer(_ subject: String, _ id: String) throws -> [(String, String)] {
      let claims = JWTMinter.claims(subject: subject, extra: ["jti": id])
      return [("Authorization", "Bearer " + (try minter.sign(kid: "k1", alg: "ES256", claims: claims)))]
    }
    let first = try bearer("", "a")
    let second = try bearer("", "b")
    let blank = try bearer("  ", "c")

    let one = try send("GET", "/kept/x", to: gateway.port, headers: first)
    #expect(one.text == #"{"n":1,"user":""}"# && StoreTests.cacheHeader(one) == "MISS", "\(one.text)")
    // Its own entry serves it again: the route does keep answers.
    let again = try send("GET", "/kept/x", to: gateway.port, headers: first)
    #expect(again.text == #"{"n":1,"user":""}"# && StoreTests.cacheHeader(again) == "HIT", "\(again.text)")
    let two = try send("GET", "/kept/x", to: gateway.port, headers: second)
    #expect(two.text == #"{"n":2,"user":""}"# && StoreTests.cacheHeader(two) == "MISS", "\(two.text)")
    let three = try send("GET", "/kept/x", to: gateway.port, headers: blank)
    #expect(three.text == #"{"n":3,"user":""}"# && StoreTests.cacheHeader(three) == "MISS", "\(three.text)")
    #expect(backend.requests.count == 3)
    #expect(backend.requests.allSatisfy { $0.head.values("X-User-Id").isEmpty })
  }

  /// HTTP/2 streams are checked the same way: verified, claims forwarded, refusals with
  /// their challenge.
  @Test func streamsOfAnHTTP2ConnectionAreVerifiedToo() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let backend = try Self.echoBackend()
    let gateway = try GatewayProcess(
      config: HTTP2Tests.h2c(Self.config(backendPort: backend.port, keys: [key])))
    defer { gateway.stopExpectingCleanExit() }
    let token = try minter.sign(
      kid: "k1", alg: "ES256", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))
    let url = "http://127.0.0.1:\(gateway.port)/me"

    let good = try HTTP2Client.curl([
      "--http2-prior-knowledge", "-H", "Authorization: Bearer " + token, "-H", "x_user_id: mallory", "-w",
      "\n%{http_version} %{http_code}", url,
    ])
    let missing = try HTTP2Client.curl(["--http2-prior-knowledge", "-D", "-", "-o", "/dev/null", url])

    #expect(good.hasSuffix("\n2 200"), "\(good)")
    #expect(backend.requests.first?.head.values("X-User-Id") == ["alice"])
    #expect(backend.requests.first?.head.values("x_user_id") == [])
    #expect(missing.hasPrefix("HTTP/2 401"), "\(missing)")
    #expect(missing.lowercased().contains("www-authenticate: bearer\r\n"), "\(missing)")
  }
}
