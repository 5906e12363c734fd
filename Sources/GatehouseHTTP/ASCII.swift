/// Byte classes of RFC 9110/9112, as bit masks so each test is a shift and an AND on the
/// hot path (a lookup table would cost a lazy-global check per access).
@usableFromInline
enum ASCII {
  @usableFromInline static let cr: UInt8 = 0x0D
  @usableFromInline static let lf: UInt8 = 0x0A
  @usableFromInline static let space: UInt8 = 0x20
  @usableFromInline static let tab: UInt8 = 0x09
  @usableFromInline static let colon: UInt8 = 0x3A
  @usableFromInline static let semicolon: UInt8 = 0x3B
  @usableFromInline static let equals: UInt8 = 0x3D
  @usableFromInline static let comma: UInt8 = 0x2C
  @usableFromInline static let quote: UInt8 = 0x22
  @usableFromInline static let backslash: UInt8 = 0x5C
  @usableFromInline static let question: UInt8 = 0x3F

  /// tchar: "!#$%&'*+-.^_`|~", digits and letters.
  @inlinable @inline(__always)
  static func isTokenChar(_ byte: UInt8) -> Bool {
    if byte < 64 { return (0x03ff_6cfa_0000_0000 as UInt64) >> UInt64(byte) & 1 == 1 }
    if byte < 128 { return (0x57ff_ffff_c7ff_fffe as UInt64) >> UInt64(byte - 64) & 1 == 1 }
    return false
  }

  /// Bytes allowed in a Host value: unreserved, sub-delims, ":", "[", "]" and "%".
  @inlinable @inline(__always)
  static func isHostChar(_ byte: UInt8) -> Bool {
    if byte < 64 { return (0x2fff_7ff2_0000_0000 as UInt64) >> UInt64(byte) & 1 == 1 }
    if byte < 128 { return (0x47ff_fffe_afff_fffe as UInt64) >> UInt64(byte - 64) & 1 == 1 }
    return false
  }

  /// field-vchar, SP and HTAB: everything but controls (NUL, CR, LF included) and DEL.
  @inlinable @inline(__always)
  static func isFieldValueByte(_ byte: UInt8) -> Bool {
    (byte >= 0x20 && byte != 0x7F) || byte == tab
  }

  /// Whether each of the eight bytes of `word` is a field-value byte other than HTAB
  /// (0x20–0x7E or 0x80–0xFF): the bulk of a value, eight bytes a step. No byte below 0x20
  /// means the subtraction borrows nowhere, so the test is exact: a byte below 0x20 or a
  /// 0x7F (zero after the XOR) sets its top bit in one of the two terms (Bit Twiddling
  /// Hacks' "has less than" and "has zero byte").
  @inlinable @inline(__always)
  static func allPlainValueBytes(_ word: UInt64) -> Bool {
    let ones: UInt64 = 0x0101_0101_0101_0101
    let tops: UInt64 = 0x8080_8080_8080_8080
    let belowSpace = (word &- ones &* 0x20) & ~word & tops
    let flipped = word ^ (ones &* 0x7F)
    let delete = (flipped &- ones) & ~flipped & tops
    return belowSpace | delete == 0
  }

  /// RFC 3986 `pchar` without `%` (checked with the two hex digits after it): unreserved,
  /// sub-delims, ":" and "@". Not `` "<>[\]^`{|} ``, which no URI may hold unencoded: `\` is a
  /// path separator to some servers, and the rest only ever show up in probes.
  @inlinable @inline(__always)
  static func isPathChar(_ byte: UInt8) -> Bool {
    if byte < 64 { return (0x2fff_7fd2_0000_0000 as UInt64) >> UInt64(byte) & 1 == 1 }
    if byte < 128 { return (0x47ff_fffe_87ff_ffff as UInt64) >> UInt64(byte - 64) & 1 == 1 }
    return false
  }

  /// Visible ASCII but "#": a fragment never belongs in a request target (RFC 9112 §3.2).
  @inlinable @inline(__always)
  static func isTargetByte(_ byte: UInt8) -> Bool {
    byte > 0x20 && byte < 0x7F && byte != 0x23
  }

  @inlinable @inline(__always)
  static func isWhitespace(_ byte: UInt8) -> Bool { byte == space || byte == tab }

  @inlinable @inline(__always)
  static func isDigit(_ byte: UInt8) -> Bool { byte &- 0x30 < 10 }

  @inlinable @inline(__always)
  static func hexValue(_ byte: UInt8) -> UInt64? {
    switch byte {
    case 0x30...0x39: return UInt64(byte &- 0x30)
    case 0x41...0x46: return UInt64(byte &- 0x37)
    case 0x61...0x66: return UInt64(byte &- 0x57)
    default: return nil
    }
  }

  /// Lowercases ASCII letters only.
  @inlinable @inline(__always)
  static func lower(_ byte: UInt8) -> UInt8 {
    byte &- 0x41 < 26 ? byte | 0x20 : byte
  }

  /// Case-insensitive comparison of `bytes` with an already-lowercase ASCII name.
  @inlinable
  static func equalsLowercase(
    _ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int, _ lowercase: StaticString
  ) -> Bool {
    guard end - start == lowercase.utf8CodeUnitCount else { return false }
    let expected = lowercase.utf8Start
    var i = 0
    while i < end - start {
      if lower(bytes[start + i]) != expected[i] { return false }
      i += 1
    }
    return true
  }
}
