import GatehouseJWT

/// What verifying a request's bearer token left for the rest of its exchange (routes with
/// `jwt` only, Docs/jwt.md).
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
  /// The wait for keys is for a refresh because of an unknown `kid` (else for any keys).
  var awaitsUnknownKey = false
}

/// How a request's bearer token fares at the door.
enum BearerVerdict {
  /// Let through (verified, or none on a route that does not require one).
  case admitted
  case refused(ExchangeMachine.Refusal)
  /// The provider's keys are being fetched: wait, then check again (once).
  case awaitKeys
}

/// What a verified token means for its provider's routes, worked out once per token and kept
/// with it in the loop's cache of verified tokens (`JWTVerificationCache` attachments): the
/// forwarded claims depend only on the token and the provider's `forward_claims`, so a
/// client's next request reuses them. A reload that changes `jwt` empties the cache.
final class BearerFacts {
  /// `forward_claims` as upstream field lines.
  let claimLines: [UInt8]
  /// Why a claim cannot be forwarded (the request is refused), or nil.
  let claimProblem: String?
  /// The user's part of a cache key: a digest of the provider, `sub` and the forwarded
  /// claims (the admin API lists keys, and must not list who asked). A token without `sub`
  /// (an empty or blank one counts as none, `VerifiedToken.namesNobody`) keys by itself, so
  /// such tokens never share answers with each other.
  let userKey: String

  init(_ verified: VerifiedToken, token: UnsafeRawBufferPointer, plan: RouteJWTPlan) {
    var lines: [UInt8] = []
    var problem: String?
    for (claim, prefix) in plan.claims where problem == nil {
      switch verified.claimText(claim) {
      case .absent:
        continue
      case .value(let text):
        lines.append(contentsOf: prefix)
        lines.append(contentsOf: text)
        lines.append(contentsOf: "\r\n".utf8)
      case .refused(let why):
        problem = "claim \(claim): \(why)"
      }
    }
    claimLines = problem == nil ? lines : []
    claimProblem = problem
    var input = Array(plan.providerName.utf8)
    input.append(0)
    if let subject = verified.subject {
      input.append(contentsOf: "sub:".utf8)
      input.append(contentsOf: subject)
    } else {
      input.append(contentsOf: "token:".utf8)
      input.append(contentsOf: token)
    }
    // The backend answers for the claims it is sent: one `sub` with another tenant or other
    // roles is another answer.
    input.append(0)
    input.append(contentsOf: lines)
    userKey = String(TokenFingerprint.sha256Hex(input).prefix(32))
  }
}
