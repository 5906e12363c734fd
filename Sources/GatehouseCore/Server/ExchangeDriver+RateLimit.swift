import GatehouseLogging

/// The client key's limit counted in the shared tier (Docs/shared-tier.md): the machine waits in
/// `waiting(.rateLimit)` while the count is asked for.
extension ExchangeDriver {
  /// Sends the pipelined `INCR`+`PEXPIRE` for the key's current window; the reply (within
  /// `shared.timeout_ms`, or on the next loop turn while the tier is down) settles the wait.
  /// No reply, an error, a timeout or no tier: the local bucket decides, and a throttled
  /// warning says so. Returns the verdict when it is known at once (no tier on this loop).
  func countRateLimit(_ exchange: Exchange) -> ExchangeMachine.ImmediateEvent? {
    let snapshot = exchange.snapshot
    guard let bucket = exchange.rateLimitBucket, let keyID = exchange.clientID, let tier = context.sharedTier,
      let limit = snapshot.rateLimiter.limit(bucket: bucket)
    else {
      return .rateLimitSettled(limited: limitedLocally(exchange, outcome: "down"))
    }
    let window = SharedRateWindow(perSecond: limit.perSecond)
    let (index, secondsLeft) = window.window(atUnixMs: RFC3339.nowMilliseconds())
    tier.countRequest(keyID: keyID, window: index, expiryMs: window.expiryMs) { [weak self, weak exchange] count in
      guard let self, let exchange, self.exchange === exchange, exchange.machine.phase == .waiting(.rateLimit)
      else { return }
      let limited: Bool
      if let count {
        limited = !window.allows(count: count)
        if limited { exchange.retryAfterSeconds = secondsLeft }
      } else {
        limited = limitedLocally(exchange, outcome: tier.health.isUp ? "failed" : "down")
      }
      run(.rateLimitSettled(limited: limited), on: exchange)
    }
    return nil
  }

  /// The tier did not count the request: the local bucket does, so a limit never fails
  /// open. Sets `Retry-After` when it refuses.
  private func limitedLocally(_ exchange: Exchange, outcome: String) -> Bool {
    context.shared.warnRateLimitFellBack(outcome: outcome)
    guard let bucket = exchange.rateLimitBucket,
      case .limited(let seconds) = exchange.snapshot.rateLimiter.take(bucket: bucket, nowMs: RateLimiter.clockMs())
    else { return false }
    exchange.retryAfterSeconds = seconds
    return true
  }
}
