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
    guard let first = headers.firstIndex(lowercaseName: "authorization") else { return .absent }
    guard var next = headers.nextIndex(lowercaseName: "authorization", after: first) else {
      guard isBearerScheme(headers.valueBytes(at: first)) else { return .absent }
      let token = tokenBytes(headers.valueBytes(at: first))
      // Its bytes are not checked here: the verifier reads base64url strictly, and a token
      // found in the cache of verified tokens matched a verified one byte for byte. A scan
      // here would cost every request what only a bad token needs.
      guard !token.isEmpty, token.count <= maxTokenBytes else { return .malformed }
      return .token(field: first)
    }
    // More than one `Authorization`: ambiguous when any of them is a bearer token.
    var bearer = isBearerScheme(headers.valueBytes(at: first))
    while !bearer {
      bearer = isBearerScheme(headers.valueBytes(at: next))
      guard let after = headers.nextIndex(lowercaseName: "authorization", after: next) else { break }
      next = after
    }
    return bearer ? .malformed : .absent
  }

  /// The token's bytes in the value of `Authorization` (after `Bearer` and its spaces).
  static func tokenBytes(_ value: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    value.dropFirst(6).drop { $0 == 0x20 }
  }

  /// `Bearer ` (scheme names are case-insensitive, RFC 7235 §2.1).
  static func isBearerScheme(_ value: ArraySlice<UInt8>) -> Bool {
    ASCIIBytes.startsWithLowercase(value, "bearer ")
  }
}
