import GatehouseJWT

/// What verifying a request's bearer token left for the rest of its exchange (routes with
/// `jwt` only, SPEC §15).
final class BearerAdmission {
  /// On a route that keeps answers per user: the digest that goes into the cache key
  /// (`CacheKey.user`), so one user's stored answer never reaches another.
  var userKey: String?
  /// `forward_claims` as upstream field lines (`X-User-Id: 42\r\n`), written after the
  /// client's fields; the client's own copies were dropped by the route's header plan.
  var claimLines: [UInt8] = []
  /// The `WWW-Authenticate` line of a refusal.
  var challenge: [UInt8] = []
  /// Why the token was refused, for the access line (never the token or a claim).
  var problem: String?
  /// A refresh for an unknown `kid` was waited for already: the next unknown is final.
  var waitedForKeys = false
  /// The wait under way is for a refresh because of an unknown `kid` (else for any keys).
  var refreshForUnknownKey = false
}

/// How a request's bearer token fares at the door.
enum BearerVerdict {
  /// Let through (verified, or none on a route that does not require one).
  case admitted
  case refused(ExchangeMachine.Refusal)
  /// The provider's keys are being fetched: wait, then check again.
  case awaitKeys(unknownKey: Bool)
}
