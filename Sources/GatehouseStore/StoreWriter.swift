import CGatehouseSQLite
import Dispatch

#if canImport(Glibc)
  import Glibc
#endif

/// Settings the writer thread needs (a subset of `Store.Configuration`).
struct WriterSettings: Sendable {
  var maxBytes: Int64
  var maxBatch: Int
  var checkpointEveryCommits: Int
  var idleCheckpointMs: Int
  /// First and longest wait before kept token writes are tried again after a failed commit.
  var retryMinMs: Int64
  var retryMaxMs: Int64
  var clock: @Sendable () -> Int64
  var onEvent: (@Sendable (StoreEvent) -> Void)?
}

/// The store's lock as the writer sees it: while another process holds it (`sharing` set),
/// the writer tries to take it before each batch and on each idle tick.
struct LockState: Sendable {
  var lock: StoreLock
  var sharing: SharedFileWatch?
  var report: @Sendable (String) -> Void
}

/// The store's only writing connection and the loop that drains `WriterQueue` into it.
///
/// `@unchecked Sendable` because the object is created on the opening thread and then
/// handed to the writer thread, which is the only one to touch the connection and the
/// mutable fields afterwards (the hand-over happens-before through `pthread_create`).
final class StoreWriter: @unchecked Sendable {
  private let db: SQLiteConnection
  private let queue: WriterQueue
  private let counters: StoreCounters
  private var settings: WriterSettings
  private var lockState: LockState
  // Totals kept in memory so eviction and stats never scan the table; recomputed from the
  // table when a batch rolls back.
  private var totalBytes: Int64 = 0
  private var entryCount: Int64 = 0
  private var commitsSinceCheckpoint = 0
  private var walDirty = false
  private var pendingTokens = PendingTokenWrites()
  private var backoff: RetryBackoff
  private var health = WriteHealth()

  init(
    db: SQLiteConnection, queue: WriterQueue, counters: StoreCounters, lock: LockState, settings: WriterSettings
  ) throws(StoreError) {
    self.db = db
    self.queue = queue
    self.counters = counters
    self.lockState = lock
    self.settings = settings
    backoff = RetryBackoff(minMs: settings.retryMinMs, maxMs: settings.retryMaxMs)
    try reloadTotals()
  }

  private func reloadTotals() throws(StoreError) {
    let statement = try db.cachedStatement("SELECT count(*), coalesce(sum(bytes), 0) FROM cache_entries")
    _ = try statement.step()
    entryCount = statement.int64(0)
    totalBytes = statement.int64(1)
    statement.reset()
    counters.entries.store(entryCount, ordering: .relaxed)
    counters.bytes.store(totalBytes, ordering: .relaxed)
  }

  /// The thread body: batches until `.stop`, checkpointing as it goes, and retrying kept
  /// token writes when their back-off is over (even when no other work arrives).
  func run() {
    while true {
      if backoff.isDue(nowMs: Self.monotonicMs()) { retryPendingTokens() }
      guard let batch = queue.take(limit: settings.maxBatch) else {
        var timeoutMs = settings.idleCheckpointMs
        if let retryMs = backoff.msUntilDue(nowMs: Self.monotonicMs()) {
          timeoutMs = min(timeoutMs, Int(retryMs) + 1)
        }
        if !queue.waitForWork(timeoutMs: timeoutMs) && walDirty {
          // Idle: fold the WAL back into the database and cut it to zero bytes.
          checkpoint(truncate: true)
        }
        watchLock()
        continue
      }
      // After `take`, so a batch sees the lock as it was when its last item was queued.
      watchLock()
      if apply(batch) { break }
    }
    // A last try, so a closing store does not drop what a retry could still commit.
    if !pendingTokens.isEmpty { retryPendingTokens() }
    if !pendingTokens.isEmpty {
      settings.onEvent?(.tokenWritesLost(names: pendingTokens.ordered.map(\.name)))
    }
    checkpoint(truncate: true)
  }

  /// While another process holds the lock: one non-blocking `flock` per loop turn (only
  /// then), a warning once the grace period is over, and exact totals on taking over.
  private func watchLock() {
    guard var watch = lockState.sharing else { return }
    let acquired = lockState.lock.tryAcquire()
    switch watch.observe(acquired: acquired, nowMs: settings.clock()) {
    case .none:
      break
    case .warnShared:
      lockState.report(SharedFileWatch.sharedMessage(lockState.lock))
    case .tookOver(let afterWarning):
      // The other process wrote rows this one's totals never saw.
      try? reloadTotals()
      if afterWarning { lockState.report(SharedFileWatch.tookOverMessage(storePath: lockState.lock.storePath)) }
    }
    lockState.sharing = acquired ? nil : watch
  }

  /// Milliseconds of a clock that never jumps: back-off waits must not depend on the wall
  /// clock (or on the injected `clock`, which tests may hold still).
  static func monotonicMs() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

  /// Commits the kept token writes in a transaction of their own, so a batch of cache
  /// writes that cannot fit never holds them back.
  private func retryPendingTokens() {
    let writes = pendingTokens.ordered
    let before = db.totalChanges
    do {
      try db.inTransaction { () throws(StoreError) in
        for (name, write) in writes {
          switch write {
          case .save(let token): try applyToken(token)
          case .delete: try applyDeleteToken(name)
          }
        }
      }
      pendingTokens.removeAll()
      backoff.reset()
      walDirty = true
      commitsSinceCheckpoint += 1
      committed(changedRows: db.totalChanges != before)
    } catch {
      backoff.failed(nowMs: Self.monotonicMs())
      failed(error)
    }
    publishPendingTokens()
  }

  private func publishPendingTokens() {
    counters.pendingTokenWrites.store(Int64(pendingTokens.count), ordering: .relaxed)
  }

  /// Records a failed commit; the first of an episode is reported.
  private func failed(_ error: StoreError) {
    if health.commitFailed() {
      settings.onEvent?(.writesFailing(error: "\(error)", pendingTokenWrites: pendingTokens.count))
    }
  }

  /// Records a commit; the one that ends an episode is reported.
  private func committed(changedRows: Bool) {
    if let failedCommits = health.commitSucceeded(changedRows: changedRows) {
      settings.onEvent?(.writesRecovered(failedCommits: failedCommits))
    }
  }

  private func checkpoint(truncate: Bool) {
    if let result = try? db.checkpoint(truncate: truncate), !result.busy, truncate {
      walDirty = false
    }
    commitsSinceCheckpoint = 0
  }

  /// Batch-local counts, published only once the batch has committed.
  private struct BatchCounts {
    var writes: Int64 = 0
    var unchanged: Int64 = 0
    var evictions: Int64 = 0
    var oversize: Int64 = 0
  }

  /// Applies one batch in one transaction; returns true when `.stop` was in it.
  private func apply(_ batch: [WriterItem]) -> Bool {
    var counts = BatchCounts()
    var purgeReplies: [(WriterReply<Result<Int, StoreError>>, Int)] = []
    var failure: StoreError? = nil
    // Decided from the batch itself so a failed commit still ends the thread on close.
    let stop = batch.contains { if case .stop = $0 { return true } else { return false } }
    let now = settings.clock()
    let changesBefore = db.totalChanges
    do {
      try db.inTransaction { () throws(StoreError) in
        for item in batch {
          switch item {
          case .cache(let write):
            try applyCache(write, now: now, counts: &counts)
          case .renew(let renewal):
            try applyRenewal(renewal, now: now, counts: &counts)
          case .touches(let touches):
            try applyTouches(touches)
          case .discardDamaged(let entry):
            try applyDiscardDamaged(entry)
          case .token(let token):
            try applyToken(token)
          case .deleteToken(let name):
            try applyDeleteToken(name)
          case .keySet(let keySet):
            try applyKeySet(keySet)
          case .purge(let target, let reply):
            purgeReplies.append((reply, try applyPurge(target)))
          case .barrier:
            // Answered below, whether or not the batch commits.
            break
          case .setMaxBytes(let bytes):
            // Evicting down to it happens below, in this transaction.
            settings.maxBytes = bytes
            counters.maxBytes.store(bytes, ordering: .relaxed)
          case .execute(let sql):
            try db.execute(sql)
          case .stop:
            break
          }
        }
        try evictIfNeeded(counts: &counts)
      }
      counters.writes.wrappingAdd(counts.writes, ordering: .relaxed)
      counters.unchangedWrites.wrappingAdd(counts.unchanged, ordering: .relaxed)
      counters.evictions.wrappingAdd(counts.evictions, ordering: .relaxed)
      counters.oversizeSkipped.wrappingAdd(counts.oversize, ordering: .relaxed)
      walDirty = true
      commitsSinceCheckpoint += 1
      pendingTokens.supersede(committed: batch)
      if pendingTokens.isEmpty { backoff.reset() }
      let changedRows = db.totalChanges != changesBefore
      committed(changedRows: changedRows)
      // The file takes writes again: kept token writes need not wait for their back-off.
      if changedRows && !pendingTokens.isEmpty { retryPendingTokens() }
    } catch {
      // The whole batch rolled back: count the cache writes lost (the next answer replaces
      // them), keep the token writes for a retry, fail the purges, and re-read the totals
      // that were adjusted in memory.
      // Counted from the batch: the items after the one that failed were never reached.
      var lostCacheWrites: Int64 = 0
      for item in batch {
        switch item {
        case .cache, .renew: lostCacheWrites += 1
        // A reload's limit holds although its eviction rolled back: the next commit evicts.
        case .setMaxBytes(let bytes):
          settings.maxBytes = bytes
          counters.maxBytes.store(bytes, ordering: .relaxed)
        default: break
        }
      }
      counters.writeErrors.wrappingAdd(lostCacheWrites, ordering: .relaxed)
      let hadPendingTokens = !pendingTokens.isEmpty
      pendingTokens.keep(failed: batch)
      // Only a first failure schedules the retry; one already scheduled keeps its back-off.
      if !hadPendingTokens && !pendingTokens.isEmpty { backoff.failed(nowMs: Self.monotonicMs()) }
      failure = error
      failed(error)
      try? reloadTotals()
    }
    publishPendingTokens()
    // Totals are published before anyone waiting is woken, so a caller that saw its purge
    // or flush complete also sees the sizes that followed it.
    counters.entries.store(entryCount, ordering: .relaxed)
    counters.bytes.store(totalBytes, ordering: .relaxed)
    if let failure {
      for item in batch {
        if case .purge(_, let reply) = item { reply.fulfil(.failure(failure)) }
      }
    } else {
      for (reply, count) in purgeReplies { reply.fulfil(.success(count)) }
    }
    if commitsSinceCheckpoint >= settings.checkpointEveryCommits { checkpoint(truncate: false) }
    // Every barrier of the batch, also those after an item that failed: the transaction
    // stopped there, and a flush must not wait forever for a batch that is over.
    for item in batch {
      if case .barrier(let reply) = item { reply.fulfil(()) }
    }
    return stop
  }

  private func applyCache(_ write: PendingCacheWrite, now: Int64, counts: inout BatchCounts) throws(StoreError) {
    let headers = HeaderBlock.encode(write.headers)
    let bytes = Int64(headers.count + write.body.count)
    guard bytes <= settings.maxBytes else {
      counts.oversize += 1
      return
    }
    let digest = StoreCrypto.sha256(write.body)
    let storedAt = min(write.storedAtMs ?? now, now)

    let existing = try db.cachedStatement("SELECT body_sha256, bytes, status FROM cache_entries WHERE id = ?")
    try existing.bind(write.key.id, at: 1)
    var oldBytes: Int64? = nil
    var unchanged = false
    if try existing.step() {
      oldBytes = existing.int64(1)
      unchanged = existing.blob(0) == digest && existing.int64(2) == Int64(write.status)
    }
    existing.reset()

    if unchanged {
      // Same body and status: only record that the answer was confirmed now. The stored
      // headers are kept; the body they describe is the same bytes.
      let touch = try db.cachedStatement(
        "UPDATE cache_entries SET stored_at = max(stored_at, ?1), last_access = max(last_access, ?3) WHERE id = ?2")
      try touch.bind(storedAt, at: 1)
      try touch.bind(write.key.id, at: 2)
      try touch.bind(now, at: 3)
      try touch.run()
      counts.unchanged += 1
      return
    }

    let upsert = try db.cachedStatement(
      """
      INSERT INTO cache_entries
        (id, method, upstream, path, query, vary, status, headers, body, body_sha256, bytes, stored_at, last_access)
      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
      ON CONFLICT(id) DO UPDATE SET
        status = excluded.status, headers = excluded.headers, body = excluded.body,
        body_sha256 = excluded.body_sha256, bytes = excluded.bytes, stored_at = excluded.stored_at,
        last_access = max(cache_entries.last_access, excluded.last_access)
      """)
    try upsert.bind(write.key.id, at: 1)
    try upsert.bind(write.key.method, at: 2)
    try upsert.bind(write.key.upstream, at: 3)
    try upsert.bind(write.key.path, at: 4)
    try upsert.bind(write.key.sortedQuery, at: 5)
    try upsert.bind(write.key.varyPart, at: 6)
    try upsert.bind(write.status, at: 7)
    try upsert.bind(blob: headers, at: 8)
    try upsert.bind(blob: write.body, at: 9)
    try upsert.bind(blob: digest, at: 10)
    try upsert.bind(bytes, at: 11)
    try upsert.bind(storedAt, at: 12)
    try upsert.bind(now, at: 13)
    try upsert.run()
    totalBytes += bytes - (oldBytes ?? 0)
    if oldBytes == nil { entryCount += 1 }
    counts.writes += 1
  }

  /// A stored answer the upstream confirmed (RFC 9111 §4.3.4): new headers and age, the
  /// body row as it is. An entry gone meanwhile (evicted, purged) stays gone: headers alone
  /// are no answer.
  private func applyRenewal(_ renewal: PendingRenewal, now: Int64, counts: inout BatchCounts) throws(StoreError) {
    let headers = HeaderBlock.encode(renewal.headers)
    let existing = try db.cachedStatement("SELECT bytes, length(body) FROM cache_entries WHERE id = ?")
    try existing.bind(renewal.id, at: 1)
    guard try existing.step() else {
      existing.reset()
      return
    }
    let oldBytes = existing.int64(0)
    let bytes = existing.int64(1) + Int64(headers.count)
    existing.reset()
    let update = try db.cachedStatement(
      "UPDATE cache_entries SET headers = ?1, bytes = ?2, stored_at = ?3, last_access = max(last_access, ?3) WHERE id = ?4"
    )
    try update.bind(blob: headers, at: 1)
    try update.bind(bytes, at: 2)
    try update.bind(now, at: 3)
    try update.bind(renewal.id, at: 4)
    try update.run()
    totalBytes += bytes - oldBytes
    counts.unchanged += 1
  }

  private func applyTouches(_ touches: [String: Int64]) throws(StoreError) {
    let statement = try db.cachedStatement(
      "UPDATE cache_entries SET last_access = ?1 WHERE id = ?2 AND last_access < ?1")
    for (id, at) in touches {
      statement.reset()
      try statement.bind(at, at: 1)
      try statement.bind(id, at: 2)
      try statement.run()
    }
  }

  private func applyToken(_ token: PendingToken) throws(StoreError) {
    let statement = try db.cachedStatement(
      """
      INSERT INTO tokens (name, value, nonce, tag, encrypted, expires_at, refreshed_at, state, last_error)
      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
      ON CONFLICT(name) DO UPDATE SET
        value = excluded.value, nonce = excluded.nonce, tag = excluded.tag, encrypted = excluded.encrypted,
        expires_at = excluded.expires_at, refreshed_at = excluded.refreshed_at, state = excluded.state,
        last_error = excluded.last_error
      """)
    try statement.bind(token.name, at: 1)
    try statement.bind(blob: token.value, at: 2)
    try statement.bind(blob: token.nonce, at: 3)
    try statement.bind(blob: token.tag, at: 4)
    try statement.bind(token.encrypted ? 1 : 0, at: 5)
    try statement.bind(token.expiresAtMs, at: 6)
    try statement.bind(token.refreshedAtMs, at: 7)
    try statement.bind(token.state, at: 8)
    try statement.bind(token.lastError, at: 9)
    try statement.run()
  }

  private func applyKeySet(_ keySet: StoredKeySet) throws(StoreError) {
    let statement = try db.cachedStatement(
      """
      INSERT INTO key_sets (provider, source, jwks, fetched_at) VALUES (?1, ?2, ?3, ?4)
      ON CONFLICT(provider) DO UPDATE SET
        source = excluded.source, jwks = excluded.jwks, fetched_at = excluded.fetched_at
      """)
    try statement.bind(keySet.provider, at: 1)
    try statement.bind(keySet.source, at: 2)
    try statement.bind(blob: keySet.jwks, at: 3)
    try statement.bind(keySet.fetchedAtMs, at: 4)
    try statement.run()
  }

  private func applyDeleteToken(_ name: String) throws(StoreError) {
    let statement = try db.cachedStatement("DELETE FROM tokens WHERE name = ?")
    try statement.bind(name, at: 1)
    try statement.run()
  }

  /// Removes a row a reader found damaged, unless it has been rewritten since. Without
  /// this a damaged row would stay: an answer with the same body and status only refreshes
  /// the row's time (the digest matches), it does not rewrite the bytes.
  private func applyDiscardDamaged(_ entry: DamagedEntry) throws(StoreError) {
    let statement = try db.cachedStatement(
      "DELETE FROM cache_entries WHERE id = ?1 AND body_sha256 = ?2 AND status = ?3 RETURNING bytes")
    try statement.bind(entry.id, at: 1)
    try statement.bind(blob: entry.bodySHA256, at: 2)
    try statement.bind(entry.status, at: 3)
    _ = try removeRows(statement)
  }

  /// Steps a `DELETE … RETURNING bytes` and keeps the totals in step; returns the rows removed.
  private func removeRows(_ statement: SQLiteStatement) throws(StoreError) -> Int {
    var removed = 0
    while try statement.step() {
      removed += 1
      totalBytes -= statement.int64(0)
    }
    entryCount -= Int64(removed)
    return removed
  }

  private func applyPurge(_ target: PurgeTarget) throws(StoreError) -> Int {
    switch target {
    case .all:
      // The rows really deleted, not the in-memory count: another process on the same file
      // adds rows this one never counted.
      try db.cachedStatement("DELETE FROM cache_entries").run()
      let removed = db.changes
      entryCount = 0
      totalBytes = 0
      return removed
    case .id(let id):
      let statement = try db.cachedStatement("DELETE FROM cache_entries WHERE id = ? RETURNING bytes")
      try statement.bind(id, at: 1)
      return try removeRows(statement)
    case .prefix(let prefix):
      let range = PathPrefixRange(prefix)
      let statement: SQLiteStatement
      if let upper = range.upper {
        statement = try db.cachedStatement("DELETE FROM cache_entries WHERE path >= ?1 AND path < ?2 RETURNING bytes")
        try statement.bind(textBytes: range.lower, at: 1)
        try statement.bind(textBytes: upper, at: 2)
      } else {
        statement = try db.cachedStatement("DELETE FROM cache_entries WHERE path >= ?1 RETURNING bytes")
        try statement.bind(textBytes: range.lower, at: 1)
      }
      return try removeRows(statement)
    }
  }

  /// Deletes least recently used entries until the total fits `max_bytes`. Entries written
  /// in this batch carry the newest access time, so they go last.
  private func evictIfNeeded(counts: inout BatchCounts) throws(StoreError) {
    guard totalBytes > settings.maxBytes else { return }
    let oldest = try db.cachedStatement(
      "SELECT id, bytes FROM cache_entries ORDER BY last_access, rowid LIMIT 64")
    let delete = try db.cachedStatement("DELETE FROM cache_entries WHERE id = ?")
    while totalBytes > settings.maxBytes {
      oldest.reset()
      var victims: [(String, Int64)] = []
      while try oldest.step() { victims.append((oldest.string(0), oldest.int64(1))) }
      oldest.reset()
      if victims.isEmpty {
        // The in-memory total drifted from the table; trust the table.
        try reloadTotals()
        return
      }
      for (id, bytes) in victims where totalBytes > settings.maxBytes {
        delete.reset()
        try delete.bind(id, at: 1)
        try delete.run()
        totalBytes -= bytes
        entryCount -= 1
        counts.evictions += 1
      }
    }
  }
}

/// The byte range of paths starting with a prefix: `lower <= path < upper`. Paths compare
/// byte-wise (BINARY collation), so the upper bound is the prefix with its last byte
/// incremented (after dropping trailing 0xFF bytes, which UTF-8 never contains anyway);
/// this keeps prefix queries on the `(path, id)` index instead of a LIKE scan.
struct PathPrefixRange {
  var lower: [UInt8]
  var upper: [UInt8]?

  init(_ prefix: String) {
    lower = Array(prefix.utf8)
    var bound = lower
    while let last = bound.last, last == 0xFF { bound.removeLast() }
    if bound.isEmpty {
      upper = nil
    } else {
      bound[bound.count - 1] += 1
      upper = bound
    }
  }
}

/// Starts a detached-joinable POSIX thread running `body`. A pthread rather than Foundation's
/// Thread keeps Foundation out of the module.
func startThread(_ body: @escaping @Sendable () -> Void) throws(StoreError) -> pthread_t {
  final class Box {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }
  let box = Unmanaged.passRetained(Box(body)).toOpaque()
  var thread = pthread_t()
  let code = pthread_create(
    &thread, nil,
    { raw in
      let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
      box.body()
      return nil
    }, box)
  guard code == 0 else {
    Unmanaged<Box>.fromOpaque(box).release()
    throw StoreError(kind: .cannotOpen, message: "could not start the store writer thread: error \(code)")
  }
  return thread
}
