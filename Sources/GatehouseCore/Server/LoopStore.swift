import GatehouseHTTP
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// One loop's access to the store: its own read connection, a short-lived memory of
/// answers it read (so an outage does not turn every request into a SQLite query), and a
/// memory of what it last wrote per key (so an unchanged answer is not queued again).
/// Confined to its loop.
final class LoopStore {
  let store: Store
  private let logger: Logger
  private var reader: StoreReader?
  /// When to try again after the reader could not be opened (the file was deleted or moved,
  /// or cannot be read): a file put back, or one the writer recreates at the next start,
  /// is read again without a restart, and a missing one costs one `open` now and then.
  private var reopen = RetryBackoff(minMs: 500, maxMs: 30_000)
  private var recent = RecentAnswers()
  /// Body sizes of entries too large for `recent`, by id (`knownLargeBodySize`).
  private var largeBodies: [String: Int] = [:]
  private var written: [String: WrittenEntry] = [:]
  /// Cache keys already computed on this loop: a key costs string building and a SHA-256.
  private var keys: [KeyInputs: CacheKey] = [:]

  /// What a cache key is computed from (Docs/clients-and-cache.md): the upstream, its path and query, and the
  /// route's vary headers (names and values: two routes, or one before and after a reload,
  /// may key on different names that happen to carry equal values).
  struct KeyInputs: Hashable {
    let upstream: String
    let target: [UInt8]
    let varyNames: [String]
    let vary: [String]
    let clientID: String?
    /// The route's own `Host` for the upstream, if it sets one.
    let host: [UInt8]?
    /// `RoutePlan.cacheScope`.
    let scope: String?
    /// The gzip entry of a route that passes bodies through (see `StoreEntryRules.cacheKeyInputs`).
    let gzip: Bool
    /// On a JWT route, the signed-in user's digest (`BearerAdmission.userKey`).
    var user: String? = nil

    // Only what differs from request to request is hashed: the upstream, vary names, host
    // and scope are the route's and the same for most entries of the memo, and hashing
    // strings is most of a lookup's cost. Equality still compares every field.
    func hash(into hasher: inout Hasher) {
      target.withUnsafeBytes { hasher.combine(bytes: $0) }
      hasher.combine(vary.count)
      for value in vary { hasher.combine(value) }
      hasher.combine(clientID)
      hasher.combine(user)
      hasher.combine(gzip)
    }
  }

  struct WrittenEntry {
    let bodyHash: Int
    let status: Int
    let atMs: Int64
  }

  /// How many write records and memoized keys a loop keeps (each cleared when full).
  static let memoLimit = 4096
  /// Keys computed from inputs larger than this (long queries, long `vary` values) are not
  /// remembered: a memo entry holds its inputs about three times over, and the SHA-256 it
  /// saves is cheap next to copying them.
  static let keyMemoMaxInputBytes = 1024
  /// An unchanged body is re-queued at most this often; `stored_at` is at most this old.
  static let rewriteIntervalMs: Int64 = 1000

  init(store: Store, logger: Logger) {
    self.store = store
    self.logger = logger
  }

  /// The cache key for `inputs`, computed once per loop and remembered (bounded).
  func key(_ inputs: KeyInputs) -> CacheKey {
    if let key = keys[inputs] { return key }
    let target = inputs.target
    let questionMark = target.firstIndex(of: 0x3F)
    let path = String(decoding: target[..<(questionMark ?? target.endIndex)], as: UTF8.self)
    let query = questionMark.map { String(decoding: target[($0 + 1)...], as: UTF8.self) } ?? ""
    var varyPairs: [(name: String, value: String)] = []
    for (index, name) in inputs.varyNames.enumerated() where index < inputs.vary.count && !inputs.vary[index].isEmpty {
      varyPairs.append((name, String(inputs.vary[index].dropFirst())))
    }
    // HEAD is answered from GET entries: the same resource, without the body.
    let key = CacheKey(
      method: "GET", upstream: inputs.upstream, path: path, query: query, vary: varyPairs, clientID: inputs.clientID,
      host: inputs.host.map { String(decoding: $0, as: UTF8.self) }, scope: inputs.scope, gzip: inputs.gzip,
      user: inputs.user)
    var inputBytes = target.count + (inputs.clientID?.utf8.count ?? 0) + (inputs.host?.count ?? 0)
    for value in inputs.vary { inputBytes += value.utf8.count }
    guard inputBytes <= Self.keyMemoMaxInputBytes else { return key }
    if keys.count >= Self.memoLimit { keys.removeAll(keepingCapacity: true) }
    keys[inputs] = key
    return key
  }

  /// The stored answer for `id`, or nil (also on any read error: a miss, never a failure).
  func lookup(id: String, nowMs: Int64) -> StoredAnswer? {
    if let answer = recent.lookup(id, nowMs: nowMs) { return answer }
    if reader == nil { openReader() }
    guard let answer = reader?.lookup(id: id) else {
      recent.remove(id)
      largeBodies.removeValue(forKey: id)
      return nil
    }
    if answer.body.count > recent.limits.maxBody {
      if largeBodies.count >= Self.memoLimit { largeBodies.removeAll(keepingCapacity: true) }
      largeBodies[id] = answer.body.count
    } else if !largeBodies.isEmpty {
      largeBodies.removeValue(forKey: id)
    }
    recent.insert(answer, id: id, nowMs: nowMs)
    return answer
  }

  /// The body size of an entry last read as too large for the memory of recent answers:
  /// such an entry costs a read of its whole body from the file, so a request it cannot be
  /// served to (the buffer budget is spent) is refused before that read.
  func knownLargeBodySize(id: String) -> Int? { largeBodies.isEmpty ? nil : largeBodies[id] }

  /// The stored answer for `id` without its body, when it is an entry last read as too large
  /// for the memory of recent answers (nil otherwise, and on any read error): a HEAD, or a
  /// request whose condition the answer meets, needs no body (`KeptAnswerShapes`).
  func lookupLargeHead(id: String) -> StoredAnswerHead? {
    guard knownLargeBodySize(id: id) != nil else { return nil }
    if reader == nil { openReader() }
    guard let head = reader?.lookupHead(id: id), head.bodyCount > recent.limits.maxBody else {
      largeBodies.removeValue(forKey: id)
      return nil
    }
    largeBodies[id] = head.bodyCount
    return head
  }

  /// Opens the reader unless a failed open's back-off is still running. The failure is
  /// logged once, when it starts (the store counts each one in `read_errors`), and the
  /// recovery once.
  private func openReader() {
    let nowMs = Int64(EventLoop.monotonicNanoseconds() / 1_000_000)
    if reopen.dueAtMs != nil && !reopen.isDue(nowMs: nowMs) { return }
    do {
      reader = try store.makeReader()
      if reopen.delayMs != nil {
        logger.info(
          "store reader open again; stored answers are served again", ["path": .string(store.configuration.path)])
        reopen.reset()
      }
    } catch {
      if reopen.delayMs == nil {
        logger.warn(
          "cannot open a store reader; lookups are misses until it opens (tried again with back-off)",
          ["path": .string(store.configuration.path), "error": .string("\(error)")])
      }
      reopen.failed(nowMs: nowMs)
    }
  }

  /// Queues an answer for the store's writer unless the same body was queued just now.
  /// `decoded`: the body was decoded from gzip (`StoreEntryRules.keptForm`), which the stored
  /// headers then say (`StoreEntryRules.decodedMarkerName`). Returns the answer as queued
  /// (for the shared tier's write-behind), nil when it was not.
  @discardableResult
  func remember(
    key: CacheKey, status: Int, headers: HTTPHeaders, body: [UInt8], decoded: Bool = false, nowMs: Int64
  ) -> StoredAnswer? {
    var hasher = Hasher()
    hasher.combine(body.count)
    body.withUnsafeBytes { hasher.combine(bytes: $0) }
    let bodyHash = hasher.finalize()
    if let last = written[key.id], last.bodyHash == bodyHash, last.status == status,
      nowMs - last.atMs < Self.rewriteIntervalMs
    {
      return nil
    }
    var stored: StoredHeaders = []
    stored.reserveCapacity(headers.count)
    headers.withEachField { name, value in
      // Nor what a client never sees from the upstream (the gateway's own fields among them).
      if HopByHop.isHopByHop(name) || HopByHop.gatewayAnswerFields.contains(name) { return }
      stored.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
    }
    // Added past the filter above, which drops a backend's own.
    if decoded { stored.append((StoreEntryRules.decodedMarkerName, "gzip")) }
    guard store.remember(key: key, status: status, headers: stored, body: body) else { return nil }
    if written.count >= Self.memoLimit { written.removeAll(keepingCapacity: true) }
    written[key.id] = WrittenEntry(bodyHash: bodyHash, status: status, atMs: nowMs)
    let answer = StoredAnswer(status: status, headers: stored, body: body, storedAtMs: nowMs)
    recent.insert(answer, id: key.id, nowMs: nowMs)
    return answer
  }

  /// Keeps an answer another replica stored (read from the shared tier) with its own age,
  /// so it is served here as stale as it is, and found at once by this loop's lookups.
  func keepShared(_ answer: StoredAnswer, key: CacheKey, nowMs: Int64) {
    guard
      store.remember(
        key: key, status: answer.status, headers: answer.headers, body: answer.body, storedAtMs: answer.storedAtMs)
    else { return }
    recent.insert(answer, id: key.id, nowMs: nowMs)
  }

  /// The upstream confirmed `stored` unchanged with a `304` whose fields are `notModified`:
  /// the answer's headers are updated from them (RFC 9111 §4.3.4) and its age starts again,
  /// without the body being written again. Returns the answer as it is now stored.
  func renew(key: CacheKey, _ stored: StoredAnswer, notModified: HTTPHeaders, nowMs: Int64) -> StoredAnswer {
    let renewed = StoredAnswer(
      status: stored.status, headers: StoreEntryRules.renewedHeaders(stored.headers, notModified: notModified),
      body: stored.body, storedAtMs: nowMs)
    guard store.renew(key: key, headers: renewed.headers) else { return renewed }
    recent.insert(renewed, id: key.id, nowMs: nowMs)
    return renewed
  }

  /// The backend's newest good answer for `key` is one the store may not keep (too large,
  /// `no-store`, `private`, `Set-Cookie`): the older stored one is superseded, and serving
  /// it later as a stale answer would go back to what the backend has replaced.
  func forget(key: CacheKey) {
    recent.remove(key.id)
    written[key.id] = nil
    store.forget(key: key)
  }

  /// After a purge: forget everything remembered here.
  func forgetRecent() {
    recent.removeAll()
    written.removeAll()
  }

  /// Hands recorded accesses to the writer (for LRU) now and then, and lets go of answers
  /// whose time in `recent` is over (so an idle loop holds none).
  func flushTouches() {
    reader?.flushTouches()
    recent.sweep(nowMs: RFC3339.nowMilliseconds())
  }

  /// Keys memoized on this loop (tests).
  var memoizedKeyCount: Int { keys.count }
}
