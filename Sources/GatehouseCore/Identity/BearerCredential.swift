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
    // Its bytes are not checked here: the verifier reads base64url strictly, and a token
    // found in the cache of verified tokens matched a verified one byte for byte. A scan
    // here would cost every request what only a bad token needs.
    guard !token.isEmpty, token.count <= maxTokenBytes else { return .malformed }
    return found
  }

  /// The token's bytes in the value of `Authorization` (after `Bearer` and its spaces).
  static func tokenBytes(_ value: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    value.dropFirst(6).drop { $0 == 0x20 }
  }

  /// `Bearer ` (scheme names are case-insensitive, RFC 7235 §2.1). Compared with a literal's
  /// bytes: no array is made per request.
  static func isBearerScheme(_ value: ArraySlice<UInt8>) -> Bool {
    let scheme: StaticString = "bearer "
    guard value.count >= scheme.utf8CodeUnitCount else { return false }
    var index = value.startIndex
    for offset in 0..<scheme.utf8CodeUnitCount {
      let byte = value[index]
      if (byte &- 0x41 < 26 ? byte | 0x20 : byte) != scheme.utf8Start[offset] { return false }
      index += 1
    }
    return true
  }
}
