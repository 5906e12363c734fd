import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Token buckets shared by all loops, one per rate-limited client key. Each bucket is one
/// 64-bit atomic word (milli-tokens in the high half, the last refill time in milliseconds
/// in the low half) updated with compare-and-swap: no lock, and a client whose requests
/// land on different loops still gets one budget.
public final class RateLimiter: Sendable {
  public struct Limit: Sendable, Equatable {
    public let perSecond: Double
    public let burst: Int
  }

  /// One bucket's word; a class because `Atomic` cannot be copied into an array.
  private final class Bucket: Sendable {
    let word: Atomic<UInt64>
    init(_ value: UInt64) { word = Atomic(value) }
  }

  private let limits: [Limit]
  private let buckets: [Bucket]

  public init(limits: [Limit], nowMs: UInt32) {
    self.limits = limits
    buckets = limits.map { limit in
      Bucket(Self.pack(milliTokens: UInt32(min(limit.burst, 4_000_000)) * 1000, timeMs: nowMs))
    }
  }

  /// The outcome of asking for one token.
  public enum Decision: Sendable, Equatable {
    case allowed
    /// Refused; a token will be there in this many seconds (at least 1).
    case limited(retryAfterSeconds: Int)
  }

  /// Takes one token from bucket `index` at time `nowMs` (a wrapping millisecond clock).
  public func take(bucket index: Int, nowMs: UInt32) -> Decision {
    let limit = limits[index]
    let capacity = UInt64(min(limit.burst, 4_000_000)) * 1000
    let refillPerMs = limit.perSecond  // milli-tokens per millisecond
    while true {
      let current = buckets[index].word.load(ordering: .relaxed)
      let (tokens, last) = Self.unpack(current)
      let elapsed = nowMs &- last  // wraps correctly every 49 days
      let refilled = min(capacity, UInt64(tokens) + UInt64(Double(elapsed) * refillPerMs))
      if refilled < 1000 {
        let missing = Double(1000 - refilled)
        let seconds = max(1, Int((missing / max(refillPerMs, 0.000_001) / 1000).rounded(.up)))
        return .limited(retryAfterSeconds: seconds)
      }
      let next = Self.pack(milliTokens: UInt32(refilled - 1000), timeMs: nowMs)
      if buckets[index].word.compareExchange(expected: current, desired: next, ordering: .relaxed).exchanged {
        return .allowed
      }
    }
  }

  /// The limiter's clock: monotonic milliseconds, wrapping at 2^32.
  public static func clockMs() -> UInt32 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt32(truncatingIfNeeded: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec / 1_000_000))
  }

  static func pack(milliTokens: UInt32, timeMs: UInt32) -> UInt64 { UInt64(milliTokens) << 32 | UInt64(timeMs) }

  static func unpack(_ word: UInt64) -> (milliTokens: UInt32, timeMs: UInt32) {
    (UInt32(truncatingIfNeeded: word >> 32), UInt32(truncatingIfNeeded: word))
  }
}
