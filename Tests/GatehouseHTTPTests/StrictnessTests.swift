import GatehouseHTTP
import Testing

/// One malformed or ambiguous request and the statuses it may be refused with.
struct RejectedRequest: CustomTestStringConvertible, Sendable {
  let name: String
  let raw: [UInt8]
  let statuses: Set<Int>
  var testDescription: String { name }

  init(_ name: String, _ raw: String, _ statuses: Set<Int> = [400]) {
    self.name = name
    self.raw = Array(raw.utf8)
    self.statuses = statuses
  }

  init(_ name: String, bytes raw: [UInt8], _ statuses: Set<Int> = [400]) {
    self.name = name
    self.raw = raw
    self.statuses = statuses
  }
}

private let post = "POST / HTTP/1.1\r\nHost: a\r\n"
private let chunkedPost = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"

/// Every request-smuggling and strictness case the parser must refuse. Each is its own
/// test case, so a regression names the case.
let rejectedRequests: [RejectedRequest] = [
  // Content-Length and Transfer-Encoding together or repeated.
  .init("CL and TE together", post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
  .init("TE and CL together", post + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
  .init("two different CLs", post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello"),
  .init("same CL twice", post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
  .init("CL list 5, 5", post + "Content-Length: 5, 5\r\n\r\nhello"),
  .init("empty CL", post + "Content-Length: \r\n\r\n"),
  .init("CL +5", post + "Content-Length: +5\r\n\r\nhello"),
  .init("CL -1", post + "Content-Length: -1\r\n\r\n"),
  .init("CL 0x10", post + "Content-Length: 0x10\r\n\r\n"),
  .init("CL 1_0", post + "Content-Length: 1_0\r\n\r\n"),
  .init("CL 1Z", post + "Content-Length: 1Z\r\n\r\n"),
  .init("CL ' 5 5'", post + "Content-Length:  5 5\r\n\r\n"),
  .init("CL over 2^63", post + "Content-Length: 9223372036854775808\r\n\r\n"),
  .init("CL far over 2^64", post + "Content-Length: 184467440737095516160\r\n\r\n"),
  .init(
    "chunked twice in two fields", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init("chunked twice in one list", post + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE ,chunked", post + "Transfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n"),
  .init("TE chunked,", post + "Transfer-Encoding: chunked,\r\n\r\n0\r\n\r\n"),
  .init("TE chunked, identity", post + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE quoted chunked", post + "Transfer-Encoding: \"chunked\"\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE chunk", post + "Transfer-Encoding: chunk\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE xchunked", post + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE gzip, chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", [501]),
  .init("TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  // Desync disguises of the Transfer-Encoding field itself.
  .init("TE with space before colon", post + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
  .init("TE with tab before colon", post + "Transfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n"),
  .init("TE with vertical tab in value", post + "Transfer-Encoding: \u{0B}chunked\r\n\r\n0\r\n\r\n"),
  .init("TE with form feed after value", post + "Transfer-Encoding: chunked\u{0C}\r\n\r\n0\r\n\r\n"),
  .init("TE with control byte in name", post + "Transfer\u{01}Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init("TE name after a leading space", post + " Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  // Header syntax.
  .init("whitespace before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n"),
  .init("obs-fold line", "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n two\r\n\r\n"),
  .init("obs-fold carrying TE", post + "X: y\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init("obs-fold with tab", post + "X: y\r\n\tTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init("bare CR in request line", "GET /\r HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("bare CR ending request line", "GET / HTTP/1.1\rHost: a\r\n\r\n"),
  .init("bare CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n"),
  .init("bare CR in name", "GET / HTTP/1.1\r\nHost: a\r\nX\rY: a\r\n\r\n"),
  .init("bare CR before line end", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\r\n\r\n"),
  .init("bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n"),
  .init("bare LF after one header", "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n"),
  .init("bare LF ending the head", "GET / HTTP/1.1\r\nHost: a\r\n\n"),
  .init("NUL in value", bytes: Array("GET / HTTP/1.1\r\nHost: a\r\nX: a".utf8) + [0] + Array("b\r\n\r\n".utf8)),
  .init("control byte 0x01 in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\u{01}b\r\n\r\n"),
  .init("DEL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\u{7F}b\r\n\r\n"),
  .init("escape in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\u{1B}b\r\n\r\n"),
  .init("NUL in name", bytes: Array("GET / HTTP/1.1\r\nHost: a\r\nX".utf8) + [0] + Array("Y: b\r\n\r\n".utf8)),
  .init("bad byte in name", "GET / HTTP/1.1\r\nHost: a\r\nX@Y: b\r\n\r\n"),
  .init(
    "non-ASCII byte in name",
    bytes: Array("GET / HTTP/1.1\r\nHost: a\r\nX".utf8) + [0xC3, 0xA9] + Array(": b\r\n\r\n".utf8)),
  .init("empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n"),
  .init("line with no colon", "GET / HTTP/1.1\r\nHost: a\r\nNoColonHere\r\n\r\n"),
  .init("two Host headers", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
  .init("no Host in HTTP/1.1", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
  .init("space in Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
  // Request line.
  .init("lowercase http version", "GET / http/1.1\r\nHost: a\r\n\r\n"),
  .init("two spaces after method", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("missing target", "GET HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("control byte in target", "GET /a\u{01}b HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("non-ASCII in target", bytes: Array("GET /".utf8) + [0xFF] + Array(" HTTP/1.1\r\nHost: a\r\n\r\n".utf8)),
  .init("bad byte in method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("target without a leading slash", "GET users/7 HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("fragment in target", "GET /users/7#top HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("asterisk target on GET", "GET * HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("absolute form of another scheme", "GET ftp://host/a HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("absolute form without a host", "GET http:///a HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("bare LF before request line", "\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
  // Chunk framing.
  .init("chunk size 0x1", chunkedPost + "0x1\r\na\r\n0\r\n\r\n"),
  .init("chunk size +1", chunkedPost + "+1\r\na\r\n0\r\n\r\n"),
  .init("chunk size -0", chunkedPost + "-0\r\n\r\n"),
  .init("chunk size with leading space", chunkedPost + " 1\r\na\r\n0\r\n\r\n"),
  .init("chunk size 1_0", chunkedPost + "1_0\r\n0123456789abcdef\r\n0\r\n\r\n"),
  .init("chunk size with trailing junk", chunkedPost + "1x\r\na\r\n0\r\n\r\n"),
  .init("chunk size with trailing space", chunkedPost + "1 \r\na\r\n0\r\n\r\n"),
  .init("empty chunk size", chunkedPost + "\r\na\r\n0\r\n\r\n"),
  .init("chunk size overflow", chunkedPost + "FFFFFFFFFFFFFFFF0\r\na\r\n0\r\n\r\n"),
  .init("chunk size 2^64", chunkedPost + "10000000000000000\r\na\r\n0\r\n\r\n"),
  .init("chunk line ended by bare LF", chunkedPost + "1\na\r\n0\r\n\r\n"),
  .init("chunk line with bare CR", chunkedPost + "1\ra\r\n0\r\n\r\n"),
  .init("last chunk ended by bare LF", chunkedPost + "0\n\r\n"),
  .init("chunk extension with control byte", chunkedPost + "1;a=\u{01}b\r\na\r\n0\r\n\r\n"),
  .init("chunk extension with NUL", bytes: Array((chunkedPost + "1;a").utf8) + [0] + Array("\r\na\r\n0\r\n\r\n".utf8)),
  .init(
    "chunk extension over 1 KiB", chunkedPost + "1;a=" + String(repeating: "b", count: 1100) + "\r\na\r\n0\r\n\r\n"),
  .init("chunk extension without name", chunkedPost + "1;=b\r\na\r\n0\r\n\r\n"),
  .init("whitespace after a chunk extension name", chunkedPost + "1;a \r\nx\r\n0\r\n\r\n"),
  .init("whitespace after a chunk extension value", chunkedPost + "1;a=b\t\r\nx\r\n0\r\n\r\n"),
  .init(
    "chunk size line longer than the limit", chunkedPost + String(repeating: "0", count: 1100) + "1\r\nx\r\n0\r\n\r\n"),
  .init("chunk extension with open quote", chunkedPost + "1;a=\"b\r\na\r\n0\r\n\r\n"),
  .init("chunk data longer than declared", chunkedPost + "1\r\nab\r\n0\r\n\r\n"),
  .init("chunk data without CRLF", chunkedPost + "1\r\naX0\r\n\r\n"),
  .init("chunk data with bare LF", chunkedPost + "1\r\na\n0\r\n\r\n"),
  .init("Content-Length in trailers", chunkedPost + "0\r\nContent-Length: 5\r\n\r\n"),
  .init("Transfer-Encoding in trailers", chunkedPost + "0\r\nTransfer-Encoding: chunked\r\n\r\n"),
  .init("Host in trailers", chunkedPost + "0\r\nHost: evil\r\n\r\n"),
  .init("Authorization in trailers", chunkedPost + "0\r\nAuthorization: Bearer x\r\n\r\n"),
  .init("bad syntax in trailers", chunkedPost + "0\r\nX : y\r\n\r\n"),
]

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
