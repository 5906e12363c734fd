import GatehouseJSON

/// What the admin API shows about one token (Docs/admin-openapi.json `GET /admin/tokens`). Holds no value: only a fingerprint.
public struct TokenPublicState: Sendable, Equatable {
  public let name: String
  /// `static`, `file` or `oauth2_client_credentials`.
  public let type: String
  public let state: TokenState
  /// The first 8 hex digits of the SHA-256 of the current value; nil without a value.
  public let fingerprint: String?
  /// RFC 3339 UTC; nil without a value or for a value that does not expire.
  public let expiresAt: String?
  /// RFC 3339 UTC; when the current value was obtained.
  public let refreshedAt: String?
  public let lastError: String?

  /// The admin API's JSON object, with every member present (`null` where there is nothing).
  public var json: JSONValue {
    func text(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
    return .object([
      ("name", .string(name)), ("type", .string(type)), ("state", .string(state.rawValue)),
      ("fingerprint", text(fingerprint)), ("expires_at", text(expiresAt)), ("refreshed_at", text(refreshedAt)),
      ("last_error", text(lastError)),
    ])
  }
}

/// Why an operator's token command failed; `httpStatus` is the admin API's answer.
public enum TokenOperationError: Error, Sendable, Equatable, CustomStringConvertible {
  case unknownToken(String)
  /// The value for `PUT` cannot be sent as a header (400).
  case invalidValue(TokenValueProblem)
  /// A static token has nothing to refresh from (409).
  case notRefreshable(String)
  /// The refresh ran and failed; carries `last_error` (502).
  case refreshFailed(String)
  /// The manager is stopping (503).
  case stopped

  public var httpStatus: Int {
    switch self {
    case .unknownToken: 404
    case .invalidValue: 400
    case .notRefreshable: 409
    case .refreshFailed: 502
    case .stopped: 503
    }
  }

  public var description: String {
    switch self {
    case .unknownToken(let name): "no token named \(name)"
    case .invalidValue(let problem): problem.description
    case .notRefreshable(let name): "token \(name) is static: set a new value instead"
    case .refreshFailed(let lastError): lastError
    case .stopped: "token manager is stopping"
    }
  }
}
