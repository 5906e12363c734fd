import GatehouseJWT

/// Identity providers whose JWTs routes verify (`jwt`, Docs/jwt.md).
public struct JWTConfig: Sendable, Equatable {
  /// In config file order.
  public let providers: [JWTProviderConfig]

  public init(providers: [JWTProviderConfig]) {
    self.providers = providers
  }

  public static let none = JWTConfig(providers: [])

  public func provider(named name: String) -> JWTProviderConfig? {
    providers.first { $0.name == name }
  }
}

/// One identity provider (`jwt.providers.NAME`).
public struct JWTProviderConfig: Sendable, Equatable {
  /// Where the provider's keys come from: fetched, or written in the config.
  public enum KeySource: Sendable, Equatable {
    /// `jwks_url`: fetched at start, every `jwks_refresh_s`, and on an unknown `kid`.
    case url(HTTPURL)
    /// `keys`: a JWKS document, serialized; never fetched.
    case inline([UInt8])
  }

  public let name: String
  /// `iss` must equal it when set.
  public let issuer: String?
  public let keySource: KeySource
  /// `aud` must hold one of them when the list is not empty.
  public let audiences: [String]
  /// Default RS256 and ES256.
  public let algorithms: [JWTAlgorithm]
  /// Default 30 s: clocks of phones and servers disagree by that much.
  public let leewaySeconds: Int64
  /// Default 600 s.
  public let jwksRefresh: Duration
  /// Claim name → upstream header name, in config order.
  public let forwardClaims: [ForwardedClaim]

  public struct ForwardedClaim: Sendable, Equatable {
    public let claim: String
    public let header: String

    public init(claim: String, header: String) {
      self.claim = claim
      self.header = header
    }
  }

  public init(
    name: String, issuer: String?, keySource: KeySource, audiences: [String], algorithms: [JWTAlgorithm],
    leewaySeconds: Int64, jwksRefresh: Duration, forwardClaims: [ForwardedClaim]
  ) {
    self.name = name
    self.issuer = issuer
    self.keySource = keySource
    self.audiences = audiences
    self.algorithms = algorithms
    self.leewaySeconds = leewaySeconds
    self.jwksRefresh = jwksRefresh
    self.forwardClaims = forwardClaims
  }

  /// The rules a token of this provider must meet.
  public var policy: JWTPolicy {
    JWTPolicy(
      issuer: issuer, audiences: audiences, algorithms: Set(algorithms), leewaySeconds: leewaySeconds)
  }
}

/// A route's `jwt` block: which provider's tokens it takes and what they must hold.
public struct RouteJWTConfig: Sendable, Equatable {
  public let provider: String
  /// Default true: a request without a token gets 401. False lets it through anonymous
  /// (a token that is present must still be valid).
  public let required: Bool
  /// Every one of them must be granted (`scope` or `scp`).
  public let scopes: [String]

  public init(provider: String, required: Bool, scopes: [String]) {
    self.provider = provider
    self.required = required
    self.scopes = scopes
  }
}
