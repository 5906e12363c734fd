import GatehouseStore

extension LoopContext {
  /// Keeps this loop's shared-tier connection in step with `plan`: started with the loop,
  /// replaced when a reload changes `shared` (a new plan), stopped when it goes or the loop
  /// stops. Commands waiting on a replaced connection fail with `.stopped`, which their
  /// callers treat as a miss.
  func useSharedTier(_ plan: SharedTierPlan?) {
    if let current = sharedTier, current.plan === plan { return }
    let previous = sharedTier
    previous?.stop()
    sharedTier = nil
    guard let plan else { return }
    let tier = LoopSharedTier(plan: plan, loop: loop, warnings: shared.sharedTierWarnings)
    // The counters go on across a reload (Prometheus counters only grow).
    if let previous {
      tier.counts = previous.counts
      tier.refused = previous.refused
    }
    sharedTier = tier
    tier.start()
  }

  /// An answer kept in the local store is written behind to the shared tier too, on a later
  /// loop turn (after the answer went out), with the route's longest stale window as its TTL.
  func writeBehind(_ answer: StoredAnswer, key: CacheKey, policy: CachePolicy) {
    guard let tier = sharedTier else { return }
    let ttlMs = max(policy.staleIfErrorMs, policy.freshMs + policy.staleWhileRevalidateMs)
    guard ttlMs > 0 else { return }
    loop.executeLater { [weak tier] in tier?.write(answer, key: key, ttlMs: ttlMs) }
  }
}
