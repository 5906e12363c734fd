import Foundation
import Testing

/// What one client sends never changes what the upstream answers others: a GET's body and
/// fields the cache key does not hold stay out of shared answers, and fields that make a
/// backend take another URL, method, host or client address do not reach it at all.
@Suite struct PoisoningTests {
  /// Answers with what it got: the body, and the fields a poisoner would use.
  static func echoBackend() throws -> TestBackend {
    try TestBackend { request in
      func echo(_ name: String) -> String { request.head.value(name) ?? "" }
      let body =
        #"{"body":"\#(String(decoding: request.body, as: UTF8.self).replacingOccurrences(of: "\"", with: "'"))","#
        + #""host":"\#(echo("X-Forwarded-Host"))","debug":"\#(echo("X-Debug"))","lang":"\#(echo("Accept-Language"))"}"#
      return jsonAnswer(body)
    }
  }

  static func config(port: UInt16, cache: [String: Any], headers: [String: Any]? = nil) -> [String: Any] {
    var config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [TestConfig.route("cached", match: "/c/*", extra: ["cache": cache])],
        upstreams: ["api": TestConfig.upstream(port: port, answerTimeoutMs: 5000)], headers: headers))
    config["store"] = ["path": "var/store.sqlite"]
    return config
  }

  @Test func aGetWithABodyNeitherReadsNorFeedsTheStore() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }

    let attack = Array(#"{"q":"ATTACK"}"#.utf8)
    let withLength = try send(
      "GET", "/c/x", to: gateway.port, headers: [("Content-Type", "application/json")], body: attack)
    let client = try RawClient(port: gateway.port)
    defer { client.close() }
    let chunked = try client.exchange(
      Array("GET /c/y HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".utf8) + chunkedBody([attack]))
    let plainX = try send("GET", "/c/x", to: gateway.port)
    let plainY = try send("GET", "/c/y", to: gateway.port)
    let againX = try send("GET", "/c/x", to: gateway.port)

    #expect(StoreTests.cacheHeader(withLength) == "BYPASS")
    #expect(StoreTests.cacheHeader(chunked) == "BYPASS")
    #expect(withLength.text.contains("ATTACK") && chunked.text.contains("ATTACK"))
    #expect(!plainX.text.contains("ATTACK") && !plainY.text.contains("ATTACK"), "\(plainX.text) \(plainY.text)")
    #expect(StoreTests.cacheHeader(plainX) == "MISS" && StoreTests.cacheHeader(plainY) == "MISS")
    #expect(StoreTests.cacheHeader(againX) == "HIT")
    // A stored answer is not handed to a request with a body either.
    let another = try send("GET", "/c/x", to: gateway.port, body: Array(#"{"q":"other"}"#.utf8))
    #expect(another.text.contains("other"), "\(another.text)")
  }

  @Test func overrideFieldsNeverReachTheUpstreamUnlessPassed() throws {
    let backend = try TestBackend { _ in jsonAnswer(#"{"ok":true}"#) }
    defer { backend.stop() }
    let overrides = [
      ("X-Original-URL", "/admin"), ("X-Rewrite-URL", "/admin"), ("X-HTTP-Method-Override", "DELETE"),
      ("Forwarded", "for=1.2.3.4;host=evil.example"), ("X-Real-IP", "1.2.3.4"), ("X-Forwarded-Prefix", "/evil"),
      ("X-Forwarded-Host", "evil.example"), ("X-Forwarded-Port", "1"), ("X_Forwarded_Host", "evil.example"),
    ]
    for pass in [false, true] {
      let gateway = try GatewayProcess(
        config: TestConfig.make(
          routes: [TestConfig.route("open", match: "/*")],
          upstreams: ["api": TestConfig.upstream(port: backend.port, answerTimeoutMs: 5000)],
          headers: pass ? ["pass": ["X-Forwarded-Host"], "forwarded": true] : nil))
      defer { gateway.stopExpectingCleanExit() }
      let before = backend.requests.count
      #expect(try send("GET", "/x", to: gateway.port, headers: overrides).status == 200)
      let seen = try #require(backend.requests.dropFirst(before).first)
      for (name, _) in overrides where name.lowercased() != "x-forwarded-host" {
        if name == "Forwarded" && pass {
          // The gateway's own, not the client's.
          #expect(seen.head.values("Forwarded") == ["for=127.0.0.1;proto=http"])
        } else {
          #expect(!seen.head.has(name), "\(name) reached the upstream (pass: \(pass))")
        }
      }
      #expect(seen.head.values("X-Forwarded-Host") == (pass ? ["evil.example"] : []))
      #expect(!seen.head.has("X_Forwarded_Host"))
      #expect(seen.head.value("X-Forwarded-Proto") == "http")
    }
  }

  /// A request whose answer may be shared carries only the fields its key holds: the
  /// stored, collapsed and refreshed answers cannot depend on one client's other fields.
  @Test func sharedAnswersDependOnlyOnKeyedFields() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port, cache: ["fresh_s": 0, "stale_while_revalidate_s": 60, "vary": ["Accept-Language"]]))
    defer { gateway.stopExpectingCleanExit() }
    let poisoned = [
      ("X-Debug", "1"), ("Accept-Language", "fr"), ("X-Forwarded-Host", "evil.example"),
      ("X-Forwarded-For", "9.9.9.9"),
    ]

    let first = try send("GET", "/c/me", to: gateway.port, headers: poisoned)
    // Served from the store, and refreshed in the background with the first request's fields.
    let second = try send("GET", "/c/me", to: gateway.port, headers: poisoned)
    #expect(backend.waitForRequests(2))

    #expect(StoreTests.cacheHeader(first) == "MISS")
    #expect(first.text.contains(#""lang":"fr""#), "\(first.text)")
    #expect(!first.text.contains("evil") && !first.text.contains(#""debug":"1""#), "\(first.text)")
    #expect(StoreTests.cacheHeader(second) == "STALE")
    for request in backend.requests {
      #expect(request.head.value("Accept-Language") == "fr")
      #expect(!request.head.has("X-Debug") && !request.head.has("X-Forwarded-Host"))
      // Only the peer, not an address the client wrote.
      #expect(request.head.values("X-Forwarded-For") == ["127.0.0.1"])
    }
    // A request that is not shared (a POST) still carries the client's fields.
    _ = try send(
      "POST", "/c/me", to: gateway.port, headers: [("X-Debug", "1"), ("X-Forwarded-For", "9.9.9.9")],
      body: Array("{}".utf8))
    #expect(backend.requests.last?.head.value("X-Debug") == "1")
    #expect(backend.requests.last?.head.value("X-Forwarded-For") == "9.9.9.9, 127.0.0.1")
  }

  /// A keyed field the client's `Connection` names is dropped before the upstream, so the
  /// answer would be stored under a value the upstream never saw: such a request bypasses
  /// the store.
  @Test func aKeyedFieldNamedInConnectionBypassesTheStore() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, cache: ["fresh_s": 60, "vary": ["Accept-Language"]]))
    defer { gateway.stopExpectingCleanExit() }

    let attack = try send(
      "GET", "/c/x", to: gateway.port, headers: [("Accept-Language", "de"), ("Connection", "Accept-Language")])
    let victim = try send("GET", "/c/x", to: gateway.port, headers: [("Accept-Language", "de")])

    #expect(StoreTests.cacheHeader(attack) == "BYPASS")
    #expect(StoreTests.cacheHeader(victim) == "MISS")
    #expect(victim.text.contains(#""lang":"de""#), "\(victim.text)")
  }
}
