import GatehouseConfig
import GatehouseJWT
import Synchronization

/// Where the next provider scope (`RouteJWTPlan.cacheScope`) starts.
private let nextCacheScope = Atomic<Int>(1)

/// A route's `jwt` block, compiled against its provider (Docs/jwt.md). A class for the reason
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
  /// The provider's number in the loops' caches of verified tokens, new for every snapshot:
  /// a token verified under one config's provider (its position, issuer, audiences,
  /// algorithms, forwarded claims) never counts for another config's, even when a request
  /// that waited across a reload inserts it late.
  let cacheScope: Int
  /// Answers are stored per user: the route has a `cache` block without `shared`.
  let keysAnswersPerUser: Bool
  /// The 403's challenge, with the scopes the route asks for (RFC 6750 §3).
  let scopeChallenge: [UInt8]

  init(
    _ route: RouteJWTConfig, provider: JWTProviderConfig, providerIndex: Int, cacheScope: Int, cache: RouteCacheConfig?
  ) {
    providerName = provider.name
    self.providerIndex = providerIndex
    self.cacheScope = cacheScope
    policy = provider.policy
    required = route.required
    scopes = route.scopes
    claims = provider.forwardClaims.map { ($0.claim, Array("\($0.header): ".utf8)) }
    keysAnswersPerUser = cache.map { !$0.shared } ?? false
    scopeChallenge = Array(
      "WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"\(route.scopes.joined(separator: " "))\"\r\n"
        .utf8)
  }

  /// One fresh scope per provider of a snapshot being built.
  static func makeCacheScopes(count: Int) -> [Int] {
    guard count > 0 else { return [] }
    let first = nextCacheScope.add(count, ordering: .relaxed).oldValue
    return Array(first..<(first + count))
  }

  /// The upstream header names `forward_claims` writes: a client's own copies are dropped.
  static func claimHeaders(_ provider: JWTProviderConfig) -> [String] {
    provider.forwardClaims.map(\.header)
  }

  /// RFC 6750 §3.1: a request without credentials gets the challenge without an error code.
  static let missingChallenge = Array("WWW-Authenticate: Bearer\r\n".utf8)
  static let invalidChallenge = Array("WWW-Authenticate: Bearer error=\"invalid_token\"\r\n".utf8)
}
