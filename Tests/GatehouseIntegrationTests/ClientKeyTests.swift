import Foundation
import Testing

/// Client keys (`clients`, Docs/clients-and-cache.md): 401 without a valid key, 429 over the rate,
/// keys never forwarded, and with `required` the store never serves one client's answer
/// to another.
@Suite struct ClientKeyTests {
  static let iosKey = "ios-key-CANARY-5b1e"
  static let webKey = "web-key-CANARY-93c0"
  static let slowKey = "slow-key-CANARY-e44d"

  static func clients(required: Bool) throws -> [String: Any] {
    [
      "required": required,
      "keys": [
        ["id": "ios", "sha256": try ExternalTool.sha256Hex(iosKey)],
        ["id": "web", "sha256": try ExternalTool.sha256Hex(webKey)],
        ["id": "slow", "sha256": try ExternalTool.sha256Hex(slowKey), "rate_per_s": 0.05, "burst": 2],
      ],
    ]
  }

  /// A gateway with client keys (`required` or not) in front of `port`, enveloped route.
  static func gateway(port: UInt16, required: Bool = true, cache: [String: Any]? = nil) throws -> GatewayProcess {
    var config = StoreTests.config(port: port, cache: cache ?? [:], envelope: ["enabled": true])
    if cache == nil, var routes = config["routes"] as? [[String: Any]] {
      routes[0]["cache"] = nil
      config["routes"] = routes
    }
    config["clients"] = try clients(required: required)
    return try GatewayProcess(config: config)
  }

  @Test func missingKeyIs401Envelope() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/me", to: gateway.port)

    expectJSONAnswer(answer, status: 401, body: errorEnvelope(401, "client key required"))
    #expect(answer.head.value("WWW-Authenticate") == "ApiKey")
    #expect(backend.requests.isEmpty)
    #expect(ErrorTests.loggedReason(gateway, path: "/me") == "client_key_missing")
  }

  /// The gateway answers 401 while the body is still coming; when the rest of the body is
  /// then malformed, the client gets no second answer, and the request has one access line
  /// with the status it got.
  @Test func aBadBodyAfterALocalAnswerGetsNoSecondAnswer() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port)

    try client.send(
      Array("POST /upload HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n".utf8))
    let first = try client.readAnswer(timeout: 10)
    try client.send(Array("zz-not-a-chunk-size\r\n".utf8))
    let second = try? client.readAnswer(timeout: 5)

    expectJSONAnswer(first, status: 401, body: errorEnvelope(401, "client key required"))
    #expect(second == nil, "\(second?.status ?? 0) \(second?.text ?? "")")
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["status"] as? Int == 401 })
    let lines = gateway.logLines().filter { $0["msg"] as? String == "access" }
    #expect(lines.count == 1 && lines.first?["status"] as? Int == 401 && lines.first?["path"] as? String == "/upload")
    #expect(backend.requests.isEmpty)
  }

  /// A key sent twice (two fields, or both forms) is ambiguous: refused, even when one of
  /// the two is right.
  @Test func aKeySentTwiceIsRefused() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let attempts: [[(String, String)]] = [
      [("X-Api-Key", Self.iosKey), ("X-Api-Key", "not-a-key")],
      [("X-Api-Key", "not-a-key"), ("X-Api-Key", Self.iosKey)],
      [("X-Api-Key", Self.iosKey), ("Authorization", "ApiKey " + Self.webKey)],
    ]
    let answers = try attempts.map { try send("GET", "/twice", to: gateway.port, headers: $0) }
    let once = try send("GET", "/once", to: gateway.port, headers: [("X-Api-Key", Self.iosKey)])

    for answer in answers {
      expectJSONAnswer(answer, status: 401, body: errorEnvelope(401, "client key not recognized"))
      #expect(answer.head.value("WWW-Authenticate") == "ApiKey")
    }
    #expect(once.status == 200)
    #expect(backend.requests.map(\.path) == ["/once"])
  }

  /// `always_200` covers the client checks too: HTTP 200, the status only in `code`.
  @Test func alwaysOKRoutesAnswerClientKeyErrorsWith200() throws {
    let backend = try ModalBackend()
    var config = StoreTests.config(port: backend.port, cache: [:], envelope: ["enabled": true, "status": "always_200"])
    if var routes = config["routes"] as? [[String: Any]] {
      routes[0]["cache"] = nil
      config["routes"] = routes
    }
    config["clients"] = try Self.clients(required: true)
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let slow = [("X-Api-Key", Self.slowKey)]

    let missing = try send("GET", "/a", to: gateway.port)
    let limited = try (0..<3).map { _ in try send("GET", "/a", to: gateway.port, headers: slow) }.last!

    expectJSONAnswer(missing, status: 200, body: errorEnvelope(401, "client key required"))
    expectJSONAnswer(limited, status: 200, body: errorEnvelope(429, "rate limit exceeded"))
    #expect(limited.head.value("Retry-After") != nil)
  }

  @Test func wrongKeyIs401EnvelopeInEitherForm() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let attempts: [[(String, String)]] = [
      [("X-Api-Key", "not-a-key")],
      [("Authorization", "ApiKey not-a-key")],
      [("X-Api-Key", Self.iosKey + "x")],
      [("Authorization", "Bearer " + Self.iosKey)],
    ]
    let answers = try attempts.map { try send("GET", "/me", to: gateway.port, headers: $0) }

    for answer in answers.prefix(3) {
      expectJSONAnswer(answer, status: 401, body: errorEnvelope(401, "client key not recognized"))
    }
    // A bearer credential is not a client key: the key is missing.
    expectJSONAnswer(answers[3], status: 401, body: errorEnvelope(401, "client key required"))
    #expect(backend.requests.isEmpty)
  }

  @Test func rightKeyInEitherFormPassesAndIsNeverForwarded() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let attempts: [[(String, String)]] = [
      [("X-Api-Key", Self.iosKey)],
      [("x-api-key", Self.webKey)],
      [("Authorization", "ApiKey " + Self.iosKey)],
      [("Authorization", "apikey " + Self.webKey)],
    ]
    let answers = try attempts.map { try send("GET", "/me", to: gateway.port, headers: $0) }

    #expect(answers.map(\.status) == [200, 200, 200, 200])
    try #require(backend.requests.count == 4)
    for request in backend.requests {
      #expect(!request.head.has("X-Api-Key"))
      #expect(!request.head.values("Authorization").contains { $0.lowercased().hasPrefix("apikey") })
      let raw = String(decoding: request.raw, as: UTF8.self)
      #expect(!raw.contains(Self.iosKey) && !raw.contains(Self.webKey))
    }
  }

  /// `X_Api_Key` is not a key to the gateway, and is not forwarded either: a CGI-style
  /// backend would read it as the X-Api-Key the gateway keeps from it.
  @Test func underscoreLookAlikeOfTheKeyHeaderIsNotForwarded() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port, required: false)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/me", to: gateway.port, headers: [("X_Api_Key", Self.iosKey)])

    #expect(answer.status == 200)
    let request = try #require(backend.requests.first)
    #expect(!String(decoding: request.raw, as: UTF8.self).contains(Self.iosKey))
  }

  @Test func otherAuthorizationIsForwardedAlongsideAKey() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send(
      "GET", "/me", to: gateway.port, headers: [("X-Api-Key", Self.iosKey), ("Authorization", "Bearer for-backend")])

    #expect(answer.status == 200)
    let request = try #require(backend.requests.first)
    #expect(request.head.values("Authorization") == ["Bearer for-backend"])
    #expect(!request.head.has("X-Api-Key"))
  }

  @Test func keysAreOptionalUnlessRequiredButAWrongOneIsStill401() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port, required: false)
    defer { gateway.stopExpectingCleanExit() }

    let anonymous = try send("GET", "/open", to: gateway.port)
    let known = try send("GET", "/open", to: gateway.port, headers: [("X-Api-Key", Self.webKey)])
    let wrong = try send("GET", "/open", to: gateway.port, headers: [("X-Api-Key", "guess")])

    #expect(anonymous.status == 200)
    #expect(known.status == 200)
    expectJSONAnswer(wrong, status: 401, body: errorEnvelope(401, "client key not recognized"))
    #expect(backend.requests.count == 2)
    #expect(backend.requests.allSatisfy { !$0.head.has("X-Api-Key") })
  }

  @Test func overTheRateIs429WithRetryAfter() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let answers = try (0..<4).map { _ in
      try send("GET", "/limited", to: gateway.port, headers: [("X-Api-Key", Self.slowKey)])
    }
    let otherClient = try send("GET", "/limited", to: gateway.port, headers: [("X-Api-Key", Self.iosKey)])

    #expect(answers.map(\.status) == [200, 200, 429, 429])
    for limited in answers.suffix(2) {
      expectJSONAnswer(limited, status: 429, body: errorEnvelope(429, "rate limit exceeded"))
      let retryAfter = limited.head.value("Retry-After").flatMap { Int($0) }
      #expect(
        retryAfter.map { $0 >= 1 && $0 <= 20 } == true, "Retry-After: \(limited.head.value("Retry-After") ?? "-")")
    }
    #expect(otherClient.status == 200)
    #expect(backend.requests.count == 3)
    #expect(waitUntil { gateway.accessLines().count >= 5 })
    #expect(gateway.accessLines().map { $0["reason"] as? String } == [nil, nil, "rate_limited", "rate_limited", nil])
  }

  /// A reload keeps each client's bucket as it was: otherwise every reload (an operator's
  /// routine change) would hand every client a fresh burst.
  @Test func aReloadDoesNotRefillTheBuckets() throws {
    let backend = try ModalBackend()
    var config = StoreTests.config(port: backend.port, cache: [:], envelope: ["enabled": true])
    config["clients"] = try Self.clients(required: true)
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let slow = [("X-Api-Key", Self.slowKey)]

    let burst = try (0..<2).map { _ in try send("GET", "/limited", to: gateway.port, headers: slow).status }
    // The same limits under a changed config: a reload that really rebuilds everything.
    config["headers"] = ["set": ["X-Reloaded": "1"]]
    try gateway.rewriteConfig(config)
    let reload = try gateway.admin().request("POST", "/admin/reload")
    let afterReload = try send("GET", "/limited", to: gateway.port, headers: slow)

    #expect(burst == [200, 200])
    #expect(reload.status == 200)
    expectJSONAnswer(afterReload, status: 429, body: errorEnvelope(429, "rate limit exceeded"))
    #expect(backend.requests.count == 2)
  }

  @Test func staleAnswersNeverLeakAcrossClients() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port, cache: ["stale_if_error_s": 3600])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let ownAnswer = try send("GET", "/profile", to: gateway.port, headers: [("X-Api-Key", Self.iosKey)])
    try #require(admin.waitForStoredEntries(1))
    backend.stop()
    let other = try send("GET", "/profile", to: gateway.port, headers: [("X-Api-Key", Self.webKey)])
    let own = try send("GET", "/profile", to: gateway.port, headers: [("Authorization", "ApiKey " + Self.iosKey)])

    #expect(ownAnswer.status == 200)
    expectJSONAnswer(other, status: 502, body: errorEnvelope(502, "upstream unavailable"))
    #expect(other.head.value("X-Gatehouse-Cache") != "STALE")
    StoreTests.expectStale(own, body: ownAnswer.text)
  }

  @Test func freshAnswersNeverLeakAcrossClients() throws {
    let backend = try ModalBackend()
    let gateway = try Self.gateway(port: backend.port, cache: ["fresh_s": 60])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let clients = [Self.iosKey, Self.webKey, Self.iosKey, Self.webKey]
    let answers = try clients.map { key in
      try send("GET", "/feed", to: gateway.port, headers: [("X-Api-Key", key)])
    }

    #expect(answers.map { $0.head.value("X-Gatehouse-Cache") } == ["MISS", "MISS", "HIT", "HIT"])
    #expect(backend.requests.count == 2)
    #expect(admin.waitForStoredEntries(2))
  }
}
