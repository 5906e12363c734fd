@testable import GatehouseJSON

/// The tree parser as it was before it was built on JSONScanner, kept only to compare against.
/// A strict RFC 8259 parser that builds a `JSONValue` tree.
///
/// Strict means: one value with optional whitespace around it, no comments, no trailing
/// commas, no single quotes, no leading zeros or `+` in numbers, no NaN/Infinity, no raw
/// control characters in strings, valid UTF-8, no lone surrogate escapes, and no duplicate
/// keys in an object (a config with two `"upstream"` keys is ambiguous, so it is an error).
/// A leading UTF-8 byte order mark is skipped, which RFC 8259 §8.1 allows. Errors are
/// `JSONError`s with line and column filled in and a message that says what was expected.
struct LegacyJSONParser {
  private let bytes: [UInt8]
  private let limits: JSONParser.Limits
  private var position = 0
  private var depth = 0

  private init(bytes: [UInt8], limits: JSONParser.Limits) {
    self.bytes = bytes
    self.limits = limits
  }

  /// Parses one complete JSON text.
  static func parse(_ bytes: [UInt8], limits: JSONParser.Limits = .config) throws(JSONError) -> JSONValue {
    var parser = LegacyJSONParser(bytes: bytes, limits: limits)
    if bytes.count > limits.maxBytes {
      throw parser.error(
        at: limits.maxBytes, .documentTooLarge, "document is larger than the limit of \(limits.maxBytes) bytes")
    }
    if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { parser.position = 3 }
    parser.skipWhitespace()
    let value = try parser.parseValue()
    parser.skipWhitespace()
    if parser.position < bytes.count {
      throw parser.error(
        at: parser.position, .trailingContent, "unexpected \(parser.describeByte()) after the end of the document")
    }
    return value
  }

  /// Parses one complete JSON text given as a string.
  static func parse(_ text: String, limits: JSONParser.Limits = .config) throws(JSONError) -> JSONValue {
    try parse(Array(text.utf8), limits: limits)
  }

  // MARK: - Values

  private mutating func parseValue() throws(JSONError) -> JSONValue {
    guard position < bytes.count else {
      throw error(at: position, .unexpectedEnd, "unexpected end of document, expected a value")
    }
    switch bytes[position] {
    case UInt8(ascii: "{"): return try parseObject()
    case UInt8(ascii: "["): return try parseArray()
    case UInt8(ascii: "\""): return .string(try parseString())
    case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
    case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
    case UInt8(ascii: "n"): try expectLiteral("null"); return .null
    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
    default: throw error(at: position, .unexpectedByte, "unexpected \(describeByte()), expected a value")
    }
  }

  private mutating func enterContainer() throws(JSONError) {
    depth += 1
    if depth > limits.maxDepth {
      throw error(at: position, .depthLimitExceeded, "nesting is deeper than the limit of \(limits.maxDepth)")
    }
  }

  private mutating func parseObject() throws(JSONError) -> JSONValue {
    try enterContainer()
    position += 1  // "{"
    var members: [(key: String, value: JSONValue)] = []
    var seenKeys: Set<String> = []
    skipWhitespace()
    if peek() == UInt8(ascii: "}") {
      position += 1
      depth -= 1
      return .object(members)
    }
    while true {
      skipWhitespace()
      guard peek() == UInt8(ascii: "\"") else {
        throw error(at: position, unexpectedCode, "unexpected \(describeByte()), expected a string key")
      }
      let keyStart = position
      let key = try parseString()
      if !seenKeys.insert(key).inserted {
        throw error(at: keyStart, .duplicateKey, "duplicate key \(JSONValue.string(key).serializedString())")
      }
      skipWhitespace()
      guard peek() == UInt8(ascii: ":") else {
        throw error(at: position, unexpectedCode, "unexpected \(describeByte()), expected ':'")
      }
      position += 1
      skipWhitespace()
      let value = try parseValue()
      members.append((key: key, value: value))
      skipWhitespace()
      switch peek() {
      case UInt8(ascii: ","):
        position += 1
      case UInt8(ascii: "}"):
        position += 1
        depth -= 1
        return .object(members)
      default:
        throw error(at: position, unexpectedCode, "unexpected \(describeByte()), expected ',' or '}'")
      }
    }
  }

  private mutating func parseArray() throws(JSONError) -> JSONValue {
    try enterContainer()
    position += 1  // "["
    var elements: [JSONValue] = []
    skipWhitespace()
    if peek() == UInt8(ascii: "]") {
      position += 1
      depth -= 1
      return .array(elements)
    }
    while true {
      skipWhitespace()
      elements.append(try parseValue())
      skipWhitespace()
      switch peek() {
      case UInt8(ascii: ","):
        position += 1
      case UInt8(ascii: "]"):
        position += 1
        depth -= 1
        return .array(elements)
      default:
        throw error(at: position, unexpectedCode, "unexpected \(describeByte()), expected ',' or ']'")
      }
    }
  }

  private mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
    let start = position
    let expected = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
    for byte in expected {
      guard peek() == byte else { throw error(at: start, .invalidLiteral, "invalid literal, expected '\(literal)'") }
      position += 1
    }
  }

  // MARK: - Numbers

  private mutating func parseNumber() throws(JSONError) -> JSONNumber {
    let start = position
    var isInteger = true
    if peek() == UInt8(ascii: "-") { position += 1 }
    guard let first = peek(), isDigit(first) else {
      throw error(at: position, .invalidNumber, "invalid number, expected a digit")
    }
    if first == UInt8(ascii: "0") {
      position += 1
      if let next = peek(), isDigit(next) {
        throw error(at: start, .leadingZero, "invalid number, leading zeros are not allowed")
      }
    } else {
      skipDigits()
    }
    if peek() == UInt8(ascii: ".") {
      isInteger = false
      position += 1
      guard let next = peek(), isDigit(next) else {
        throw error(at: position, .invalidNumber, "invalid number, expected a digit after '.'")
      }
      skipDigits()
    }
    if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
      isInteger = false
      position += 1
      if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { position += 1 }
      guard let next = peek(), isDigit(next) else {
        throw error(at: position, .invalidNumber, "invalid number, expected a digit in the exponent")
      }
      skipDigits()
    }
    let text = String(decoding: bytes[start..<position], as: UTF8.self)
    guard let double = Double(text), double.isFinite else {
      throw error(at: start, .numberOutOfRange, "number is out of range")
    }
    return JSONNumber(double: double, integer: isInteger ? Int64(text) : nil)
  }

  private func isDigit(_ byte: UInt8) -> Bool {
    byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
  }

  private mutating func skipDigits() {
    while let byte = peek(), isDigit(byte) { position += 1 }
  }

  // MARK: - Strings

  private mutating func parseString() throws(JSONError) -> String {
    let start = position
    position += 1  // opening quote
    var decoded: [UInt8] = []
    var chunkStart = position
    while true {
      guard position < bytes.count else { throw error(at: start, .unexpectedEnd, "unterminated string") }
      let byte = bytes[position]
      switch byte {
      case UInt8(ascii: "\""):
        decoded.append(contentsOf: bytes[chunkStart..<position])
        position += 1
        guard let string = String(validating: decoded, as: UTF8.self) else {
          throw error(at: start, .invalidUTF8, "string is not valid UTF-8")
        }
        return string
      case UInt8(ascii: "\\"):
        decoded.append(contentsOf: bytes[chunkStart..<position])
        try parseEscape(into: &decoded)
        chunkStart = position
      case 0x00..<0x20:
        throw error(
          at: position, .controlCharacterInString, "control character in string (write it as an escape such as \\n)")
      default:
        position += 1
      }
    }
  }

  private mutating func parseEscape(into decoded: inout [UInt8]) throws(JSONError) {
    let escapeStart = position
    position += 1  // backslash
    guard let byte = peek() else { throw error(at: escapeStart, .unexpectedEnd, "unterminated escape") }
    position += 1
    switch byte {
    case UInt8(ascii: "\""): decoded.append(UInt8(ascii: "\""))
    case UInt8(ascii: "\\"): decoded.append(UInt8(ascii: "\\"))
    case UInt8(ascii: "/"): decoded.append(UInt8(ascii: "/"))
    case UInt8(ascii: "b"): decoded.append(0x08)
    case UInt8(ascii: "f"): decoded.append(0x0C)
    case UInt8(ascii: "n"): decoded.append(0x0A)
    case UInt8(ascii: "r"): decoded.append(0x0D)
    case UInt8(ascii: "t"): decoded.append(0x09)
    case UInt8(ascii: "u"):
      var scalar = UInt32(try parseHexQuad(escapeStart: escapeStart))
      if (0xD800..<0xDC00).contains(scalar) {
        // A high surrogate must be followed by an escaped low surrogate.
        guard peek() == UInt8(ascii: "\\"), peek(offset: 1) == UInt8(ascii: "u") else {
          throw error(at: escapeStart, .loneSurrogate, "lone surrogate in \\u escape")
        }
        position += 2
        let low = UInt32(try parseHexQuad(escapeStart: escapeStart))
        guard (0xDC00..<0xE000).contains(low) else {
          throw error(at: escapeStart, .loneSurrogate, "lone surrogate in \\u escape")
        }
        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
      } else if (0xDC00..<0xE000).contains(scalar) {
        throw error(at: escapeStart, .loneSurrogate, "lone surrogate in \\u escape")
      }
      decoded.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
    default:
      throw error(at: escapeStart, .invalidEscape, "invalid escape '\\\(describeASCII(byte))'")
    }
  }

  private mutating func parseHexQuad(escapeStart: Int) throws(JSONError) -> UInt16 {
    var value: UInt16 = 0
    for _ in 0..<4 {
      guard let byte = peek(), let digit = hexValue(byte) else {
        throw error(at: escapeStart, .invalidUnicodeEscape, "invalid \\u escape, expected four hex digits")
      }
      value = value << 4 | UInt16(digit)
      position += 1
    }
    return value
  }

  private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
  }

  // MARK: - Positions and messages

  private func peek(offset: Int = 0) -> UInt8? {
    position + offset < bytes.count ? bytes[position + offset] : nil
  }

  private mutating func skipWhitespace() {
    while let byte = peek(), byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
      position += 1
    }
  }

  /// `unexpectedEnd` at the end of the document, `unexpectedByte` before it.
  private var unexpectedCode: JSONError.Reason { position < bytes.count ? .unexpectedByte : .unexpectedEnd }

  private func describeByte() -> String {
    guard let byte = peek() else { return "end of document" }
    return "'\(describeASCII(byte))'"
  }

  /// Printable ASCII as itself, anything else as a code, so a message never carries raw bytes.
  private func describeASCII(_ byte: UInt8) -> String {
    if byte >= 0x21 && byte < 0x7F { return String(UnicodeScalar(byte)) }
    let hex = String(byte, radix: 16, uppercase: true)
    return "0x" + (hex.count == 1 ? "0" + hex : hex)
  }

  /// Line and column are computed only when an error is reported, so parsing stays a single pass.
  private func error(at offset: Int, _ kind: JSONError.Reason, _ message: String) -> JSONError {
    var line = 1
    var column = 1
    let start = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
    for byte in bytes[min(start, offset)..<min(offset, bytes.count)] {
      if byte == 0x0A {
        line += 1
        column = 1
      } else if byte & 0xC0 != 0x80 {
        // Count the first byte of each UTF-8 sequence only, so a column is a character.
        column += 1
      }
    }
    return JSONError(offset: offset, line: line, column: column, reason: JSONError.Reason(kind.code, message: message))
  }
}
