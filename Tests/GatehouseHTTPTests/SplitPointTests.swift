import GatehouseHTTP
import Testing

/// The same bytes must parse the same however they are cut: at every byte boundary into two
/// pieces, and into pieces of one byte.
@Suite struct SplitPointTests {
  static let requests: [String] = [
    "GET /a?b=c HTTP/1.1\r\nHost: example\r\nAccept: */*\r\nUser-Agent: test/1.0\r\n\r\n",
    "\r\nPOST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world",
    "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Sum: 1\r\n\r\n",
    "PUT /d HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: h\r\n\r\n",
    "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /y HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
  ]

  static let responses: [String] = [
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"a\":[1,2,3]}",
    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n",
    "HTTP/1.1 204 No Content\r\nX: y\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
  ]

  @Test(arguments: requests)
  func requestSplitAtEveryBoundary(_ text: String) throws {
    let raw = bytes(text)
    let whole = try parseRequests(pieces: [raw])
    #expect(!whole.isEmpty)
    for split in 0...raw.count {
      let pieces = [Array(raw[..<split]), Array(raw[split...])]
      #expect(try parseRequests(pieces: pieces) == whole, "split at \(split)")
    }
    #expect(try parseRequests(pieces: raw.map { [$0] }) == whole)
  }

  @Test(arguments: responses)
  func responseSplitAtEveryBoundary(_ text: String) throws {
    let raw = bytes(text)
    let whole = try parseResponses(pieces: [raw])
    #expect(!whole.isEmpty)
    for split in 0...raw.count {
      let pieces = [Array(raw[..<split]), Array(raw[split...])]
      #expect(try parseResponses(pieces: pieces) == whole, "split at \(split)")
    }
    #expect(try parseResponses(pieces: raw.map { [$0] }) == whole)
  }

  /// A line exactly at the length limit is accepted however the stream is cut, also
  /// between its CR and LF.
  @Test func lineAtTheLimitIsAcceptedAtEverySplit() throws {
    let limits = HTTPLimits(maxLineLength: 128)
    let line = "GET /" + String(repeating: "a", count: 114) + " HTTP/1.1"
    #expect(line.utf8.count == 128)
    let raw = bytes(line + "\r\nHost: a\r\n\r\n")
    let whole = try parseRequests(pieces: [raw], limits: limits)
    for split in 0...raw.count {
      #expect(try parseRequests(pieces: [Array(raw[..<split]), Array(raw[split...])], limits: limits) == whole)
    }
  }

  /// Three-way splits of the chunked request, to cut size lines and trailers twice.
  @Test func chunkedRequestSplitThreeWays() throws {
    let raw = bytes(Self.requests[2])
    let whole = try parseRequests(pieces: [raw])
    let start = raw.count - 60
    for a in start..<raw.count {
      for b in a...raw.count {
        let pieces = [Array(raw[..<a]), Array(raw[a..<b]), Array(raw[b...])]
        #expect(try parseRequests(pieces: pieces) == whole, "split at \(a), \(b)")
      }
    }
  }
}
