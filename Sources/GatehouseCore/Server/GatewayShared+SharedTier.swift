import GatehouseNet

extension GatewayShared {
  /// A rate limit fell back to the local buckets (the shared tier failed, timed out or is
  /// down): a warning unless one went out in the last 10 s, so limits never fail open or
  /// over to local counting silently, and an outage does not flood the log.
  /// `suppressed_before` counts the fallbacks held back since the last line.
  func warnRateLimitFellBack(outcome: String) {
    let now = EventLoop.monotonicNanoseconds()
    guard let earlier = sharedRateFallbacks.withLock({ $0.admit(now: now) }) else { return }
    logger.warn(
      "shared tier did not count a rate limit; the local buckets decide",
      ["outcome": .string(outcome), "suppressed_before": .int(earlier)])
  }
}
