import Foundation
import Testing

/// The envelope of Docs/envelope.md, row by row: every answer on an enveloped route is
/// `{"code","datas","message"}` with the right status, content type and length, except
/// non-JSON successes and redirects, which pass unchanged.
@Suite struct EnvelopeTests {
  /// Runs `body` against a gateway whose one route (`/*`) is enveloped with `envelope`
  /// settings and goes to a backend answering `answer`.
  static func withEnvelopedGateway(
    _ answer: BackendAction, envelope: [String: Any] = [:], limits: [String: Any]? = nil, admin: Bool = false,
    _ body: (GatewayProcess, TestBackend) throws -> Void
  ) throws {
    let backend = try TestBackend(always: answer)
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*", envelope: envelope)],
      upstreams: ["api": TestConfig.upstream(port: backend.port, answerTimeoutMs: 2000)], limits: limits)
    let gateway = try GatewayProcess(config: admin ? TestConfig.withAdmin(config) : config)
    defer { gateway.stopExpectingCleanExit() }
    try body(gateway, backend)
  }

  // MARK: Backend 2xx with a JSON body

  @Test func jsonSuccessIsWrappedWithTheBackendsStatus() throws {
    let body = #"{"id":7,"name":"Ann \"A\"","tags":["x","y"],"score":1.5e2,"none":null}"#
    try Self.withEnvelopedGateway(jsonAnswer(body, status: 201, reason: "Created")) { gateway, _ in
      let answer = try send("GET", "/users/7", to: gateway.port)
      expectJSONAnswer(answer, status: 201, body: successEnvelope(body))
    }
  }

  @Test func jsonArrayAndScalarBodiesAreWrappedAsTheyAre() throws {
    for body in ["[1,2,3]", #""just a string""#, "42", "true", " {\"spaced\" : [ ] } "] {
      try Self.withEnvelopedGateway(jsonAnswer(body)) { gateway, _ in
        let answer = try send("GET", "/value", to: gateway.port)
        // The document goes in as the backend sent it; only whitespace around it is left out
        // (a trailing newline in `datas` would look like part of the value).
        let trimmed = String(body.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
        expectJSONAnswer(answer, status: 200, body: successEnvelope(trimmed))
      }
    }
  }

  @Test func keyPathPicksANestedMember() throws {
    let body = #"{"data":{"items":[{"id":1},{"id":2}],"total":2},"meta":{}}"#
    try Self.withEnvelopedGateway(jsonAnswer(body), envelope: ["key_path": "data.items"]) { gateway, _ in
      let answer = try send("GET", "/items", to: gateway.port)
      expectJSONAnswer(answer, status: 200, body: successEnvelope(#"[{"id":1},{"id":2}]"#))
    }
  }

  @Test func keyPathIndexesArrays() throws {
    let body = #"{"users":[{"name":"ann"},{"name":"bob","roles":["admin","dev"]}]}"#
    try Self.withEnvelopedGateway(jsonAnswer(body), envelope: ["key_path": "users.1.name"]) { gateway, _ in
      expectJSONAnswer(try send("GET", "/u", to: gateway.port), status: 200, body: successEnvelope(#""bob""#))
    }
    try Self.withEnvelopedGateway(jsonAnswer(body), envelope: ["key_path": "users.1.roles.0"]) { gateway, _ in
      expectJSONAnswer(try send("GET", "/u", to: gateway.port), status: 200, body: successEnvelope(#""admin""#))
    }
  }

  @Test func keyPathThatIsAbsentGivesNullDatas() throws {
    let body = #"{"users":[{"name":"ann"}],"count":1}"#
    for path in ["missing", "users.5.name", "users.0.email", "count.x", "users.name"] {
      try Self.withEnvelopedGateway(jsonAnswer(body), envelope: ["key_path": path]) { gateway, _ in
        let answer = try send("GET", "/u", to: gateway.port)
        expectJSONAnswer(answer, status: 200, body: successEnvelope("null"))
      }
    }
  }

  /// A `key_path` that finds nothing is most likely wrong: it is logged (once per route per
  /// 10 s, naming the route and the key path) and counted per route, not only answered with
  /// `null`.
  @Test func keyPathThatFindsNothingIsLoggedOnceAndCounted() throws {
    let body = #"{"users":[{"name":"ann"}]}"#
    try Self.withEnvelopedGateway(jsonAnswer(body), envelope: ["key_path": "data.users"], admin: true) {
      gateway, _ in
      var statuses: [Int] = []
      for _ in 0..<3 { statuses.append(try send("GET", "/u", to: gateway.port).status) }
      let admin = try gateway.admin()
      var page: MetricsPage?
      let counted = waitUntil(timeout: 10, interval: .milliseconds(100)) {
        page = try? MetricsPage(try admin.request("GET", "/metrics").text)
        return page?.value("gatehouse_envelope_key_path_missing_total", ["route": "wrapped"]) == 3
      }
      #expect(statuses == [200, 200, 200])
      #expect(counted, "\(String(describing: page?.samples("gatehouse_envelope_key_path_missing_total")))")
      #expect(page?.types["gatehouse_envelope_key_path_missing_total"] == "counter")
      let warnings = gateway.logLines().filter { ($0["msg"] as? String)?.hasPrefix("envelope key_path") == true }
      #expect(warnings.count == 1, "\(warnings)")
      #expect(warnings.first?["route"] as? String == "wrapped")
      #expect(warnings.first?["key_path"] as? String == "data.users")
      #expect(warnings.first?["level"] as? String == "warn")
    }
    // A key path that is found is neither logged nor counted.
    try Self.withEnvelopedGateway(jsonAnswer(body), envelope: ["key_path": "users"], admin: true) { gateway, _ in
      #expect(try send("GET", "/u", to: gateway.port).status == 200)
      let page = try MetricsPage(try gateway.admin().request("GET", "/metrics").text)
      #expect(page.samples("gatehouse_envelope_key_path_missing_total").isEmpty)
      #expect(!gateway.logLines().contains { ($0["msg"] as? String)?.hasPrefix("envelope key_path") == true })
    }
  }

  // MARK: Backend 2xx without a body

  @Test func emptySuccessBodyIs200WithNullDatas() throws {
    for status in [200, 201, 202] {
      let answer = BackendAction.respond(
        BackendAnswer(status: status, headers: [("Content-Type", "application/json")], body: .bytes([])))
      try Self.withEnvelopedGateway(answer) { gateway, _ in
        expectJSONAnswer(try send("POST", "/create", to: gateway.port), status: 200, body: successEnvelope("null"))
      }
    }
  }

  @Test func noContentIs200WithNullDatas() throws {
    let answer = BackendAction.respond(BackendAnswer(status: 204, reason: "No Content"))
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      expectJSONAnswer(try send("DELETE", "/users/1", to: gateway.port), status: 200, body: successEnvelope("null"))
    }
  }

  // MARK: An envelope from the backend

  @Test func backendEnvelopePassesUnchanged() throws {
    let bodies = [
      #"{"code":3,"datas":{"a":1},"message":"custom"}"#,
      #"{"message":"only a message","code":0}"#,
      #"{"datas":[1],"code":12}"#,
    ]
    for body in bodies {
      try Self.withEnvelopedGateway(jsonAnswer(body, status: 202, reason: "Accepted")) { gateway, _ in
        expectJSONAnswer(try send("GET", "/e", to: gateway.port), status: 202, body: body)
      }
    }
  }

  @Test func objectWithCodeAloneIsWrapped() throws {
    let body = #"{"code":5,"value":"not an envelope"}"#
    try Self.withEnvelopedGateway(jsonAnswer(body)) { gateway, _ in
      expectJSONAnswer(try send("GET", "/e", to: gateway.port), status: 200, body: successEnvelope(body))
    }
  }

  @Test func errorStatusWithABackendEnvelopePassesUnchanged() throws {
    let body = #"{"code":4001,"datas":null,"message":"quota"}"#
    try Self.withEnvelopedGateway(jsonAnswer(body, status: 403, reason: "Forbidden")) { gateway, _ in
      expectJSONAnswer(try send("GET", "/e", to: gateway.port), status: 403, body: body)
    }
  }

  // MARK: Backend 4xx / 5xx

  static let errorMessages: [(status: Int, reason: String, body: String, message: String)] = [
    (400, "Bad Request", #"{"message":"name is required"}"#, "name is required"),
    (401, "Unauthorized", #"{"error":"invalid_token"}"#, "invalid_token"),
    (403, "Forbidden", #"{"error_description":"scope missing","other":1}"#, "scope missing"),
    (422, "Unprocessable Content", #"{"detail":"too short"}"#, "too short"),
    (409, "Conflict", #"{"detail":"d","error":"e","message":"m"}"#, "m"),
    (500, "Internal Server Error", #"{"error":{"code":7,"message":"nested text"}}"#, "nested text"),
    (502, "Bad Gateway", #"{"message":42,"error":"fallback"}"#, "fallback"),
    (503, "Service Unavailable", #"{"unrelated":true}"#, "Service Unavailable"),
    (404, "Not Found", "<html>not json</html>", "Not Found"),
    (500, "Internal Server Error", "", "Internal Server Error"),
  ]

  @Test(arguments: 0..<errorMessages.count)
  func errorStatusBecomesAnErrorEnvelope(index: Int) throws {
    let row = Self.errorMessages[index]
    let contentType = row.body.hasPrefix("<") ? "text/html" : "application/json"
    let answer = jsonAnswer(row.body, status: row.status, reason: row.reason, contentType: contentType)
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      let answer = try send("GET", "/fails", to: gateway.port)
      expectJSONAnswer(answer, status: row.status, body: errorEnvelope(row.status, row.message))
    }
  }

  @Test func problemJSONErrorsUseTheirDetail() throws {
    let body = #"{"type":"about:blank","title":"Out of credit","status":403,"detail":"balance is 30"}"#
    let answer = jsonAnswer(body, status: 403, reason: "Forbidden", contentType: "application/problem+json")
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      expectJSONAnswer(
        try send("GET", "/p", to: gateway.port), status: 403, body: errorEnvelope(403, "balance is 30"))
    }
  }

  @Test func errorMessagesAreEscapedInTheEnvelope() throws {
    let body = #"{"message":"line\nbreak \"quoted\" \u00e9"}"#
    try Self.withEnvelopedGateway(jsonAnswer(body, status: 400, reason: "Bad Request")) { gateway, _ in
      let answer = try send("GET", "/p", to: gateway.port)
      #expect(answer.status == 400)
      #expect(answer.head.contentLength == Int64(answer.body.count))
      let object = try answer.jsonObject()
      #expect(object["message"] as? String == "line\nbreak \"quoted\" é")
      #expect(isErrorEnvelope(answer, status: 400))
    }
  }

  // MARK: Invalid JSON, unreachable, timed out, no route

  @Test func invalidJSONWithAJSONContentTypeIs502() throws {
    for body in [#"{"unterminated": "#, "{'single':1}", "[1,2,]", #"{"a":1} trailing"#] {
      try Self.withEnvelopedGateway(jsonAnswer(body)) { gateway, _ in
        expectJSONAnswer(
          try send("GET", "/bad", to: gateway.port), status: 502, body: errorEnvelope(502, "upstream sent invalid JSON")
        )
      }
    }
  }

  @Test func unreachableBackendIs502() throws {
    let port = try TestSocket.unusedPort()
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*")], upstreams: ["api": TestConfig.upstream(port: port)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    expectJSONAnswer(
      try send("GET", "/down", to: gateway.port), status: 502, body: errorEnvelope(502, "upstream unavailable"))
  }

  @Test func resetByTheBackendIs502() throws {
    try Self.withEnvelopedGateway(.reset) { gateway, _ in
      expectJSONAnswer(
        try send("GET", "/reset", to: gateway.port), status: 502, body: errorEnvelope(502, "upstream unavailable"))
    }
  }

  @Test func slowBackendIs504() throws {
    let gate = Gate()
    var answer = BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array("{}".utf8)))
    answer.holdUntil = gate
    defer { gate.open() }
    try Self.withEnvelopedGateway(.respond(answer)) { gateway, _ in
      expectJSONAnswer(
        try send("GET", "/slow", to: gateway.port), status: 504, body: errorEnvelope(504, "upstream timed out"))
      gate.open()
    }
  }

  @Test func noRouteIs404() throws {
    let backend = try TestBackend(always: jsonAnswer("{}"))
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("only", match: "/only")],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    expectJSONAnswer(
      try send("GET", "/x", to: gateway.port), status: 404, body: errorEnvelope(404, "no route for GET /x"))
    #expect(backend.requests.isEmpty)
  }

  // MARK: Requests the gateway refuses

  @Test func malformedRequestIs400AndTheConnectionCloses() throws {
    try Self.withEnvelopedGateway(jsonAnswer("{}")) { gateway, backend in
      let client = try RawClient(port: gateway.port)
      let answer = try client.exchange(Array("GET /x HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n".utf8))
      #expect(isErrorEnvelope(answer, status: 400))
      #expect(answer.head.value("Content-Type") == "application/json")
      #expect(answer.head.contentLength == Int64(answer.body.count))
      #expect(client.waitForEnd() != .stillOpen)
      #expect(backend.requests.isEmpty)
    }
  }

  @Test func bodyOverTheLimitIs413AndTheConnectionCloses() throws {
    try Self.withEnvelopedGateway(jsonAnswer("{}"), limits: ["max_body_bytes": 100]) { gateway, backend in
      let client = try RawClient(port: gateway.port)
      let answer = try client.exchange(httpRequest("POST", "/x", body: [UInt8](repeating: 0x61, count: 500)))
      #expect(isErrorEnvelope(answer, status: 413))
      #expect(answer.head.contentLength == Int64(answer.body.count))
      #expect(client.waitForEnd() != .stillOpen)
      #expect(backend.requests.isEmpty)
    }
  }

  @Test func headerOverTheLimitIs431AndTheConnectionCloses() throws {
    try Self.withEnvelopedGateway(jsonAnswer("{}"), limits: ["max_header_bytes": 1024]) { gateway, backend in
      let client = try RawClient(port: gateway.port)
      let answer = try client.exchange(
        httpRequest("GET", "/x", headers: [("X-Big", String(repeating: "b", count: 4000))]))
      #expect(isErrorEnvelope(answer, status: 431))
      #expect(answer.head.contentLength == Int64(answer.body.count))
      #expect(client.waitForEnd() != .stillOpen)
      #expect(backend.requests.isEmpty)
    }
  }

  // MARK: status: always_200

  @Test func alwaysOKPutsTheStatusOnlyInCode() throws {
    let cases: [(BackendAction, String)] = [
      (jsonAnswer(#"{"a":1}"#, status: 201, reason: "Created"), successEnvelope(#"{"a":1}"#)),
      (jsonAnswer(#"{"error":"gone"}"#, status: 404, reason: "Not Found"), errorEnvelope(404, "gone")),
      (jsonAnswer("{oops", status: 200), errorEnvelope(502, "upstream sent invalid JSON")),
      (jsonAnswer("", status: 503, reason: "Service Unavailable"), errorEnvelope(503, "Service Unavailable")),
      (
        jsonAnswer(#"{"code":9,"datas":null,"message":"theirs"}"#, status: 400),
        #"{"code":9,"datas":null,"message":"theirs"}"#
      ),
    ]
    for (answer, body) in cases {
      try Self.withEnvelopedGateway(answer, envelope: ["status": "always_200"]) { gateway, _ in
        expectJSONAnswer(try send("GET", "/a", to: gateway.port), status: 200, body: body)
      }
    }
  }

  @Test
  func alwaysOKAlsoCoversAnswersTheGatewayMakes() throws {
    let port = try TestSocket.unusedPort()
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*", envelope: ["status": "always_200"])],
      upstreams: ["api": TestConfig.upstream(port: port)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    expectJSONAnswer(
      try send("GET", "/down", to: gateway.port), status: 200, body: errorEnvelope(502, "upstream unavailable"))

    let gate = Gate()
    var held = BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array("{}".utf8)))
    held.holdUntil = gate
    defer { gate.open() }
    try Self.withEnvelopedGateway(.respond(held), envelope: ["status": "always_200"]) { slow, _ in
      expectJSONAnswer(
        try send("GET", "/slow", to: slow.port), status: 200, body: errorEnvelope(504, "upstream timed out"))
      gate.open()
    }
  }

  // MARK: Content types and pass-through

  @Test func jsonWithCharsetAndSuffixTypesIsWrapped() throws {
    for contentType in ["application/json; charset=utf-8", "application/problem+json", "application/vnd.api+json"] {
      try Self.withEnvelopedGateway(jsonAnswer(#"{"k":"v"}"#, contentType: contentType)) { gateway, _ in
        expectJSONAnswer(try send("GET", "/t", to: gateway.port), status: 200, body: successEnvelope(#"{"k":"v"}"#))
      }
    }
  }

  @Test func nonJSONSuccessPassesThroughUnchanged() throws {
    let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0xFF, 0x7B]
    let cases: [(String, [UInt8])] = [("text/plain", Array("plain {not json".utf8)), ("image/png", png)]
    for (contentType, bytes) in cases {
      let answer = BackendAction.respond(
        BackendAnswer(headers: [("Content-Type", contentType), ("X-Extra", "kept")], body: .bytes(bytes)))
      try Self.withEnvelopedGateway(answer) { gateway, _ in
        let answer = try send("GET", "/file", to: gateway.port)
        #expect(answer.status == 200)
        #expect(answer.head.value("Content-Type") == contentType)
        #expect(answer.head.value("X-Extra") == "kept")
        #expect(answer.head.contentLength == Int64(bytes.count))
        #expect(answer.body == bytes)
      }
    }
  }

  @Test func redirectPassesThroughUnchanged() throws {
    let answer = BackendAction.respond(
      BackendAnswer(
        status: 302, reason: "Found", headers: [("Location", "/elsewhere"), ("Content-Type", "text/html")],
        body: .bytes(Array("<a>moved</a>".utf8))))
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      let answer = try send("GET", "/old", to: gateway.port)
      #expect(answer.status == 302)
      #expect(answer.head.value("Location") == "/elsewhere")
      #expect(answer.head.value("Content-Type") == "text/html")
      #expect(answer.text == "<a>moved</a>")
      #expect(answer.head.contentLength == 12)
    }
  }

  @Test func contentLengthIsRightForEveryAnswerOnOneConnection() throws {
    let backend = try TestBackend { request in
      switch request.path {
      case "/ok": return jsonAnswer(#"{"ok":"é"}"#)
      case "/empty": return .respond(BackendAnswer(status: 204, reason: "No Content"))
      case "/error": return jsonAnswer(#"{"message":"ünïcode"}"#, status: 400, reason: "Bad Request")
      case "/invalid": return jsonAnswer("{")
      case "/text": return .respond(.text("plain"))
      case "/chunked":
        return .respond(
          BackendAnswer(
            headers: [("Content-Type", "application/json")],
            body: .chunked([Array(#"{"parts":"#.utf8), Array("[1,".utf8), Array("2]}".utf8)])))
      default: return jsonAnswer("{}", status: 404, reason: "Not Found")
      }
    }
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*")],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let expected: [(String, Int, String)] = [
      ("/ok", 200, successEnvelope(#"{"ok":"é"}"#)),
      ("/empty", 200, successEnvelope("null")),
      ("/error", 400, errorEnvelope(400, "ünïcode")),
      ("/invalid", 502, errorEnvelope(502, "upstream sent invalid JSON")),
      ("/chunked", 200, successEnvelope(#"{"parts":[1,2]}"#)),
      ("/nothing", 404, errorEnvelope(404, "Not Found")),
    ]
    for (path, status, body) in expected {
      let answer = try client.exchange(httpRequest("GET", path))
      expectJSONAnswer(answer, status: status, body: body)
      #expect(!answer.head.isChunked)
    }
    let text = try client.exchange(httpRequest("GET", "/text"))
    #expect(text.text == "plain")
    #expect(text.head.contentLength == 5)
  }

  // MARK: HEAD

  @Test func headIsAskedAsGetAndAnsweredWithTheSameHeadersAndNoBody() throws {
    let body = #"{"id":1,"name":"head"}"#
    try Self.withEnvelopedGateway(jsonAnswer(body, headers: [("X-Version", "3")])) { gateway, backend in
      let client = try RawClient(port: gateway.port)
      let head = try client.exchange(httpRequest("HEAD", "/thing"), requestWasHEAD: true)
      let get = try client.exchange(httpRequest("GET", "/thing"))

      expectJSONAnswer(get, status: 200, body: successEnvelope(body))
      #expect(head.status == 200)
      #expect(head.body.isEmpty)
      #expect(head.head.contentLength == get.head.contentLength)
      #expect(head.head.value("Content-Type") == "application/json")
      #expect(head.head.value("X-Version") == "3")
      #expect(backend.requests.map(\.method) == ["GET", "GET"])
      // Nothing extra after the HEAD answer: the connection is still in step.
      let again = try client.exchange(httpRequest("GET", "/thing"))
      #expect(again.text == successEnvelope(body))
    }
  }

  @Test func headOfAnErrorHasTheErrorsLengthAndNoBody() throws {
    try Self.withEnvelopedGateway(jsonAnswer(#"{"error":"nope"}"#, status: 403, reason: "Forbidden")) { gateway, _ in
      let client = try RawClient(port: gateway.port)
      let head = try client.exchange(httpRequest("HEAD", "/x"), requestWasHEAD: true)
      let get = try client.exchange(httpRequest("GET", "/x"))
      #expect(head.status == 403)
      #expect(head.head.contentLength == Int64(errorEnvelope(403, "nope").utf8.count))
      expectJSONAnswer(get, status: 403, body: errorEnvelope(403, "nope"))
    }
  }

  // MARK: gzip

  @Test func gzipFromTheBackendIsDecodedBeforeWrapping() throws {
    let body = #"{"compressed":true,"list":["a","b","c"]}"#
    let compressed = try ExternalTool.gzip(Array(body.utf8))
    let answer = BackendAction.respond(
      BackendAnswer(
        headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")], body: .bytes(compressed)))
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      let answer = try send("GET", "/z", to: gateway.port)
      expectJSONAnswer(answer, status: 200, body: successEnvelope(body))
      #expect(!answer.head.has("Content-Encoding"))
    }
  }

  @Test func gzipErrorBodyFromTheBackendIsDecodedForItsMessage() throws {
    let compressed = try ExternalTool.gzip(Array(#"{"message":"zipped failure"}"#.utf8))
    let answer = BackendAction.respond(
      BackendAnswer(
        status: 500, reason: "Internal Server Error",
        headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")], body: .bytes(compressed)))
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      expectJSONAnswer(
        try send("GET", "/z", to: gateway.port), status: 500, body: errorEnvelope(500, "zipped failure"))
    }
  }

  @Test func corruptGzipFromTheBackendIs502() throws {
    var compressed = try ExternalTool.gzip(Array(String(repeating: #"{"a":1},"#, count: 50).utf8))
    for index in 12..<min(40, compressed.count - 8) { compressed[index] ^= 0x5A }
    let answer = BackendAction.respond(
      BackendAnswer(
        headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")], body: .bytes(compressed)))
    try Self.withEnvelopedGateway(answer) { gateway, _ in
      let answer = try send("GET", "/z", to: gateway.port)
      #expect(isErrorEnvelope(answer, status: 502))
      #expect(answer.head.contentLength == Int64(answer.body.count))
    }
  }

  /// A JSON answer over `max_bytes` streams wrapped whether or not the client takes gzip:
  /// the upstream is not asked for gzip on an enveloped route (a gzip body can only be
  /// wrapped whole), so a backend that compresses when asked sends it plain. Before, the
  /// client that took gzip got a 502 where the one that did not got the answer.
  @Test func aLargeJSONAnswerIsWrappedWhetherOrNotTheClientTakesGzip() throws {
    let body = "[" + (0..<600).map { #"{"id":\#($0),"name":"user number \#($0)"}"# }.joined(separator: ",") + "]"
    let compressed = try ExternalTool.gzip(Array(body.utf8))
    let backend = try TestBackend { request in
      let asked = (request.head.value("Accept-Encoding") ?? "").contains("gzip")
      return .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json")] + (asked ? [("Content-Encoding", "gzip")] : []),
          body: .bytes(asked ? compressed : Array(body.utf8))))
    }
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*", envelope: ["max_bytes": 4096])],
      upstreams: ["api": TestConfig.upstream(port: backend.port, answerTimeoutMs: 5000)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    #expect(compressed.count < 4096 && body.utf8.count > 4096)

    for accepted in [nil, "gzip", "br, gzip;q=0.8"] {
      let answer = try send(
        "GET", "/users", to: gateway.port, headers: accepted.map { [("Accept-Encoding", $0)] } ?? [])
      #expect(answer.status == 200, "\(accepted ?? "-")")
      #expect(!answer.head.has("Content-Encoding"), "\(accepted ?? "-")")
      // Compared as a Bool: a failure would print the 25 KB body twice.
      let wrapped = answer.text == successEnvelope(body)
      #expect(wrapped, "\(accepted ?? "-"): \(answer.text.prefix(120))")
    }
    #expect(backend.requests.allSatisfy { !$0.head.has("Accept-Encoding") })
  }

  /// Asks a gateway whose envelope buffers at most 1 KiB for `/list` from the backend on
  /// `port`, and expects `json` wrapped (streamed, as it is larger).
  static func expectStreamedWrap(
    of json: String, from port: UInt16, sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*", envelope: ["max_bytes": 1024])],
      upstreams: ["api": TestConfig.upstream(port: port, answerTimeoutMs: 5000)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let answer = try send("GET", "/list", to: gateway.port)
    #expect(answer.status == 200, sourceLocation: sourceLocation)
    // Compared as a Bool: a failure would print the whole body twice.
    let wrapped = answer.text == successEnvelope(json)
    #expect(wrapped, "\(answer.text.prefix(80))", sourceLocation: sourceLocation)
  }

  /// A JSON answer over `max_bytes` that starts with a byte order mark split across reads
  /// streams wrapped without it (it is not part of the value); one that arrives whole does
  /// too.
  @Test(arguments: [[1, 2], [3], [2]])
  func aByteOrderMarkSplitAcrossReadsIsLeftOutOfAStreamedAnswer(_ cuts: [Int]) throws {
    let json = "[" + (0..<300).map { #"{"id":\#($0)}"# }.joined(separator: ",") + "]"
    let body: [UInt8] = [0xEF, 0xBB, 0xBF] + Array(json.utf8)
    let head = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n".utf8)
    var pieces: [[UInt8]] = []
    var start = 0
    for cut in cuts + [body.count] {
      pieces.append(Array(body[start..<cut]))
      start = cut
    }
    pieces[0] = head + pieces[0]
    let answer = FaultAnswer(pieces, pause: .milliseconds(50))
    let backend = try FaultBackend { _ in answer }
    defer { backend.stop() }
    try Self.expectStreamedWrap(of: json, from: backend.port)
  }

  /// A chunked JSON answer whose first read alone passes `max_bytes` switches to the
  /// wrapped stream with nothing buffered yet: the empty buffer writes no chunk (an empty
  /// chunk would end the body; it stopped the gateway).
  @Test func aFirstReadLargerThanTheBufferSwitchesToAWrappedStream() throws {
    let json = "[" + (0..<400).map { #"{"id":\#($0)}"# }.joined(separator: ",") + "]"
    let backend = try TestBackend(
      always: .respond(
        BackendAnswer(headers: [("Content-Type", "application/json")], body: .chunked([Array(json.utf8)]))))
    defer { backend.stop() }
    try Self.expectStreamedWrap(of: json, from: backend.port)
  }

  @Test func bigEnvelopeIsGzippedForAClientThatAsks() throws {
    let items = (0..<200).map { #"{"id":\#($0),"name":"item number \#($0)"}"# }
    let body = "[" + items.joined(separator: ",") + "]"
    try Self.withEnvelopedGateway(jsonAnswer(body)) { gateway, _ in
      let client = try RawClient(port: gateway.port)
      let zipped = try client.exchange(httpRequest("GET", "/big", headers: [("Accept-Encoding", "br, gzip")]))
      let plain = try client.exchange(httpRequest("GET", "/big"))

      #expect(zipped.status == 200)
      #expect(zipped.head.value("Content-Encoding") == "gzip")
      #expect(zipped.head.values("Vary").contains { $0.lowercased().contains("accept-encoding") })
      #expect(zipped.head.value("Content-Type") == "application/json")
      #expect(zipped.head.contentLength == Int64(zipped.body.count))
      #expect(zipped.body.count < body.utf8.count)
      #expect(String(decoding: try ExternalTool.gunzip(zipped.body), as: UTF8.self) == successEnvelope(body))
      expectJSONAnswer(plain, status: 200, body: successEnvelope(body))
      #expect(!plain.head.has("Content-Encoding"))
    }
  }

  @Test func smallEnvelopeIsNotGzipped() throws {
    try Self.withEnvelopedGateway(jsonAnswer(#"{"small":true}"#)) { gateway, _ in
      let answer = try send("GET", "/s", to: gateway.port, headers: [("Accept-Encoding", "gzip")])
      expectJSONAnswer(answer, status: 200, body: successEnvelope(#"{"small":true}"#))
      #expect(!answer.head.has("Content-Encoding"))
    }
  }

  @Test func gzipRefusedWithQZeroIsNotSent() throws {
    let body = "[" + (0..<300).map { "\($0)" }.joined(separator: ",") + "]"
    try Self.withEnvelopedGateway(jsonAnswer(body)) { gateway, _ in
      let answer = try send("GET", "/s", to: gateway.port, headers: [("Accept-Encoding", "gzip;q=0, identity")])
      expectJSONAnswer(answer, status: 200, body: successEnvelope(body))
      #expect(!answer.head.has("Content-Encoding"))
    }
  }
}

/// HEAD and cache headers on answers too big for the envelope buffer, which are wrapped
/// while streaming (the HEAD rule of Docs/envelope.md; `X-Gatehouse-Cache`, Docs/clients-and-cache.md).
@Suite struct EnvelopeWrappedStreamTests {
  static let items = "[" + (0..<400).map { #"{"id":\#($0)}"# }.joined(separator: ",") + "]"

  static func gateway(backend: TestBackend, cache: [String: Any]? = nil) throws -> GatewayProcess {
    var extra: [String: Any] = [:]
    if let cache { extra["cache"] = cache }
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("wrapped", match: "/*", envelope: ["max_bytes": 1024], extra: extra)],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    return try GatewayProcess(config: config)
  }

  static func backend(chunked: Bool) throws -> TestBackend {
    let bytes = Array(items.utf8)
    let body: BackendAnswer.Body =
      chunked
      ? .chunked(stride(from: 0, to: bytes.count, by: 700).map { Array(bytes[$0..<min($0 + 700, bytes.count)]) })
      : .bytes(bytes)
    return try TestBackend(
      always: .respond(BackendAnswer(headers: [("Content-Type", "application/json")], body: body)))
  }

  @Test func getOfABigBodyIsWrappedWhileStreaming() throws {
    for chunked in [false, true] {
      let backend = try Self.backend(chunked: chunked)
      defer { backend.stop() }
      let gateway = try Self.gateway(backend: backend)
      defer { gateway.stopExpectingCleanExit() }

      let answer = try send("GET", "/big", to: gateway.port)

      #expect(answer.status == 200)
      #expect(answer.head.isChunked)
      #expect(answer.head.value("Content-Type") == "application/json")
      #expect(answer.text == successEnvelope(Self.items))
    }
  }

  @Test
  func headOfABigBodyHasNoBody() throws {
    for chunked in [false, true] {
      let backend = try Self.backend(chunked: chunked)
      defer { backend.stop() }
      let gateway = try Self.gateway(backend: backend)
      defer { gateway.stopExpectingCleanExit() }

      let client = try RawClient(port: gateway.port)
      let head = try client.exchange(httpRequest("HEAD", "/big"), requestWasHEAD: true)
      // Whatever followed the HEAD answer would be read as the start of this one.
      let get = try client.exchange(httpRequest("GET", "/big"))

      #expect(head.status == 200, "backend chunked: \(chunked)")
      #expect(head.head.value("Content-Type") == "application/json")
      #expect(get.status == 200, "backend chunked: \(chunked)")
      #expect(get.text == successEnvelope(Self.items), "backend chunked: \(chunked)")
    }
  }

  @Test
  func bigBodyOnACachedRouteSaysMiss() throws {
    let backend = try Self.backend(chunked: false)
    defer { backend.stop() }
    let gateway = try Self.gateway(backend: backend, cache: ["fresh_s": 60])
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/big", to: gateway.port)

    #expect(answer.text == successEnvelope(Self.items))
    #expect(answer.head.value("X-Gatehouse-Cache") == "MISS")
  }
}
