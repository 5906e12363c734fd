import Foundation
import Testing

/// What a `JWKSServer` answers at `/jwks.json`.
enum JWKSMode: Sendable {
  case serve([UInt8])
  case failing
  case redirect
  case huge
  case hanging
  /// These keys, once the server's gate opens.
  case held([UInt8])
}

/// An identity provider's key endpoint for the tests: its answer switched by the test,
/// its requests counted.
final class JWKSServer: Sendable {
  let mode: Shared<JWKSMode>
  let gate = Gate()
  let server: TestBackend

  init(keys: [[String: Any]]) throws {
    let mode = Shared(JWKSMode.serve(try JWKSServer.document(keys)))
    self.mode = mode
    let gate = self.gate
    server = try TestBackend { _ in
      switch mode.value {
      case .serve(let document):
        return .respond(BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(document)))
      case .failing:
        return jsonAnswer(#"{"error":"down"}"#, status: 503, reason: "Service Unavailable")
      case .redirect:
        return .respond(
          BackendAnswer(status: 302, reason: "Found", headers: [("Location", "http://127.0.0.1:1/jwks.json")]))
      case .huge:
        return .respond(
          BackendAnswer(
            headers: [("Content-Type", "application/json")], body: .generated(length: 600_000, chunked: false)))
      case .hanging:
        var answer = BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array("{}".utf8)))
        answer.holdUntil = gate
        return .respond(answer)
      case .held(let document):
        var answer = BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(document))
        answer.holdUntil = gate
        return .respond(answer)
      }
    }
  }

  static func document(_ keys: [[String: Any]]) throws -> [UInt8] {
    Array(try JSONSerialization.data(withJSONObject: JWTMinter.jwks(keys)))
  }

  func serve(_ keys: [[String: Any]]) throws { mode.value = .serve(try Self.document(keys)) }
  var url: String { "http://127.0.0.1:\(server.port)/jwks.json" }
  var fetches: Int { server.requests.count }

  deinit {
    gate.open()
    server.stop()
  }
}

/// Signing keys fetched from `jwks_url` (Docs/jwt.md): refreshed on an unknown `kid` at most
/// once per 10 s, kept in the store across restarts, never "accept" without keys; and
/// answers kept per user.
@Suite struct JWTKeysTests {
  static var profile: [String: Any] { JWTTests.profile }

  @Test func keysComeFromTheURLAndAnUnknownKeyIdRefreshesThemAtMostEvery10Seconds() throws {
    let minter = try JWTMinter()
    let first = try minter.key("ec256", kid: "k1")
    let rotated = try minter.key("ec256", kid: "k2")
    let jwks = try JWKSServer(keys: [first])
    let backend = try JWTTests.echoBackend()
    let gateway = try GatewayProcess(config: JWTTests.config(backendPort: backend.port, jwksURL: jwks.url))
    defer { gateway.stopExpectingCleanExit() }
    let claims = JWTMinter.claims(subject: "alice", extra: Self.profile)
    let oldToken = try minter.sign(kid: "k1", alg: "ES256", claims: claims)
    let newToken = try minter.sign(kid: "k2", alg: "ES256", claims: claims)

    // The first request may come before the start's fetch ended: it waits for it.
    #expect(try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + oldToken)]).status == 200)
    try jwks.serve([first, rotated])
    // The provider added k2: within 10 s of the last fetch a token naming it is refused,
    // after that it brings one refresh, and is verified.
    var statuses: [Int] = []
    let verified = waitUntil(timeout: 40, interval: .milliseconds(500)) {
      let status = (try? send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + newToken)]))?
        .status
      statuses.append(status ?? 0)
      return status == 200
    }
    #expect(verified, "\(statuses)")
    #expect(statuses.allSatisfy { $0 == 200 || $0 == 401 }, "\(statuses)")
    // Many refused requests, yet one fetch at start and one on demand (a scheduled refresh
    // is 600 s away).
    #expect(jwks.fetches == 2, "\(jwks.fetches) fetches for \(statuses.count) requests")
    let listing = try gateway.admin().json("/admin/jwt")
    let providers = try #require(listing["providers"] as? [[String: Any]])
    #expect(providers.first?["key_ids"] as? [String] == ["k1", "k2"])
    #expect(providers.first?["source"] as? String == jwks.url)
    #expect(providers.first?["last_error"] is NSNull)
  }

  @Test func storedKeysOutliveARestartWhileTheProviderIsDown() throws {
    let minter = try JWTMinter()
    let key = try minter.key("rsa", kid: "k1")
    let jwks = try JWKSServer(keys: [key])
    let backend = try JWTTests.echoBackend()
    let storeDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-jwks-\(UUID())")
    try FileManager.default.createDirectory(at: storeDirectory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: storeDirectory) }
    var config = JWTTests.config(backendPort: backend.port, jwksURL: jwks.url)
    config["store"] = ["path": storeDirectory.appendingPathComponent("store.sqlite").path]
    let token = try minter.sign(
      kid: "k1", alg: "RS256", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))
    let first = try GatewayProcess(config: config)
    #expect(try send("GET", "/me", to: first.port, headers: [("Authorization", "Bearer " + token)]).status == 200)
    first.stopExpectingCleanExit()

    jwks.mode.value = .failing
    let second = try GatewayProcess(config: config)
    defer { second.stopExpectingCleanExit() }
    let answer = try send("GET", "/me", to: second.port, headers: [("Authorization", "Bearer " + token)])
    #expect(answer.status == 200, "\(answer.text)")
    let admin = try second.admin()
    #expect(
      waitUntil(timeout: 20) {
        let provider = (try? admin.json("/admin/jwt")["providers"] as? [[String: Any]])?.first
        return (provider?["last_error"] as? String)?.contains("503") == true
      })
    let provider = try #require((try admin.json("/admin/jwt")["providers"] as? [[String: Any]])?.first)
    #expect(provider["key_ids"] as? [String] == ["k1"])
    #expect(provider["fetched_at"] is String)
  }

  /// No keys at all (nothing fetched, nothing stored): 503, never "accept"; whatever the
  /// endpoint does wrong is in `last_error`, and other routes go on being served.
  @Test func withoutKeysRequestsGet503AndTheEndpointsFaultIsShown() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let backend = try JWTTests.echoBackend()
    let token = try minter.sign(
      kid: "k1", alg: "ES256", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))
    let faults: [(JWKSMode, String)] = [
      (.failing, "503"), (.redirect, "redirects are not followed"), (.huge, "larger than"),
      (.hanging, "no complete answer"),
    ]
    for (mode, expected) in faults {
      let jwks = try JWKSServer(keys: [key])
      jwks.mode.value = mode
      var config = JWTTests.config(
        backendPort: backend.port, jwksURL: jwks.url,
        extraRoutes: [TestConfig.route("plain", match: "/plain")])
      config["store"] = nil
      let gateway = try GatewayProcess(config: config)
      defer { gateway.stopExpectingCleanExit() }

      // A route without jwt is not held up by the provider.
      #expect(try send("GET", "/plain", to: gateway.port).status == 200)
      let answer = try send(
        "GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + token)], timeout: 40)
      #expect(
        isErrorEnvelope(answer, status: 503, message: "token signing keys unavailable"), "\(expected): \(answer.text)")
      let provider = (try gateway.admin().json("/admin/jwt")["providers"] as? [[String: Any]])?.first
      #expect((provider?["last_error"] as? String)?.contains(expected) == true, "\(provider ?? [:])")
      #expect(provider?["key_ids"] as? [String] == [])
      jwks.gate.open()
    }
    #expect(!backend.requests.contains { $0.target == "/me" })
  }

  /// `gatehouse admin jwt refresh NAME` fetches now and shows the result.
  @Test func theAdminCommandListsAndRefreshesProviders() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let added = try minter.key("ed25519", kid: "k2")
    let jwks = try JWKSServer(keys: [key])
    let backend = try JWTTests.echoBackend()
    let gateway = try GatewayProcess(config: JWTTests.config(backendPort: backend.port, jwksURL: jwks.url))
    defer { gateway.stopExpectingCleanExit() }
    let url = "http://127.0.0.1:\(try #require(gateway.adminPort()))"
    #expect(waitUntil(timeout: 10) { jwks.fetches >= 1 })
    try jwks.serve([key, added])

    let refreshed = try runAdmin(["--url", url, "--token", TestConfig.adminToken, "jwt", "refresh", "app"])
    let listed = try runAdmin(["--url", url, "--token", TestConfig.adminToken, "jwt", "list"])
    let unknown = try runAdmin(["--url", url, "--token", TestConfig.adminToken, "jwt", "refresh", "nope"])

    #expect(refreshed.status == 0 && refreshed.stdout.contains("k1,k2"), "\(refreshed.stdout) \(refreshed.stderr)")
    #expect(listed.status == 0 && listed.stdout.contains("https://id.test/"), "\(listed.stdout)")
    #expect(unknown.status != 0)
    #expect(gateway.waitForLogLine { $0["action"] as? String == "jwt refresh" && $0["provider"] as? String == "app" })
  }

  /// A route with a cache keeps answers per user: in an outage each user gets their own
  /// stale answer and nobody gets another's, also when two users ask at once; the admin API
  /// lists the user's digest, never the user.
  @Test func storedAnswersAreKeptPerUser() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let failing = Shared(false)
    let hold = Shared<Gate?>(nil)
    let backend = try TestBackend { request in
      if failing.value { return jsonAnswer(#"{"error":"down"}"#, status: 503, reason: "Service Unavailable") }
      let user = request.head.value("X-User-Id") ?? "anonymous"
      var answer = BackendAnswer(
        headers: [("Content-Type", "application/json")], body: .bytes(Array(#"{"user":"\#(user)"}"#.utf8)))
      answer.holdUntil = hold.value
      return .respond(answer)
    }
    let jwt: [String: Any] = ["provider": "app"]
    let config = JWTTests.config(
      backendPort: backend.port, keys: [key],
      extraRoutes: [
        TestConfig.route("kept", match: "/kept/*", extra: ["jwt": jwt, "cache": ["stale_if_error_s": 600]]),
        TestConfig.route(
          "common", match: "/common/*", extra: ["jwt": jwt, "cache": ["stale_if_error_s": 600, "shared": true]]),
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    func bearer(_ user: String) throws -> [(String, String)] {
      [
        (
          "Authorization",
          "Bearer " + (try minter.sign(kid: "k1", alg: "ES256", claims: JWTMinter.claims(subject: user)))
        )
      ]
    }
    let alice = try bearer("alice")
    let bob = try bearer("bob")
    let carol = try bearer("carol")

    #expect(try send("GET", "/kept/x", to: gateway.port, headers: alice).text == #"{"user":"alice"}"#)
    #expect(try send("GET", "/kept/x", to: gateway.port, headers: bob).text == #"{"user":"bob"}"#)
    // A shared answer is asked for without the user's claims: the backend sees nobody.
    #expect(try send("GET", "/common/x", to: gateway.port, headers: alice).text == #"{"user":"anonymous"}"#)
    #expect(admin.waitForStoredEntries(3))
    // Two users at once on one path: two upstream requests, each its own answer.
    let gate = Gate()
    hold.value = gate
    let before = backend.requests.count
    let answers = Shared<[String]>([])
    let group = DispatchGroup()
    for headers in [alice, bob] {
      let headers = headers
      DispatchQueue.global().async(group: group) {
        let text = (try? send("GET", "/kept/both", to: gateway.port, headers: headers, timeout: 20))?.text ?? ""
        answers.value = answers.value + [text]
      }
    }
    #expect(waitUntil(timeout: 10) { backend.requests.count == before + 2 })
    gate.open()
    #expect(group.wait(timeout: .now() + 20) == .success)
    hold.value = nil
    #expect(Set(answers.value) == [#"{"user":"alice"}"#, #"{"user":"bob"}"#])

    failing.value = true
    StoreTests.expectStale(try send("GET", "/kept/x", to: gateway.port, headers: alice), body: #"{"user":"alice"}"#)
    StoreTests.expectStale(try send("GET", "/kept/x", to: gateway.port, headers: bob), body: #"{"user":"bob"}"#)
    #expect(try send("GET", "/kept/x", to: gateway.port, headers: carol).status == 503)
    // `cache.shared`: one answer for everyone.
    StoreTests.expectStale(try send("GET", "/common/x", to: gateway.port, headers: bob), body: #"{"user":"anonymous"}"#)
    let entries = try #require(try admin.json("/admin/cache/entries")["entries"] as? [[String: Any]])
    let users = entries.filter { $0["route"] as? String == "kept" }.compactMap { $0["user"] as? String }
    #expect(users.count == 4 && Set(users).count == 2 && users.allSatisfy { $0.count == 32 }, "\(users)")
    #expect(entries.first { $0["route"] as? String == "common" }?["user"] is NSNull)
    let listing = String(decoding: try JSONSerialization.data(withJSONObject: entries), as: UTF8.self)
    #expect(!listing.contains("alice") && !listing.contains("bob"))
  }

  /// A request that waits for keys across a reload is verified under the config it came
  /// with, and what it verified counts for that config only: a token of one provider never
  /// passes on another provider's route because the reload moved providers around.
  @Test func aTokenVerifiedAcrossAReloadCountsForItsOwnProviderOnly() throws {
    let minter = try JWTMinter()
    let keyA = try minter.key("ec256", kid: "ka")
    let keyB = try minter.key("ec256", kid: "kb")
    let keyC = try minter.key("ec256", kid: "kc")
    let jwks = try JWKSServer(keys: [])
    jwks.mode.value = .held(try JWKSServer.document([keyA]))
    let backend = try JWTTests.echoBackend()
    func provider(_ extra: [String: Any]) -> [String: Any] {
      extra.merging(["forward_claims": ["sub": "X-User-Id"]]) { $1 }
    }
    let first: [String: Any] = [
      "m": provider(["jwks_url": jwks.url]), "n": provider(["keys": JWTMinter.jwks([keyB])]),
    ]
    var config = JWTTests.config(backendPort: backend.port, keys: [keyC])
    config["jwt"] = ["providers": first]
    config["routes"] = [
      TestConfig.route("me", match: "/me", extra: ["jwt": ["provider": "m"]]),
      TestConfig.route("b", match: "/b", extra: ["jwt": ["provider": "n"]]),
    ]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let tokenA = try minter.sign(
      kid: "ka", alg: "ES256", claims: ["sub": "alice", "exp": Int(Date().timeIntervalSince1970) + 600])

    // The request waits: A's keys are still being fetched.
    let waited = Shared<Int>(0)
    let group = DispatchGroup()
    DispatchQueue.global().async(group: group) {
      waited.value =
        (try? send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + tokenA)], timeout: 30))?
        .status ?? -1
    }
    #expect(waitUntil(timeout: 10) { jwks.fetches >= 1 })
    Thread.sleep(forTimeInterval: 0.5)
    // A new provider sorts first and takes position 0, A's position before.
    var second = first
    second["a"] = provider(["keys": JWTMinter.jwks([keyC])])
    config["jwt"] = ["providers": second]
    config["routes"] =
      (config["routes"] as! [[String: Any]]) + [
        TestConfig.route("c", match: "/c", extra: ["jwt": ["provider": "a"]])
      ]
    try gateway.rewriteConfig(config)
    #expect(try gateway.admin().request("POST", "/admin/reload").status == 200)
    jwks.gate.open()
    #expect(group.wait(timeout: .now() + 30) == .success)
    #expect(waited.value == 200)

    let onC = try send("GET", "/c", to: gateway.port, headers: [("Authorization", "Bearer " + tokenA)])
    let onB = try send("GET", "/b", to: gateway.port, headers: [("Authorization", "Bearer " + tokenA)])
    #expect(onC.status == 401, "\(onC.text)")
    #expect(onB.status == 401, "\(onB.text)")
    #expect(try send("GET", "/me", to: gateway.port, headers: [("Authorization", "Bearer " + tokenA)]).status == 200)
  }

  /// On a `cache.shared` route the answer is everyone's: the backend is asked without the
  /// user's claims. On a per-user route it gets them.
  @Test func aSharedAnswerIsAskedForWithoutTheUsersClaims() throws {
    let minter = try JWTMinter()
    let key = try minter.key("ec256", kid: "k1")
    let backend = try JWTTests.echoBackend()
    let config = JWTTests.config(
      backendPort: backend.port, keys: [key],
      extraRoutes: [
        TestConfig.route(
          "common", match: "/common/*",
          extra: ["jwt": ["provider": "app"], "cache": ["stale_if_error_s": 600, "shared": true]]),
        TestConfig.route(
          "kept", match: "/kept/*", extra: ["jwt": ["provider": "app"], "cache": ["stale_if_error_s": 600]]),
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let token = try minter.sign(
      kid: "k1", alg: "ES256", claims: JWTMinter.claims(subject: "alice", extra: Self.profile))
    let bearer = [("Authorization", "Bearer " + token)]

    #expect(try send("GET", "/common/x", to: gateway.port, headers: bearer).status == 200)
    #expect(try send("GET", "/kept/x", to: gateway.port, headers: bearer).status == 200)

    let common = try #require(backend.requests.first { $0.target == "/common/x" })
    let kept = try #require(backend.requests.first { $0.target == "/kept/x" })
    #expect(common.head.values("X-User-Id").isEmpty && common.head.values("X-User-Email").isEmpty)
    #expect(kept.head.values("X-User-Id") == ["alice"])
  }
}
