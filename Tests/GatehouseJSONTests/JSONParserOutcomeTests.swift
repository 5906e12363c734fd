import Testing

@testable import GatehouseJSON

/// What `JSONParser` gives for documents valid and not: the value, or the error's offset,
/// reason and printed text (config errors print that text, so it must not drift).
@Suite struct JSONParserOutcomeTests {
  struct Case: Sendable, CustomTestStringConvertible {
    let document: [UInt8]
    let outcome: String
    init(_ text: String, _ outcome: String) { (document, self.outcome) = (Array(text.utf8), outcome) }
    init(bytes: [UInt8], _ outcome: String) { (document, self.outcome) = (bytes, outcome) }
    var testDescription: String { String(decoding: document, as: UTF8.self).debugDescription }
  }

  /// `ok` and the value (numbers as `double/integer`), or `error @offset reason: description`.
  static func outcome(_ document: [UInt8], limits: JSONParser.Limits = .config) -> String {
    do throws(JSONError) {
      return "ok " + dump(try JSONParser.parse(document, limits: limits))
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

  // Numbers (-0, big integers, 1e999), literals, strings (escapes, surrogates, UTF-8, controls),
  // structure (trailing commas, missing separators, truncation), duplicate keys, a byte order
  // mark, line and column counting. A string's invalid UTF-8 is reported at the string, and
  // only when nothing else is wrong in it before its closing quote.
  static let cases: [Case] = [
    Case("", "error @0 unexpectedEnd: line 1, column 1: unexpected end of document, expected a value"),
    Case(" ", "error @1 unexpectedEnd: line 1, column 2: unexpected end of document, expected a value"),
    Case("1", "ok 1.0/1"),
    Case("-0", "ok -0.0/0"),
    Case("-0.0", "ok -0.0"),
    Case("0", "ok 0.0/0"),
    Case("-1", "ok -1.0/-1"),
    Case("01", "error @0 leadingZero: line 1, column 1: invalid number, leading zeros are not allowed"),
    Case("-01", "error @0 leadingZero: line 1, column 1: invalid number, leading zeros are not allowed"),
    Case("00", "error @0 leadingZero: line 1, column 1: invalid number, leading zeros are not allowed"),
    Case("+1", "error @0 unexpectedByte: line 1, column 1: unexpected '+', expected a value"),
    Case("1.", "error @2 invalidNumber: line 1, column 3: invalid number, expected a digit after '.'"),
    Case(".5", "error @0 unexpectedByte: line 1, column 1: unexpected '.', expected a value"),
    Case("1e", "error @2 invalidNumber: line 1, column 3: invalid number, expected a digit in the exponent"),
    Case("1e+", "error @3 invalidNumber: line 1, column 4: invalid number, expected a digit in the exponent"),
    Case("1e-", "error @3 invalidNumber: line 1, column 4: invalid number, expected a digit in the exponent"),
    Case("1E5", "ok 100000.0"),
    Case("1e999", "error @0 numberOutOfRange: line 1, column 1: number is out of range"),
    Case("-1e999", "error @0 numberOutOfRange: line 1, column 1: number is out of range"),
    Case("1e-999", "ok 0.0"),
    Case("1.5e3", "ok 1500.0"),
    Case("123456789012345678901234567890", "ok 1.2345678901234568e+29"),
    Case("9223372036854775807", "ok 9.223372036854776e+18/9223372036854775807"),
    Case("9223372036854775808", "ok 9.223372036854776e+18"),
    Case("-9223372036854775808", "ok -9.223372036854776e+18/-9223372036854775808"),
    Case("-9223372036854775809", "ok -9.223372036854776e+18"),
    Case("9007199254740993", "ok 9007199254740992.0/9007199254740993"),
    Case("0.1", "ok 0.1"),
    Case("1.0", "ok 1.0"),
    Case("2.5E-3", "ok 0.0025"),
    Case("-", "error @1 invalidNumber: line 1, column 2: invalid number, expected a digit"),
    Case("-a", "error @1 invalidNumber: line 1, column 2: invalid number, expected a digit"),
    Case("1.x", "error @2 invalidNumber: line 1, column 3: invalid number, expected a digit after '.'"),
    Case("1ex", "error @2 invalidNumber: line 1, column 3: invalid number, expected a digit in the exponent"),
    Case("1e+x", "error @3 invalidNumber: line 1, column 4: invalid number, expected a digit in the exponent"),
    Case("0x10", "error @1 trailingContent: line 1, column 2: unexpected 'x' after the end of the document"),
    Case("NaN", "error @0 unexpectedByte: line 1, column 1: unexpected 'N', expected a value"),
    Case("Infinity", "error @0 unexpectedByte: line 1, column 1: unexpected 'I', expected a value"),
    Case("-Infinity", "error @1 invalidNumber: line 1, column 2: invalid number, expected a digit"),
    Case("true", "ok true"),
    Case("false", "ok false"),
    Case("null", "ok null"),
    Case("tru", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'true'"),
    Case("trux", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'true'"),
    Case("nul", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'null'"),
    Case("nulx", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'null'"),
    Case("fals", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'false'"),
    Case("falsy", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'false'"),
    Case("truex", "error @4 trailingContent: line 1, column 5: unexpected 'x' after the end of the document"),
    Case("[truex]", "error @5 unexpectedByte: line 1, column 6: unexpected 'x', expected ',' or ']'"),
    Case("t", "error @0 invalidLiteral: line 1, column 1: invalid literal, expected 'true'"),
    Case("[t]", "error @1 invalidLiteral: line 1, column 2: invalid literal, expected 'true'"),
    Case("[tr", "error @1 invalidLiteral: line 1, column 2: invalid literal, expected 'true'"),
    Case(#""""#, #"ok """#),
    Case(#""abc""#, #"ok "abc""#),
    Case(#""abc"#, "error @0 unexpectedEnd: line 1, column 1: unterminated string"),
    Case(#""\"#, "error @1 unexpectedEnd: line 1, column 2: unterminated escape"),
    Case(#""\x""#, #"error @1 invalidEscape: line 1, column 2: invalid escape '\x'"#),
    Case(#""\u""#, #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(#""\u12""#, #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(#""\u12"#, #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(#""\u00e9""#, #"ok "é""#),
    Case(#""\u00E9""#, #"ok "é""#),
    Case(
      #""\uZZZZ""#, #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(#""\ud83d\ude00""#, #"ok "😀""#),
    Case(#""\ud83d""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\ude00""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\ud83dx""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\ud83d\u0041""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\ud83d\n""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\ud83d\ud83d""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\ud83d\"#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(
      #""\ud83d\u"#, #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(
      #""\ud83d\u12"#, #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(#""\ud83d"#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(
      #""\ud83d\uZZZZ""#,
      #"error @1 invalidUnicodeEscape: line 1, column 2: invalid \u escape, expected four hex digits"#),
    Case(#""\ud83d\x""#, #"error @1 loneSurrogate: line 1, column 2: lone surrogate in \u escape"#),
    Case(#""\n"#, "error @0 unexpectedEnd: line 1, column 1: unterminated string"),
    Case(#""\n""#, #"ok "\n""#),
    Case(#""a\"\\\/\b\f\n\r\t""#, #"ok "a\"\\/\u{08}\u{0C}\n\r\t""#),
    Case(
      "\"a\tb\"",
      #"error @2 controlCharacterInString: line 1, column 3: control character in string (write it as an escape such as \n)"#
    ),
    Case(
      "\"a\nb\"",
      #"error @2 controlCharacterInString: line 1, column 3: control character in string (write it as an escape such as \n)"#
    ),
    Case(bytes: [0x22, 0x7F, 0x22], #"ok "\u{7F}""#),
    Case(#""é😀""#, #"ok "é😀""#),
    Case("[1,]", "error @3 unexpectedByte: line 1, column 4: unexpected ']', expected a value"),
    Case("[1,,2]", "error @3 unexpectedByte: line 1, column 4: unexpected ',', expected a value"),
    Case("[,1]", "error @1 unexpectedByte: line 1, column 2: unexpected ',', expected a value"),
    Case("[,]", "error @1 unexpectedByte: line 1, column 2: unexpected ',', expected a value"),
    Case(#"{"a":1,}"#, "error @7 unexpectedByte: line 1, column 8: unexpected '}', expected a string key"),
    Case("{,}", "error @1 unexpectedByte: line 1, column 2: unexpected ',', expected a string key"),
    Case("{'a':1}", "error @1 unexpectedByte: line 1, column 2: unexpected ''', expected a string key"),
    Case("{a:1}", "error @1 unexpectedByte: line 1, column 2: unexpected 'a', expected a string key"),
    Case(#"{"a" 1}"#, "error @5 unexpectedByte: line 1, column 6: unexpected '1', expected ':'"),
    Case(#"{"a":}"#, "error @5 unexpectedByte: line 1, column 6: unexpected '}', expected a value"),
    Case(#"{"a"}"#, "error @4 unexpectedByte: line 1, column 5: unexpected '}', expected ':'"),
    Case(#"{"a":1 "b":2}"#, #"error @7 unexpectedByte: line 1, column 8: unexpected '"', expected ',' or '}'"#),
    Case(#"{"a":1]"#, "error @6 unexpectedByte: line 1, column 7: unexpected ']', expected ',' or '}'"),
    Case("[1}", "error @2 unexpectedByte: line 1, column 3: unexpected '}', expected ',' or ']'"),
    Case("[1 2]", "error @3 unexpectedByte: line 1, column 4: unexpected '2', expected ',' or ']'"),
    Case("1 2", "error @2 trailingContent: line 1, column 3: unexpected '2' after the end of the document"),
    Case("[] []", "error @3 trailingContent: line 1, column 4: unexpected '[' after the end of the document"),
    Case("{} x", "error @3 trailingContent: line 1, column 4: unexpected 'x' after the end of the document"),
    Case("// c\n1", "error @0 unexpectedByte: line 1, column 1: unexpected '/', expected a value"),
    Case("/* c */ 1", "error @0 unexpectedByte: line 1, column 1: unexpected '/', expected a value"),
    Case("[", "error @1 unexpectedEnd: line 1, column 2: unexpected end of document, expected a value"),
    Case("]", "error @0 unexpectedByte: line 1, column 1: unexpected ']', expected a value"),
    Case("{", "error @1 unexpectedEnd: line 1, column 2: unexpected end of document, expected a string key"),
    Case("}", "error @0 unexpectedByte: line 1, column 1: unexpected '}', expected a value"),
    Case("[1", "error @2 unexpectedEnd: line 1, column 3: unexpected end of document, expected ',' or ']'"),
    Case("[1,", "error @3 unexpectedEnd: line 1, column 4: unexpected end of document, expected a value"),
    Case(#"{"a""#, "error @4 unexpectedEnd: line 1, column 5: unexpected end of document, expected ':'"),
    Case(#"{"a":"#, "error @5 unexpectedEnd: line 1, column 6: unexpected end of document, expected a value"),
    Case(#"{"a":1"#, "error @6 unexpectedEnd: line 1, column 7: unexpected end of document, expected ',' or '}'"),
    Case(#"{"a":1,"#, "error @7 unexpectedEnd: line 1, column 8: unexpected end of document, expected a string key"),
    Case(#"{""#, "error @1 unexpectedEnd: line 1, column 2: unterminated string"),
    Case(":", "error @0 unexpectedByte: line 1, column 1: unexpected ':', expected a value"),
    Case(",", "error @0 unexpectedByte: line 1, column 1: unexpected ',', expected a value"),
    Case("[[[[[[]]]]]]", "ok [[[[[[]]]]]]"),
    Case("[[[[[[[[[[1]]]]]]]]]]", "ok [[[[[[[[[[1.0/1]]]]]]]]]]"),
    Case(#"{"a":1,"a":2}"#, #"error @7 duplicateKey: line 1, column 8: duplicate key "a""#),
    Case("{\n  \"a\": 1,\n  \"a\": 2\n}", #"error @14 duplicateKey: line 3, column 3: duplicate key "a""#),
    Case(#"{"a":{"a":1},"b":{"a":2}}"#, #"ok {"a":{"a":1.0/1},"b":{"a":2.0/2}}"#),
    Case(#"{"é":1,"e\u0301":2}"#, #"error @8 duplicateKey: line 1, column 8: duplicate key "é""#),
    Case(#"{"\u0061":1,"a":2}"#, #"error @12 duplicateKey: line 1, column 13: duplicate key "a""#),
    Case(#"{"a":1,"b":2,"a":3 x}"#, #"error @13 duplicateKey: line 1, column 14: duplicate key "a""#),
    Case(#"{"a":1,"a" 2}"#, #"error @7 duplicateKey: line 1, column 8: duplicate key "a""#),
    Case("[1e999 x", "error @1 numberOutOfRange: line 1, column 2: number is out of range"),
    Case("[1e999", "error @1 numberOutOfRange: line 1, column 2: number is out of range"),
    Case(#"{"a":1e999"#, "error @5 numberOutOfRange: line 1, column 6: number is out of range"),
    Case("[1e999,", "error @1 numberOutOfRange: line 1, column 2: number is out of range"),
    Case("{\n  \"é\": tru }", "error @10 invalidLiteral: line 2, column 8: invalid literal, expected 'true'"),
    Case("{\n\t\"a\": [1,\n 2,, 3]\n}", "error @15 unexpectedByte: line 3, column 4: unexpected ',', expected a value"),
    Case("\n\n   x", "error @5 unexpectedByte: line 3, column 4: unexpected 'x', expected a value"),
    Case("\r\n1 x", "error @4 trailingContent: line 2, column 3: unexpected 'x' after the end of the document"),
    Case(" [ 1 , 2 ] ", "ok [1.0/1,2.0/2]"),
    Case("[ ]", "ok []"),
    Case("{ }", "ok {}"),
    Case("[ 1 ,\n ]", "error @7 unexpectedByte: line 2, column 2: unexpected ']', expected a value"),
    Case(#"{"a": {"b": [true, false, null, "x", -2.5, {}]}}"#, #"ok {"a":{"b":[true,false,null,"x",-2.5,{}]}}"#),
    Case(#""\u0000""#, #"ok "\0""#),
    Case(#""\/""#, #"ok "/""#),
    Case(#"["a\x"]"#, #"error @3 invalidEscape: line 1, column 4: invalid escape '\x'"#),
    Case(#"{"a":"\ud83d"}"#, #"error @6 loneSurrogate: line 1, column 7: lone surrogate in \u escape"#),
    Case(#"{"k":"v","k":"w""#, #"error @9 duplicateKey: line 1, column 10: duplicate key "k""#),
    Case(
      #"["\u00"]"#, #"error @2 invalidUnicodeEscape: line 1, column 3: invalid \u escape, expected four hex digits"#),
    Case("[1.5x]", "error @4 unexpectedByte: line 1, column 5: unexpected 'x', expected ',' or ']'"),
    Case("[-]", "error @2 invalidNumber: line 1, column 3: invalid number, expected a digit"),
    Case("[-0]", "ok [-0.0/0]"),
    Case("[0,01]", "error @3 leadingZero: line 1, column 4: invalid number, leading zeros are not allowed"),
    Case(#"["\"#, "error @2 unexpectedEnd: line 1, column 3: unterminated escape"),
    Case("﻿1", "ok 1.0/1"),
    Case("﻿", "error @3 unexpectedEnd: line 1, column 1: unexpected end of document, expected a value"),
    Case("﻿﻿1", "error @3 unexpectedByte: line 1, column 1: unexpected '0xEF', expected a value"),
    Case(bytes: [0xEF, 0xBB], "error @0 unexpectedByte: line 1, column 1: unexpected '0xEF', expected a value"),
    Case(bytes: [0xEF], "error @0 unexpectedByte: line 1, column 1: unexpected '0xEF', expected a value"),
    Case("﻿\n [x]", "error @6 unexpectedByte: line 2, column 3: unexpected 'x', expected a value"),
    Case(#"﻿{"a" 1}"#, "error @8 unexpectedByte: line 1, column 6: unexpected '1', expected ':'"),
    Case(bytes: [0x22, 0xC3, 0x28, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xC3, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xC3], "error @0 unexpectedEnd: line 1, column 1: unterminated string"),
    Case(bytes: [0x22, 0xFF, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(
      bytes: [0x22, 0xFF, 0x01, 0x22],
      #"error @2 controlCharacterInString: line 1, column 3: control character in string (write it as an escape such as \n)"#
    ),
    Case(bytes: [0x22, 0xFF, 0x5C, 0x78, 0x22], #"error @2 invalidEscape: line 1, column 3: invalid escape '\x'"#),
    Case(
      bytes: [0x22, 0xFF, 0x5C, 0x75, 0x31, 0x22],
      #"error @2 invalidUnicodeEscape: line 1, column 3: invalid \u escape, expected four hex digits"#),
    Case(bytes: [0x22, 0xFF, 0x61], "error @0 unexpectedEnd: line 1, column 1: unterminated string"),
    Case(bytes: [0x22, 0xFF, 0x5C], "error @2 unexpectedEnd: line 1, column 3: unterminated escape"),
    Case(bytes: [0x22, 0xFF, 0x22, 0x2C], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xFF, 0x22, 0x20], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(
      bytes: [0x5B, 0x22, 0xFF, 0x22, 0x20, 0x78], "error @1 invalidUTF8: line 1, column 2: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xED, 0xA0, 0x80, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xE0, 0x80, 0x80, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(
      bytes: [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xC0, 0xAF, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(bytes: [0x22, 0xE2, 0x82, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(#""😀""#, #"ok "😀""#),
    Case(
      bytes: [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D],
      "error @1 invalidUTF8: line 1, column 2: string is not valid UTF-8"),
    Case(
      bytes: [0x22, 0xC3, 0xA9, 0xFF, 0x5C, 0x75, 0x64, 0x38, 0x33, 0x64, 0x22],
      #"error @4 loneSurrogate: line 1, column 4: lone surrogate in \u escape"#),
    Case(bytes: [0x22, 0x80, 0x80, 0xC3, 0x22], "error @0 invalidUTF8: line 1, column 1: string is not valid UTF-8"),
    Case(
      bytes: [0x22, 0x61, 0x00, 0x22],
      #"error @2 controlCharacterInString: line 1, column 3: control character in string (write it as an escape such as \n)"#
    ),
    Case(
      bytes: [0x31, 0x00], "error @1 trailingContent: line 1, column 2: unexpected '0x00' after the end of the document"
    ),
    Case(bytes: [0x00], "error @0 unexpectedByte: line 1, column 1: unexpected '0x00', expected a value"),
    Case(bytes: [0xFF], "error @0 unexpectedByte: line 1, column 1: unexpected '0xFF', expected a value"),
    Case("[é]", "error @1 unexpectedByte: line 1, column 2: unexpected '0xC3', expected a value"),
  ]

  @Test(arguments: cases)
  func outcome(of testCase: Case) {
    #expect(Self.outcome(testCase.document) == testCase.outcome)
  }

  static let limitCases: [(maxBytes: Int, maxDepth: Int, text: String, outcome: String)] = [
    (1000, 3, "[[[1]]]", "ok [[[1.0/1]]]"),
    (1000, 0, "[[[1]]]", "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (5, 10, "[[[1]]]", "error @5 documentTooLarge: line 1, column 6: document is larger than the limit of 5 bytes"),
    (1000, 3, "[[[[1]]]]", "error @3 depthLimitExceeded: line 1, column 4: nesting is deeper than the limit of 3"),
    (1000, 0, "[[[[1]]]]", "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (5, 10, "[[[[1]]]]", "error @5 documentTooLarge: line 1, column 6: document is larger than the limit of 5 bytes"),
    (
      1000, 3, #"{"a":{"b":{"c":{}}}}"#,
      "error @15 depthLimitExceeded: line 1, column 16: nesting is deeper than the limit of 3"
    ),
    (
      1000, 0, #"{"a":{"b":{"c":{}}}}"#,
      "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"
    ),
    (
      5, 10, #"{"a":{"b":{"c":{}}}}"#,
      "error @5 documentTooLarge: line 1, column 6: document is larger than the limit of 5 bytes"
    ),
    (1000, 3, #"[{"a":[[]]}]"#, "error @7 depthLimitExceeded: line 1, column 8: nesting is deeper than the limit of 3"),
    (1000, 0, #"[{"a":[[]]}]"#, "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (
      5, 10, #"[{"a":[[]]}]"#,
      "error @5 documentTooLarge: line 1, column 6: document is larger than the limit of 5 bytes"
    ),
    (1000, 3, "1", "ok 1.0/1"),
    (1000, 0, "1", "ok 1.0/1"),
    (5, 10, "1", "ok 1.0/1"),
    (1000, 3, "[]", "ok []"),
    (1000, 0, "[]", "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (5, 10, "[]", "ok []"),
    (1000, 3, "{}", "ok {}"),
    (1000, 0, "{}", "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (5, 10, "{}", "ok {}"),
    (1000, 3, "[1,22]", "ok [1.0/1,22.0/22]"),
    (1000, 0, "[1,22]", "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (5, 10, "[1,22]", "error @5 documentTooLarge: line 1, column 6: document is larger than the limit of 5 bytes"),
    (1000, 3, "[1,2]", "ok [1.0/1,2.0/2]"),
    (1000, 0, "[1,2]", "error @0 depthLimitExceeded: line 1, column 1: nesting is deeper than the limit of 0"),
    (5, 10, "[1,2]", "ok [1.0/1,2.0/2]"),
    (1000, 3, "  1  ", "ok 1.0/1"),
    (1000, 0, "  1  ", "ok 1.0/1"),
    (5, 10, "  1  ", "ok 1.0/1"),
    (1000, 3, #""x""#, #"ok "x""#),
    (1000, 0, #""x""#, #"ok "x""#),
    (5, 10, #""x""#, #"ok "x""#),
  ]

  @Test func limits() {
    for (maxBytes, maxDepth, text, expected) in Self.limitCases {
      let limits = JSONParser.Limits(maxBytes: maxBytes, maxDepth: maxDepth)
      #expect(Self.outcome(Array(text.utf8), limits: limits) == expected, "\(text) with \(maxBytes), \(maxDepth)")
    }
  }

  /// The fuzz seeds; `ok` alone for the long config documents.
  static let corpus: [String: String] = [
    "corpus/json/bad-numbers": "error @1 leadingZero: line 1, column 2: invalid number, leading zeros are not allowed",
    "corpus/json/bad-structure": "error @5 unexpectedByte: line 1, column 6: unexpected '1', expected ':'",
    "corpus/json/byte-order-mark": "ok {}",
    "corpus/json/compact-scalars":
      #"ok {"a":123.0/123,"b":[456.0/456,"c",7.0/7,"d",0.0/0,"e"],"e":"f","g":0.0/0,"h":-9.0/-9}"#,
    "corpus/json/deep": #"ok [[[[[[[[[[[[[[[[[[[[{"a":[[[[1.0/1]]]]}]]]]]]]]]]]]]]]]]]]]"#,
    "corpus/json/deep-mixed-70":
      "error @192 depthLimitExceeded: line 1, column 193: nesting is deeper than the limit of 64",
    "corpus/json/duplicate-keys": #"error @7 duplicateKey: line 1, column 8: duplicate key "a""#,
    "corpus/json/envelope": #"ok {"code":0.0/0,"datas":{"users":[1.0/1,2.0/2]},"message":""}"#,
    "corpus/json/error-body":
      #"ok {"status":-1.0/-1,"error":{"code":7.0/7,"message":"token expired"},"error_description":"x","detail":"y"}"#,
    "corpus/json/escapes": #"ok ["\"\\/\u{08}\u{0C}\n\r\t","\0\u{1F}é￿","😀","􏿿"]"#,
    "corpus/json/invalid-utf8": "error @1 invalidUTF8: line 1, column 2: string is not valid UTF-8",
    "corpus/json/key-paths":
      #"ok {"users":[{"name":"x"},{"name":"y"}],"users2":{"0":"zero","01":"one"},"list":[[1.0/1],[2.0/2],[3.0/3],{"x":[4.0/4]}]}"#,
    "corpus/json/lone-surrogates": #"error @2 loneSurrogate: line 1, column 3: lone surrogate in \u escape"#,
    "corpus/json/media-type": "error @0 unexpectedByte: line 1, column 1: unexpected 'a', expected a value",
    "corpus/json/mixed-array": #"ok [0.0/0,-0.0015,100.0,true,false,null,"",{},[],[[]],{"a":{}}]"#,
    "corpus/json/nested-object":
      #"ok {"data":{"items":[{"id":1.0/1,"name":"a"},{"id":2.0/2,"tags":["x","y"]},{"id":3.0/3},{"id":4.0/4,"deep":{"k":[null]}}],"total":4.0/4}}"#,
    "corpus/json/top-level-number": "ok -0.0",
    "corpus/json/trailing-comma": "error @10 unexpectedByte: line 1, column 11: unexpected ']', expected a value",
    "corpus/json/utf8": #"ok ["é","€","😀","􏿿","퟿","","ࠀ","𐀀"]"#,
    "corpus/config/bom-and-number": "error @118 numberOutOfRange: line 1, column 116: number is out of range",
    "corpus/config/default": "ok",
    "corpus/config/interpolation": "ok",
    "corpus/config/interpolation-errors": "ok",
    "corpus/config/invalid-json": #"error @94 duplicateKey: line 1, column 95: duplicate key "a""#,
    "corpus/config/many-issues": "ok",
    "corpus/config/minimal": #"ok {"routes":[{"name":"r","match":{"path":"/"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/not-an-object": #"ok [{"routes":[]}]"#,
    "corpus/config/one-issue-clients-without-keys":
      #"ok {"clients":{"required":true,"keys":[]},"routes":[{"name":"r","match":{"path":"/"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/one-issue-duplicate-route":
      #"ok {"routes":[{"name":"users","match":{"path":"/a"},"stub":{"mode":"always"}},{"name":"users","match":{"path":"/b"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/one-issue-header-value-blank":
      #"ok {"headers":{"set":{"X-Version":"1.4.2 "}},"routes":[{"name":"r","match":{"path":"/"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/one-issue-listener-twice":
      #"ok {"listen":[{"address":"127.0.0.1:8080"},{"address":"127.0.0.1:8080"}],"routes":[{"name":"r","match":{"path":"/"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/one-issue-managed-header":
      #"ok {"headers":{"set":{"Content-Length":"0"},"remove":["Cookie"]},"routes":[{"name":"r","match":{"path":"/"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/one-issue-public-admin-without-token":
      #"ok {"admin":{"listen":"0.0.0.0:9901"},"routes":[{"name":"r","match":{"path":"/"},"stub":{"mode":"always"}}]}"#,
    "corpus/config/one-issue-rewrite-parameter":
      #"ok {"upstreams":{"api":{"url":"http://127.0.0.1:3000"}},"routes":[{"name":"r","match":{"path":"/u/:id"},"upstream":"api","path":"/v/:ib/*"}]}"#,
    "corpus/config/one-issue-tls-on-http": "ok",
    "corpus/config/spec-example": "ok",
    "corpus/config/two-issues-token-value-and-method": "ok",
    "crashes/json/dot-before-combining-mark": #"error @44 duplicateKey: line 1, column 43: duplicate key "a""#,
  ]

  @Test func fuzzInputs() throws {
    let inputs =
      SavedFuzzInput.all(targets: ["json", "config"], in: "corpus")
      + SavedFuzzInput.all(targets: ["json", "config"], in: "crashes")
    #expect(inputs.count == Self.corpus.count)
    for input in inputs {
      let expected = try #require(Self.corpus[String(input.path.dropFirst("Fuzz/".count))], "\(input.path)")
      let outcome = Self.outcome(try input.bytes())
      #expect(expected == "ok" ? outcome.hasPrefix("ok ") : outcome == expected, "\(input.path)")
    }
  }

  @Test func deepNesting() {
    for depth in [63, 64, 65, 100] {
      let array = Self.outcome(
        Array((String(repeating: "[", count: depth) + String(repeating: "]", count: depth)).utf8))
      let object = Self.outcome(
        Array((String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)).utf8))
      if depth <= 64 {
        #expect(array.hasPrefix("ok ") && object.hasPrefix("ok "))
      } else {
        #expect(array == "error @64 depthLimitExceeded: line 1, column 65: nesting is deeper than the limit of 64")
        #expect(
          object == "error @320 depthLimitExceeded: line 1, column 321: nesting is deeper than the limit of 64")
      }
    }
  }

  /// The parser refuses what `JSONValidator` refuses (after a byte order mark, which only the
  /// parser skips), and no later than it does but for invalid UTF-8; it refuses valid JSON only
  /// for a duplicate key or a number out of range.
  func checkAgainstTheValidator(_ bytes: [UInt8]) {
    let skipped = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
    let options = JSONValidationOptions(maxDepth: JSONParser.Limits.config.maxDepth)
    let verdict = Array(bytes.dropFirst(skipped)).withUnsafeBytes { JSONValidator.firstError(in: $0, options: options) }
    do throws(JSONError) {
      _ = try JSONParser.parse(bytes)
      #expect(verdict == nil, "\(bytes)")
    } catch {
      if let verdict {
        // Invalid UTF-8 is reported at its string's quote, but only once the rest of the
        // string is known to be well formed, so a later error in the string comes first.
        #expect(verdict.reason == .invalidUTF8 || error.offset <= verdict.offset + skipped, "\(bytes)")
      } else {
        #expect(error.reason == .duplicateKey || error.reason == .numberOutOfRange, "\(bytes)")
      }
      #expect(error.line >= 1 && error.column >= 1, "\(bytes)")
    }
  }

  @Test func agreesWithTheValidatorOnPrefixesAndSubstitutions() {
    let documents = [
      #"{"a": [1, -2.5e3, true, null], "b\n": {"c": "\ud83d\ude00é"}}"#, #"[0, -0, 12.5, 1e2, "x\u0041", false]"#,
    ]
    let substitutes: [UInt8] = [0x01, 0x22, 0x5C, 0x2C, 0x5D, 0x7D, 0x3A, 0xFF, 0x78, 0x30, 0x2D, 0x2E, 0x65, 0x20]
    for text in documents {
      let bytes = Array(text.utf8)
      for end in 0...bytes.count { checkAgainstTheValidator(Array(bytes[..<end])) }
      for index in bytes.indices {
        for byte in substitutes {
          var changed = bytes
          changed[index] = byte
          checkAgainstTheValidator(changed)
        }
      }
    }
  }

  @Test func agreesWithTheValidatorOnRandomDocuments() {
    let alphabet: [UInt8] =
      Array("{}[]\":,\\ u u d 8 3 D C e E 0 1 9 - + . t r u e n l f a s x \n\t".utf8) + [0xFF, 0xC3, 0xA9, 0xED, 0x01]
    var random = SplitMix64(seed: 7)
    for _ in 0..<20000 {
      let length = Int.random(in: 0...14, using: &random)
      checkAgainstTheValidator((0..<length).map { _ in alphabet.randomElement(using: &random)! })
    }
  }
}
