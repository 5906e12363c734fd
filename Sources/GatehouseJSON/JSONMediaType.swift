/// Whether a Content-Type names JSON: `application/json` or an `application/*+json` type
/// (`application/problem+json`), any letter case, optional parameters
/// (`application/json; charset=utf-8`), optional whitespace around the whole value and
/// before `;`. `text/json`, `application/jsonp`, `application/json-seq` and anything else are
/// not JSON to the envelope (their bodies pass through unchanged).
public enum JSONMediaType {
  /// Checks a Content-Type header value. Inlinable so callers in other modules get a
  /// contiguous-bytes fast path instead of an unspecialized generic walk.
  @inlinable
  public static func isJSON<Bytes: Collection<UInt8>>(_ contentType: Bytes) -> Bool {
    if let verdict = contentType.withContiguousStorageIfAvailable({ isJSON(bytes: UnsafeRawBufferPointer($0)) }) {
      return verdict
    }
    return Array(contentType).withUnsafeBytes { isJSON(bytes: $0) }
  }

  /// Checks a Content-Type header value given as raw bytes.
  public static func isJSON(bytes contentType: UnsafeRawBufferPointer) -> Bool {
    var state = Parse.leadingSpace
    var subtypeLength = 0
    // The last five subtype bytes, lowercased, to test for a `+json` suffix without a buffer.
    var subtypeTail: UInt64 = 0
    var typeMatched = 0  // bytes of "application" matched so far
    for raw in contentType {
      let byte = raw | (raw &- 0x41 < 26 ? 0x20 : 0)  // ASCII lowercase
      switch state {
      case .leadingSpace:
        if byte == 0x20 || byte == 0x09 { continue }
        state = .type
        fallthrough
      case .type:
        if byte == 0x2F {
          guard typeMatched == application.count else { return false }
          state = .subtype
        } else {
          guard typeMatched < application.count, application[typeMatched] == byte else { return false }
          typeMatched += 1
        }
      case .subtype:
        if byte == 0x3B {
          state = .parameters
        } else if byte == 0x20 || byte == 0x09 {
          state = .afterSubtype
        } else {
          guard isTokenByte(byte) else { return false }
          subtypeLength += 1
          subtypeTail = subtypeTail &<< 8 | UInt64(byte)
        }
      case .afterSubtype:
        if byte == 0x3B {
          state = .parameters
        } else if byte != 0x20 && byte != 0x09 {
          return false
        }
      case .parameters:
        // Not inspected: `charset` and the like do not change what the body is.
        continue
      }
    }
    guard state == .subtype || state == .afterSubtype || state == .parameters else { return false }
    let json: UInt64 = 0x6A_73_6F_6E  // "json"
    let plusJSON: UInt64 = 0x2B_6A_73_6F_6E  // "+json"
    if subtypeLength == 4 && subtypeTail & 0xFFFF_FFFF == json { return true }
    return subtypeLength > 5 && subtypeTail & 0xFF_FFFF_FFFF == plusJSON
  }

  /// `isJSON` over a String.
  public static func isJSON(_ contentType: String) -> Bool { isJSON(contentType.utf8) }

  private static let application = Array("application".utf8)

  private enum Parse {
    case leadingSpace, type, subtype, afterSubtype, parameters
  }

  /// RFC 9110 `tchar`.
  private static func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case 0x30...0x39, 0x61...0x7A, 0x41...0x5A: return true
    case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: return true
    default: return false
    }
  }
}
