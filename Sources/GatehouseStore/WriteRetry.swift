/// What the writer decides when commits fail, kept apart from SQLite so the rules can be
/// tested on their own: which token writes are kept for a retry, when the retry is due, and
/// where a failure episode starts and ends (one log line each, not one per batch).

/// The newest write of one token that has not been committed yet.
enum TokenWrite: Sendable {
  case save(PendingToken)
  case delete
}

/// Token writes whose commit failed, newest per token. A token is an operator's credential
/// (and losing it brings an older, maybe revoked, value back at the next start), so unlike a
/// cache write, which the next answer replaces, it is kept until a commit takes it.
struct PendingTokenWrites {
  private(set) var writes: [String: TokenWrite] = [:]

  var isEmpty: Bool { writes.isEmpty }
  var count: Int { writes.count }

  /// The token writes of `items`, in queue order: the later write of a token wins.
  static func tokenWrites(in items: [WriterItem]) -> [(name: String, write: TokenWrite)] {
    items.compactMap { item in
      switch item {
      case .token(let token): return (token.name, .save(token))
      case .deleteToken(let name): return (name, .delete)
      default: return nil
      }
    }
  }

  /// A batch failed to commit: keep its token writes. They were queued after every write
  /// kept so far, so they replace those of the same token.
  mutating func keep(failed items: [WriterItem]) {
    for (name, write) in Self.tokenWrites(in: items) { writes[name] = write }
  }

  /// A batch committed: a token it wrote has a newer value on disk than the one kept here,
  /// which must then not be retried over it.
  mutating func supersede(committed items: [WriterItem]) {
    for (name, _) in Self.tokenWrites(in: items) { writes[name] = nil }
  }

  /// Everything kept, in name order (the order does not matter to SQLite; it keeps tests stable).
  var ordered: [(name: String, write: TokenWrite)] {
    writes.keys.sorted().map { ($0, writes[$0]!) }
  }

  mutating func removeAll() { writes = [:] }
}

/// When the next try of something that failed is due: after `minMs`, doubling after each
/// failed try up to `maxMs`, so a full disk (or a missing file) costs one small attempt now
/// and then rather than a busy loop or giving up. Times are monotonic milliseconds. Public
/// because the gateway's loops use it for their store readers too.
public struct RetryBackoff: Sendable {
  public let minMs: Int64
  public let maxMs: Int64
  /// The current wait; nil while nothing has failed since the last reset.
  public private(set) var delayMs: Int64? = nil
  public private(set) var dueAtMs: Int64? = nil

  public init(minMs: Int64, maxMs: Int64) {
    self.minMs = max(1, minMs)
    self.maxMs = max(self.minMs, maxMs)
  }

  /// A try failed at `nowMs`: the next one waits longer.
  public mutating func failed(nowMs: Int64) {
    let delay = delayMs.map { min($0 * 2, maxMs) } ?? minMs
    delayMs = delay
    dueAtMs = nowMs + delay
  }

  /// Nothing is waiting any more: the next failure starts again at `minMs`.
  public mutating func reset() {
    delayMs = nil
    dueAtMs = nil
  }

  public func isDue(nowMs: Int64) -> Bool { dueAtMs.map { nowMs >= $0 } ?? false }

  /// How long the writer may sleep before the retry is due; nil when none is scheduled.
  public func msUntilDue(nowMs: Int64) -> Int64? { dueAtMs.map { max(0, $0 - nowMs) } }
}

/// Where a run of failed commits starts and ends, so the log gets one warning when writes
/// start failing and one line when they work again, however many batches fail in between.
struct WriteHealth {
  /// Failed commits since the last commit that wrote something; 0 while healthy.
  private(set) var failedCommits = 0

  var isFailing: Bool { failedCommits > 0 }

  /// A commit failed; true when this starts an episode.
  mutating func commitFailed() -> Bool {
    failedCommits += 1
    return failedCommits == 1
  }

  /// A commit succeeded. Only one that changed rows ends an episode: an empty transaction
  /// (a flush, a pragma) commits even on a full disk and proves nothing. Returns the
  /// number of failed commits when an episode ended.
  mutating func commitSucceeded(changedRows: Bool) -> Int? {
    guard changedRows, failedCommits > 0 else { return nil }
    defer { failedCommits = 0 }
    return failedCommits
  }
}
