import GatehouseHTTP
import Testing

private let post = "POST / HTTP/1.1\r\nHost: a\r\n"
private let chunkedPost = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"

@Suite struct StrictnessTests {
  @Test(arguments: rejectedRequests)
  func refuses(_ request: RejectedRequest) {
    let error = requestError(request.raw)
    #expect(error != nil, "accepted: \(request.name)")
    if let error { #expect(request.statuses.contains(error.status), "\(request.name): \(error) → \(error.status)") }
  }

  /// The same refusals hold when the bytes arrive one at a time.
  @Test(arguments: rejectedRequests)
  func refusesByteByByte(_ request: RejectedRequest) {
    var parser = HTTPRequestParser()
    var failure: HTTPParseError?
    for byte in request.raw {
      do {
        _ = try parser.parseAll([byte])
      } catch {
        failure = error
        break
      }
    }
    #expect(failure == requestError(request.raw), "\(request.name)")
  }

  /// A first byte that cannot start a method (a TLS ClientHello sent to a plain port) is
  /// refused as it arrives, not when a line end comes (which may be never).
  @Test func aRequestThatCannotStartWithAMethodIsRefusedAtItsFirstByte() {
    for first: UInt8 in [0x16, 0x00, 0x80, 0x20, 0x7B] {
      var parser = HTTPRequestParser()
      #expect(throws: HTTPParseError.invalidMethod) { _ = try parser.parseAll([first, 0x03, 0x01, 0x02, 0x00]) }
    }
    var leading = HTTPRequestParser()
    #expect(throws: Never.self) { _ = try leading.parseAll(Array("\r\n\r\nGE".utf8)) }
    var afterEmptyLine = HTTPRequestParser()
    #expect(throws: HTTPParseError.invalidMethod) { _ = try afterEmptyLine.parseAll(Array("\r\n\u{16}\u{3}".utf8)) }
  }

  @Test func specificErrorsForTheClassicCases() {
    #expect(
      requestError(post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")
        == .contentLengthWithTransferEncoding)
    #expect(requestError(post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n") == .duplicateContentLength)
    #expect(
      requestError(post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")
        == .duplicateTransferEncoding)
    #expect(requestError("GET / HTTP/1.1\r\nHost : a\r\n\r\n") == .whitespaceBeforeColon)
    #expect(requestError("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n") == .obsoleteLineFolding)
    #expect(requestError("GET / HTTP/1.1\nHost: a\n\n") == .bareLF)
    #expect(requestError("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n") == .bareCR)
    #expect(requestError("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n") == .missingColon)
    #expect(requestError("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") == .duplicateHost)
    #expect(requestError(chunkedPost + "FFFFFFFFFFFFFFFF0\r\n") == .chunkSizeOverflow)
    #expect(requestError(chunkedPost + "1\r\nab\r\n") == .missingChunkCRLF)
    #expect(requestError(chunkedPost + "0\r\nHost: x\r\n\r\n") == .forbiddenTrailer)
    #expect(requestError(chunkedPost + "1;a=" + String(repeating: "b", count: 1100) + "\r\n") == .chunkExtensionTooLong)
  }

  /// Allowed trailers do not leak into the head's fields.
  @Test func trailersAreNeverMergedIntoHeaders() throws {
    let events = try parseRequests(chunkedPost + "1\r\na\r\n0\r\nX-Trace: t\r\n\r\n")
    let head = try #require(events.first?.requestHead)
    #expect(head.headers["x-trace"] == nil)
    #expect(events.last == .end(HTTPHeaders([("X-Trace", "t")])))
  }
}
