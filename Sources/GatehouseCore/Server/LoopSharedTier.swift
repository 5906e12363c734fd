import GatehouseLogging
import GatehouseNet
import GatehouseSharedTier
import GatehouseStore

/// One loop's use of the shared tier (Docs/shared-tier.md): its own `RedisConnection`, the commands the
/// gateway sends (stored answers in and out, purges, rate-limit counters) and their counts for
/// `gatehouse_shared_requests_total{op,result}`. Confined to its loop, like the connection.
final class LoopSharedTier {
  enum Operation: Int, CaseIterable {
    /// `index`: the purge index's commands (`ZADD` with each write, its upkeep, and a purge's
    /// `ZSCAN`/`ZREM` and the `UNLINK` of the index); `del` stays the deletes of stored answers.
    case get, set, del, incr, index

    var label: String {
      switch self {
      case .get: "get"
      case .set: "set"
      case .del: "del"
      case .incr: "incr"
      case .index: "index"
      }
    }
  }

  let plan: SharedTierPlan
  let connection: RedisConnection
  /// Throttled warnings, shared by every loop of the process.
  let warnings: SharedTierWarnings
  /// By operation, then by `RedisOutcome` (in `allCases` order).
  var counts: [[UInt64]] = Array(
    repeating: Array(repeating: 0, count: RedisOutcome.allCases.count), count: Operation.allCases.count)
  /// Why a record read was refused, the `reason` of `gatehouse_shared_records_refused_total`:
  /// not a record or malformed, another format version, the seal, written under another key,
  /// or an answer the store's rules refuse.
  static let refusalReasons = ["record", "version", "seal", "key", "rules"]
  /// Records refused, by `refusalReasons`.
  var refused: [UInt64] = Array(repeating: 0, count: LoopSharedTier.refusalReasons.count)
  /// When this loop's writes trim the purge index and push its expiry out.
  var indexUpkeep = SharedTierIndexUpkeep()

  /// How many members or keys one scan round asks for, and the most rounds a purge's scan
  /// runs (`SharedTierPurge`'s values; tests make them small).
  var scanCount = SharedTierPurge.batch
  var maxScanRounds = SharedTierPurge.maxScanRounds

  init(plan: SharedTierPlan, loop: EventLoop, warnings: SharedTierWarnings) {
    self.plan = plan
    self.warnings = warnings
    connection = RedisConnection(configuration: plan.connection, loop: loop)
    let link = ObjectIdentifier(self)
    let url = plan.redactedURL
    connection.onUpChange = { up, problem in
      if up {
        warnings.linkCameUp(link, url: url)
      } else {
        warnings.linkWentDown(link, problem: problem, url: url)
      }
    }
  }

  func start() { connection.start() }
  func stop() {
    connection.stop()
    warnings.linkStopped(ObjectIdentifier(self))
  }

  var health: RedisHealth { connection.health }

  func count(_ operation: Operation, _ reply: RedisReply) {
    let outcome = RedisOutcome.allCases.firstIndex(of: reply.outcome) ?? 0
    counts[operation.rawValue][outcome] &+= 1
  }

  // MARK: Stored answers

  /// Writes `answer` under `key`'s id for `ttlMs`, unless its record is over
  /// `max_entry_bytes`, and names it in the purge index (`SharedTierIndex`) in the same
  /// pipeline: one more command per write, no extra round trip. Fire and forget: nothing
  /// waits for the replies.
  func write(_ answer: StoredAnswer, key: CacheKey, ttlMs: Int64) {
    let id = key.id
    guard ttlMs > 0, answer.body.count <= plan.config.maxEntryBytes,
      let record = SharedTierRecord.encode(answer, id: id, sealer: plan.sealer),
      record.count <= plan.config.maxEntryBytes
    else { return }
    connection.send([Array("SET".utf8), plan.key(id), record, Array("PX".utf8), Array(String(ttlMs).utf8)]) {
      [self] reply in count(.set, reply)
    }
    let entry = SharedTierIndex.Entry(path: key.path, upstream: key.upstream, method: key.method, id: id)
    guard let member = SharedTierIndex.member(entry, sealer: plan.sealer) else { return }
    let nowMs = RFC3339.nowMilliseconds()
    let expiresAtMs = nowMs + ttlMs
    // Scored by expiry, so expired members are trimmed by score. A rewrite of the entry (same
    // id, so the same member) only moves its score, and only later (`GT`; a new member is
    // added all the same): a rewrite with a shorter TTL, or two replicas' `SET`s and `ZADD`s
    // interleaved, never leave a member that would be trimmed while its entry lives.
    connection.send([Array("ZADD".utf8), plan.indexKey, Array("GT".utf8), Array(String(expiresAtMs).utf8), member]) {
      [self] reply in count(.index, reply)
    }
    guard let work = indexUpkeep.afterWrite(nowMs: nowMs, entryExpiresAtMs: expiresAtMs) else { return }
    for command in work.commands(key: plan.indexKey) {
      connection.send(command) { [self] reply in upkept(command, reply) }
    }
  }

  /// Counts an upkeep command's reply; members dropped over the cap are logged (throttled).
  private func upkept(_ command: [[UInt8]], _ reply: RedisReply) {
    count(.index, reply)
    if command.first == Array("ZREMRANGEBYRANK".utf8), case .integer(let dropped) = reply, dropped > 0 {
      warnings.indexCapped(dropped: Int(dropped), maxMembers: indexUpkeep.maxMembers)
    }
  }

  /// The answer stored under `id` for an entry of `route` (`gzipEntry`: see
  /// `StoreEntryRules.isGzipEntry`), or nil (a miss, a record refused, a failure or timeout),
  /// on the loop, within `shared.timeout_ms`. The tier is trusted to keep records, not to vouch
  /// for them: a record must be one this gateway would have written there (its format, its
  /// seal when `store.secret_key` is set, the key it was written under, and the store's rules
  /// for the route, `StoreEntryRules.refusal(ofShared:)`), else it is a miss, counted in
  /// `refused` and logged (throttled).
  func read(id: String, route: RoutePlan, gzipEntry: Bool, completion: @escaping (StoredAnswer?) -> Void) {
    connection.send([Array("GET".utf8), plan.key(id)]) { [self] reply in
      count(.get, reply)
      guard let bytes = reply.bytes else { return completion(nil) }
      switch SharedTierRecord.decode(bytes, id: id, sealer: plan.sealer, maxBytes: plan.config.maxEntryBytes) {
      case .success(let answer):
        if let rule = StoreEntryRules.refusal(ofShared: answer, gzipEntry: gzipEntry, plan: route) {
          refuse("rules", rule: rule, route: route.name)
          return completion(nil)
        }
        completion(answer)
      case .failure(let refusal):
        refuse(refusal.label, rule: nil, route: route.name)
        completion(nil)
      }
    }
  }

  private func refuse(_ reason: String, rule: String?, route: String) {
    if let index = Self.refusalReasons.firstIndex(of: reason) { refused[index] &+= 1 }
    warnings.recordRefused(reason: reason, rule: rule, route: route)
  }

  // Purges: `LoopSharedTier+Purge.swift`.

  // MARK: Rate limits

  /// Counts one request of `keyID` in window `window` (`SharedRateWindow`): the count so far,
  /// or nil when the tier did not answer (the caller falls back to its local bucket), on the
  /// loop, within `shared.timeout_ms`. `INCR` and `PEXPIRE` go in one pipeline (one round
  /// trip); the counter outlives its window by `expiryMs`, so a replica whose clock runs a
  /// little behind still finds it.
  func countRequest(keyID: String, window: Int64, expiryMs: Int64, completion: @escaping (Int64?) -> Void) {
    let key = plan.prefix + Array("rl:\(keyID):\(window)".utf8)
    connection.send([Array("INCR".utf8), key]) { [self] reply in
      count(.incr, reply)
      // INCR's answer counts this request, so it is at least 1: anything less is a counter
      // someone else wrote (a negative one would let every request through), and the local
      // bucket decides instead.
      if case .integer(let value) = reply, value >= 1 { completion(value) } else { completion(nil) }
    }
    connection.send([Array("PEXPIRE".utf8), key, Array(String(expiryMs).utf8)]) { _ in }
  }

  /// The figures `/metrics` and `/admin/status` read from this loop.
  struct Figures: Sendable {
    let counts: [[UInt64]]
    let refused: [UInt64]
    let health: RedisHealth.Snapshot
  }

  var figures: Figures { Figures(counts: counts, refused: refused, health: health.snapshot) }
}
