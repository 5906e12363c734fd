import Testing

@testable import GatehouseJSON

/// Compares `JSONParser` with the parser it replaced on many documents, valid and not: the
/// value, or the error's offset, reason and printed text, must be the same.
@Suite struct JSONParserDifferentialTests {
  static let documents: [[UInt8]] = {
    var documents: [[UInt8]] = handWritten.map { Array($0.utf8) } + rawDocuments
    for input in SavedFuzzInput.all(targets: ["json", "config"], in: "corpus")
      + SavedFuzzInput.all(targets: ["json", "config"], in: "crashes")
    {
      if let bytes = try? input.bytes() { documents.append(bytes) }
    }
    return documents
  }()

  static let handWritten: [String] = [
    "", " ", "1", "-0", "-0.0", "0", "-1", "01", "-01", "00", "+1", "1.", ".5", "1e", "1e+", "1e-", "1E5", "1e999",
    "-1e999", "1e-999", "1.5e3", "123456789012345678901234567890", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "9007199254740993", "0.1", "1.0", "2.5E-3", "-", "-a", "1.x",
    "1ex", "1e+x", "0x10", "NaN", "Infinity", "-Infinity", "true", "false", "null", "tru", "trux", "nul", "nulx",
    "fals", "falsy", "truex", "[truex]", "t", "[t]", "[tr", "\"\"", "\"abc\"", "\"abc", "\"\\", "\"\\x\"", "\"\\u\"",
    "\"\\u12\"", "\"\\u12", "\"\\u00e9\"", "\"\\u00E9\"", "\"\\uZZZZ\"", "\"\\ud83d\\ude00\"", "\"\\ud83d\"",
    "\"\\ude00\"", "\"\\ud83dx\"", "\"\\ud83d\\u0041\"", "\"\\ud83d\\n\"", "\"\\ud83d\\ud83d\"", "\"\\ud83d\\",
    "\"\\ud83d\\u", "\"\\ud83d\\u12", "\"\\ud83d", "\"\\ud83d\\uZZZZ\"", "\"\\ud83d\\x\"", "\"\\n", "\"\\n\"",
    "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"a\tb\"", "\"a\nb\"", "\"\u{7F}\"", "\"é😀\"", "[1,]", "[1,,2]", "[,1]", "[,]",
    "{\"a\":1,}", "{,}", "{'a':1}", "{a:1}", "{\"a\" 1}", "{\"a\":}", "{\"a\"}", "{\"a\":1 \"b\":2}", "{\"a\":1]",
    "[1}", "[1 2]", "1 2", "[] []", "{} x", "// c\n1", "/* c */ 1", "[", "]", "{", "}", "[1", "[1,", "{\"a\"",
    "{\"a\":", "{\"a\":1", "{\"a\":1,", "{\"", ":", ",", "[[[[[[]]]]]]", "[[[[[[[[[[1]]]]]]]]]]",
    "{\"a\":1,\"a\":2}", "{\n  \"a\": 1,\n  \"a\": 2\n}", "{\"a\":{\"a\":1},\"b\":{\"a\":2}}",
    "{\"é\":1,\"e\\u0301\":2}",
    "{\"\\u0061\":1,\"a\":2}", "{\"a\":1,\"b\":2,\"a\":3 x}", "{\"a\":1,\"a\" 2}", "[1e999 x", "[1e999", "{\"a\":1e999",
    "[1e999,", "{\n  \"é\": tru }", "{\n\t\"a\": [1,\n 2,, 3]\n}", "\n\n   x", "\r\n1 x", " [ 1 , 2 ] ", "[ ]", "{ }",
    "[ 1 ,\n ]", "{\"a\": {\"b\": [true, false, null, \"x\", -2.5, {}]}}", "\"\\u0000\"", "\"\\/\"", "[\"a\\x\"]",
    "{\"a\":\"\\ud83d\"}", "{\"k\":\"v\",\"k\":\"w\"", "[\"\\u00\"]", "[1.5x]", "[-]", "[-0]", "[0,01]", "[\"\\",
  ]

  static let rawDocuments: [[UInt8]] = [
    [0xEF, 0xBB, 0xBF] + Array("1".utf8), [0xEF, 0xBB, 0xBF], [0xEF, 0xBB, 0xBF, 0xEF, 0xBB, 0xBF, 0x31],
    [0xEF, 0xBB], [0xEF], [0xEF, 0xBB, 0xBF] + Array("\n [x]".utf8), [0xEF, 0xBB, 0xBF] + Array("{\"a\" 1}".utf8),
    [0x22, 0xC3, 0x28, 0x22], [0x22, 0xC3, 0x22], [0x22, 0xC3], [0x22, 0xFF, 0x22], [0x22, 0xFF, 0x01, 0x22],
    [0x22, 0xFF, 0x5C, 0x78, 0x22], [0x22, 0xFF, 0x5C, 0x75, 0x31, 0x22], [0x22, 0xFF, 0x61], [0x22, 0xFF, 0x5C],
    [0x22, 0xFF, 0x22, 0x2C], [0x22, 0xFF, 0x22, 0x20], [0x5B, 0x22, 0xFF, 0x22, 0x20, 0x78],
    [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xE0, 0x80, 0x80, 0x22], [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],
    [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xE2, 0x82, 0x22], [0x22, 0xF0, 0x9F, 0x98, 0x80, 0x22],
    [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D], [0x22, 0xC3, 0xA9, 0xFF, 0x5C, 0x75, 0x64, 0x38, 0x33, 0x64, 0x22],
    [0x22, 0x80, 0x80, 0xC3, 0x22], [0x22, 0x61, 0x00, 0x22], [0x31, 0x00], [0x00], [0xFF], [0x5B, 0xC3, 0xA9, 0x5D],
  ]

  /// Documents whose every prefix and every one-byte substitution is compared too.
  static let mutated: [String] = [
    "{\"a\": [1, -2.5e3, true, null], \"b\\n\": {\"c\": \"\\ud83d\\ude00é\"}}",
    "[0, -0, 12.5, 1e2, \"x\\u0041\", false]",
  ]

  static let substitutes: [UInt8] = [
    0x01, 0x22, 0x5C, 0x2C, 0x5D, 0x7D, 0x3A, 0xFF, 0x78, 0x30, 0x2D, 0x2E, 0x65, 0x20,
  ]

  static func outcome(_ parse: () throws(JSONError) -> JSONValue) -> String {
    do throws(JSONError) {
      return "ok " + dump(try parse())
    } catch {
      return "error @\(error.offset) \(name(of: error.reason)): \(error)"
    }
  }

  static func dump(_ value: JSONValue) -> String {
    switch value {
    case .null: "null"
    case .bool(let bool): "\(bool)"
    case .number(let number): "\(number.double)" + (number.integer.map { "/\($0)" } ?? "")
    case .string(let string): string.debugDescription
    case .array(let elements): "[" + elements.map(dump).joined(separator: ",") + "]"
    case .object(let members):
      "{" + members.map { $0.key.debugDescription + ":" + dump($0.value) }.joined(separator: ",") + "}"
    }
  }

  static let reasons: [(String, JSONError.Reason)] = [
    ("unexpectedEnd", .unexpectedEnd), ("unexpectedByte", .unexpectedByte), ("byteOrderMark", .byteOrderMark),
    ("trailingContent", .trailingContent), ("trailingComma", .trailingComma), ("expectedColon", .expectedColon),
    ("expectedKey", .expectedKey), ("expectedCommaOrClose", .expectedCommaOrClose),
    ("mismatchedClose", .mismatchedClose), ("invalidLiteral", .invalidLiteral), ("invalidNumber", .invalidNumber),
    ("leadingZero", .leadingZero), ("controlCharacterInString", .controlCharacterInString),
    ("invalidEscape", .invalidEscape), ("invalidUnicodeEscape", .invalidUnicodeEscape),
    ("loneSurrogate", .loneSurrogate), ("invalidUTF8", .invalidUTF8), ("depthLimitExceeded", .depthLimitExceeded),
    ("duplicateKey", .duplicateKey), ("numberOutOfRange", .numberOutOfRange), ("documentTooLarge", .documentTooLarge),
  ]

  static func name(of reason: JSONError.Reason) -> String {
    reasons.first { $0.1 == reason }?.0 ?? "?"
  }

  static let limits: [JSONParser.Limits] = [
    .config, JSONParser.Limits(maxBytes: 65536, maxDepth: 8), JSONParser.Limits(maxBytes: 12, maxDepth: 3),
    JSONParser.Limits(maxBytes: 1000, maxDepth: 0),
  ]

  func compare(_ bytes: [UInt8]) {
    for limits in Self.limits {
      let old = Self.outcome { () throws(JSONError) in try LegacyJSONParser.parse(bytes, limits: limits) }
      let new = Self.outcome { () throws(JSONError) in try JSONParser.parse(bytes, limits: limits) }
      #expect(new == old, "\(bytes) with maxBytes \(limits.maxBytes), maxDepth \(limits.maxDepth)")
    }
  }

  @Test func sameOutcomeOnTheCorpus() {
    #expect(Self.documents.count > 200)
    for document in Self.documents { compare(document) }
  }

  @Test func sameOutcomeOnPrefixesAndSubstitutions() {
    for text in Self.mutated {
      let bytes = Array(text.utf8)
      for end in 0...bytes.count { compare(Array(bytes[..<end])) }
      for index in bytes.indices {
        for byte in Self.substitutes {
          var changed = bytes
          changed[index] = byte
          compare(changed)
        }
      }
    }
  }

  @Test func sameOutcomeOnDeepNesting() {
    for depth in [63, 64, 65, 100] {
      compare(Array(String(repeating: "[", count: depth).utf8) + Array(String(repeating: "]", count: depth).utf8))
      compare(
        Array(String(repeating: "{\"a\":", count: depth).utf8) + [0x31]
          + Array(String(repeating: "}", count: depth).utf8))
    }
  }

  @Test func sameOutcomeOnRandomDocuments() {
    let alphabet: [UInt8] =
      Array("{}[]\":,\\ u u d 8 3 D C e E 0 1 9 - + . t r u e n l f a s x \n\t".utf8) + [0xFF, 0xC3, 0xA9, 0xED, 0x01]
    var random = SplitMix64(seed: 7)
    for _ in 0..<40000 {
      let length = Int.random(in: 0...14, using: &random)
      compare((0..<length).map { _ in alphabet.randomElement(using: &random)! })
    }
  }

  /// Prints each hand-written case's outcome (`swift test --filter printOutcomes`), to write
  /// expectations from.
  @Test(.disabled(if: true)) func printOutcomes() {
    for document in Self.handWritten.map({ Array($0.utf8) }) + Self.rawDocuments {
      print(document, Self.outcome { () throws(JSONError) in try LegacyJSONParser.parse(document) })
    }
  }
}
