import GatehouseStore

/// A loop's memory of the answers it read from or wrote to the store in the last second,
/// so that a burst of requests for one key (an outage, a hot entry) is not a SQLite read
/// each. Bounded three ways whatever clients ask for: entries, bytes (a second's hot
/// answers, not a copy of the store), and time (an entry is served for `ttlMs`, and expired
/// ones are let go of, so an idle loop holds none). Dropping an entry costs a lookup later,
/// never an answer. Confined to its loop.
struct RecentAnswers {
  struct Limits {
    var ttlMs: Int64 = 1000
    var maxEntries = 1024
    /// Larger bodies are never kept here.
    var maxBody = 256 * 1024
    var maxBytes = 8 << 20
  }

  private struct Entry {
    let answer: StoredAnswer
    let atMs: Int64
    let size: Int
  }

  let limits: Limits
  private var entries: [String: Entry] = [:]
  /// Body and header bytes held (at most `limits.maxBytes`).
  private(set) var bytes = 0
  /// When expired entries were last let go of.
  private var sweptAtMs: Int64 = 0

  init(limits: Limits = Limits()) {
    self.limits = limits
  }

  var count: Int { entries.count }

  /// The answer kept for `id` if it is younger than the TTL.
  func lookup(_ id: String, nowMs: Int64) -> StoredAnswer? {
    guard let entry = entries[id], nowMs - entry.atMs < limits.ttlMs else { return nil }
    return entry.answer
  }

  mutating func insert(_ answer: StoredAnswer, id: String, nowMs: Int64) {
    guard answer.body.count <= limits.maxBody else { return }
    remove(id)
    let size = Self.footprint(answer)
    if entries.count >= limits.maxEntries || bytes + size > limits.maxBytes {
      // Expired entries first (they are never served again), then everything.
      dropExpired(nowMs: nowMs)
      if entries.count >= limits.maxEntries || bytes + size > limits.maxBytes { removeAll() }
    }
    entries[id] = Entry(answer: answer, atMs: nowMs, size: size)
    bytes += size
  }

  mutating func remove(_ id: String) {
    if let old = entries.removeValue(forKey: id) { bytes -= old.size }
  }

  mutating func removeAll() {
    entries.removeAll()
    bytes = 0
  }

  /// Lets go of expired entries; cheap to call often (it looks at most once per TTL).
  mutating func sweep(nowMs: Int64) {
    guard !entries.isEmpty, nowMs - sweptAtMs >= limits.ttlMs else { return }
    dropExpired(nowMs: nowMs)
  }

  private mutating func dropExpired(nowMs: Int64) {
    sweptAtMs = nowMs
    entries = entries.filter { nowMs - $0.value.atMs < limits.ttlMs }
    bytes = entries.values.reduce(0) { $0 + $1.size }
  }

  /// The bytes an entry holds: its body and its header text, plus a little per field (the
  /// dictionary's own overhead is bounded by `maxEntries`).
  static func footprint(_ answer: StoredAnswer) -> Int {
    answer.headers.reduce(answer.body.count) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
  }
}
