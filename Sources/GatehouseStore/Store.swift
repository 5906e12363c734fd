import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The gateway's SQLite store: the last good answer per cache key and the token states.
///
/// Threads and connections:
/// - one writer thread owns the only read-write connection; `remember`, `saveToken`, the
///   purges and the readers' access records reach it through one bounded queue and are
///   committed in batches, one transaction per batch;
/// - each event loop reads through its own `StoreReader` (read-only connection);
/// - admin reads (`list`, `entry`, `loadTokens`) use one read-only admin connection behind a
///   Mutex; purges go through the writer queue (so the writer's size accounting stays exact)
///   and wait for its commit. Admin calls block their caller for at most one batch: call them
///   from the admin/control thread, never from an event loop.
///
/// The writer holds an advisory lock on `<path>.lock` (`StoreLock`) so a second process on
/// the same file is noticed and reported (`SharedFileWatch`).
///
/// Nothing here depends on HTTP types: callers pass strings, status codes, header pairs and
/// body bytes.
public final class Store: Sendable {
  /// How the store is opened. Only `path` and `maxBytes` usually need setting.
  public struct Configuration: Sendable {
    /// The SQLite file (`store.path`). Its directory must exist and be writable.
    public var path: String
    /// `store.max_bytes`: stored headers + bodies are kept at or under this by LRU eviction.
    public var maxBytes: Int64
    /// `store.secret_key`: when non-empty, token values are encrypted with AES-256-GCM
    /// under HKDF-SHA-256(secret, salt "gatehouse-store", info "tokens/aes-256-gcm/v1").
    public var secretKey: String?
    /// Bounded queue size (cache writes and access batches); beyond it writes are dropped.
    public var queueCapacity: Int = 4096
    /// Bound on the body and header bytes waiting in the queue (writes beyond it are
    /// dropped like writes beyond `queueCapacity`).
    public var queueMaxBytes: Int = 64 << 20
    /// Most items committed in one transaction.
    public var maxBatch: Int = 512
    /// How long the writer and the admin connection wait for a lock.
    public var busyTimeoutMs: Int32 = 5000
    /// How long a reader waits for a lock before answering a miss: short, it runs on a loop.
    public var readerBusyTimeoutMs: Int32 = 20
    /// A PASSIVE checkpoint after this many commits (SQLite's own auto-checkpoint runs too).
    public var checkpointEveryCommits: Int = 32
    /// After this long without work the writer checkpoints with TRUNCATE (WAL back to 0 bytes).
    public var idleCheckpointMs: Int = 1000
    /// A reader hands its recorded accesses to the writer after this many distinct hits...
    public var touchBatchSize: Int = 64
    /// ...or when this much time has passed since its last hand-over.
    public var touchIntervalMs: Int64 = 1000
    /// How long another process may hold the store's lock (`<path>.lock`) before a warning
    /// says two processes share the file. Longer than the default drain timeout (10 s), so
    /// the overlap of a restart where the new gateway starts before the old one exits is
    /// silent. 0 warns at open (in `warnings`).
    public var sharedFileGraceMs: Int64 = 15_000
    /// Receives warnings that arise after opening (another process sharing the file, or
    /// letting go of it), on the writer thread.
    public var onWarning: @Sendable (String) -> Void = { _ in }
    /// Milliseconds since the Unix epoch; injected so tests control time.
    public var clock: @Sendable () -> Int64 = systemMillis
    /// After a failed commit, token writes are kept and tried again this long after the
    /// failure, the wait doubling after each failed try up to `writeRetryMaxMs`: long enough
    /// not to spin on a full disk, short enough that a token is on disk soon after space
    /// comes back.
    public var writeRetryMinMs: Int64 = 250
    public var writeRetryMaxMs: Int64 = 30_000
    /// Told when commits start failing, when they work again and when token writes are lost
    /// at close (see `StoreEvent`); runs on the writer thread.
    public var onEvent: (@Sendable (StoreEvent) -> Void)? = nil

    public init(path: String, maxBytes: Int64, secretKey: String? = nil) {
      self.path = path
      self.maxBytes = maxBytes
      self.secretKey = secretKey
    }
  }

  /// The configuration the store was opened with.
  public let configuration: Configuration
  /// Messages for the caller's log from opening (a damaged file moved aside, the file
  /// shared with another process when `sharedFileGraceMs` is 0). Never secret.
  public let warnings: [String]

  private let queue: WriterQueue
  private let counters: StoreCounters
  private let tokenKey: [UInt8]?
  private let admin: Mutex<SQLiteConnection?>
  private let writerThread: Mutex<pthread_t?>
  private let lock: StoreLock

  /// Opens (or creates) the store and starts its writer thread. A damaged file is moved
  /// aside and replaced (see `warnings`); errors are only for what the operator must fix.
  public static func open(_ configuration: Configuration) throws(StoreError) -> Store {
    try Store(configuration)
  }

  private init(_ configuration: Configuration) throws(StoreError) {
    guard configuration.maxBytes > 0 else {
      throw StoreError(kind: .invalidArgument, message: "max_bytes must be positive")
    }
    let now = configuration.clock()
    let opened = try StoreFile.openWriter(
      path: configuration.path, busyTimeoutMs: configuration.busyTimeoutMs, now: now)
    var warnings = opened.warnings
    var sharing: SharedFileWatch? = nil
    if !opened.lockHeld {
      var watch = SharedFileWatch(sinceMs: now, graceMs: configuration.sharedFileGraceMs)
      if watch.observe(acquired: false, nowMs: now) == .warnShared {
        warnings.append(SharedFileWatch.sharedMessage(opened.lock))
      }
      sharing = watch
    }
    self.configuration = configuration
    self.warnings = warnings
    lock = opened.lock
    if let secret = configuration.secretKey, !secret.isEmpty {
      tokenKey = StoreCrypto.tokenKey(secret: secret)
    } else {
      tokenKey = nil
    }
    queue = WriterQueue(capacity: configuration.queueCapacity, maxPendingBytes: configuration.queueMaxBytes)
    counters = StoreCounters(maxBytes: configuration.maxBytes)
    admin = Mutex(nil)
    let writer = try StoreWriter(
      db: opened.connection, queue: queue, counters: counters,
      lock: LockState(lock: opened.lock, sharing: sharing, report: configuration.onWarning),
      settings: WriterSettings(
        maxBytes: configuration.maxBytes, maxBatch: max(1, configuration.maxBatch),
        checkpointEveryCommits: max(1, configuration.checkpointEveryCommits),
        idleCheckpointMs: max(10, configuration.idleCheckpointMs), retryMinMs: configuration.writeRetryMinMs,
        retryMaxMs: configuration.writeRetryMaxMs, clock: configuration.clock, onEvent: configuration.onEvent))
    writerThread = Mutex(try startThread { writer.run() })
  }

  deinit { close() }

  // MARK: Cache writes and reads

  /// Hands an answer to the writer; never blocks. Returns false when it was dropped (queue
  /// full or store closed), which is counted in `StoreStats.droppedWrites`. The caller has
  /// already decided the answer is cacheable (GET/HEAD, 2xx, no no-store/private/Set-Cookie).
  ///
  /// An answer with the stored status and body (same SHA-256) does not rewrite the row: only
  /// `stored_at` (its age) and the last access are refreshed, and the stored headers are kept,
  /// since they describe the same bytes. The hash is computed on the writer thread.
  /// `storedAtMs`: the answer's age is older than now (read from the shared tier).
  @discardableResult
  public func remember(
    key: CacheKey, status: Int, headers: StoredHeaders, body: [UInt8], storedAtMs: Int64? = nil
  ) -> Bool {
    let write = PendingCacheWrite(key: key, status: status, headers: headers, body: body, storedAtMs: storedAtMs)
    switch queue.enqueue(.cache(write)) {
    case .accepted:
      return true
    case .full, .closed:
      counters.droppedWrites.wrappingAdd(1, ordering: .relaxed)
      return false
    }
  }

  /// Renews the stored answer for `key` with `headers` (its age starts again, its body
  /// stays as stored) after the upstream confirmed it unchanged; never blocks. False when it
  /// was dropped, counted like a dropped write. Applied as `unchanged_writes`.
  @discardableResult
  public func renew(key: CacheKey, headers: StoredHeaders) -> Bool {
    switch queue.enqueue(.renew(PendingRenewal(id: key.id, headers: headers))) {
    case .accepted:
      return true
    case .full, .closed:
      counters.droppedWrites.wrappingAdd(1, ordering: .relaxed)
      return false
    }
  }

  /// Removes the entry for `key` without waiting: the request path's way to drop an answer
  /// that a newer one, which may not be kept, has replaced. False when it was dropped (queue
  /// full or store closed), counted like a dropped write.
  @discardableResult
  public func forget(key: CacheKey) -> Bool {
    switch queue.enqueue(.purge(.id(key.id), WriterReply())) {
    case .accepted:
      return true
    case .full, .closed:
      counters.droppedWrites.wrappingAdd(1, ordering: .relaxed)
      return false
    }
  }

  /// A reader for the calling thread (one per event loop). A failure (the file was deleted
  /// or cannot be read) counts in `StoreStats.readErrors`: the caller answers a miss.
  public func makeReader() throws(StoreError) -> StoreReader {
    do {
      return try StoreReader(
        path: configuration.path, busyTimeoutMs: configuration.readerBusyTimeoutMs, queue: queue, counters: counters,
        clock: configuration.clock, touchBatchSize: configuration.touchBatchSize,
        touchIntervalMs: configuration.touchIntervalMs)
    } catch {
      counters.readErrors.wrappingAdd(1, ordering: .relaxed)
      throw error
    }
  }

  /// Changes `max_bytes` (a config reload): least recently used entries are evicted down to
  /// it on the writer thread, and larger answers are no longer stored. Returns false when
  /// `bytes` is not positive or the store is closed.
  @discardableResult
  public func setMaxBytes(_ bytes: Int64) -> Bool {
    guard bytes > 0 else { return false }
    if case .accepted = queue.enqueue(.setMaxBytes(bytes)) { return true }
    return false
  }

  /// Waits until everything queued before the call is committed (tests, shutdown).
  public func flush() {
    let reply = WriterReply<Void>()
    switch queue.enqueue(.barrier(reply)) {
    case .accepted: reply.wait()
    case .full, .closed: break
    }
  }

  /// Runs `sql` on the writer's connection after what is queued, and waits for it (tests).
  func executeOnWriter(_ sql: String) {
    _ = queue.enqueue(.execute(sql))
    flush()
  }

  /// Commits what is queued, checkpoints (TRUNCATE), stops the writer and closes the
  /// connections. Later writes are dropped. Readers stay usable until released.
  public func close() {
    _ = queue.enqueue(.stop)
    if let thread = writerThread.withLock({ state -> pthread_t? in
      defer { state = nil }
      return state
    }) {
      pthread_join(thread, nil)
    }
    lock.release()
    admin.withLock { $0 = nil }
  }

  // MARK: Operations (admin API)

  /// Sizes and counters; reads memory only, never the file.
  public func stats() -> StoreStats {
    StoreStats(
      entries: counters.entries.load(ordering: .relaxed), bytes: counters.bytes.load(ordering: .relaxed),
      maxBytes: counters.maxBytes.load(ordering: .relaxed), writes: counters.writes.load(ordering: .relaxed),
      unchangedWrites: counters.unchangedWrites.load(ordering: .relaxed),
      droppedWrites: counters.droppedWrites.load(ordering: .relaxed),
      evictions: counters.evictions.load(ordering: .relaxed),
      oversizeSkipped: counters.oversizeSkipped.load(ordering: .relaxed),
      readErrors: counters.readErrors.load(ordering: .relaxed),
      writeErrors: counters.writeErrors.load(ordering: .relaxed),
      droppedTouches: counters.droppedTouches.load(ordering: .relaxed), queueDepth: queue.depth,
      pendingTokenWrites: counters.pendingTokenWrites.load(ordering: .relaxed))
  }

  /// Entries whose upstream path starts with `prefix`, ordered by path then id. `cursor` is
  /// the `nextCursor` of the previous page (opaque: hex of the last path, a dot, the last
  /// id). `limit` is clamped to 1...1000.
  public func list(prefix: String = "", limit: Int = 100, cursor: String? = nil) throws(StoreError) -> CacheEntryPage {
    let limit = min(max(limit, 1), 1000)
    let range = PathPrefixRange(prefix)
    var start = (path: range.lower, id: "")
    if let cursor {
      guard let position = Self.decodeCursor(cursor) else {
        throw StoreError(kind: .invalidCursor, message: "cursor not recognised")
      }
      // A cursor before the prefix range (from another listing) must not widen it.
      if !position.path.lexicographicallyPrecedes(range.lower) { start = position }
    }
    let columns = "id, method, upstream, path, query, status, bytes, stored_at, last_access, vary"
    return try withAdmin { (db: SQLiteConnection) throws(StoreError) -> CacheEntryPage in
      let statement: SQLiteStatement
      if let upper = range.upper {
        statement = try db.cachedStatement(
          "SELECT \(columns) FROM cache_entries WHERE (path, id) > (?1, ?2) AND path < ?3 ORDER BY path, id LIMIT ?4")
        try statement.bind(textBytes: upper, at: 3)
      } else {
        statement = try db.cachedStatement(
          "SELECT \(columns) FROM cache_entries WHERE (path, id) > (?1, ?2) ORDER BY path, id LIMIT ?4")
      }
      defer { statement.reset() }
      try statement.bind(textBytes: start.path, at: 1)
      try statement.bind(start.id, at: 2)
      try statement.bind(limit + 1, at: 4)
      var entries: [CacheEntrySummary] = []
      while try statement.step() { entries.append(Self.summary(statement)) }
      var next: String? = nil
      if entries.count > limit {
        entries.removeLast()
        next = entries.last.map { Self.encodeCursor(path: $0.path, id: $0.id) }
      }
      return CacheEntryPage(entries: entries, nextCursor: next)
    }
  }

  /// One entry with its headers and body, or nil when absent (or not an id).
  public func entry(id: String) throws(StoreError) -> CacheEntryDetail? {
    guard isCacheID(id) else { return nil }
    return try withAdmin { (db: SQLiteConnection) throws(StoreError) -> CacheEntryDetail? in
      let statement = try db.cachedStatement(
        """
        SELECT id, method, upstream, path, query, status, bytes, stored_at, last_access, vary, headers, body,
          body_sha256 FROM cache_entries WHERE id = ?
        """)
      defer { statement.reset() }
      try statement.bind(id, at: 1)
      guard try statement.step() else { return nil }
      guard let headers = HeaderBlock.decode(statement.blob(10)) else {
        throw StoreError(kind: .corrupt, message: "stored headers of \(id) are damaged")
      }
      return CacheEntryDetail(
        summary: Self.summary(statement), vary: statement.string(9), headers: headers, body: statement.blob(11),
        bodySHA256: StoreCrypto.hex(statement.blob(12)))
    }
  }

  /// Removes one entry; returns 1, or 0 when it was not there.
  public func purge(id: String) throws(StoreError) -> Int {
    guard isCacheID(id) else { return 0 }
    return try purge(.id(id))
  }

  /// Removes every entry whose upstream path starts with `prefix`; returns how many.
  public func purge(prefix: String) throws(StoreError) -> Int { try purge(.prefix(prefix)) }

  /// Removes every cache entry (tokens stay); returns how many.
  public func purgeAll() throws(StoreError) -> Int { try purge(.all) }

  private func purge(_ target: PurgeTarget) throws(StoreError) -> Int {
    let reply = WriterReply<Result<Int, StoreError>>()
    switch queue.enqueue(.purge(target, reply)) {
    case .accepted: break
    case .full, .closed: throw StoreError(kind: .closed, message: "the store is closed")
    }
    return try reply.wait().get()
  }

  /// Runs `PRAGMA integrity_check` on the admin connection: `["ok"]` when the file is sound.
  /// Reads the whole file; meant for operators and crash tests, not for request paths.
  public func checkIntegrity() throws(StoreError) -> [String] {
    try withAdmin { (db: SQLiteConnection) throws(StoreError) -> [String] in
      try db.strings("PRAGMA integrity_check")
    }
  }

  // MARK: Tokens

  /// Queues a token for storage (not subject to the cache queue's bound). With a secret key
  /// the value is encrypted here, on the caller's thread, before it is queued. When its
  /// commit fails (a full disk), the write is kept and retried, newest value per token, until
  /// a commit takes it; `StoreStats.pendingTokenWrites` counts those waiting.
  /// Throws only when encryption fails or the store is closed.
  public func saveToken(
    name: String, value: String, expiresAtMs: Int64?, refreshedAtMs: Int64?, state: String, lastError: String?
  ) throws(StoreError) {
    var pending = PendingToken(
      name: name, value: Array(value.utf8), nonce: nil, tag: nil, encrypted: false, expiresAtMs: expiresAtMs,
      refreshedAtMs: refreshedAtMs, state: state, lastError: lastError)
    if let tokenKey {
      // AAD = the token name: a value copied onto another token's row fails to open.
      let sealed = try StoreCrypto.seal(pending.value, key: tokenKey, aad: Array(name.utf8))
      pending.value = sealed.ciphertext
      pending.nonce = sealed.nonce
      pending.tag = sealed.tag
      pending.encrypted = true
    }
    switch queue.enqueue(.token(pending)) {
    case .accepted: return
    case .full, .closed: throw StoreError(kind: .closed, message: "the store is closed")
    }
  }

  /// Queues the removal of a token.
  public func deleteToken(name: String) {
    _ = queue.enqueue(.deleteToken(name))
  }

  // MARK: Signing keys

  /// Queues an identity provider's keys for storage (replacing the provider's last ones).
  public func saveKeySet(_ keySet: StoredKeySet) {
    _ = queue.enqueue(.keySet(keySet))
  }

  /// Every stored key set, by provider name. Reads what is committed.
  public func loadKeySets() throws(StoreError) -> [StoredKeySet] {
    try withAdmin { (db: SQLiteConnection) throws(StoreError) -> [StoredKeySet] in
      let statement = try db.cachedStatement(
        "SELECT provider, source, jwks, fetched_at FROM key_sets ORDER BY provider")
      defer { statement.reset() }
      var sets: [StoredKeySet] = []
      while try statement.step() {
        sets.append(
          StoredKeySet(
            provider: statement.string(0), source: statement.string(1), jwks: statement.blob(2),
            fetchedAtMs: statement.int64(3)))
      }
      return sets
    }
  }

  /// Every stored token that can be read. A token that cannot be decrypted (wrong or
  /// missing key, damaged row) is left out with a warning: the caller treats it as missing.
  /// Reads what is committed; call `flush()` first to include queued saves.
  public func loadTokens() throws(StoreError) -> TokenLoadResult {
    let rows = try withAdmin { (db: SQLiteConnection) throws(StoreError) -> [(StoredToken, PendingToken)] in
      let statement = try db.cachedStatement(
        """
        SELECT name, value, nonce, tag, encrypted, expires_at, refreshed_at, state, last_error
        FROM tokens ORDER BY name
        """)
      defer { statement.reset() }
      var rows: [(StoredToken, PendingToken)] = []
      while try statement.step() {
        let raw = PendingToken(
          name: statement.string(0), value: statement.blob(1), nonce: statement.optionalBlob(2),
          tag: statement.optionalBlob(3), encrypted: statement.int64(4) != 0, expiresAtMs: statement.optionalInt64(5),
          refreshedAtMs: statement.optionalInt64(6), state: statement.string(7), lastError: statement.optionalString(8))
        let token = StoredToken(
          name: raw.name, value: "", expiresAtMs: raw.expiresAtMs, refreshedAtMs: raw.refreshedAtMs, state: raw.state,
          lastError: raw.lastError)
        rows.append((token, raw))
      }
      return rows
    }
    var result = TokenLoadResult(tokens: [], warnings: [])
    for (token, raw) in rows {
      var token = token
      if raw.encrypted {
        guard let tokenKey else {
          result.warnings.append(
            "token \(raw.name) is stored encrypted but no store.secret_key is set; treated as missing, and kept")
          result.unreadable.insert(raw.name)
          continue
        }
        let sealed = StoreCrypto.Sealed(nonce: raw.nonce ?? [], ciphertext: raw.value, tag: raw.tag ?? [])
        guard let plain = StoreCrypto.open(sealed, key: tokenKey, aad: Array(raw.name.utf8)) else {
          result.warnings.append(
            "token \(raw.name) could not be decrypted (store.secret_key changed?); treated as missing, and kept")
          result.unreadable.insert(raw.name)
          continue
        }
        token.value = String(decoding: plain, as: UTF8.self)
      } else {
        if tokenKey != nil {
          result.warnings.append("token \(raw.name) was stored unencrypted; it is encrypted at its next save")
        }
        token.value = String(decoding: raw.value, as: UTF8.self)
      }
      result.tokens.append(token)
    }
    return result
  }

  // MARK: Helpers

  private func withAdmin<T: Sendable>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
    let path = configuration.path
    let timeout = configuration.busyTimeoutMs
    return try admin.withLock { (db: inout SQLiteConnection?) throws(StoreError) -> T in
      if db == nil { db = try SQLiteConnection(path: path, mode: .readOnly, busyTimeoutMs: timeout) }
      return try body(db!)
    }
  }

  private static func summary(_ statement: SQLiteStatement) -> CacheEntrySummary {
    CacheEntrySummary(
      id: statement.string(0), method: statement.string(1), upstream: statement.string(2),
      path: statement.string(3), query: statement.string(4), status: Int(statement.int64(5)),
      bytes: statement.int64(6), storedAtMs: statement.int64(7), lastAccessMs: statement.int64(8),
      vary: statement.string(9))
  }

  static func encodeCursor(path: String, id: String) -> String {
    StoreCrypto.hex(path.utf8) + "." + id
  }

  static func decodeCursor(_ cursor: String) -> (path: [UInt8], id: String)? {
    guard let dot = cursor.lastIndex(of: ".") else { return nil }
    let id = String(cursor[cursor.index(after: dot)...])
    guard isCacheID(id) else { return nil }
    let hex = Array(cursor[..<dot].utf8)
    guard hex.count % 2 == 0 else { return nil }
    func nibble(_ c: UInt8) -> UInt8? {
      switch c {
      case 0x30...0x39: return c - 0x30
      case 0x61...0x66: return c - 0x61 + 10
      default: return nil
      }
    }
    var path: [UInt8] = []
    path.reserveCapacity(hex.count / 2)
    var index = 0
    while index < hex.count {
      guard let high = nibble(hex[index]), let low = nibble(hex[index + 1]) else { return nil }
      path.append(high << 4 | low)
      index += 2
    }
    return (path, id)
  }
}
