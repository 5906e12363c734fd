import GatehouseHTTP
import Testing

@Suite struct RequestParserTests {
  @Test func parsesRequestLineAndHeaders() throws {
    let events = try parseRequests(
      "GET /users/7?x=1&y=2 HTTP/1.1\r\nHost: api.example\r\nX-Custom-Name:  value with  spaces \t\r\nAccept: */*\r\n\r\n"
    )
    #expect(events.count == 2)
    let head = try #require(events[0].requestHead)
    #expect(head.method == .get)
    #expect(head.targetString == "/users/7?x=1&y=2")
    #expect(String(decoding: head.path, as: UTF8.self) == "/users/7")
    #expect(head.query.map { String(decoding: $0, as: UTF8.self) } == "x=1&y=2")
    #expect(head.version == .http1_1)
    #expect(head.keepAlive)
    #expect(head.bodyFraming == .none)
    #expect(head.headers.count == 3)
    #expect(head.headers.name(at: 1) == "X-Custom-Name")
    #expect(head.headers["x-custom-name"] == "value with  spaces")
    #expect(head.headers["HOST"] == "api.example")
    #expect(head.headers["missing"] == nil)
    #expect(events[1] == .end(nil))
  }

  @Test func recognizesMethodsAndKeepsUnknownOnes() throws {
    for (name, method) in [
      ("GET", HTTPMethod.get), ("HEAD", .head), ("POST", .post), ("PUT", .put),
      ("DELETE", .delete), ("OPTIONS", .options), ("PATCH", .patch), ("PURGE", .other("PURGE")),
      ("get", .other("get")),
    ] {
      let events = try parseRequests("\(name) / HTTP/1.1\r\nHost: a\r\n\r\n")
      #expect(events.first?.requestHead?.method == method)
    }
  }

  @Test func contentLengthBodyArrivesAsRangesOfTheInput() throws {
    var parser = HTTPRequestParser()
    let raw = bytes("POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789")
    let events = try parser.parseAll(raw)
    #expect(events.count == 3)
    guard case .body(let range) = events[1] else {
      Issue.record("expected a body event, got \(events[1])")
      return
    }
    #expect(Array(raw[range]) == bytes("0123456789"))
    #expect(events[2] == .end(nil))
    #expect(parser.isIdle)
  }

  @Test func contentLengthWithLeadingZerosIsDecimal() throws {
    let events = try parseRequests("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 010\r\n\r\n0123456789")
    #expect(events.first?.requestHead?.bodyFraming == .contentLength(10))
    #expect(events[1] == .body(bytes("0123456789")))
  }

  @Test func largestContentLengthIsAccepted() throws {
    let events = try parseRequests("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n")
    #expect(events.first?.requestHead?.bodyFraming == .contentLength(Int64.max))
  }

  @Test func chunkedBodyWithExtensionsAndTrailers() throws {
    let events = try parseRequests(
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        + "5;name=value;quoted=\"a \\\"b\\\"\"\r\nhello\r\n"
        + "6 ; ext\r\n world\r\n0\r\nX-Checksum: abc\r\n\r\n")
    #expect(events.count == 3)
    #expect(events[0].requestHead?.bodyFraming == .chunked)
    #expect(events[1] == .body(bytes("hello world")))
    guard case .end(let trailers?) = events[2] else {
      Issue.record("expected trailers, got \(events[2])")
      return
    }
    #expect(trailers["x-checksum"] == "abc")
  }

  @Test func transferEncodingIsCaseInsensitive() throws {
    let events = try parseRequests(
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ChUnKeD\r\n\r\n1\r\nx\r\n0\r\n\r\n")
    #expect(events[1] == .body(bytes("x")))
  }

  @Test func absoluteFormTargetsBecomeOriginForm() throws {
    func target(_ text: String) throws -> String? { try parseRequests(text).first?.requestHead?.targetString }
    #expect(try target("GET http://example.com/users/7?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n") == "/users/7?x=1")
    #expect(try target("GET HTTPS://example.com:8443/a HTTP/1.1\r\nHost: x\r\n\r\n") == "/a")
    #expect(try target("GET http://example.com HTTP/1.1\r\nHost: x\r\n\r\n") == "/")
  }

  @Test func pipelinedRequestsComeOutInOrder() throws {
    let events = try parseRequests(
      "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"
        + "GET /c HTTP/1.1\r\nHost: a\r\n\r\n")
    let targets = events.compactMap { $0.requestHead?.targetString }
    #expect(targets == ["/a", "/b", "/c"])
    #expect(events.count == 7)
    #expect(events[3] == .body(bytes("hi")))
  }

  @Test func leadingEmptyLinesBeforeRequestAreSkipped() throws {
    let events = try parseRequests("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
    #expect(events.first?.requestHead?.targetString == "/")
  }

  @Test func keepAliveFollowsVersionAndConnectionTokens() throws {
    func keepAlive(_ text: String) throws -> Bool? { try parseRequests(text).first?.requestHead?.keepAlive }
    #expect(try keepAlive("GET / HTTP/1.1\r\nHost: a\r\n\r\n") == true)
    #expect(try keepAlive("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") == false)
    #expect(try keepAlive("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n") == false)
    #expect(try keepAlive("GET / HTTP/1.0\r\n\r\n") == false)
    #expect(try keepAlive("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n") == true)
    #expect(try keepAlive("GET / HTTP/1.0\r\nConnection: Keep-Alive, close\r\n\r\n") == false)
  }

  @Test func expectContinueIsReported() throws {
    let head = try parseRequests(
      "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n"
    ).first?.requestHead
    #expect(head?.expectsContinue == true)
    let plain = try parseRequests("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n").first?.requestHead
    #expect(plain?.expectsContinue == false)
  }

  @Test func requestAfterConnectionCloseIsDiscarded() throws {
    let events = try parseRequests(
      "GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n")
    #expect(events.compactMap { $0.requestHead?.targetString } == ["/a"])
  }

  @Test func requestAfterAnErrorIsNeverParsed() {
    var parser = HTTPRequestParser()
    let bad = bytes("GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n")
    #expect(throws: HTTPParseError.whitespaceBeforeColon) { try parser.parseAll(bad) }
    let good = bytes("GET /b HTTP/1.1\r\nHost: a\r\n\r\n")
    #expect(throws: HTTPParseError.whitespaceBeforeColon) { try parser.parseAll(good) }
    #expect(parser.isClosed)
  }

  @Test func eofInsideAMessageIsReported() throws {
    var parser = HTTPRequestParser()
    _ = try parser.parseAll(bytes("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab"))
    #expect(throws: HTTPParseError.unexpectedEOF) { try parser.finish() }
    var idle = HTTPRequestParser()
    _ = try idle.parseAll(bytes("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
    #expect(try idle.finish() == nil)
    var partialHead = HTTPRequestParser()
    _ = try partialHead.parseAll(bytes("GET / HTTP/1.1\r\nHo"))
    #expect(throws: HTTPParseError.unexpectedEOF) { try partialHead.finish() }
  }

  @Test func headersTooLargeIs431() {
    let limits = HTTPLimits(maxHeaderBytes: 200)
    let big = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "v", count: 300) + "\r\n\r\n"
    let error = requestError(big, limits: limits)
    #expect(error == .headersTooLarge)
    #expect(error?.status == 431)
    // Refused before the head ends: a head that never ends cannot grow without bound.
    #expect(
      requestError("GET / HTTP/1.1\r\nX: " + String(repeating: "v", count: 300), limits: limits) == .headersTooLarge)
  }

  @Test func tooManyHeadersIs431() {
    let limits = HTTPLimits(maxHeaderCount: 3)
    let error = requestError("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", limits: limits)
    #expect(error == .tooManyHeaders)
    #expect(error?.status == 431)
  }

  @Test func requestLineTooLongIs414AndHeaderLineTooLongIs431() {
    let limits = HTTPLimits(maxLineLength: 64)
    let longTarget = "GET /" + String(repeating: "a", count: 100) + " HTTP/1.1\r\nHost: a\r\n\r\n"
    #expect(requestError(longTarget, limits: limits) == .requestLineTooLong)
    #expect(requestError(longTarget, limits: limits)?.status == 414)
    let longHeader = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "b", count: 100) + "\r\n\r\n"
    #expect(requestError(longHeader, limits: limits) == .headersTooLarge)
  }

  @Test func bodyOverTheLimitIs413() {
    let limits = HTTPLimits(maxBodyBytes: 10)
    let declared = requestError("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n", limits: limits)
    #expect(declared == .bodyTooLarge)
    #expect(declared?.status == 413)
    let chunked = requestError(
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nabcdef\r\n0\r\n\r\n",
      limits: limits)
    #expect(chunked == .bodyTooLarge)
  }

  @Test func unsupportedVersionIs505() {
    #expect(requestError("GET / HTTP/2.0\r\nHost: a\r\n\r\n")?.status == 505)
    #expect(requestError("GET / HTTP/1\r\nHost: a\r\n\r\n") == .invalidVersion)
    #expect(requestError("GET / http/1.1\r\nHost: a\r\n\r\n") == .invalidVersion)
  }
}
