import Testing

@testable import GatehouseCore
@testable import GatehouseHTTP
@testable import GatehouseJSON

@Suite struct ProxyWritersTests {
  func parse(_ text: String) throws -> HTTPRequestHead {
    var parser = HTTPRequestParser()
    for event in try parser.parseAll(Array(text.utf8)) {
      if case .head(let head) = event { return head }
    }
    throw HTTPParseError.unexpectedEOF
  }

  func upstreamHead(
    _ text: String, plan: HeaderPlan = HeaderPlan(layers: []), framing: HTTPBodyFraming = .none
  ) throws -> String {
    let head = try parse(text)
    var out: [UInt8] = []
    UpstreamRequestWriter.write(
      head: head,
      target: (Array("/api/v1".utf8) + Array(head.path) + (head.query.map { [0x3F] + Array($0) } ?? []))[...],
      hostHeader: Array("backend:3000".utf8), plan: plan, clientAddress: Array("10.1.2.3".utf8),
      forwardedProto: "http", requestID: Array("rid-1".utf8), framing: framing, into: &out)
    return String(decoding: out, as: UTF8.self)
  }

  @Test func hopByHopFieldsAreNeverForwarded() throws {
    let text = try upstreamHead(
      "GET /users?x=1 HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive, X-Secret-Hop\r\nKeep-Alive: timeout=5\r\n"
        + "TE: trailers\r\nUpgrade: websocket\r\nProxy-Authorization: Basic x\r\nX-Secret-Hop: 1\r\n"
        + "Accept: */*\r\n\r\n")
    #expect(
      text
        == "GET /api/v1/users?x=1 HTTP/1.1\r\nHost: backend:3000\r\nAccept: */*\r\n"
        + "X-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Proto: http\r\nX-Request-Id: rid-1\r\n\r\n")
  }

  @Test func forwardedForIsAppendedAndGatewayFieldsReplaced() throws {
    let text = try upstreamHead(
      "GET / HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Proto: https\r\nX-Request-Id: old\r\n\r\n")
    #expect(text.contains("X-Forwarded-For: 1.1.1.1, 10.1.2.3\r\n"))
    #expect(text.contains("X-Forwarded-Proto: http\r\n"))
    #expect(!text.contains("https"))
    #expect(text.contains("X-Request-Id: rid-1\r\n"))
    #expect(!text.contains("old"))
  }

  @Test func routeRulesApplyAfterTopLevelRules() throws {
    let plan = HeaderPlan(layers: [
      .init(set: [("Accept", "application/json"), ("Version", "1.4.2")], remove: ["Cookie"]),
      .init(set: [("X-Client", "gatehouse"), ("Cookie", "route=1")], remove: ["Version"]),
    ])
    let text = try upstreamHead(
      "GET / HTTP/1.1\r\nHost: gw\r\nAccept: text/html\r\nCookie: a=b\r\nVersion: 9\r\nX-Keep: y\r\n\r\n", plan: plan)
    #expect(text.contains("X-Keep: y\r\n"))
    #expect(text.contains("Accept: application/json\r\n"))
    #expect(!text.contains("text/html"))
    #expect(text.contains("Cookie: route=1\r\n"))
    #expect(!text.contains("a=b"))
    #expect(!text.contains("Version"))
    #expect(text.contains("X-Client: gatehouse\r\n"))
  }

  func fieldLines(_ text: String, _ lowercaseName: String) -> [Substring] {
    text.split(separator: "\r\n").filter { $0.lowercased().hasPrefix(lowercaseName + ":") }
  }

  /// A configured Host used to be sent next to the gateway's (two Hosts: an invalid
  /// request); it now replaces the upstream URL's, the route's over the top level's.
  @Test func configuredHostReplacesTheUpstreamsAndIsSentOnce() throws {
    let plan = HeaderPlan(layers: [
      .init(set: [("Host", "global.internal")]), .init(set: [("host", "tenant-a.internal:8443")]),
    ])
    let text = try upstreamHead("GET / HTTP/1.1\r\nHost: gw\r\n\r\n", plan: plan)
    #expect(text.hasPrefix("GET /api/v1/ HTTP/1.1\r\nHost: tenant-a.internal:8443\r\n"))
    #expect(fieldLines(text, "host").count == 1)
    let topLevelOnly = try upstreamHead(
      "GET / HTTP/1.1\r\nHost: gw\r\n\r\n", plan: HeaderPlan(layers: [.init(set: [("Host", "global.internal")])]))
    #expect(fieldLines(topLevelOnly, "host") == ["Host: global.internal"])
    let unset = try upstreamHead("GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
    #expect(fieldLines(unset, "host") == ["Host: backend:3000"])
  }

  /// Removing X-Forwarded-For drops the client's list: the backend sees only the peer.
  @Test func removedForwardedForKeepsOnlyThePeerAddress() throws {
    let text = try upstreamHead(
      "GET / HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
      plan: HeaderPlan(layers: [.init(remove: ["X-Forwarded-For"])]))
    #expect(fieldLines(text, "x-forwarded-for") == ["X-Forwarded-For: 10.1.2.3"])
  }

  /// The upstream head a route of `json` (a config) writes for `request`, with the token
  /// line the route's token would add.
  func routeHead(_ json: String, route index: Int = 0, _ request: String, alsoDropped: [String] = []) throws -> String {
    let config = try loadConfig(json)
    let route = config.routes[index]
    let plan = RoutePlan(
      route, upstreamIndex: 0, globalRules: HeaderPlan.Rules(config.headers), tokenIndex: 0, alsoDropped: alsoDropped)
    let token = plan.token.map {
      UpstreamRequestWriter.TokenLine(prefix: $0.linePrefix, value: Array("injected".utf8), suffix: $0.lineSuffix)
    }
    let head = try parse(request)
    var out: [UInt8] = []
    UpstreamRequestWriter.write(
      head: head, target: head.target, hostHeader: Array("backend:3000".utf8), plan: plan.headerPlan,
      token: token, clientAddress: Array("10.1.2.3".utf8), forwardedProto: "http", requestID: Array("rid".utf8),
      framing: .none, into: &out)
    return String(decoding: out, as: UTF8.self)
  }

  /// A top-level `set` of the token's header used to be sent next to the injected token
  /// (two Authorization fields); on a token route the token replaces it, elsewhere it holds.
  @Test func injectedTokenIsTheOnlyValueOfItsHeader() throws {
    let json = """
      {
        "upstreams": { "api": { "url": "http://127.0.0.1:3000" } },
        "tokens": { "api": { "type": "static", "value": "v" } },
        "headers": { "set": { "Authorization": "Basic Z2xvYmFs", "X_Backend_Token": "global" } },
        "routes": [
          { "name": "bearer", "match": { "path": "/b" }, "upstream": "api", "token": "api" },
          { "name": "custom", "match": { "path": "/c" }, "upstream": "api", "token": "api",
            "token_header": "X-Backend-Token", "token_format": "{token}" },
          { "name": "plain", "match": { "path": "/p" }, "upstream": "api" }
        ]
      }
      """
    let request = "GET /b HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer client\r\nX-Backend-Token: client\r\n\r\n"
    let bearer = try routeHead(json, route: 0, request)
    #expect(fieldLines(bearer, "authorization") == ["Authorization: Bearer injected"])
    let custom = try routeHead(json, route: 1, request)
    #expect(fieldLines(custom, "x-backend-token") == ["X-Backend-Token: injected"])
    #expect(fieldLines(custom, "x_backend_token").isEmpty)
    #expect(fieldLines(custom, "authorization") == ["Authorization: Basic Z2xvYmFs"])
    let plain = try routeHead(json, route: 2, request)
    #expect(fieldLines(plain, "authorization") == ["Authorization: Basic Z2xvYmFs"])
  }

  /// CGI, WSGI and PHP backends read `_` as `-`, so a client's `X_Backend_Token` would sit
  /// next to (or be merged with) the injected `X-Backend-Token`. Look-alikes of the token
  /// header, the client-key header and every name a rule sets or removes are dropped, as
  /// those of framing and gateway fields were; other names with `_` pass.
  @Test func underscoreLookAlikesOfTokenKeyAndRuleNamesAreDropped() throws {
    let json = """
      {
        "upstreams": { "api": { "url": "http://127.0.0.1:3000" } },
        "tokens": { "api": { "type": "static", "value": "v" } },
        "headers": { "set": { "X-Client": "gatehouse" }, "remove": ["X-Internal-User"] },
        "routes": [
          { "name": "custom", "match": { "path": "/c" }, "upstream": "api", "token": "api",
            "token_header": "X-Backend-Token", "token_format": "{token}" },
          { "name": "underscored", "match": { "path": "/u" }, "upstream": "api", "token": "api",
            "token_header": "X_Legacy_Token", "token_format": "{token}" }
        ]
      }
      """
    let request =
      "GET /c HTTP/1.1\r\nHost: gw\r\nX_Backend_Token: forged\r\nx_BACKEND-token: forged2\r\n"
      + "X_Api_Key: key\r\nX_Client: forged3\r\nX_Internal_User: root\r\nX-Legacy-Token: other4\r\n"
      + "X_Trace_Id: kept\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n"
    let custom = try routeHead(json, route: 0, request, alsoDropped: ["X-Api-Key"])
    #expect(!custom.contains("forged") && !custom.contains("root") && !custom.contains("X_Api_Key"), "\(custom)")
    #expect(!custom.contains("6.6.6.6"))
    #expect(fieldLines(custom, "x-backend-token") == ["X-Backend-Token: injected"])
    #expect(fieldLines(custom, "x_trace_id") == ["X_Trace_Id: kept"])
    #expect(fieldLines(custom, "x-legacy-token") == ["X-Legacy-Token: other4"])
    // A token header written with `_` drops the client's `-` spelling too.
    let underscored = try routeHead(json, route: 1, request)
    #expect(fieldLines(underscored, "x-legacy-token").isEmpty)
    #expect(fieldLines(underscored, "x_legacy_token") == ["X_Legacy_Token: injected"])
  }

  /// Every `Proxy-*` field is hop-by-hop (Config/README.md), not only the registered ones; so are
  /// `Proxy_…` and `Proxy` (httpoxy). Names that only start alike pass.
  @Test func everyProxyFieldIsDroppedBothWays() throws {
    let request = try upstreamHead(
      "GET / HTTP/1.1\r\nHost: gw\r\nProxy-Foo: 1\r\nproxy-bar: 2\r\nPROXY-AUTHORIZATION: Basic x\r\n"
        + "Proxy: http://evil:3128\r\nProxy_Baz: 3\r\nProxy-: 4\r\nProxyish: kept\r\nX-Proxy-Foo: kept\r\n"
        + "Prox: kept\r\n\r\n")
    let names = request.split(separator: "\r\n").dropFirst().map { $0.prefix { $0 != ":" }.lowercased() }
    #expect(!names.contains { $0 == "proxy" || $0.hasPrefix("proxy-") || $0.hasPrefix("proxy_") }, "\(names)")
    #expect(request.contains("Proxyish: kept\r\nX-Proxy-Foo: kept\r\nProx: kept\r\n"))

    var parser = HTTPResponseParser()
    let events = try parser.parseAll(
      Array(
        ("HTTP/1.1 200 OK\r\nProxy-Foo: 1\r\nProxy-Status: backend; error=x\r\nproxy-authenticate: Basic\r\n"
          + "Proxy: x\r\nX-Proxy-Foo: kept\r\nContent-Length: 0\r\n\r\n").utf8))
    guard case .head(let head) = events[0] else {
      Issue.record("no head")
      return
    }
    var out: [UInt8] = []
    ClientAnswerWriter.write(
      head: head, requestID: Array("rid".utf8), framing: .contentLength(0), headContentLength: nil,
      closeConnection: false, into: &out)
    #expect(
      String(decoding: out, as: UTF8.self)
        == "HTTP/1.1 200 OK\r\nX-Proxy-Foo: kept\r\nX-Request-Id: rid\r\nContent-Length: 0\r\n\r\n")
  }

  @Test func bodyFramingIsTheOneActuallySent() throws {
    let chunked = try upstreamHead(
      "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n", framing: .chunked)
    #expect(chunked.hasSuffix("Transfer-Encoding: chunked\r\n\r\n"))
    let sized = try upstreamHead(
      "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\n", framing: .contentLength(5))
    #expect(sized.hasSuffix("Content-Length: 5\r\n\r\n"))
    #expect(sized.split(separator: "Content-Length", omittingEmptySubsequences: false).count == 2)
  }

  @Test func clientAnswerDropsHopByHopAndAddsRequestID() throws {
    var parser = HTTPResponseParser()
    let events = try parser.parseAll(
      Array(
        ("HTTP/1.1 201 Created\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n"
          + "X-Request-Id: upstream\r\nContent-Type: application/json\r\n\r\n{}").utf8))
    guard case .head(let head) = events[0] else {
      Issue.record("no head")
      return
    }
    var out: [UInt8] = []
    ClientAnswerWriter.write(
      head: head, requestID: Array("rid".utf8), framing: .contentLength(2), headContentLength: nil,
      closeConnection: true, into: &out)
    #expect(
      String(decoding: out, as: UTF8.self)
        == "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Request-Id: rid\r\n"
        + "Content-Length: 2\r\nConnection: close\r\n\r\n")
  }

  @Test func gatewayErrorsAreEnvelopesWithCorrectLength() {
    var out: [UInt8] = []
    GatewayAnswer.writeFailure(
      .noRoute(method: "GET", path: "/x\"y"), requestID: Array("r".utf8), closeConnection: false, into: &out)
    let text = String(decoding: out, as: UTF8.self)
    let body = #"{"code":404,"datas":null,"message":"no route for GET /x\"y"}"#
    #expect(text.hasPrefix("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"))
    #expect(text.hasSuffix("Content-Length: \(body.utf8.count)\r\n\r\n" + body))
  }

  @Test func jsonStringsEscapeControlsQuotesAndBackslashes() {
    var out: [UInt8] = []
    JSONText.appendString("a\"b\\c\nd\u{01}e", to: &out)
    #expect(String(decoding: out, as: UTF8.self) == #""a\"b\\c\nd\u0001e""#)
  }

  @Test func requestIDsAreUniqueHexAndClientIDsAreChecked() {
    var generator = RequestIDGenerator()
    let first = generator.next()
    let second = generator.next()
    #expect(first.count == 32 && first != second)
    #expect(first.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) })
    #expect(RequestIDGenerator.isAcceptable(Array("abc-123_x.y:z".utf8)))
    #expect(!RequestIDGenerator.isAcceptable(Array("has space".utf8)))
    #expect(!RequestIDGenerator.isAcceptable(Array(repeating: 0x61, count: 200)))
    #expect(!RequestIDGenerator.isAcceptable([UInt8]()))
  }

  /// Generated ids do not follow one another: the part after the prefix of consecutive ids
  /// is not a counter, and two generators never give the same sequence. They stay unique.
  @Test func generatedRequestIDsCannotBeGuessedFromEarlierOnes() {
    var generator = RequestIDGenerator()
    let ids = (0..<2000).map { _ in String(decoding: generator.next(), as: UTF8.self) }
    let tails = ids.map { UInt64($0.suffix(16), radix: 16) ?? 0 }
    let steps = zip(tails, tails.dropFirst()).map { $1 &- $0 }
    #expect(Set(ids).count == ids.count)
    #expect(Set(ids.map { $0.prefix(16) }).count == 1)
    // A counter steps by one; a permutation's outputs are spread over the whole range.
    #expect(steps.filter { $0 == 1 }.count < 5, "consecutive ids differ by one")
    #expect(Set(steps).count > 1900)
    let high = tails.filter { $0 >= 1 << 63 }.count
    #expect((800...1200).contains(high), "\(high) of 2000 tails in the upper half")

    var other = RequestIDGenerator()
    let otherTails = (0..<50).map { _ in String(decoding: other.next(), as: UTF8.self).suffix(16) }
    #expect(Set(otherTails).isDisjoint(with: Set(ids.map { $0.suffix(16) })))
  }

  /// The permutation is one: distinct inputs, distinct outputs (checked on a run of
  /// counters around a wrap), and a different key gives a different permutation.
  @Test func theRequestIDPermutationIsOneToOne() {
    let key: (UInt64, UInt64) = (0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210)
    let inputs = (0..<5000).map { UInt64.max &- 2500 &+ UInt64($0) }
    let outputs = inputs.map { RequestIDGenerator.permute($0, key: key) }
    #expect(Set(outputs).count == inputs.count)
    #expect(outputs.map { RequestIDGenerator.permute($0, key: key) } != outputs)
    #expect(inputs.map { RequestIDGenerator.permute($0, key: (key.0, key.1 ^ 1)) } != outputs)
  }

  /// A client's id is kept only when it is 1 to 128 bytes of letters, digits and `-_.:`
  /// (no space, quote, comma, semicolon, control or non-ASCII byte that could split a log
  /// field or a header); anything else is replaced by a generated one.
  @Test func clientRequestIDsAreBoundedPlainTokens() {
    let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:".utf8)
    for byte in UInt8(0)...UInt8(255) {
      #expect(RequestIDGenerator.isAcceptable([0x61, byte, 0x62]) == allowed.contains(byte), "byte \(byte)")
    }
    #expect(RequestIDGenerator.isAcceptable(Array(repeating: 0x61, count: 128)))
    #expect(!RequestIDGenerator.isAcceptable(Array(repeating: 0x61, count: 129)))
  }
}

@Suite struct UnderscoreLookAlikeTests {
  @Test func lookAlikesOfFramingAndGatewayFieldsAreDroppedOthersKept() throws {
    var parser = HTTPRequestParser()
    let events = try parser.parseAll(
      Array(
        ("GET / HTTP/1.1\r\nHost: h\r\nTransfer_Encoding: chunked\r\nContent_Length: 5\r\nX_Forwarded_For: 6.6.6.6\r\n"
          + "X_Custom_Field: kept\r\n\r\n").utf8))
    guard case .head(let head) = events[0] else { return }
    var out: [UInt8] = []
    UpstreamRequestWriter.write(
      head: head, target: Array("/".utf8)[...], hostHeader: Array("b".utf8), plan: HeaderPlan(layers: []),
      clientAddress: Array("1.2.3.4".utf8), forwardedProto: "http", requestID: Array("r".utf8), framing: .none,
      into: &out)
    let text = String(decoding: out, as: UTF8.self)
    #expect(!text.contains("Transfer_Encoding"))
    #expect(!text.contains("Content_Length"))
    #expect(!text.contains("6.6.6.6"))
    #expect(text.contains("X_Custom_Field: kept"))
  }
}
