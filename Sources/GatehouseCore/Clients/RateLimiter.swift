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
    /// The client key the bucket belongs to: what a reload matches buckets by.
    public let keyID: String

    public init(perSecond: Double, burst: Int, keyID: String = "") {
      self.perSecond = perSecond
      self.burst = burst
      self.keyID = keyID
    }

    /// The bucket's size in milli-tokens (bursts are capped so that it fits 32 bits).
    var capacity: UInt64 { UInt64(min(burst, 4_000_000)) * 1000 }
  }

  /// One bucket's word; a class because `Atomic` cannot be copied into an array.
  private final class Bucket: Sendable {
    let word: Atomic<UInt64>
    init(_ value: UInt64) { word = Atomic(value) }
  }

  private let limits: [Limit]
  private let buckets: [Bucket]

  /// New buckets start full. With `previous` (the limiter of the config being replaced by
  /// a reload), a key that had a bucket keeps what was left in it, refilled up to `nowMs`
  /// at its old rate and capped at its new burst: otherwise every reload would hand each
  /// client a fresh burst.
  ///
  /// Tokens taken from the old buckets between this copy and the moment every loop uses the
  /// new limiter (one loop turn) are not carried over: a client may get that much extra.
  public init(limits: [Limit], nowMs: UInt32, previous: RateLimiter? = nil) {
    self.limits = limits
    var previousIndex: [String: Int] = [:]
    if let previous {
      for (index, limit) in previous.limits.enumerated() { previousIndex[limit.keyID] = index }
    }
    buckets = limits.map { limit in
      let level = previousIndex[limit.keyID].flatMap { previous?.level(at: $0, nowMs: nowMs) }
      return Bucket(Self.pack(milliTokens: UInt32(min(level ?? limit.capacity, limit.capacity)), timeMs: nowMs))
    }
  }

  /// The limit of bucket `index` (nil for an index it does not have).
  func limit(bucket index: Int) -> Limit? { limits.indices.contains(index) ? limits[index] : nil }

  /// Milli-tokens in bucket `index` at `nowMs`.
  private func level(at index: Int, nowMs: UInt32) -> UInt64 {
    let (tokens, last) = Self.unpack(buckets[index].word.load(ordering: .relaxed))
    return Self.refilled(tokens: tokens, since: last, now: nowMs, limit: limits[index])
  }

  private static func refilled(tokens: UInt32, since last: UInt32, now: UInt32, limit: Limit) -> UInt64 {
    let elapsed = now &- last  // wraps correctly every 49 days
    // limit.perSecond tokens per second are as many milli-tokens per millisecond.
    return min(limit.capacity, UInt64(tokens) + UInt64(Double(elapsed) * limit.perSecond))
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
    let refillPerMs = limit.perSecond  // milli-tokens per millisecond
    while true {
      let current = buckets[index].word.load(ordering: .relaxed)
      let (tokens, last) = Self.unpack(current)
      let refilled = Self.refilled(tokens: tokens, since: last, now: nowMs, limit: limit)
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
