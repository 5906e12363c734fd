import GatehouseHTTP

/// The bearer token a request carries (RFC 6750 §2.1: `Authorization: Bearer <token>`),
/// read from the head's bytes.
enum BearerCredential: Equatable {
  /// No `Authorization` field with the Bearer scheme.
  case absent
  /// Where the token's bytes are in the head's value of field `field`.
  case token(field: Int)
  /// Two `Authorization` fields, or a Bearer value that is no token: which credential
  /// counts is what a confused or crafted request leaves open, so it counts as invalid.
  case malformed

  /// Tokens longer than this are refused before any parsing (JWTs from identity providers
  /// are a few hundred bytes to 2 KiB).
  static let maxTokenBytes = 8192

  static func find(in headers: HTTPHeaders) -> BearerCredential {
    var found = BearerCredential.absent
    var fields = 0
    for index in 0..<headers.count where headers.nameEquals(at: index, "authorization") {
      fields += 1
      if isBearerScheme(headers.valueBytes(at: index)) { found = .token(field: index) }
    }
    if fields > 1 { return found == .absent ? .absent : .malformed }
    guard case .token(let index) = found else { return found }
    let token = tokenBytes(headers.valueBytes(at: index))
    // token68 (RFC 7235 §2.1): a JWT is three base64url parts joined by dots; anything with
    // a space or another byte is not one.
    guard !token.isEmpty, token.count <= maxTokenBytes, token.allSatisfy(isToken68Byte) else { return .malformed }
    return found
  }

  /// The token's bytes in the value of `Authorization` (after `Bearer` and its spaces).
  static func tokenBytes(_ value: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    value.dropFirst(6).drop { $0 == 0x20 }
  }

  /// `Bearer ` (scheme names are case-insensitive, RFC 7235 §2.1).
  static func isBearerScheme(_ value: ArraySlice<UInt8>) -> Bool {
    let scheme = Array("bearer ".utf8)
    guard value.count >= scheme.count else { return false }
    for (byte, expected) in zip(value, scheme) where (byte &- 0x41 < 26 ? byte | 0x20 : byte) != expected {
      return false
    }
    return true
  }

  private static func isToken68Byte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
      UInt8(ascii: "~"), UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="):
      return true
    default:
      return false
    }
  }
}
