/// The JWS algorithms a provider may use (RFC 7518 §3.1, RFC 8037 §3.1), all asymmetric.
///
/// `none` and the HMAC algorithms (`HS256/384/512`) are deliberately not cases: a gateway holds
/// only public keys, and accepting HMAC with a public key as the secret is the classic
/// algorithm-confusion forgery (RFC 8725 §2.1, §3.1).
public enum JWTAlgorithm: String, CaseIterable, Sendable {
  case rs256 = "RS256"
  case rs384 = "RS384"
  case rs512 = "RS512"
  case ps256 = "PS256"
  case es256 = "ES256"
  case es384 = "ES384"
  case edDSA = "EdDSA"

  /// The kind of key that can verify this algorithm (RFC 7518 §3.3–3.5, RFC 8037 §3.1).
  var keyKind: JWTKeyKind {
    switch self {
    case .rs256, .rs384, .rs512, .ps256: .rsa
    case .es256: .ecP256
    case .es384: .ecP384
    case .edDSA: .ed25519
    }
  }
}

/// The public key types this module turns JWKs into (RFC 7518 §6.2, §6.3; RFC 8037 §2).
enum JWTKeyKind: Sendable {
  case rsa, ecP256, ecP384, ed25519
}

/// A provider's rules (from config): whose tokens, for whom, signed how, with what clock skew.
public struct JWTPolicy: Sendable {
  /// The `iss` a token must carry (RFC 7519 §4.1.1); nil accepts any issuer.
  public var issuer: String?
  /// A token's `aud` must name one of these (RFC 7519 §4.1.3); empty skips the check.
  public var audiences: [String]
  /// The algorithms accepted from this provider (RFC 8725 §3.1: the verifier decides, not the token).
  public var algorithms: Set<JWTAlgorithm>
  /// Clock skew allowed on `exp`, `nbf` and `iat` (RFC 7519 §4.1.4: "some small leeway").
  public var leewaySeconds: Int64

  public init(
    issuer: String? = nil, audiences: [String] = [], algorithms: Set<JWTAlgorithm> = Set(JWTAlgorithm.allCases),
    leewaySeconds: Int64 = 0
  ) {
    self.issuer = issuer
    self.audiences = audiences
    self.algorithms = algorithms
    self.leewaySeconds = leewaySeconds
  }
}

/// Why a bearer token was refused. The gateway answers 401 `invalid_token` (RFC 6750 §3.1) for
/// all but `noKeys` (503); the cases exist for logs and metrics, not for the client.
public enum JWTRefusal: Error, Sendable, Equatable {
  /// Not three base64url parts, bad base64url, header or payload not a JSON object, a claim of
  /// the wrong type. The text is fixed wording, never bytes of the token.
  case malformed(String)
  /// Over `JWTVerifier.maxTokenBytes`.
  case tooLarge
  /// `none`, HMAC, an algorithm outside the policy, or no key of the algorithm's type. The text
  /// names the algorithm only when it is one of the fixed names this module knows.
  case algorithmNotAllowed(String)
  /// The `kid` names no key in the set: the caller may refresh the JWKS and try once more.
  case unknownKey
  /// The set holds no usable key at all.
  case noKeys
  case badSignature
  case expired
  case notYetValid
  case issuedInFuture
  case wrongIssuer
  case wrongAudience
  /// A `crit` header: this verifier understands no extension (RFC 7515 §4.1.11 says refuse).
  case unsupportedCritical

  /// Short text for logs. It never contains the token or its parts: a token in a log is a
  /// credential in a log.
  public var reason: String {
    switch self {
    case .malformed(let what): "malformed token: \(what)"
    case .tooLarge: "token too large"
    case .algorithmNotAllowed(let what): "algorithm not allowed: \(what)"
    case .unknownKey: "unknown key id"
    case .noKeys: "no usable keys"
    case .badSignature: "bad signature"
    case .expired: "token expired"
    case .notYetValid: "token not yet valid"
    case .issuedInFuture: "token issued in the future"
    case .wrongIssuer: "wrong issuer"
    case .wrongAudience: "wrong audience"
    case .unsupportedCritical: "unsupported critical header"
    }
  }
}
