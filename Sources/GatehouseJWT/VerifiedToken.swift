import GatehouseJSON

/// What the gateway learned from a token that passed every check: who (`sub`), until when
/// (`exp`), allowed to do what (`scope` / `scp`, RFC 8693 §4.2), and the claims to forward.
public struct VerifiedToken: Sendable {
  /// `sub` (RFC 7519 §4.1.2) as UTF-8, when it is a string that names someone: an empty or
  /// blank one (`namesNobody`) counts as no `sub`.
  public var subject: [UInt8]?
  /// `exp` (RFC 7519 §4.1.4), required; a fraction is rounded down.
  public var expiresAt: Int64
  /// `scope` (a space-separated string, RFC 8693 §4.2) or, when absent, `scp` (an array of
  /// strings, or a space-separated string as some providers send it).
  public var scopes: [String]
  /// The payload's members, for `claimText`.
  let claims: JSONValue

  package init(subject: [UInt8]?, expiresAt: Int64, scopes: [String], claims: JSONValue = .object([])) {
    self.subject = subject
    self.expiresAt = expiresAt
    self.scopes = scopes
    self.claims = claims
  }

  /// Whether the token grants every one of `required` (RFC 6750 §3.1 `insufficient_scope`
  /// otherwise). An empty list is always granted.
  public func hasScopes(_ required: [String]) -> Bool {
    required.allSatisfy(scopes.contains)
  }

  /// Whether a `sub` value names nobody: empty, or white space only (any Unicode white
  /// space, as a provider's form field left blank or padded may carry). Such a token is
  /// treated as one without `sub`: two of them are not one user.
  public static func namesNobody(_ subject: String) -> Bool {
    subject.allSatisfy(\.isWhitespace)
  }

  /// The longest claim text forwarded as a header value.
  public static let maxClaimTextBytes = 1024

  /// A claim as an upstream header value: a string's bytes; a number or boolean as its JSON
  /// literal; an array or object as compact JSON. `null` counts as absent. Refused when the
  /// text has a control byte (CR or LF would split the header: request smuggling) or is over
  /// `maxClaimTextBytes`. A `sub` that names nobody is absent too, as in `subject`: the
  /// backend is not told of a user the gateway does not count as one.
  public func claimText(_ name: String) -> ClaimText {
    let text: [UInt8]
    switch claims[name] {
    case nil, .null?: return .absent
    case .string(let string)? where name == "sub" && Self.namesNobody(string): return .absent
    case .string(let string)?: text = Array(string.utf8)
    case let value?: text = value.serializedBytes()
    }
    if text.count > Self.maxClaimTextBytes { return .refused("claim over \(Self.maxClaimTextBytes) bytes") }
    if text.contains(where: { $0 < 0x20 || $0 == 0x7F }) { return .refused("claim has a control byte") }
    return .value(text)
  }
}

/// A claim's text for a header value, or why there is none. `refused` carries a fixed reason,
/// never the claim.
public enum ClaimText: Sendable, Equatable {
  case absent
  case value([UInt8])
  case refused(String)
}
