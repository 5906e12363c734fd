import Testing

@testable import GatehouseCore

/// A secret in a streamed body is masked however the reads split it, and the body keeps
/// its length and every other byte.
@Suite struct StreamingSecretMaskerTests {
  static func run(_ body: [UInt8], secrets: [[UInt8]], cuts: [Int]) -> [UInt8] {
    var masker = StreamingSecretMasker(secrets: secrets.map(SecretSpellings.init))!
    var out: [UInt8] = []
    var start = 0
    for cut in cuts + [body.count] where cut >= start {
      let piece = Array(body[start..<cut])
      out += piece.withUnsafeBytes { masker.process($0) }
      start = cut
    }
    return out + masker.finish()
  }

  @Test func everyOccurrenceIsMaskedWhereverTheReadsSplitIt() {
    let secret = Array("tok/SECRET+42".utf8)
    let forms = [secret, Array("tok%2FSECRET%2B42".utf8)]
    let body = Array(
      #"{"message":"token tok/SECRET+42 refused","url":"/x?t=tok%2FSECRET%2B42","again":"tok/SECRET+42"}"#.utf8)
    var expected = body
    for form in forms {
      var index = 0
      while index + form.count <= expected.count {
        if Array(expected[index..<(index + form.count)]) == form {
          for position in index..<(index + form.count) { expected[position] = 0x2A }
          index += form.count
        } else {
          index += 1
        }
      }
    }
    #expect(expected != body)
    for first in stride(from: 0, through: body.count, by: 3) {
      for second in stride(from: first, through: body.count, by: 7) {
        let out = Self.run(body, secrets: [secret], cuts: [first, second])
        #expect(out == expected, "cuts \(first) \(second)")
      }
    }
    let onePerByte = Self.run(body, secrets: [secret], cuts: Array(1..<body.count))
    #expect(onePerByte == expected)
  }

  /// A backend may echo the token with JSON `\u` escapes (either case of hex digits), `\/`,
  /// or percent-encoding in any case, even mixed within one occurrence: every spelling is
  /// masked whole, byte for byte, wherever the reads split it.
  @Test func escapedSpellingsAreMaskedWhereverTheReadsSplitThem() {
    let secret = Array("tok/SECRET+42".utf8)
    let spellings = [
      #"tok\u002FSECRET\u002B42"#, #"tok\u002fSECRET\u002b42"#, #"tok\/SECRET\u002B42"#, "tok%2fSECRET%2b42",
      "tok%2FSECRET%2b42", "tok%2fSECRET+42", #"tok\u002FSECRET%2B42"#, "%74ok/SECRET+42",
    ]
    var body: [UInt8] = Array(#"{"a":""#.utf8)
    var expected = body
    for spelling in spellings {
      body += Array(spelling.utf8) + Array(#"",""#.utf8)
      expected += Array(repeating: 0x2A, count: spelling.utf8.count) + Array(#"",""#.utf8)
    }
    body += Array(#"tok%2"}"#.utf8)
    expected += Array(#"tok%2"}"#.utf8)
    for first in stride(from: 0, through: body.count, by: 5) {
      for second in stride(from: first, through: body.count, by: 11) {
        let out = Self.run(body, secrets: [secret], cuts: [first, second])
        #expect(out == expected, "cuts \(first) \(second)")
      }
    }
    #expect(Self.run(body, secrets: [secret], cuts: Array(1..<body.count)) == expected)
  }

  @Test func aBodyWithoutTheSecretPassesUnchanged() {
    let body = Array("tok/SECRE tok/SECRET-no tok".utf8)
    #expect(Self.run(body, secrets: [Array("tok/SECRET+42".utf8)], cuts: [5, 13]) == body)
  }

  @Test func secretsTooShortToLookForMakeNoMasker() {
    #expect(StreamingSecretMasker(secrets: [SecretSpellings(Array("abc".utf8))]) == nil)
  }
}
