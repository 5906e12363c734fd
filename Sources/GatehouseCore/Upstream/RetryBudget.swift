/// The retry budget of one upstream (`retry.budget_percent`): over the last 10 seconds,
/// retries may be at most `budget_percent` % of the requests, but 3 per second covered are
/// always allowed (30 once the window is full), so that a quiet upstream can still retry.
///
/// Why a budget: retries multiply the load on an upstream that is already failing. Without
/// one, `attempts: 3` triples the traffic of an overloaded fleet at the worst moment; with
/// one, a fleet-wide outage adds at most 20 % (the default), while the isolated failures
/// that retries are for still get theirs.
///
/// Counts are kept in ten one-second buckets (`now / 1 s`), the current second and the nine
/// before it: the window moves a second at a time, and a bucket is cleared as the window
/// reaches it again. Fixed inline storage: nothing allocates.
struct RetryBudget: Sendable {
  static let windowSeconds = 10
  /// Retries always allowed per second of the window.
  static let minimumRetriesPerSecond = 3
  static let nanosecondsPerSecond: UInt64 = 1_000_000_000

  /// `retry.budget_percent` (default 20).
  let percent: Int
  /// Requests and retries per second, at index `second % 10` (10 being `windowSeconds`).
  private var requestBuckets = InlineArray<10, Int>(repeating: 0)
  private var retryBuckets = InlineArray<10, Int>(repeating: 0)
  /// Sums of the buckets in the window.
  private(set) var requestsInWindow = 0
  private(set) var retriesInWindow = 0
  /// The second (since the monotonic clock's origin) the newest bucket counts; nil before
  /// the first call.
  private var currentSecond: UInt64?
  /// The first second the budget saw, which bounds the seconds the window covers.
  private var firstSecond: UInt64 = 0

  init(percent: Int = 20) {
    self.percent = max(0, percent)
  }

  /// Counts one request to the upstream (its first try; retries are counted by `mayRetry`).
  mutating func noteRequest(now: UInt64) {
    let bucket = advance(to: now)
    requestBuckets[bucket] += 1
    requestsInWindow += 1
  }

  /// Whether a retry may be made at `now`; when it may, it is counted as made. Ask last,
  /// after every other reason not to retry, so that a refused retry never spends budget.
  mutating func mayRetry(now: UInt64) -> Bool {
    let bucket = advance(to: now)
    guard retriesInWindow < allowance else { return false }
    retryBuckets[bucket] += 1
    retriesInWindow += 1
    return true
  }

  /// Retries allowed in the window as it stands (after the last call's `now`):
  /// `max(3 × seconds covered, budget_percent % of the requests)`, rounded down.
  var allowance: Int {
    max(Self.minimumRetriesPerSecond * secondsCovered, requestsInWindow * percent / 100)
  }

  /// Seconds of the window the budget has existed for, 1 to 10: a budget made a second ago
  /// has not had ten seconds' worth of minimum yet.
  var secondsCovered: Int {
    guard let currentSecond else { return 1 }
    return Int(min(currentSecond - firstSecond + 1, UInt64(Self.windowSeconds)))
  }

  /// Moves the window so that its newest bucket is `now`'s second, clearing the buckets of
  /// the seconds it leaves behind; returns that bucket's index. A `now` earlier than the
  /// newest bucket (it should not happen with a monotonic clock) counts in the newest one.
  private mutating func advance(to now: UInt64) -> Int {
    let second = now / Self.nanosecondsPerSecond
    guard let current = currentSecond else {
      currentSecond = second
      firstSecond = second
      return Int(second % UInt64(Self.windowSeconds))
    }
    guard second > current else { return Int(current % UInt64(Self.windowSeconds)) }
    // An Int range: iterating a Range<UInt64> allocates in unoptimized builds.
    let elapsed = Int(min(second - current, UInt64(Self.windowSeconds)))
    var cleared = current
    for _ in 0..<elapsed {
      cleared += 1
      let index = Int(cleared % UInt64(Self.windowSeconds))
      requestsInWindow -= requestBuckets[index]
      retriesInWindow -= retryBuckets[index]
      requestBuckets[index] = 0
      retryBuckets[index] = 0
    }
    currentSecond = second
    return Int(second % UInt64(Self.windowSeconds))
  }
}
