/// A read-only view of the cache for one event-loop thread: its own SQLite connection (in
/// WAL mode readers never block the writer nor wait for it) and its own list of recorded
/// accesses. Not Sendable: create it on the thread that uses it, with `Store.makeReader()`.
///
/// `lookup` never throws: a busy database, an I/O error or a damaged row is answered as a
/// miss and counted in `StoreStats.readErrors`. A row is damaged when its headers do not
/// decode or its body no longer has the SHA-256 it was stored with (SQLite keeps no
/// checksums of its own): such a row is never served, and the writer removes it so the
/// next good answer is stored whole.
public final class StoreReader {
  private let db: SQLiteConnection
  private let queue: WriterQueue
  private let counters: StoreCounters
  private let clock: @Sendable () -> Int64
  private let touchBatchSize: Int
  private let touchIntervalMs: Int64
  // Accesses are remembered here and handed to the writer in batches, so a hit costs no
  // write and no lock on the read path; the LRU order is exact up to one batch.
  private var pendingTouches: [String: Int64] = [:]
  private var lastHandOffMs: Int64

  init(
    path: String, busyTimeoutMs: Int32, queue: WriterQueue, counters: StoreCounters,
    clock: @escaping @Sendable () -> Int64, touchBatchSize: Int, touchIntervalMs: Int64
  ) throws(StoreError) {
    db = try SQLiteConnection(path: path, mode: .readOnly, busyTimeoutMs: busyTimeoutMs)
    self.queue = queue
    self.counters = counters
    self.clock = clock
    self.touchBatchSize = max(1, touchBatchSize)
    self.touchIntervalMs = touchIntervalMs
    lastHandOffMs = clock()
  }

  deinit { flushTouches() }

  /// The stored answer for a cache id (`CacheKey.id`), or nil. Records the access for LRU.
  public func lookup(id: String) -> StoredAnswer? {
    guard isCacheID(id) else { return nil }
    let found: StoredAnswer?
    do {
      let statement = try db.cachedStatement(
        "SELECT status, headers, body, stored_at, body_sha256 FROM cache_entries WHERE id = ?")
      // Reset at once so this connection does not keep its read snapshot open (an open
      // snapshot would hold back checkpoints).
      defer { statement.reset() }
      try statement.bind(id, at: 1)
      if try statement.step() {
        let status = statement.int64(0)
        let body = statement.blob(2)
        let digest = statement.blob(4)
        guard let headers = HeaderBlock.decode(statement.blob(1)), StoreCrypto.sha256(body) == digest else {
          counters.readErrors.wrappingAdd(1, ordering: .relaxed)
          // Dropped when the queue is full: the next read finds the damage again.
          _ = queue.enqueue(.discardDamaged(DamagedEntry(id: id, bodySHA256: digest, status: status)))
          return nil
        }
        found = StoredAnswer(
          status: Int(status), headers: headers, body: body, storedAtMs: statement.int64(3), bodyDigest: digest)
      } else {
        found = nil
      }
    } catch {
      counters.readErrors.wrappingAdd(1, ordering: .relaxed)
      return nil
    }
    if found != nil { recordAccess(id) }
    return found
  }

  /// The stored answer for a cache id without its body, or nil. Costs the same for an entry
  /// of 8 MB as for one of 8 bytes: SQLite takes a blob's length from the record's header
  /// without reading the blob, the columns before the body are on the row's first page, and
  /// those after it come from `cache_entries_head` (in the row they are past the body's
  /// overflow pages). One statement, so one snapshot: both halves are of the same row.
  /// Records the access for LRU. The digest is the one the body was stored with: a damaged
  /// body is found when it is read.
  public func lookupHead(id: String) -> StoredAnswerHead? {
    guard isCacheID(id) else { return nil }
    let found: StoredAnswerHead?
    do {
      let statement = try db.cachedStatement(Self.headQuery)
      defer { statement.reset() }
      try statement.bind(id, at: 1)
      if try statement.step() {
        guard let headers = HeaderBlock.decode(statement.blob(1)) else {
          counters.readErrors.wrappingAdd(1, ordering: .relaxed)
          return nil
        }
        found = StoredAnswerHead(
          status: Int(statement.int64(0)), headers: headers, storedAtMs: statement.int64(3),
          bodyCount: Int(statement.int64(2)), bodyDigest: statement.blob(4))
      } else {
        found = nil
      }
    } catch {
      counters.readErrors.wrappingAdd(1, ordering: .relaxed)
      return nil
    }
    if found != nil { recordAccess(id) }
    return found
  }

  static let headQuery = """
    SELECT e.status, e.headers, length(e.body), h.stored_at, h.body_sha256
    FROM cache_entries AS e, cache_entries AS h INDEXED BY cache_entries_head
    WHERE e.id = ?1 AND h.id = ?1
    """

  /// Same as `lookup(id:)` with a key.
  public func lookup(_ key: CacheKey) -> StoredAnswer? { lookup(id: key.id) }

  /// Hands recorded accesses to the writer now. Call it from a loop timer when traffic is
  /// low (otherwise a batch goes out every `touchBatchSize` hits or `touchIntervalMs`).
  public func flushTouches() {
    lastHandOffMs = clock()
    guard !pendingTouches.isEmpty else { return }
    let touches = pendingTouches
    pendingTouches = [:]
    switch queue.enqueue(.touches(touches)) {
    case .accepted: break
    case .full: counters.droppedTouches.wrappingAdd(1, ordering: .relaxed)
    case .closed: break
    }
  }

  private func recordAccess(_ id: String) {
    let now = clock()
    pendingTouches[id] = now
    if pendingTouches.count >= touchBatchSize || now - lastHandOffMs >= touchIntervalMs { flushTouches() }
  }
}
