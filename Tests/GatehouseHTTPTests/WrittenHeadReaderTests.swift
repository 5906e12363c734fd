import GatehouseHTTP
import Testing

/// `HTTPResponseParser.readWrittenHead`: the quick reading of a head the gateway wrote
/// itself must agree with the strict parser on every head it takes, and leave every other
/// head to it untouched.
@Suite struct WrittenHeadReaderTests {
  struct Read {
    var status: Int?
    var fields: [(name: [UInt8], value: [UInt8])] = []
    var consumed: Int?
  }

  /// Reads `raw` the quick way, then goes on with `parse` over what follows the head.
  func quick(_ raw: [UInt8], parser: inout HTTPResponseParser) -> Read {
    var read = Read()
    let result = raw.withUnsafeBytes { input in
      parser.readWrittenHead(
        input, begin: { read.status = $0 },
        field: { name, value in read.fields.append((Array(name), Array(value))) })
    }
    if let result {
      #expect(result.status == read.status)
      read.consumed = result.consumed
    }
    return read
  }

  @Test func aLengthFramedHeadIsReadAndItsBodyFollows() throws {
    let raw = bytes(
      "HTTP/1.1 200 OK\r\nDate: Wed, 02 Dec 2026 18:30:43 GMT\r\nContent-Type: application/json\r\n"
        + "X-Request-Id: 6bb3384f5aaed6efb207e3d62541776e\r\nContent-Length: 8\r\n\r\n{\"id\":1}")
    var parser = HTTPResponseParser()
    let read = quick(raw, parser: &parser)
    #expect(read.status == 200)
    #expect(
      read.fields.map { String(decoding: $0.name, as: UTF8.self) } == [
        "Date", "Content-Type", "X-Request-Id", "Content-Length",
      ])
    #expect(read.fields[1].value == bytes("application/json"))
    let consumed = try #require(read.consumed)
    #expect(consumed == raw.count - 8)
    let (first, taken) = try raw[consumed...].withUnsafeBytes { try parser.parse(UnsafeRawBufferPointer($0)) }
    #expect(first == .body(0..<8))
    #expect(taken == 8)
    let (last, _) = try [UInt8]().withUnsafeBytes { try parser.parse($0) }
    #expect(last == .end(nil))
  }

  @Test func aChunkedHeadLeavesTheParserDecodingChunks() throws {
    let raw = bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
    var parser = HTTPResponseParser()
    let read = quick(raw, parser: &parser)
    let consumed = try #require(read.consumed)
    #expect(read.fields.count == 1)
    let rest = Array(raw[consumed...])
    let events = try parser.parseAll(rest)
    #expect(events == [.body(3..<6), .end(nil)])
  }

  @Test func anAnswerToHEADHasNoBody() throws {
    var parser = HTTPResponseParser()
    parser.requestWasHEAD = true
    let raw = bytes("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
    let read = quick(raw, parser: &parser)
    #expect(read.consumed == raw.count)
    let (event, _) = try [UInt8]().withUnsafeBytes { try parser.parse($0) }
    #expect(event == .end(nil))
  }

  @Test(arguments: [204, 304])
  func noBodyStatusesEndAtOnce(_ status: Int) throws {
    var parser = HTTPResponseParser()
    let raw = bytes("HTTP/1.1 \(status) X\r\nContent-Length: 10\r\n\r\n")
    #expect(quick(raw, parser: &parser).consumed == raw.count)
    let (event, _) = try [UInt8]().withUnsafeBytes { try parser.parse($0) }
    #expect(event == .end(nil))
  }

  @Test func aHeadWithoutFramingIsReadUntilTheEnd() throws {
    var parser = HTTPResponseParser()
    let raw = bytes("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsome")
    let consumed = try #require(quick(raw, parser: &parser).consumed)
    let (event, _) = try raw[consumed...].withUnsafeBytes { try parser.parse(UnsafeRawBufferPointer($0)) }
    #expect(event == .body(0..<4))
    #expect(try parser.finish() == .end(nil))
  }

  /// Heads the quick reading leaves to the strict parser; after it declines, the parser
  /// reads them as a fresh one does (its state untouched).
  @Test(arguments: [
    "HTTP/1.1 100 Continue\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r",
    "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab",
    "HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\n X-A: 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-A: a\u{1}b\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-A: ab\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 1,1\r\n\r\nx",
    "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
    "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    "HTTP/1.1 2000 OK\r\n\r\n",
    "HTTP/1.1 200\tOK\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 600 X\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\n\u{7F}: 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r",
  ])
  func unusualHeadsAreLeftToTheStrictParser(_ text: String) throws {
    let raw = bytes(text)
    var parser = HTTPResponseParser()
    let read = quick(raw, parser: &parser)
    #expect(read.consumed == nil)
    var fresh = HTTPResponseParser()
    let strict = Result { try fresh.parseAll(raw) }
    let after = Result { try parser.parseAll(raw) }
    #expect(String(describing: after) == String(describing: strict))
  }

  @Test func aParserInsideAMessageDeclines() throws {
    var parser = HTTPResponseParser()
    _ = try parser.parseAll(bytes("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"))
    #expect(quick(bytes("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), parser: &parser).consumed == nil)
  }

  @Test func moreFieldsThanTheLimitAreLeftToTheStrictParser() throws {
    var limits = HTTPLimits()
    limits.maxHeaderCount = 3
    var parser = HTTPResponseParser(limits: limits)
    let raw = bytes("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n")
    #expect(quick(raw, parser: &parser).consumed == nil)
  }

  /// A head past the strict parser's byte or line limits is left to it (which refuses it).
  @Test func headsNearTheSizeLimitsAreLeftToTheStrictParser() throws {
    var limits = HTTPLimits()
    limits.maxHeaderBytes = 200
    limits.maxLineLength = 100
    let long = String(repeating: "a", count: 120)
    let many = (0..<12).map { "X-\($0): 0123456789\r\n" }.joined()
    for text in ["HTTP/1.1 200 OK\r\nX-Long: \(long)\r\n\r\n", "HTTP/1.1 200 OK\r\n\(many)\r\n"] {
      var parser = HTTPResponseParser(limits: limits)
      #expect(quick(bytes(text), parser: &parser).consumed == nil, "\(text)")
      var strict = HTTPResponseParser(limits: limits)
      #expect(throws: HTTPParseError.self) { try strict.parseAll(bytes(text)) }
    }
    // Within them, the same head is read the quick way.
    var parser = HTTPResponseParser()
    #expect(quick(bytes("HTTP/1.1 200 OK\r\n\(many)\r\n"), parser: &parser).consumed != nil)
  }

  /// Random heads of the written form: the quick reading hands over exactly the strict
  /// parser's fields, status, consumed length and body.
  @Test func randomHeadsReadAsTheStrictParserReadsThem() throws {
    var random = SplitMix64(seed: 0x5EED_4EAD)
    let nameBytes = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&'*+^`|~".utf8)
    let valueBytes = Array(" abcXYZ019-_.,;:=/\"()<>@[]{}?\t".utf8) + [0x80, 0xC3, 0xA9, 0xFF]
    for round in 0..<500 {
      let status = [200, 201, 204, 301, 304, 404, 500, 503][Int(random.next() % 8)]
      var text = bytes("HTTP/1.1 \(status) Reason \(round)\r\n")
      for _ in 0..<Int(random.next() % 12) {
        let name = (0..<(1 + Int(random.next() % 20))).map { _ in
          nameBytes[Int(random.next() % UInt64(nameBytes.count))]
        }
        if ASCIIForTests.isFramingName(name) { continue }
        var value = (0..<Int(random.next() % 40)).map { _ in valueBytes[Int(random.next() % UInt64(valueBytes.count))] }
        // Values start and end with a visible byte or are empty, as the writer makes them.
        while let last = value.last, last == 0x20 || last == 0x09 { value.removeLast() }
        while let first = value.first, first == 0x20 || first == 0x09 { value.removeFirst() }
        text += name + bytes(": ") + value + bytes("\r\n")
      }
      let bodyLength = Int(random.next() % 30)
      let bodiless = status == 204 || status == 304
      let chunked = !bodiless && random.next() % 2 == 0
      text += chunked ? bytes("Transfer-Encoding: chunked\r\n") : bytes("Content-Length: \(bodyLength)\r\n")
      text += bytes("\r\n")
      let body = (0..<bodyLength).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ round) }
      if chunked {
        if bodyLength > 0 { text += bytes(String(bodyLength, radix: 16) + "\r\n") + body + bytes("\r\n") }
        text += bytes("0\r\n\r\n")
      } else if !bodiless {
        text += body
      }
      var strictParser = HTTPResponseParser()
      let strict = try strictParser.parseAll(text)
      guard case .head(let head) = strict.first else {
        Issue.record("round \(round): no head")
        continue
      }
      var parser = HTTPResponseParser()
      let read = quick(text, parser: &parser)
      let consumed = try #require(read.consumed, "round \(round)")
      #expect(read.status == head.status)
      #expect(read.fields.count == head.headers.count, "round \(round)")
      for (index, field) in read.fields.enumerated() where index < head.headers.count {
        #expect(field.name == Array(head.headers.nameBytes(at: index)), "round \(round)")
        #expect(field.value == Array(head.headers.valueBytes(at: index)), "round \(round)")
      }
      let rest = try parser.parseAll(Array(text[consumed...]))
      #expect(collectedBody(rest, of: Array(text[consumed...])) == collectedBody(Array(strict.dropFirst()), of: text))
      #expect(rest.last == strict.last, "round \(round)")
    }
  }

  /// The body bytes `events` name; `parseAll` gives them as ranges of what it was given, and
  /// the strict run's ranges are of the whole text.
  func collectedBody(_ events: [HTTPResponseEvent], of input: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    for case .body(let range) in events { out += input[range] }
    return out
  }
}

enum ASCIIForTests {
  static func isFramingName(_ name: [UInt8]) -> Bool {
    let lowered = String(decoding: name, as: UTF8.self).lowercased()
    return lowered == "content-length" || lowered == "transfer-encoding"
  }
}
