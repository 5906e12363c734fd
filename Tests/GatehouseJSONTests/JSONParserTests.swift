import GatehouseJSON
import Testing

@Suite struct JSONParserTests {
  private func parseError(_ text: String, limits: JSONParser.Limits = .config) -> JSONError? {
    do {
      _ = try JSONParser.parse(text, limits: limits)
      return nil
    } catch {
      return error
    }
  }

  @Test func parsesEveryKindOfValue() throws {
    let value = try JSONParser.parse(#"{"a": [null, true, false, 1, -2.5, "x"], "b": {}}"#)
    #expect(
      value
        == .object([
          (
            key: "a",
            value: .array([
              .null, .bool(true), .bool(false), .number(JSONNumber(integer: 1)),
              .number(JSONNumber(double: -2.5)), .string("x"),
            ])
          ),
          (key: "b", value: .object([])),
        ]))
  }

  @Test func keepsObjectMemberOrder() throws {
    guard case .object(let members) = try JSONParser.parse(#"{"z": 1, "a": 2, "m": 3}"#) else {
      Issue.record("not an object")
      return
    }
    #expect(members.map(\.key) == ["z", "a", "m"])
  }

  @Test func rejectsDuplicateKeysWithPosition() {
    let error = parseError("{\n  \"a\": 1,\n  \"a\": 2\n}")
    #expect(error?.description == #"line 3, column 3: duplicate key "a""#)
    #expect(error?.reason == .duplicateKey)
  }

  @Test func keepsExactIntegersBeyondDoublePrecision() throws {
    guard case .number(let number) = try JSONParser.parse("9007199254740993") else {
      Issue.record("not a number")
      return
    }
    #expect(number.integer == 9_007_199_254_740_993)
  }

  @Test func integerIsOnlySetForIntegerLiterals() throws {
    for (text, integer) in [
      ("12", Int64(12)), ("-0", 0), ("1.0", nil), ("1e3", nil), ("99999999999999999999", nil),
    ] {
      guard case .number(let number) = try JSONParser.parse(text) else {
        Issue.record("not a number: \(text)")
        continue
      }
      #expect(number.integer == integer, "\(text)")
    }
  }

  @Test(arguments: [
    "01", "+1", "1.", ".5", "1e", "-", "NaN", "Infinity", "1e400", "0x10",
  ])
  func rejectsNonRFCNumbers(text: String) {
    #expect(parseError(text) != nil)
  }

  @Test func decodesEscapesAndSurrogatePairs() throws {
    let value = try JSONParser.parse(#""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00""#)
    #expect(value == .string("a\"\\/\u{08}\u{0C}\n\r\té😀"))
  }

  @Test(arguments: [
    #""\ud83d""#, #""\ude00""#, #""\ud83dx""#, #""\ud83d\u0041""#,
  ])
  func rejectsLoneSurrogates(text: String) {
    #expect(parseError(text)?.reason.description == "lone surrogate in \\u escape")
  }

  @Test func rejectsRawControlCharactersInStrings() {
    #expect(parseError("\"a\tb\"")?.reason.description.hasPrefix("control character in string") == true)
  }

  @Test func rejectsInvalidUTF8() {
    do {
      _ = try JSONParser.parse([UInt8(ascii: "\""), 0xC3, 0x28, UInt8(ascii: "\"")])
      Issue.record("accepted invalid UTF-8")
    } catch {
      #expect(error.reason.description == "string is not valid UTF-8")
    }
  }

  @Test(arguments: [
    "", "[1,]", "{\"a\":1,}", "{'a':1}", "[1 2]", "// c\n1", "tru", "nul", "\"abc", "{\"a\" 1}", "1 2",
    "[\"a\\x\"]",
  ])
  func rejectsNonRFCDocuments(text: String) {
    #expect(parseError(text) != nil)
  }

  @Test func reportsLineAndColumnInCharacters() {
    // "é" is two bytes but one column.
    let error = parseError("{\n  \"é\": tru }")
    #expect(error?.line == 2)
    #expect(error?.column == 8)
  }

  @Test func enforcesTheDepthLimit() {
    let limits = JSONParser.Limits(maxBytes: 1000, maxDepth: 3)
    #expect(parseError("[[[1]]]", limits: limits) == nil)
    #expect(parseError("[[[[1]]]]", limits: limits)?.reason.description == "nesting is deeper than the limit of 3")
  }

  @Test func enforcesTheSizeLimit() {
    let limits = JSONParser.Limits(maxBytes: 5, maxDepth: 10)
    #expect(parseError("[1,2]", limits: limits) == nil)
    #expect(parseError("[1,22]", limits: limits)?.reason.description == "document is larger than the limit of 5 bytes")
  }

  @Test func skipsALeadingByteOrderMark() throws {
    #expect(try JSONParser.parse([0xEF, 0xBB, 0xBF] + Array("1".utf8)) == .number(JSONNumber(integer: 1)))
  }

  @Test func serializesCompactlyAndRoundTrips() throws {
    let text = #"{"b":[1,2.5,-3e-7,true,null],"a":"é\"\n\u0001"}"#
    let value = try JSONParser.parse(text)
    let serialized = value.serializedString()
    #expect(serialized == #"{"b":[1,2.5,-3e-07,true,null],"a":"é\"\n\u0001"}"#)
    #expect(try JSONParser.parse(serialized) == value)
  }

  @Test func numbersCompareByValue() {
    #expect(JSONValue.number(JSONNumber(integer: 1)) == .number(JSONNumber(double: 1.0)))
    #expect(JSONValue.number(JSONNumber(integer: Int64.max)) != .number(JSONNumber(integer: Int64.max - 1)))
  }
}
