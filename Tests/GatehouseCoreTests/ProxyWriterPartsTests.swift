import Testing

@testable import GatehouseCore
@testable import GatehouseHTTP

/// The pieces the head writers are built from: name sets, request id digits, connection options.
@Suite struct ProxyWriterPartsTests {
  @Test func nameSetIgnoresCaseOnlyForLetters() {
    let set = HeaderNameSet(["content-length", "x-a^b", "x_under", "te", String(repeating: "long-", count: 16)])
    for name in [
      "content-length", "Content-Length", "CONTENT-LENGTH", "cOnTeNt-LeNgTh", "TE", "te", "X-A^B", "X_UNDER",
    ] {
      #expect(set.contains(name), "\(name)")
    }
    #expect(set.contains(String(repeating: "LONG-", count: 16)))
    // '^' and '~', '_' and DEL, '-' and CR differ only in the bit that is letter case.
    for name in ["x-a~b", "x\u{7F}under", "content\rlength", "content-lengt", "content-lengthx", "t", "", "tf"] {
      #expect(!set.contains(name), "\(name.debugDescription)")
    }
    #expect(!set.contains(String(repeating: "long-", count: 15) + "long"))
    #expect(HeaderNameSet([]).isEmpty && HeaderNameSet([""]).isEmpty && !set.isEmpty)
  }

  @Test func nameSetMatchesTheSlowComparisonForManyNames() {
    let members = ["connection", "keep-alive", "proxy-authorization", "x-forwarded-for", "a", "ab", "abcdefgh"]
    let set = HeaderNameSet(members)
    var random = SplitMix64(seed: 7)
    let alphabet = Array("aAbBcCdDeEfFgGhH-_^~09kKlLnNoOpPrRtTwWxXyYzZ".utf8)
    for round in 0..<3000 {
      var name: [UInt8]
      if round % 3 == 0 {
        // A member with some letters flipped in case, and maybe one byte changed.
        name = Array(members[Int(random.next() % UInt64(members.count))].utf8)
        for i in name.indices where random.next() % 2 == 0 && name[i] >= 0x61 && name[i] <= 0x7A { name[i] -= 0x20 }
        if random.next() % 2 == 0, !name.isEmpty {
          name[Int(random.next() % UInt64(name.count))] = alphabet[Int(random.next() % UInt64(alphabet.count))]
        }
      } else {
        name = (0..<Int(random.next() % 20)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
      }
      let lowered = String(decoding: name.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
      let expected = members.contains(lowered)
      #expect(name.withUnsafeBufferPointer { set.contains($0) } == expected, "\(lowered)")
    }
  }

  @Test func requestIDDigitsAreTheValuesInHex() {
    var random = SplitMix64(seed: 11)
    for value in [0, 1, 0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210, UInt64.max]
      + (0..<500).map({ _ in random.next() })
    {
      var digits = RequestIDGenerator.hexDigits(of: value)
      let text = withUnsafeBytes(of: &digits) { String(decoding: $0, as: UTF8.self) }
      let reference = String(value, radix: 16)
      #expect(text == String(repeating: "0", count: 16 - reference.count) + reference)
    }
  }

  /// Ids share a random prefix; their counter half is scrambled, so one id does not
  /// tell the next (consecutive ids differ in many bits, not by one).
  @Test func requestIDsShareAPrefixAndDoNotCountVisibly() {
    var source = SplitMix64(seed: 3)
    var generator = RequestIDGenerator(using: &source)
    let ids = (0..<64).map { _ in String(decoding: generator.next(), as: UTF8.self) }
    #expect(Set(ids).count == ids.count)
    #expect(Set(ids.map { $0.prefix(16) }).count == 1)
    let counters = ids.map { UInt64($0.suffix(16), radix: 16)! }
    for (earlier, later) in zip(counters, counters.dropFirst()) {
      #expect(later != earlier &+ 1)
      #expect((earlier ^ later).nonzeroBitCount > 8)
    }
  }

  func parseRequest(_ text: String) throws -> HTTPRequestHead {
    var parser = HTTPRequestParser()
    for event in try parser.parseAll(Array(text.utf8)) {
      if case .head(let head) = event { return head }
    }
    throw HTTPParseError.unexpectedEOF
  }

  @Test func parserTellsWhetherConnectionNamesOtherFields() throws {
    let plain = try parseRequest("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n")
    #expect(!plain.headers.mayListConnectionOptions)
    #expect(!(try parseRequest("GET / HTTP/1.1\r\nHost: h\r\n\r\n")).headers.mayListConnectionOptions)
    #expect(
      !(try parseRequest("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close , ,\r\n\r\n")).headers.mayListConnectionOptions
    )
    let listing = try parseRequest("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: X-Hop\r\n\r\n")
    #expect(listing.headers.mayListConnectionOptions)
    #expect(UpstreamRequestWriter.connectionListedNames(listing.headers)?.contains("x-hop") == true)
    #expect(UpstreamRequestWriter.connectionListedNames(plain.headers) == nil)
    // Fields changed after parsing may name anything: the writers look again.
    var changed = plain.headers
    changed.add(name: "Connection", value: "X-Later")
    #expect(changed.mayListConnectionOptions)
    #expect(UpstreamRequestWriter.connectionListedNames(changed)?.contains("x-later") == true)
  }

  @Test func connectionOptionsOfAnAnswerAreDropped() throws {
    var parser = HTTPResponseParser()
    let events = try parser.parseAll(
      Array("HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\nContent-Length: 0\r\n\r\n".utf8))
    guard case .head(let head) = events[0] else {
      Issue.record("no head")
      return
    }
    var out: [UInt8] = []
    ClientAnswerWriter.write(
      head: head, requestID: Array("r".utf8), framing: .contentLength(0), headContentLength: nil,
      closeConnection: false, into: &out)
    let text = String(decoding: out, as: UTF8.self)
    #expect(text.contains("X-Kept: 2\r\n") && !text.contains("X-Hop"))
  }

  @Test func cursorWritesDecimalsAndPiecesWithinItsBound() {
    var out: [UInt8] = Array("head:".utf8)
    let values: [Int64] = [0, 7, 10, 99, 100, 12345, -1, -10, Int64.max, Int64.min]
    out.appendBytes(upTo: values.count * (ByteCursor.maxDecimalLength + 1) + 8) { cursor in
      for value in values {
        cursor.writeDecimal(value)
        cursor.write(0x2C)
      }
      cursor.write("end")
      cursor.write([UInt8]())
    }
    #expect(String(decoding: out, as: UTF8.self) == "head:" + values.map { "\($0)," }.joined() + "end")
    // Exactly at the bound.
    var exact: [UInt8] = []
    exact.appendBytes(upTo: 3) { cursor in
      cursor.write(Array("abc".utf8)[1...]); cursor.write(0x21)
    }
    #expect(exact == Array("bc!".utf8))
  }
}
