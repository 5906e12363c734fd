/// Why gzip decoding or encoding failed. A struct over a private enum (as `HTTPParseError`)
/// so that new reasons do not break callers; `detail` carries zlib's own message when it has one.
public struct GzipError: Error, Hashable, Sendable, CustomStringConvertible {
  @usableFromInline
  enum Code: UInt8, Sendable {
    case corruptData, truncated, outputLimitExceeded, outOfMemory, invalidArgument, inputTooLarge, internalError
  }

  @usableFromInline let code: Code
  /// zlib's message (`incorrect header check`, `invalid distance too far back`) or our own.
  public let detail: String

  @usableFromInline init(_ code: Code, _ detail: String = "") {
    self.code = code
    self.detail = detail
  }

  /// The bytes are not a gzip stream (bad header, bad deflate data, CRC or length mismatch,
  /// garbage after the last member).
  public static let corruptData = Self(.corruptData)
  /// The input ended inside a gzip member (or was empty).
  public static let truncated = Self(.truncated)
  /// Decoding would produce more than the decoder's `maxOutputBytes` (a zip bomb, or a body
  /// too big to wrap).
  public static let outputLimitExceeded = Self(.outputLimitExceeded)
  /// zlib could not allocate its state.
  public static let outOfMemory = Self(.outOfMemory)
  /// A compression level outside 0...9 or a negative size limit.
  public static let invalidArgument = Self(.invalidArgument)
  /// More than 4 GiB handed to the encoder at once (zlib counts input in 32 bits).
  public static let inputTooLarge = Self(.inputTooLarge)
  /// zlib returned a code that our use of it should never see.
  public static let internalError = Self(.internalError)

  /// Compares the reason only, so `error == .corruptData` works whatever zlib said.
  public static func == (lhs: GzipError, rhs: GzipError) -> Bool { lhs.code == rhs.code }
  public func hash(into hasher: inout Hasher) { hasher.combine(code) }

  public var description: String {
    let reason: String
    switch code {
    case .corruptData: reason = "corrupt gzip data"
    case .truncated: reason = "truncated gzip stream"
    case .outputLimitExceeded: reason = "decompressed size over the limit"
    case .outOfMemory: reason = "zlib out of memory"
    case .invalidArgument: reason = "invalid argument"
    case .inputTooLarge: reason = "input too large"
    case .internalError: reason = "zlib internal error"
    }
    return detail.isEmpty ? reason : "\(reason): \(detail)"
  }
}
