/// Writes the envelope bodies (Docs/envelope.md) as bytes, members in this order and no spaces:
/// `{"code":0,"datas":<value or null>,"message":""}` and
/// `{"code":<status>,"datas":null,"message":"<escaped>"}`.
public enum JSONEnvelopeWriter {
  /// The success envelope around raw value bytes (already valid JSON, written as they are),
  /// or `null` when `datas` is nil (empty body, 204, key path absent).
  public static func appendSuccess(datas: UnsafeRawBufferPointer?, to out: inout [UInt8]) {
    out.reserveCapacity(out.count + successOverhead + (datas?.count ?? 4))
    out.append(contentsOf: successPrefix)
    if let datas {
      out.append(contentsOf: datas)
    } else {
      out.append(contentsOf: null)
    }
    out.append(contentsOf: successSuffix)
  }

  /// `appendSuccess` over an array slice (such as `body[range]`).
  public static func appendSuccess(datas: ArraySlice<UInt8>?, to out: inout [UInt8]) {
    guard let datas else { return appendSuccess(datas: UnsafeRawBufferPointer?.none, to: &out) }
    datas.withUnsafeBytes { appendSuccess(datas: $0, to: &out) }
  }

  /// The byte count `appendSuccess` writes for a value of `datasCount` bytes (nil for null),
  /// so a Content-Length can be written before the body.
  public static func successLength(datasCount: Int?) -> Int { successOverhead + (datasCount ?? 4) }

  /// The error envelope: `code` is the status, `message` the JSON-escaped text.
  public static func appendFailure(code: Int, message: String, to out: inout [UInt8]) {
    out.append(contentsOf: failurePrefix)
    appendDecimal(code, to: &out)
    out.append(contentsOf: failureMiddle)
    JSONStringWriter.appendQuoted(message, to: &out)
    out.append(0x7D)
  }

  /// `appendFailure` into a new array.
  public static func failure(code: Int, message: String) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(failurePrefix.count + failureMiddle.count + 8 + message.utf8.count)
    appendFailure(code: code, message: message, to: &out)
    return out
  }

  private static let successPrefix = Array(#"{"code":0,"datas":"#.utf8)
  private static let successSuffix = Array(#","message":""}"#.utf8)
  private static let successOverhead = successPrefix.count + successSuffix.count
  private static let null = Array("null".utf8)
  private static let failurePrefix = Array(#"{"code":"#.utf8)
  private static let failureMiddle = Array(#","datas":null,"message":"#.utf8)

  private static func appendDecimal(_ value: Int, to out: inout [UInt8]) {
    if value < 0 { out.append(0x2D) }
    let magnitude = value.magnitude
    var divisor: UInt = 1
    while divisor <= magnitude / 10 { divisor *= 10 }
    repeat {
      out.append(0x30 + UInt8(magnitude / divisor % 10))
      divisor /= 10
    } while divisor > 0
  }
}

/// JSON string escaping of arbitrary text: `"` and `\` escaped, control characters as
/// `\b \f \n \r \t` or `\u00XX`, everything else (including non-ASCII) written as UTF-8.
public enum JSONStringWriter {
  /// Appends `"<escaped text>"`.
  public static func appendQuoted(_ text: String, to out: inout [UInt8]) {
    out.append(0x22)
    var text = text
    // Contiguous UTF-8 (native strings always are after this call) lets runs of plain bytes
    // be copied at once.
    text.makeContiguousUTF8()
    text.utf8.withContiguousStorageIfAvailable { appendEscaped($0, to: &out) }
    out.append(0x22)
  }

  /// Appends the escaped form of UTF-8 bytes, without quotes.
  public static func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
    var runStart = 0
    for (i, byte) in utf8.enumerated() where byte < 0x20 || byte == 0x22 || byte == 0x5C {
      if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<i])) }
      runStart = i + 1
      out.append(0x5C)
      switch byte {
      case 0x22, 0x5C: out.append(byte)
      case 0x08: out.append(0x62)
      case 0x0C: out.append(0x66)
      case 0x0A: out.append(0x6E)
      case 0x0D: out.append(0x72)
      case 0x09: out.append(0x74)
      default:
        let hex: StaticString = "0123456789abcdef"
        out.append(0x75)
        out.append(0x30)
        out.append(0x30)
        out.append(hex.utf8Start[Int(byte >> 4)])
        out.append(hex.utf8Start[Int(byte & 0xF)])
      }
    }
    if runStart < utf8.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...])) }
  }
}
