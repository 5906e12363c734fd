/// A strict RFC 8259 parser that builds a `JSONValue` tree.
///
/// Strict means: one value with optional whitespace around it, no comments, no trailing
/// commas, no single quotes, no leading zeros or `+` in numbers, no NaN/Infinity, no raw
/// control characters in strings, valid UTF-8, no lone surrogate escapes, and no duplicate
/// keys in an object (a config with two `"upstream"` keys is ambiguous, so it is an error).
/// A leading UTF-8 byte order mark is skipped, which RFC 8259 §8.1 allows. Errors are
/// `JSONError`s with line and column filled in and a message that says what was expected.
///
/// The grammar is `JSONScanner`'s, the one the validators use: the scanner runs over the
/// whole document first, and the tree is then built from the bytes before the first one it
/// refused, which are known to be a valid start of a document. So this walk checks nothing
/// about the syntax; it decodes, checks what the grammar does not say (duplicate keys,
/// numbers a `Double` cannot hold) and, where it reaches the scanner's stopping point, says
/// what was wrong there in terms of what it was reading.
public struct JSONParser {
  /// Bounds that keep a hostile or mistaken input from using unbounded memory or stack.
  public struct Limits: Sendable {
    public var maxBytes: Int
    public var maxDepth: Int

    public init(maxBytes: Int, maxDepth: Int) {
      self.maxBytes = maxBytes
      self.maxDepth = maxDepth
    }

    /// Limits for config files: far above any real config, including large stub bodies.
    public static let config = Limits(maxBytes: 16 << 20, maxDepth: 64)
  }

  private let bytes: [UInt8]
  private let limits: Limits
  /// The first byte the scanner refused, or the document length when it accepted it all.
  private let end: Int
  /// What the scanner found wrong at `end`; nil when the document is valid JSON.
  private let refused: JSONError.Reason?
  private var position: Int

  private init(bytes: [UInt8], limits: Limits) {
    self.bytes = bytes
    self.limits = limits
    let start = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
    let verdict = Self.scan(bytes, from: start, limits: limits, resumingString: false)
    end = verdict?.offset ?? bytes.count
    refused = verdict?.reason
    position = start
  }

  /// Parses one complete JSON text.
  public static func parse(_ bytes: [UInt8], limits: Limits = .config) throws(JSONError) -> JSONValue {
    if bytes.count > limits.maxBytes {
      throw error(
        in: bytes, at: limits.maxBytes, .documentTooLarge,
        "document is larger than the limit of \(limits.maxBytes) bytes")
    }
    var parser = JSONParser(bytes: bytes, limits: limits)
    parser.skipWhitespace()
    let value = try parser.parseValue()
    parser.skipWhitespace()
    if parser.position < bytes.count { throw parser.refusal(expecting: nil) }
    return value
  }

  /// Parses one complete JSON text given as a string.
  public static func parse(_ text: String, limits: Limits = .config) throws(JSONError) -> JSONValue {
    try parse(Array(text.utf8), limits: limits)
  }

  /// `JSONScanner` over `bytes` from `offset` to the end: the first error, or nil.
  private static func scan(_ bytes: [UInt8], from offset: Int, limits: Limits, resumingString: Bool) -> JSONError? {
    // A negative limit refuses every container, as 0 does.
    let options = JSONValidationOptions(maxDepth: max(0, limits.maxDepth))
    var scanner = JSONScanner(options: options, startingAt: offset, inString: resumingString)
    return bytes.withUnsafeBytes { scanner.scanToEnd(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
  }

  // MARK: - Values

  private mutating func parseValue() throws(JSONError) -> JSONValue {
    guard let byte = peek() else { throw refusal(expecting: .value) }
    // The scanner accepted this byte as the start of a value. It also refused nesting deeper
    // than the limit, which bounds this recursion.
    switch byte {
    case UInt8(ascii: "{"): return try parseObject()
    case UInt8(ascii: "["): return try parseArray()
    case UInt8(ascii: "\""): return .string(try parseString())
    case UInt8(ascii: "t"): try skipLiteral("true"); return .bool(true)
    case UInt8(ascii: "f"): try skipLiteral("false"); return .bool(false)
    case UInt8(ascii: "n"): try skipLiteral("null"); return .null
    default: return .number(try parseNumber())
    }
  }

  private mutating func parseObject() throws(JSONError) -> JSONValue {
    position += 1  // "{"
    var members: [(key: String, value: JSONValue)] = []
    var seenKeys: Set<String> = []
    skipWhitespace()
    if peek() == UInt8(ascii: "}") {
      position += 1
      return .object(members)
    }
    while true {
      skipWhitespace()
      guard position < end else { throw refusal(expecting: .key) }
      let keyStart = position
      let key = try parseString()
      if !seenKeys.insert(key).inserted {
        throw Self.error(
          in: bytes, at: keyStart, .duplicateKey, "duplicate key \(JSONValue.string(key).serializedString())")
      }
      skipWhitespace()
      guard position < end else { throw refusal(expecting: .colon) }
      position += 1  // ":"
      skipWhitespace()
      members.append((key: key, value: try parseValue()))
      skipWhitespace()
      guard let byte = peek() else { throw refusal(expecting: .commaOrBrace) }
      position += 1
      if byte == UInt8(ascii: "}") { return .object(members) }
    }
  }

  private mutating func parseArray() throws(JSONError) -> JSONValue {
    position += 1  // "["
    var elements: [JSONValue] = []
    skipWhitespace()
    if peek() == UInt8(ascii: "]") {
      position += 1
      return .array(elements)
    }
    while true {
      skipWhitespace()
      elements.append(try parseValue())
      skipWhitespace()
      guard let byte = peek() else { throw refusal(expecting: .commaOrBracket) }
      position += 1
      if byte == UInt8(ascii: "]") { return .array(elements) }
    }
  }

  private mutating func skipLiteral(_ literal: StaticString) throws(JSONError) {
    // The scanner stopped inside the literal when it does not fit before `end`.
    guard position + literal.utf8CodeUnitCount <= end else {
      throw Self.error(in: bytes, at: position, .invalidLiteral, "invalid literal, expected '\(literal)'")
    }
    position += literal.utf8CodeUnitCount
  }

  // MARK: - Numbers

  private mutating func parseNumber() throws(JSONError) -> JSONNumber {
    let start = position
    var isInteger = true
    while let byte = peek(),
      byte &- UInt8(ascii: "0") < 10 || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "+")
        || byte == UInt8(ascii: ".") || byte | 0x20 == UInt8(ascii: "e")
    {
      if byte == UInt8(ascii: ".") || byte | 0x20 == UInt8(ascii: "e") { isInteger = false }
      position += 1
    }
    if position == end, let refused {
      // The scanner stopped in this number or right after it; in the number when it does not
      // end in a digit, or when the next digit follows a leading zero.
      if refused == .leadingZero {
        throw Self.error(in: bytes, at: start, .leadingZero, "invalid number, leading zeros are not allowed")
      }
      let last = bytes[position - 1]
      if last &- UInt8(ascii: "0") >= 10 {
        let expected =
          last == UInt8(ascii: ".")
          ? "a digit after '.'" : position - 1 == start ? "a digit" : "a digit in the exponent"
        throw Self.error(in: bytes, at: position, .invalidNumber, "invalid number, expected \(expected)")
      }
    }
    let text = String(decoding: bytes[start..<position], as: UTF8.self)
    guard let double = Double(text), double.isFinite else {
      throw Self.error(in: bytes, at: start, .numberOutOfRange, "number is out of range")
    }
    return JSONNumber(double: double, integer: isInteger ? Int64(text) : nil)
  }

  // MARK: - Strings

  private mutating func parseString() throws(JSONError) -> String {
    let quote = position
    let end = self.end
    let decoded: (string: String, end: Int)? = bytes.withUnsafeBytes { raw in
      // The cursor exists (a string starts at `quote`). A string that does not close before
      // `end` is one the scanner stopped in.
      guard let cursor = JSONCursor(raw), let found = cursor.stringEnd(quote), found.end <= end else { return nil }
      let content = (quote + 1)..<(found.end - 1)
      guard found.hasEscapes else {
        return (String(decoding: raw[content], as: UTF8.self), found.end)
      }
      var utf8: [UInt8] = []
      utf8.reserveCapacity(content.count)
      _ = cursor.decodeString(content) { byte in
        utf8.append(byte)
        return true
      }
      return (String(decoding: utf8, as: UTF8.self), found.end)
    }
    guard let decoded else { throw stringRefusal(quote: quote, stop: end, reason: refused ?? .unexpectedEnd) }
    position = decoded.end
    return decoded.string
  }

  /// The error for a string that starts at `quote` and in which the scanner stopped at `stop`.
  private func stringRefusal(quote: Int, stop: Int, reason: JSONError.Reason) -> JSONError {
    if reason == .controlCharacterInString {
      return Self.error(
        in: bytes, at: stop, .controlCharacterInString,
        "control character in string (write it as an escape such as \\n)")
    }
    if reason == .invalidUTF8 { return utf8Refusal(quote: quote, stop: stop) }
    let escape = lastEscape(quote: quote, stop: stop)
    switch reason {
    case .invalidEscape:
      return Self.error(
        in: bytes, at: escape?.start ?? stop, .invalidEscape, "invalid escape '\\\(Self.describeASCII(bytes[stop]))'")
    case .invalidUnicodeEscape:
      return Self.error(
        in: bytes, at: escape?.start ?? stop, .invalidUnicodeEscape, "invalid \\u escape, expected four hex digits")
    case .loneSurrogate:
      return Self.error(in: bytes, at: escape?.start ?? stop, .loneSurrogate, "lone surrogate in \\u escape")
    default:
      // The document ended in the string.
      guard let escape, !escape.isComplete || escape.isHighSurrogate else {
        return Self.error(in: bytes, at: quote, .unexpectedEnd, "unterminated string")
      }
      if escape.isUnicode && !escape.isComplete {
        return Self.error(
          in: bytes, at: escape.start, .invalidUnicodeEscape, "invalid \\u escape, expected four hex digits")
      }
      if escape.isHighSurrogate || escape.followsHighSurrogate {
        return Self.error(in: bytes, at: escape.start, .loneSurrogate, "lone surrogate in \\u escape")
      }
      return Self.error(in: bytes, at: escape.start, .unexpectedEnd, "unterminated escape")
    }
  }

  /// An escape in a string that the scanner stopped in or right after.
  private struct Escape {
    /// Where this parser reports its errors: a surrogate pair is one escape, so an error in
    /// the low half is reported at the high half.
    var start: Int
    var isUnicode: Bool
    /// Whether all of it (`\n`, or `\u` and four digits) comes before the stop.
    var isComplete: Bool
    var isHighSurrogate: Bool
    var followsHighSurrogate: Bool
  }

  /// The escape that the string starting at `quote` ends in or with before `stop`, or nil when
  /// plain text comes after the last one.
  private func lastEscape(quote: Int, stop: Int) -> Escape? {
    var last: Escape?
    var i = quote + 1
    while i < stop {
      guard bytes[i] == UInt8(ascii: "\\") else {
        last = nil
        i += 1
        continue
      }
      // The scanner lets only the `\u` of a low half follow a high surrogate escape.
      let pairedWith = last?.isHighSurrogate == true ? last?.start : nil
      let isUnicode = i + 1 < stop && bytes[i + 1] == UInt8(ascii: "u")
      let length = min(isUnicode ? 6 : 2, stop - i)
      var unit: UInt32 = 0
      if isUnicode && length == 6 {
        for k in (i + 2)..<(i + 6) { unit = unit << 4 | JSONScanner.hexValue(bytes[k]) }
      }
      last = Escape(
        start: pairedWith ?? i, isUnicode: isUnicode, isComplete: length == (isUnicode ? 6 : 2),
        isHighSurrogate: length == 6 && unit & 0xFC00 == 0xD800, followsHighSurrogate: pairedWith != nil)
      i += length
    }
    return last
  }

  /// This parser checked a string's UTF-8 only at its closing quote, so an earlier problem in
  /// the same string (a control character, a bad escape, no closing quote) is the one it
  /// reported. The scanner stops at the first invalid sequence, so it is run again from there,
  /// as inside a string, until the string ends or something else is wrong in it.
  private func utf8Refusal(quote: Int, stop: Int) -> JSONError {
    var resume = stop
    while true {
      let later = Self.scan(bytes, from: resume, limits: limits, resumingString: true)
      // No error, or one after the string closed: only the UTF-8 was wrong.
      guard let later, later.reason != .trailingContent else {
        return Self.error(in: bytes, at: quote, .invalidUTF8, "string is not valid UTF-8")
      }
      guard later.reason == .invalidUTF8 else {
        return stringRefusal(quote: quote, stop: later.offset, reason: later.reason)
      }
      // A bad byte where a sequence would start is skipped; one where a continuation byte
      // should be is read again as the start of what follows.
      resume = later.offset == resume ? resume + 1 : later.offset
    }
  }

  // MARK: - Positions and messages

  private func peek() -> UInt8? {
    position < end ? bytes[position] : nil
  }

  private mutating func skipWhitespace() {
    while position < end && JSONScanner.isWhitespace(bytes[position]) { position += 1 }
  }

  /// What the parser was about to read when it reached the scanner's stopping point, as its
  /// messages say it.
  private enum Expectation: String {
    case value = "a value"
    case key = "a string key"
    case colon = "':'"
    case commaOrBrace = "',' or '}'"
    case commaOrBracket = "',' or ']'"
  }

  /// The error where the walk reached `end` between tokens: what was found there, and what
  /// could have come instead (nil: the end of the document, after the top-level value).
  private func refusal(expecting expectation: Expectation?) -> JSONError {
    if refused == .depthLimitExceeded {
      return Self.error(
        in: bytes, at: position, .depthLimitExceeded, "nesting is deeper than the limit of \(limits.maxDepth)")
    }
    let found = position < bytes.count ? "'\(Self.describeASCII(bytes[position]))'" : "end of document"
    guard let expectation else {
      return Self.error(in: bytes, at: position, .trailingContent, "unexpected \(found) after the end of the document")
    }
    let code: JSONError.Reason = position < bytes.count ? .unexpectedByte : .unexpectedEnd
    return Self.error(in: bytes, at: position, code, "unexpected \(found), expected \(expectation.rawValue)")
  }

  /// Printable ASCII as itself, anything else as a code, so a message never carries raw bytes.
  private static func describeASCII(_ byte: UInt8) -> String {
    if byte >= 0x21 && byte < 0x7F { return String(UnicodeScalar(byte)) }
    let hex = String(byte, radix: 16, uppercase: true)
    return "0x" + (hex.count == 1 ? "0" + hex : hex)
  }

  /// Line and column are computed only when an error is reported.
  private static func error(
    in bytes: [UInt8], at offset: Int, _ kind: JSONError.Reason, _ message: String
  ) -> JSONError {
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
