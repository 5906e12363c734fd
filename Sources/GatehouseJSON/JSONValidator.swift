/// Strict RFC 8259 validation of a whole document in memory: structure, strings (escapes,
/// UTF-8, no raw controls), numbers, literals, whitespace, and a nesting limit. Builds nothing
/// and allocates nothing (the depth stack, one bit per level, lives on the stack).
public enum JSONValidator {
  /// Throws the first error (offset and reason) or returns when `bytes` is one valid document.
  public static func validate(
    _ bytes: UnsafeRawBufferPointer, options: JSONValidationOptions = JSONValidationOptions()
  ) throws(JSONError) {
    if let error = firstError(in: bytes, options: options) { throw error }
  }

  /// `validate` over an array.
  public static func validate(
    _ bytes: [UInt8], options: JSONValidationOptions = JSONValidationOptions()
  ) throws(JSONError) {
    if let error = bytes.withUnsafeBytes({ firstError(in: $0, options: options) }) { throw error }
  }

  /// The first error in `bytes`, or nil when it is one valid document.
  public static func firstError(
    in bytes: UnsafeRawBufferPointer, options: JSONValidationOptions = JSONValidationOptions()
  ) -> JSONError? {
    var scanner = JSONScanner(options: options)
    return scanner.scanToEnd(bytes)
  }

  /// Whether `bytes` is one valid document.
  public static func isValid(
    _ bytes: UnsafeRawBufferPointer, options: JSONValidationOptions = JSONValidationOptions()
  ) -> Bool {
    firstError(in: bytes, options: options) == nil
  }
}

/// Validation of a document that arrives in pieces of any size (a streamed body too big to
/// buffer). Keeps only a few words of state and a depth stack of one bit per level, and
/// reports an error from the first byte after which no continuation could be valid.
///
/// ```
/// var validator = JSONStreamingValidator()
/// for piece in body { try validator.feed(piece) }
/// try validator.finish()
/// ```
public struct JSONStreamingValidator: Sendable {
  private var scanner: JSONScanner
  /// One bit per open container, allocated once for `maxDepth` (64 bytes for 512 levels).
  private var stack: [UInt64]

  public init(options: JSONValidationOptions = JSONValidationOptions()) {
    scanner = JSONScanner(options: options)
    stack = [UInt64](repeating: 0, count: JSONScanner.stackWords(maxDepth: options.maxDepth))
  }

  /// Bytes fed so far (without the piece that failed, if any).
  public var bytesFed: Int { scanner.consumed }

  /// Whether the bytes so far form a complete document (more whitespace may still follow).
  public var isComplete: Bool {
    switch scanner.mode {
    case .done: return true
    case .numberZero, .numberInteger, .numberFraction, .numberExponent: return scanner.depth == 0
    case .value, .arrayFirstValue, .objectFirstKey, .key, .colon, .afterValue, .string, .escape, .unicodeEscape,
      .surrogateBackslash, .surrogateU, .utf8Continuation, .numberMinus, .numberDot, .numberExponentMark,
      .numberExponentSign, .literal, .failed:
      return false
    }
  }

  /// Checks the next piece. After an error every call throws that same error.
  public mutating func feed(_ bytes: UnsafeRawBufferPointer) throws(JSONError) {
    let error = stack.withUnsafeMutableBufferPointer { scanner.scan(bytes, stack: $0.baseAddress!) }
    if let error { throw error }
  }

  /// `feed` over an array.
  public mutating func feed(_ bytes: [UInt8]) throws(JSONError) {
    let error = bytes.withUnsafeBytes { raw in
      stack.withUnsafeMutableBufferPointer { scanner.scan(raw, stack: $0.baseAddress!) }
    }
    if let error { throw error }
  }

  /// Checks that the pieces fed so far are one complete document.
  public mutating func finish() throws(JSONError) {
    if let error = scanner.finish() { throw error }
  }
}
