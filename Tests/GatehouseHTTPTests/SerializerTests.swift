import GatehouseHTTP
import Testing

@Suite struct SerializerTests {
  @Test func framingIsChosenInOnePlace() {
    #expect(HTTPSerializer.framing(bodyLength: 12, allowsBody: true, peerVersion: .http1_1) == .contentLength(12))
    #expect(HTTPSerializer.framing(bodyLength: nil, allowsBody: true, peerVersion: .http1_1) == .chunked)
    #expect(HTTPSerializer.framing(bodyLength: nil, allowsBody: true, peerVersion: .http1_0) == .untilClose)
    #expect(HTTPSerializer.framing(bodyLength: 5, allowsBody: false, peerVersion: .http1_1) == HTTPBodyFraming.none)
    #expect(!HTTPSerializer.statusAllowsBody(204))
    #expect(!HTTPSerializer.statusAllowsBody(304))
    #expect(!HTTPSerializer.statusAllowsBody(100))
    #expect(HTTPSerializer.statusAllowsBody(200))
  }

  @Test func writesResponseHeadWithItsOwnFramingField() throws {
    var out: [UInt8] = []
    let headers = HTTPHeaders([("Content-Type", "application/json"), ("Content-Length", "999"), ("X-A", "b")])
    try HTTPSerializer.writeResponseHead(status: 200, headers: headers, framing: .contentLength(2), into: &out)
    #expect(
      String(decoding: out, as: UTF8.self)
        == "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-A: b\r\nContent-Length: 2\r\n\r\n")
    out.removeAll()
    try HTTPSerializer.writeResponseHead(status: 502, headers: HTTPHeaders(), framing: .chunked, into: &out)
    #expect(String(decoding: out, as: UTF8.self) == "HTTP/1.1 502 Bad Gateway\r\nTransfer-Encoding: chunked\r\n\r\n")
  }

  @Test func answerToHEADCarriesTheLength() throws {
    var out: [UInt8] = []
    try HTTPSerializer.writeResponseHead(
      status: 200, headers: HTTPHeaders(), framing: .none, headContentLength: 42, into: &out)
    #expect(String(decoding: out, as: UTF8.self) == "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n")
  }

  @Test(arguments: ["a\rb", "a\nb", "a\u{0}b", "a\r\nInjected: yes"])
  func refusesValuesThatWouldBreakTheHead(_ value: String) {
    var out: [UInt8] = []
    let headers = HTTPHeaders([("X-Token", value)])
    #expect(throws: HTTPSerializer.Error.self) {
      try HTTPSerializer.writeRequestHead(
        method: .get, target: ArraySlice("/".utf8), headers: headers, framing: .none, into: &out)
    }
    #expect(throws: HTTPSerializer.Error.self) {
      try HTTPSerializer.writeResponseHead(status: 200, headers: headers, framing: .none, into: &out)
    }
  }

  @Test(arguments: ["Bad Name", "X\r\nY", "", "Nul\u{0}"])
  func refusesBadNames(_ name: String) {
    var out: [UInt8] = []
    #expect(throws: HTTPSerializer.Error.self) {
      try HTTPSerializer.writeRequestHead(
        method: .get, target: ArraySlice("/".utf8), headers: HTTPHeaders([(name, "v")]), framing: .none, into: &out)
    }
  }

  @Test func chunkFramingRoundTripsThroughTheParser() throws {
    var out: [UInt8] = []
    try HTTPSerializer.writeRequestHead(
      method: .post, target: ArraySlice("/u?q=1".utf8), headers: HTTPHeaders([("Host", "h")]), framing: .chunked,
      into: &out)
    for piece in ["hello", String(repeating: "x", count: 300)] {
      HTTPSerializer.writeChunkHeader(size: piece.utf8.count, into: &out)
      out.append(contentsOf: piece.utf8)
      HTTPSerializer.writeChunkTrailer(into: &out)
    }
    HTTPSerializer.writeLastChunk(into: &out)
    let events = try parseRequests(pieces: [out])
    #expect(events[0].requestHead?.bodyFraming == .chunked)
    #expect(events[1] == .body(bytes("hello" + String(repeating: "x", count: 300))))
    #expect(events[2] == .end(nil))
  }

  @Test func decimalAndHexDigits() {
    for value: Int64 in [0, 7, 10, 99, 12345, Int64.max] {
      var out: [UInt8] = []
      HTTPSerializer.appendDecimal(value, to: &out)
      #expect(String(decoding: out, as: UTF8.self) == String(value))
    }
    var out: [UInt8] = []
    HTTPSerializer.writeChunkHeader(size: 0x1a2b, into: &out)
    #expect(String(decoding: out, as: UTF8.self) == "1a2b\r\n")
  }

  /// serialize → parse gives back what was serialized, for a spread of heads.
  @Test func requestHeadsRoundTrip() throws {
    let methods: [HTTPMethod] = [.get, .post, .put, .delete, .patch, .other("PURGE")]
    var generator = SplitMix64(seed: 7)
    for round in 0..<200 {
      let method = methods[round % methods.count]
      var pairs: [(String, String)] = [("Host", "h\(round)")]
      for n in 0..<Int(generator.next() % 12) {
        let value = String(
          (0..<Int(generator.next() % 20)).map { _ in
            Character(UnicodeScalar(UInt8(0x21 + generator.next() % 94)))
          })
        pairs.append(("X-Field-\(n)", value))
      }
      let headers = HTTPHeaders(pairs)
      let length = Int64(generator.next() % 50)
      var out: [UInt8] = []
      let target = "/r/\(round)?n=\(generator.next() % 1000)"
      try HTTPSerializer.writeRequestHead(
        method: method, target: ArraySlice(target.utf8), headers: headers, framing: .contentLength(length), into: &out)
      out.append(contentsOf: [UInt8](repeating: 0x61, count: Int(length)))
      let events = try parseRequests(pieces: [out])
      let head = try #require(events.first?.requestHead)
      #expect(head.method == method)
      #expect(head.targetString == target)
      #expect(head.bodyFraming == .contentLength(length))
      #expect(head.headers.pairs.dropLast().map { "\($0.name): \($0.value)" } == pairs.map { "\($0.0): \($0.1)" })
    }
  }

  /// Every registered status has its own phrase (an envelope's `message` falls back to it
  /// when the backend names none); unregistered ones get their class's name.
  @Test func registeredStatusesHaveTheirOwnReasonPhrase() {
    let registered = [
      100, 101, 102, 103, 200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 307, 308,
      400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 418, 421, 422, 423,
      424, 425, 426, 428, 429, 431, 451, 500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511,
    ]
    let classNames: Set = ["Informational", "Success", "Redirection", "Client Error", "Server Error"]
    for status in registered {
      #expect(!classNames.contains(HTTPStatusPhrase.reason(for: status)), "\(status)")
    }
    #expect(HTTPStatusPhrase.reason(for: 410) == "Gone")
    #expect(HTTPStatusPhrase.reason(for: 418) == "I'm a teapot")
    #expect(HTTPStatusPhrase.reason(for: 299) == "Success")
    #expect(HTTPStatusPhrase.reason(for: 499) == "Client Error")
    #expect(HTTPStatusPhrase.reason(for: 599) == "Server Error")
  }

  @Test func responseHeadsRoundTrip() throws {
    for status in [200, 201, 301, 404, 418, 500, 503] {
      var out: [UInt8] = []
      try HTTPSerializer.writeResponseHead(
        status: status, headers: HTTPHeaders([("A", "1"), ("b", "two words")]), framing: .contentLength(3),
        into: &out)
      out.append(contentsOf: bytes("abc"))
      let events = try parseResponses(pieces: [out])
      let head = try #require(events.first?.responseHead)
      #expect(head.status == status)
      #expect(head.reasonString == HTTPStatusPhrase.reason(for: status))
      #expect(head.headers["B"] == "two words")
      #expect(events[1] == .body(bytes("abc")))
    }
  }
}
