// The strictness cases, shared: the parser's unit tests (Tests/GatehouseHTTPTests/) refuse
// each one, and the gateway's end-to-end tests (Tests/GatehouseIntegrationTests/) send each to
// the whole gateway. Test targets cannot import each other, so this file is also compiled
// into the integration tests, through a symlink there.

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

private let rejectedPost = "POST / HTTP/1.1\r\nHost: a\r\n"
private let rejectedChunkedPost = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"

/// Every request-smuggling and strictness case the parser must refuse. Each is its own
/// test case, so a regression names the case.
let rejectedRequests: [RejectedRequest] = [
  // Content-Length and Transfer-Encoding together or repeated.
  .init("CL and TE together", rejectedPost + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
  .init("TE and CL together", rejectedPost + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
  .init("two different CLs", rejectedPost + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello"),
  .init("same CL twice", rejectedPost + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
  .init("CL list 5, 5", rejectedPost + "Content-Length: 5, 5\r\n\r\nhello"),
  .init("empty CL", rejectedPost + "Content-Length: \r\n\r\n"),
  .init("CL +5", rejectedPost + "Content-Length: +5\r\n\r\nhello"),
  .init("CL -1", rejectedPost + "Content-Length: -1\r\n\r\n"),
  .init("CL 0x10", rejectedPost + "Content-Length: 0x10\r\n\r\n"),
  .init("CL 1_0", rejectedPost + "Content-Length: 1_0\r\n\r\n"),
  .init("CL 1Z", rejectedPost + "Content-Length: 1Z\r\n\r\n"),
  .init("CL ' 5 5'", rejectedPost + "Content-Length:  5 5\r\n\r\n"),
  .init("CL over 2^63", rejectedPost + "Content-Length: 9223372036854775808\r\n\r\n"),
  .init("CL far over 2^64", rejectedPost + "Content-Length: 184467440737095516160\r\n\r\n"),
  .init(
    "chunked twice in two fields",
    rejectedPost + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init(
    "chunked twice in one list", rejectedPost + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE ,chunked", rejectedPost + "Transfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n"),
  .init("TE chunked,", rejectedPost + "Transfer-Encoding: chunked,\r\n\r\n0\r\n\r\n"),
  .init("TE chunked, identity", rejectedPost + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE quoted chunked", rejectedPost + "Transfer-Encoding: \"chunked\"\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE chunk", rejectedPost + "Transfer-Encoding: chunk\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE xchunked", rejectedPost + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", [400, 501]),
  .init("TE gzip, chunked", rejectedPost + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", [501]),
  .init("TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  // Desync disguises of the Transfer-Encoding field itself.
  .init("TE with space before colon", rejectedPost + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
  .init("TE with tab before colon", rejectedPost + "Transfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n"),
  .init("TE with vertical tab in value", rejectedPost + "Transfer-Encoding: \u{0B}chunked\r\n\r\n0\r\n\r\n"),
  .init("TE with form feed after value", rejectedPost + "Transfer-Encoding: chunked\u{0C}\r\n\r\n0\r\n\r\n"),
  .init("TE with control byte in name", rejectedPost + "Transfer\u{01}Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init("TE name after a leading space", rejectedPost + " Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  // Header syntax.
  .init("whitespace before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n"),
  .init("obs-fold line", "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n two\r\n\r\n"),
  .init("obs-fold carrying TE", rejectedPost + "X: y\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  .init("obs-fold with tab", rejectedPost + "X: y\r\n\tTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
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
  // Request targets that would reach a path no route allowed, or are not paths at all.
  .init("dot-dot segments", "GET /p/../../admin/secret HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("dot segment", "GET /a/./b HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("trailing dot-dot", "GET /users/.. HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("encoded dot-dot", "GET /users/%2e%2e HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("mixed encoded dot-dot", "GET /a/.%2E/b HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("dot-dot with a path parameter", "GET /a/..;x/b HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("dot-dot before an encoded slash", "GET /a/..%2Fb HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("dot-dot in absolute form", "GET http://a/x/../y HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("dot-dot before an encoded semicolon", "GET /a/..%3B/admin HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("dot-dot before an encoded NUL", "GET /a/..%00/admin HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("overlong UTF-8 dot-dot", "GET /a/%c0%ae%c0%ae/admin HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("encoded NUL in the path", "GET /a%00.json HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("CONNECT authority form", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", [501]),
  .init("CONNECT with a path", "CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", [501]),
  .init("TRACE", "TRACE /x HTTP/1.1\r\nHost: a\r\n\r\n", [501]),
  .init("OPTIONS asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("quote in path", "GET /a\"b HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("backslash in path", "GET /a\\..\\b HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("brace in path", "GET /a{b} HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("angle bracket in path", "GET /<script> HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("percent without hex digits", "GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n"),
  .init("user info in absolute form", "GET http://u:p@a/x HTTP/1.1\r\nHost: a\r\n\r\n"),
  // Chunk framing.
  .init("chunk size 0x1", rejectedChunkedPost + "0x1\r\na\r\n0\r\n\r\n"),
  .init("chunk size +1", rejectedChunkedPost + "+1\r\na\r\n0\r\n\r\n"),
  .init("chunk size -0", rejectedChunkedPost + "-0\r\n\r\n"),
  .init("chunk size with leading space", rejectedChunkedPost + " 1\r\na\r\n0\r\n\r\n"),
  .init("chunk size 1_0", rejectedChunkedPost + "1_0\r\n0123456789abcdef\r\n0\r\n\r\n"),
  .init("chunk size with trailing junk", rejectedChunkedPost + "1x\r\na\r\n0\r\n\r\n"),
  .init("chunk size with trailing space", rejectedChunkedPost + "1 \r\na\r\n0\r\n\r\n"),
  .init("empty chunk size", rejectedChunkedPost + "\r\na\r\n0\r\n\r\n"),
  .init("chunk size overflow", rejectedChunkedPost + "FFFFFFFFFFFFFFFF0\r\na\r\n0\r\n\r\n"),
  .init("chunk size 2^64", rejectedChunkedPost + "10000000000000000\r\na\r\n0\r\n\r\n"),
  .init("chunk line ended by bare LF", rejectedChunkedPost + "1\na\r\n0\r\n\r\n"),
  .init("chunk line with bare CR", rejectedChunkedPost + "1\ra\r\n0\r\n\r\n"),
  .init("last chunk ended by bare LF", rejectedChunkedPost + "0\n\r\n"),
  .init("chunk extension with control byte", rejectedChunkedPost + "1;a=\u{01}b\r\na\r\n0\r\n\r\n"),
  .init(
    "chunk extension with NUL",
    bytes: Array((rejectedChunkedPost + "1;a").utf8) + [0] + Array("\r\na\r\n0\r\n\r\n".utf8)),
  .init(
    "chunk extension over 1 KiB",
    rejectedChunkedPost + "1;a=" + String(repeating: "b", count: 1100) + "\r\na\r\n0\r\n\r\n"),
  .init("chunk extension without name", rejectedChunkedPost + "1;=b\r\na\r\n0\r\n\r\n"),
  .init("whitespace after a chunk extension name", rejectedChunkedPost + "1;a \r\nx\r\n0\r\n\r\n"),
  .init("whitespace after a chunk extension value", rejectedChunkedPost + "1;a=b\t\r\nx\r\n0\r\n\r\n"),
  .init(
    "chunk size line longer than the limit",
    rejectedChunkedPost + String(repeating: "0", count: 1100) + "1\r\nx\r\n0\r\n\r\n"),
  .init("chunk extension with open quote", rejectedChunkedPost + "1;a=\"b\r\na\r\n0\r\n\r\n"),
  .init("chunk data longer than declared", rejectedChunkedPost + "1\r\nab\r\n0\r\n\r\n"),
  .init("chunk data without CRLF", rejectedChunkedPost + "1\r\naX0\r\n\r\n"),
  .init("chunk data with bare LF", rejectedChunkedPost + "1\r\na\n0\r\n\r\n"),
  .init("Content-Length in trailers", rejectedChunkedPost + "0\r\nContent-Length: 5\r\n\r\n"),
  .init("Transfer-Encoding in trailers", rejectedChunkedPost + "0\r\nTransfer-Encoding: chunked\r\n\r\n"),
  .init("Host in trailers", rejectedChunkedPost + "0\r\nHost: evil\r\n\r\n"),
  .init("Authorization in trailers", rejectedChunkedPost + "0\r\nAuthorization: Bearer x\r\n\r\n"),
  .init("bad syntax in trailers", rejectedChunkedPost + "0\r\nX : y\r\n\r\n"),
]
