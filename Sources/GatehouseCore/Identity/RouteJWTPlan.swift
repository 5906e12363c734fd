import GatehouseConfig
import GatehouseJWT

/// A route's `jwt` block, compiled against its provider (SPEC §15). A class for the reason
/// `RoutePlan` is one: it is read on every request of the route.
final class RouteJWTPlan: Sendable {
  let providerName: String
  /// Where the provider is in `jwt.providers` (and in the published key values, checked
  /// by name); also the verification cache's provider number.
  let providerIndex: Int
  let policy: JWTPolicy
  let required: Bool
  let scopes: [String]
  /// `forward_claims`: each claim and the start of its upstream line (`X-User-Id: `).
  let claims: [(claim: String, linePrefix: [UInt8])]
  /// Answers are stored per user: the route has a `cache` block without `shared`.
  let keysAnswersPerUser: Bool
  /// The 403's challenge, with the scopes the route asks for (RFC 6750 §3).
  let scopeChallenge: [UInt8]

  init(_ route: RouteJWTConfig, provider: JWTProviderConfig, providerIndex: Int, cache: RouteCacheConfig?) {
    providerName = provider.name
    self.providerIndex = providerIndex
    policy = provider.policy
    required = route.required
    scopes = route.scopes
    claims = provider.forwardClaims.map { ($0.claim, Array("\($0.header): ".utf8)) }
    keysAnswersPerUser = cache.map { !$0.shared } ?? false
    scopeChallenge = Array(
      "WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"\(route.scopes.joined(separator: " "))\"\r\n"
        .utf8)
  }

  /// The upstream header names `forward_claims` writes: a client's own copies are dropped.
  static func claimHeaders(_ provider: JWTProviderConfig) -> [String] {
    provider.forwardClaims.map(\.header)
  }

  /// RFC 6750 §3.1: a request without credentials gets the challenge without an error code.
  static let missingChallenge = Array("WWW-Authenticate: Bearer\r\n".utf8)
  static let invalidChallenge = Array("WWW-Authenticate: Bearer error=\"invalid_token\"\r\n".utf8)
}
