/// When an identity provider's keys are fetched (Docs/jwt.md), as a pure state machine: the
/// keyring feeds it events with the time and performs what it answers.
///
/// - Keys are fetched at start, then every `refreshMs` after a success.
/// - A failed fetch is tried again sooner (5 s, doubling, never later than `refreshMs`);
///   the keys at hand stay in use meanwhile.
/// - A token with an unknown `kid` (a key added since the last fetch) may start a fetch,
///   and so may a request that finds no keys at all, but at most one fetch starts per
///   `demandIntervalMs` (10 s) for such demands, however many clients ask: a client
///   inventing `kid`s cannot make the gateway hammer the provider.
struct KeySetSchedule: Equatable {
  /// At most one fetch on demand per this long.
  static let demandIntervalMs: Int64 = 10_000
  static let firstRetryMs: Int64 = 5_000

  let refreshMs: Int64
  private(set) var fetching = false
  /// When the last fetch started (ms since the epoch); nil before any.
  private(set) var lastStartMs: Int64?
  private(set) var failuresInARow = 0

  init(refreshMs: Int64) {
    self.refreshMs = refreshMs
  }

  /// What a demand (a waiting request) or a timer leads to.
  enum Start: Equatable {
    /// Start a fetch now (and join its waiters).
    case fetch
    /// A fetch is under way: join its waiters.
    case join
    /// Too soon since the last fetch: answer the waiter with the keys at hand.
    case refuse
  }

  /// The timer for the next scheduled fetch fired (or the keyring starts).
  mutating func scheduledFetch(nowMs: Int64) -> Start {
    guard !fetching else { return .join }
    begin(nowMs)
    return .fetch
  }

  /// A request asks for keys (an unknown `kid`, or none at all).
  mutating func demand(nowMs: Int64) -> Start {
    if fetching { return .join }
    if let last = lastStartMs, nowMs - last < Self.demandIntervalMs { return .refuse }
    begin(nowMs)
    return .fetch
  }

  /// A fetch ended; returns when the next scheduled one is due (ms from now).
  mutating func fetchEnded(success: Bool) -> Int64 {
    fetching = false
    if success {
      failuresInARow = 0
      return refreshMs
    }
    failuresInARow += 1
    let backoff = Self.firstRetryMs << Int64(min(failuresInARow - 1, 20))
    return min(backoff, refreshMs)
  }

  /// Before this time (ms since the epoch) a demand is refused: what the loops are told, so
  /// they refuse an unknown `kid` without asking.
  var demandRefusedUntilMs: Int64 {
    guard !fetching, let last = lastStartMs else { return 0 }
    return last + Self.demandIntervalMs
  }

  private mutating func begin(_ nowMs: Int64) {
    fetching = true
    lastStartMs = nowMs
  }
}
