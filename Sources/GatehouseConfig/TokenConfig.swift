/// One named backend credential (`tokens.NAME`, Docs/behaviour.md).
public struct TokenConfig: Sendable, Equatable {
  public let name: String
  public let source: TokenSource
}

/// Where a token's value comes from, chosen by the `type` key.
public enum TokenSource: Sendable, Equatable {
  /// `type: "static"`: the value in the config (usually `${ENV}`). An empty value is allowed and
  /// means the token starts `missing` (it can be set through the admin API).
  case fixed(SecretValue)
  /// `type: "file"`: read from a file at start, on reload and when the file changes.
  case file(path: String)
  /// `type: "oauth2_client_credentials"`.
  case oauth2ClientCredentials(OAuth2ClientCredentialsConfig)

  /// The `type` value as written in the config.
  public var typeName: String {
    switch self {
    case .fixed: "static"
    case .file: "file"
    case .oauth2ClientCredentials: "oauth2_client_credentials"
    }
  }
}

/// An OAuth 2 client credentials grant (RFC 6749 §4.4).
public struct OAuth2ClientCredentialsConfig: Sendable, Equatable {
  /// Where to POST the form; its `basePath` is the full token endpoint path.
  public let tokenURL: HTTPURL
  public let clientID: String
  public let clientSecret: SecretValue
  /// Sent as `scope` when set.
  public let scope: String?
  /// Refresh this long before `expires_in` runs out. Default 60 s.
  public let refreshBefore: Duration
}
