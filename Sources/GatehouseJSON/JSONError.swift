/// Why bytes are not valid JSON, and where. One type for every JSON reader here: the
/// validators (whole buffer and streaming) and the tree parser (`JSONParser`).
///
/// `offset` is the index (from the start of the document, across all pieces fed to a
/// streaming validator) of the first byte that cannot be part of a valid document, or the
/// document length when it ends too early. The tree parser also fills in `line` and `column`
/// (1-based; the column counts characters, not bytes, so it matches what an editor shows);
/// the validators leave them 0, since the streaming one keeps no text to count lines in.
public struct JSONError: Error, Hashable, Sendable, CustomStringConvertible {
  /// Index of the offending byte in the whole document.
  public let offset: Int
  /// What is wrong there.
  public let reason: Reason
  /// 1-based line of `offset`, or 0 when not computed.
  public let line: Int
  /// 1-based column (in characters) of `offset`, or 0 when not computed.
  public let column: Int

  @inlinable public init(offset: Int, reason: Reason) {
    self.offset = offset
    self.reason = reason
    self.line = 0
    self.column = 0
  }

  public init(offset: Int, line: Int, column: Int, reason: Reason) {
    self.offset = offset
    self.reason = reason
    self.line = line
    self.column = column
  }

  /// Line and column follow from the offset in a given document, so they take no part in
  /// equality: an error is the same whether or not they were computed.
  public static func == (lhs: JSONError, rhs: JSONError) -> Bool {
    lhs.offset == rhs.offset && lhs.reason == rhs.reason
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(offset)
    hasher.combine(reason)
  }

  /// `line L, column C: reason` when the position is known (config errors print this),
  /// otherwise `invalid JSON at byte N: reason`.
  public var description: String {
    line > 0 ? "line \(line), column \(column): \(reason)" : "invalid JSON at byte \(offset): \(reason)"
  }

  /// A short reason. A struct over a private enum (as `HTTPParseError`) so that new reasons do
  /// not break callers.
  public struct Reason: Hashable, Sendable, CustomStringConvertible {
    @usableFromInline
    enum Code: UInt8, Sendable {
      case unexpectedEnd, unexpectedByte, byteOrderMark, trailingContent, trailingComma
      case expectedColon, expectedKey, expectedCommaOrClose, mismatchedClose
      case invalidLiteral, invalidNumber, leadingZero
      case controlCharacterInString, invalidEscape, invalidUnicodeEscape, loneSurrogate, invalidUTF8
      case depthLimitExceeded
      case duplicateKey, numberOutOfRange, documentTooLarge
    }

    @usableFromInline let code: Code
    /// The tree parser's wording, which says what it found and expected ("unexpected ',',
    /// expected a value"); nil for the validators, which use the fixed text of the code.
    @usableFromInline let message: String?

    @usableFromInline init(_ code: Code) {
      self.code = code
      self.message = nil
    }

    init(_ code: Code, message: String) {
      self.code = code
      self.message = message
    }

    /// The wording is not part of the reason's identity: `.unexpectedByte` from the parser
    /// equals `.unexpectedByte` from a validator.
    public static func == (lhs: Reason, rhs: Reason) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// The document stopped in the middle of a value (or was empty).
    public static let unexpectedEnd = Self(.unexpectedEnd)
    /// A byte that cannot start or continue a value here.
    public static let unexpectedByte = Self(.unexpectedByte)
    /// The document starts with 0xEF, the first byte of a UTF-8 byte order mark (the
    /// streaming validator cannot wait for the next two bytes). RFC 8259 §8.1: a BOM must not
    /// be added, and a parser may ignore it; we refuse it, as no valid document starts so.
    public static let byteOrderMark = Self(.byteOrderMark)
    /// Something other than whitespace after the top-level value.
    public static let trailingContent = Self(.trailingContent)
    /// `[1,]` or `{"a":1,}`.
    public static let trailingComma = Self(.trailingComma)
    /// An object key not followed by `:`.
    public static let expectedColon = Self(.expectedColon)
    /// An object member that does not start with a string key.
    public static let expectedKey = Self(.expectedKey)
    /// A value inside a container not followed by `,` or the closing bracket.
    public static let expectedCommaOrClose = Self(.expectedCommaOrClose)
    /// `]` closing an object or `}` closing an array.
    public static let mismatchedClose = Self(.mismatchedClose)
    /// Not `true`, `false` or `null`.
    public static let invalidLiteral = Self(.invalidLiteral)
    /// A number that does not follow the RFC 8259 grammar (`-`, `1.`, `.5`, `1e`, `+1`).
    public static let invalidNumber = Self(.invalidNumber)
    /// A number with a leading zero (`01`, `-00`).
    public static let leadingZero = Self(.leadingZero)
    /// A raw byte below 0x20 inside a string (must be escaped).
    public static let controlCharacterInString = Self(.controlCharacterInString)
    /// A backslash followed by something other than `"\/bfnrtu`.
    public static let invalidEscape = Self(.invalidEscape)
    /// `\u` not followed by four hexadecimal digits.
    public static let invalidUnicodeEscape = Self(.invalidUnicodeEscape)
    /// A `\uD800`–`\uDFFF` escape that is not half of a high-low pair.
    public static let loneSurrogate = Self(.loneSurrogate)
    /// Raw bytes that are not UTF-8: bad lead or continuation bytes, overlong forms, encoded
    /// surrogates, code points above U+10FFFF.
    public static let invalidUTF8 = Self(.invalidUTF8)
    /// More nested arrays and objects than the configured limit.
    public static let depthLimitExceeded = Self(.depthLimitExceeded)
    /// An object with two members of the same name (tree parser only: a config with two
    /// `"upstream"` keys is ambiguous).
    public static let duplicateKey = Self(.duplicateKey)
    /// A number too large for a `Double` (tree parser only).
    public static let numberOutOfRange = Self(.numberOutOfRange)
    /// A document larger than the parser's byte limit (tree parser only).
    public static let documentTooLarge = Self(.documentTooLarge)

    public var description: String {
      if let message { return message }
      switch code {
      case .unexpectedEnd: return "unexpected end of document"
      case .unexpectedByte: return "unexpected byte"
      case .byteOrderMark: return "byte order mark"
      case .trailingContent: return "content after the top-level value"
      case .trailingComma: return "trailing comma"
      case .expectedColon: return "expected ':' after object key"
      case .expectedKey: return "expected string key"
      case .expectedCommaOrClose: return "expected ',' or closing bracket"
      case .mismatchedClose: return "mismatched closing bracket"
      case .invalidLiteral: return "invalid literal"
      case .invalidNumber: return "invalid number"
      case .leadingZero: return "number with leading zero"
      case .controlCharacterInString: return "unescaped control character in string"
      case .invalidEscape: return "invalid escape"
      case .invalidUnicodeEscape: return "invalid \\u escape"
      case .loneSurrogate: return "lone surrogate escape"
      case .invalidUTF8: return "invalid UTF-8"
      case .depthLimitExceeded: return "nesting deeper than the limit"
      case .duplicateKey: return "duplicate key"
      case .numberOutOfRange: return "number is out of range"
      case .documentTooLarge: return "document is larger than the limit"
      }
    }
  }
}

/// Knobs for validation. The defaults are what the gateway uses.
public struct JSONValidationOptions: Hashable, Sendable {
  /// How many arrays and objects may be open at once; one more is `depthLimitExceeded`.
  /// Bounds the work a hostile body can cause and the size of the depth stack (one bit per level).
  public var maxDepth: Int
  /// Whether `\uD800` without a following low surrogate (or a lone `\uDC00`) is accepted.
  /// RFC 8259 §8.2 allows it in the grammar but says the result is unpredictable, and I-JSON
  /// (RFC 7493) forbids it; many strict parsers reject it, so the gateway rejects it by default
  /// rather than forward a body its clients may not decode.
  public var allowsLoneSurrogates: Bool

  public init(maxDepth: Int = 512, allowsLoneSurrogates: Bool = false) {
    precondition(maxDepth >= 0, "maxDepth must not be negative")
    self.maxDepth = maxDepth
    self.allowsLoneSurrogates = allowsLoneSurrogates
  }
}
