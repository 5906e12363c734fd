import GatehouseHTTP
import GatehouseJWT
import GatehouseLogging

/// Bearer tokens at the door (Docs/jwt.md): found in the request, verified against the
/// provider's published keys (once per token per loop: `verifiedTokens`), their scopes and
/// forwarded claims checked. Refusals leave their challenge and reason on the admission.
extension LoopContext {
  /// Checks the request's bearer token for `plan`; `admission` collects what the exchange
  /// needs afterwards. `mayWait`: false once the keys were waited for.
  func admitBearer(
    _ head: HTTPRequestHead, plan: RouteJWTPlan, admission: BearerAdmission, mayWait: Bool = true
  ) -> BearerVerdict {
    let credential = BearerCredential.find(in: head.headers)
    guard case .token(let field) = credential else {
      if credential == .malformed { return refuse(.invalid, "malformed bearer credential", plan, admission) }
      guard plan.required else {
        // Anonymous requests share answers among themselves, never with a user's.
        if plan.keysAnswersPerUser { admission.userKey = "-" }
        return .admitted
      }
      metrics.countJWT(provider: plan.providerName, result: .missing)
      admission.challenge = RouteJWTPlan.missingChallenge
      admission.problem = "no bearer token"
      return .refused(.bearerMissing)
    }
    let token = BearerCredential.tokenBytes(head.headers.valueBytes(at: field))
    let nowMs = RFC3339.nowMilliseconds()
    let now = nowMs / 1000
    return token.withUnsafeBytes { bytes in
      guard let provider = jwtKeys.provider(plan.providerName, index: plan.providerIndex) else {
        return refuse(.noKeys, "no such provider", plan, admission)
      }
      if let hit = verifiedTokens.lookUpEntry(bytes, provider: plan.cacheScope, keys: provider.generation, now: now),
        let facts = hit.attachment as? BearerFacts
      {
        return admit(hit.token, facts: facts, plan: plan, admission: admission)
      }
      guard let keys = provider.keys else {
        // A fetch under way, or one the keyring may start: worth the wait (bounded by the
        // fetch's timeouts); else no keys, and never "accept" for want of them.
        if mayWait && (provider.fetching || nowMs >= provider.unknownKeyRefreshAfterMs) { return .awaitKeys }
        return refuse(.noKeys, "no signing keys", plan, admission)
      }
      switch JWTVerifier.verify(bytes, keys: keys, policy: plan.policy, now: now) {
      case .success(let verified):
        let facts = BearerFacts(verified, token: bytes, plan: plan)
        verifiedTokens.insert(
          bytes, provider: plan.cacheScope, keys: provider.generation, verified: verified,
          leewaySeconds: plan.policy.leewaySeconds, attachment: facts)
        return admit(verified, facts: facts, plan: plan, admission: admission)
      case .failure(.unknownKey):
        // A key the provider added since the last fetch: worth one refresh, at most one per
        // 10 s for everyone, and one wait per request (`mayWait`).
        if mayWait && (provider.fetching || nowMs >= provider.unknownKeyRefreshAfterMs) {
          admission.awaitsUnknownKey = true
          return .awaitKeys
        }
        return refuse(.invalid, JWTRefusal.unknownKey.reason, plan, admission)
      case .failure(.noKeys):
        return refuse(.noKeys, JWTRefusal.noKeys.reason, plan, admission)
      case .failure(.expired):
        return refuse(.expired, JWTRefusal.expired.reason, plan, admission)
      case .failure(let refusal):
        return refuse(.invalid, refusal.reason, plan, admission)
      }
    }
  }

  /// A verified token: its scopes, its claims for the upstream, the user's cache key part.
  private func admit(
    _ verified: VerifiedToken, facts: BearerFacts, plan: RouteJWTPlan, admission: BearerAdmission
  ) -> BearerVerdict {
    if !plan.scopes.isEmpty && !verified.hasScopes(plan.scopes) {
      metrics.countJWT(provider: plan.providerName, result: .insufficientScope)
      admission.challenge = plan.scopeChallenge
      admission.problem = "insufficient scope"
      return .refused(.scopeInsufficient)
    }
    if let problem = facts.claimProblem { return refuse(.invalid, problem, plan, admission) }
    admission.claimLines = facts.claimLines
    if plan.keysAnswersPerUser { admission.userKey = facts.userKey }
    metrics.countJWT(provider: plan.providerName, result: .valid)
    return .admitted
  }

  private func refuse(
    _ result: JWTResult, _ problem: String, _ plan: RouteJWTPlan, _ admission: BearerAdmission
  ) -> BearerVerdict {
    metrics.countJWT(provider: plan.providerName, result: result)
    admission.problem = problem
    if result == .noKeys { return .refused(.signingKeysUnavailable) }
    admission.challenge = RouteJWTPlan.invalidChallenge
    return .refused(.bearerInvalid)
  }
}
