import GatehouseHTTP
import GatehouseLogging

/// The shared tier standing in for a failing upstream (Docs/shared-tier.md): the machine asks
/// (`lookUpSharedTier`) when the upstream failed and nothing is stored on this replica.
extension ExchangeDriver {
  /// Sends the `GET`; its reply comes back on the loop within `shared.timeout_ms` (the
  /// connection's command timeout) and is fed to the machine, unless the exchange ended
  /// meanwhile (the client left). A hit the route allows is served `STALE` and kept in the
  /// local store, where the collapsed waiters released after this answer find it.
  func lookUpSharedTier(_ exchange: Exchange) -> ExchangeMachine.ImmediateEvent? {
    guard let tier = context.sharedTier, let key = exchange.cacheKey, let routeIndex = exchange.routeIndex,
      let policy = exchange.snapshot.routePlans[routeIndex].cache
    else { return .sharedTierMissed }
    let route = exchange.snapshot.routePlans[routeIndex]
    tier.read(id: key.id, route: route, gzipEntry: StoreEntryRules.isGzipEntry(exchange)) {
      [weak self, weak exchange] answer in
      guard let self, let exchange, self.exchange === exchange else { return }
      var found = false
      let now = RFC3339.nowMilliseconds()
      if let answer, policy.allowsStaleIfError(ageMs: StoreEntryRules.elapsedMs(since: answer.storedAtMs, nowMs: now)),
        CacheStorability.allowsStale(answer.headers)
      {
        context.store?.keepShared(answer, key: key, nowMs: now)
        exchange.storedAnswer = answer
        found = true
      }
      run(.sharedTierLookedUp(found: found), on: exchange)
    }
    return nil
  }
}
