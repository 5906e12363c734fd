import GatehouseHTTP
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore
@testable import GatehouseStore

/// An answer read from the shared tier meets the rules an upstream answer meets on its way
/// into the store, whoever wrote the record: what the gateway would not have stored, it does
/// not serve (`StoreEntryRules.refusal(ofShared:)`).
@Suite struct SharedTierRecordRulesTests {
  static let config = """
    {
      "upstreams": { "api": { "url": "http://127.0.0.1:3000" } },
      "tokens": { "api": { "type": "static", "value": "secret-value" } },
      "routes": [
        { "name": "plain", "match": { "path": "/p/*" }, "upstream": "api", "envelope": { "enabled": false },
          "cache": { "stale_if_error_s": 60, "vary": ["Accept-Language"] } },
        { "name": "wrapped", "match": { "path": "/w/*" }, "upstream": "api",
          "cache": { "stale_if_error_s": 60 } },
        { "name": "token", "match": { "path": "/t/*" }, "upstream": "api", "token": "api",
          "envelope": { "enabled": false }, "cache": { "stale_if_error_s": 60 },
          "invalid_token": { "status": [401], "body_field": "error", "body_values": ["invalid_token"] } }
      ]
    }
    """

  static func plan(_ name: String) throws -> RoutePlan {
    let config = try loadConfig(Self.config)
    let route = try #require(config.routes.first { $0.name == name })
    return RoutePlan(
      route, upstreamIndex: 0, globalRules: HeaderPlan.Rules(config.headers), tokenIndex: 0, alsoDropped: [])
  }

  static func answer(
    _ status: Int = 200, _ headers: [(String, String)] = [("Content-Type", "application/json")],
    body: String = #"{"id":1}"#
  ) -> StoredAnswer {
    StoredAnswer(status: status, headers: headers, body: Array(body.utf8), storedAtMs: 1_700_000_000_000)
  }

  static func refusal(_ answer: StoredAnswer, route: String = "plain", gzipEntry: Bool = false) throws -> String? {
    StoreEntryRules.refusal(ofShared: answer, gzipEntry: gzipEntry, plan: try plan(route))
  }

  @Test func answersTheGatewayWouldStoreAreServed() throws {
    let json: (String, String) = ("Content-Type", "application/json")
    #expect(try Self.refusal(Self.answer()) == nil)
    #expect(
      try Self.refusal(
        Self.answer(
          200,
          [
            json, ("ETag", #""v1""#), ("Cache-Control", "max-age=60, must-revalidate"),
            ("Vary", "Accept-Language, Accept-Encoding"), ("Last-Modified", "Tue, 15 Nov 1994 08:12:31 GMT"),
            ("Age", "12"), ("Content-Location", "/p/1"),
          ])) == nil)
    #expect(try Self.refusal(Self.answer(204, [], body: "")) == nil)
    #expect(try Self.refusal(Self.answer(203)) == nil)
    // A page on a route that passes bodies through is what its backend serves.
    #expect(try Self.refusal(Self.answer(200, [("Content-Type", "text/html")], body: "<p>hi</p>")) == nil)
    // The gzip entry of a pass-through route keeps gzip as it came.
    #expect(try Self.refusal(Self.answer(200, [json, ("Content-Encoding", "gzip")]), gzipEntry: true) == nil)
    #expect(try Self.refusal(Self.answer(200, [json, ("Content-Encoding", "identity")])) == nil)
    // Enveloped: JSON, an empty body, a file.
    #expect(try Self.refusal(Self.answer(), route: "wrapped") == nil)
    #expect(try Self.refusal(Self.answer(204, [], body: ""), route: "wrapped") == nil)
    #expect(try Self.refusal(Self.answer(200, [("Content-Type", "image/png")], body: "PNG"), route: "wrapped") == nil)
    #expect(try Self.refusal(Self.answer(200, [json], body: #"{"error":"none"}"#), route: "token") == nil)
  }

  @Test func whatTheGatewayWouldNotStoreIsRefused() throws {
    let json: (String, String) = ("Content-Type", "application/json")
    let cases: [(StoredAnswer, String, String, Bool)] = [
      (Self.answer(200, [json, ("Set-Cookie", "session=attacker; Path=/")]), "plain", "set-cookie", false),
      (Self.answer(200, [json, ("set-cookie", "a=b")]), "wrapped", "set-cookie", false),
      (Self.answer(200, [json, ("Location", "https://evil.example/")]), "plain", "location", false),
      (Self.answer(201, [json, ("Location", "/p/2")]), "wrapped", "location", false),
      (Self.answer(200, [("Content-Type", "text/html")], body: "<script>x</script>"), "wrapped", "content-type", false),
      (
        Self.answer(200, [("content-type", " Text/HTML ; charset=utf-8")], body: "<p>"), "wrapped", "content-type",
        false
      ),
      (Self.answer(200, [("Content-Type", "application/xhtml+xml")], body: "<p/>"), "wrapped", "content-type", false),
      (Self.answer(204, [json], body: String(repeating: "x", count: 103)), "plain", "body", false),
      (Self.answer(204, [], body: "HTTP/1.1 200 OK\r\n\r\n"), "wrapped", "body", false),
      (Self.answer(206, [json, ("Content-Range", "bytes 0-1/9")]), "plain", "status", false),
      (Self.answer(200, [json, ("Cache-Control", "private")]), "plain", "cache-control", false),
      (Self.answer(200, [json, ("Cache-Control", "no-store")]), "plain", "cache-control", false),
      (Self.answer(200, [json, ("Vary", "Cookie")]), "plain", "vary", false),
      (Self.answer(200, [json, ("Vary", "*")]), "plain", "vary", false),
      (Self.answer(200, [json, ("Content-Encoding", "br")]), "plain", "content-encoding", true),
      (Self.answer(200, [json, ("Content-Encoding", "gzip")]), "plain", "content-encoding", false),
      (Self.answer(200, [json, ("Content-Encoding", "gzip")]), "wrapped", "content-encoding", false),
      (Self.answer(200, [json, ("Transfer-Encoding", "chunked")]), "plain", "transfer-encoding", false),
      (Self.answer(200, [json, ("Content-Length", "5")]), "plain", "content-length", false),
      (Self.answer(200, [json, ("Connection", "close")]), "plain", "connection", false),
      (Self.answer(200, [json, ("Proxy-Authenticate", "Basic")]), "plain", "proxy-authenticate", false),
      (Self.answer(200, [json, ("X-Gatehouse-Cache", "HIT")]), "plain", "x-gatehouse-cache", false),
      (Self.answer(200, [json, ("Server", "nginx/1.0")]), "plain", "server", false),
      (Self.answer(200, [json, ("X-Request-Id", "forged")]), "plain", "x-request-id", false),
      (Self.answer(200, [json], body: #"{"cut"#), "wrapped", "envelope", false),
      (Self.answer(200, [json], body: #"{"error":"invalid_token"}"#), "token", "token-rejected", false),
    ]
    for (answer, route, rule, gzipEntry) in cases {
      #expect(
        try Self.refusal(answer, route: route, gzipEntry: gzipEntry) == rule,
        "\(route) \(answer.status) \(answer.headers.map { "\($0.name): \($0.value)" })")
    }
  }

  @Test func sizeBoundsAreAnUpstreamAnswersAndTheStores() throws {
    let limits = Exchange.upstreamAnswerLimits
    let many = (0...limits.maxHeaderCount).map { ("X-F\($0)", "v") }
    #expect(try Self.refusal(Self.answer(200, many)) == "size")
    #expect(try Self.refusal(Self.answer(200, Array(many.prefix(limits.maxHeaderCount)))) == nil)
    let long = (0..<5).map { ("X-Long\($0)", String(repeating: "v", count: 16 << 10)) }
    #expect(try Self.refusal(Self.answer(200, long)) == "size")
    let big = StoredAnswer(
      status: 200, headers: [("Content-Type", "application/octet-stream")],
      body: Array(repeating: 0, count: StoreEntryRules.maxStoredBody + 1), storedAtMs: 0)
    #expect(try Self.refusal(big) == "size")
  }

  /// One set of rules: what the read refuses for `CacheStorability`'s reasons, the write path
  /// does not store (`isStorable`), on the same route kind.
  @Test func theStoreKeepsNoneOfWhatTheTierRefuses() throws {
    let json: (String, String) = ("Content-Type", "application/json")
    let samples: [(Int, [(String, String)], Bool)] = [
      (200, [json, ("Set-Cookie", "a=b")], false), (200, [json, ("Location", "/x")], false),
      (201, [json, ("Location", "/x")], true), (200, [("Content-Type", "text/html")], true),
      (200, [("Content-Type", "text/html")], false), (200, [json], true), (206, [json], false),
      (200, [json, ("Cache-Control", "no-cache")], true),
    ]
    for (status, fields, enveloped) in samples {
      let headers = HTTPHeaders(fields)
      let stored = CacheStorability.isStorable(status: status, headers: headers, keyed: [], enveloped: enveloped)
      let refused = try Self.refusal(Self.answer(status, fields, body: "{}"), route: enveloped ? "wrapped" : "plain")
      #expect(stored == (refused == nil), "\(status) \(fields) enveloped: \(enveloped)")
    }
  }
}
