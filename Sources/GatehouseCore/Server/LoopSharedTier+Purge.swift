import GatehouseSharedTier
import GatehouseStore

/// What a purge (`gatehouse admin cache purge`) removes from the shared tier: best effort,
/// asynchronous, after the local purge answered (see `Docs/shared-tier.md`).
enum SharedTierPurge: Sendable {
  /// These entries (by id: the tier may hold a sibling's even when this replica had none).
  case ids([String])
  /// The entries of every replica the purge index names under a prefix or a route, and
  /// `heldHere`, the ids this replica's store held there (listed before its local purge), in
  /// case the index lacks some (not indexed, or the index was evicted or failed).
  case selected(SharedTierPurgeSelection, heldHere: [String])
  /// Every stored answer under `shared.prefix` (`SCAN` + `DEL`) and the index, rate-limit
  /// counters kept.
  case all

  /// `DEL`s and `ZREM`s carry at most this many keys, so one command stays small; a scan
  /// round asks for about this many.
  static let batch = 500
  /// A scan (the full purge's `SCAN`, a selected purge's `ZSCAN`) runs at most this many
  /// rounds: about five million keys, so a runaway scan on a huge keyspace ends.
  static let maxScanRounds = 10_000

  /// The `SCAN` pattern for stored answers: the prefix, glob characters escaped, then a hex
  /// digit (a cache key id; the rate-limit counters, `rl:…`, and the index, `ix`, do not match).
  static func answerPattern(prefix: [UInt8]) -> [UInt8] {
    SharedTierIndex.globEscaped(prefix) + Array("[0-9a-f]*".utf8)
  }

  /// The next cursor and the keys of one `SCAN` reply; nil when it is not one.
  static func scanPage(_ reply: RedisReply) -> (cursor: [UInt8], keys: [[UInt8]])? {
    guard case .array(let parts) = reply, parts.count == 2, case .bulk(let cursor) = parts[0],
      case .array(let items) = parts[1]
    else { return nil }
    var keys: [[UInt8]] = []
    for item in items {
      guard case .bulk(let key) = item else { return nil }
      keys.append(key)
    }
    return (cursor, keys)
  }
}

extension LoopSharedTier {
  /// Deletes what `purge` names, in batches; nothing waits for it. `completion` (tests,
  /// logs) hears how many keys the tier deleted, or nil when it failed on the way.
  func purge(_ purge: SharedTierPurge, completion: @escaping (Int?) -> Void = { _ in }) {
    switch purge {
    case .ids(let ids):
      let keys = ids.filter(isCacheID).map { plan.key($0) }
      deleteKeys(keys[...], deleted: 0, completion: completion)
    case .selected(let selection, let heldHere):
      // The index first; then what this replica held that the index did not name.
      scanIndex(selection, cursor: Array("0".utf8), round: 0, left: Set(heldHere.filter(isCacheID)), deleted: 0) {
        [self] left, deleted in
        let keys = left.sorted().map { plan.key($0) }
        deleteKeys(keys[...], deleted: deleted ?? 0) { total in completion(deleted == nil ? nil : total) }
      }
    case .all:
      // Before the scan: a write after this purge starts a new index.
      connection.send([Array("DEL".utf8), plan.indexKey]) { [self] reply in count(.index, reply) }
      scan(cursor: Array("0".utf8), round: 0, deleted: 0, completion: completion)
    }
  }

  private func deleteKeys(_ keys: ArraySlice<[UInt8]>, deleted: Int, completion: @escaping (Int?) -> Void) {
    guard !keys.isEmpty else { return completion(deleted) }
    let batch = keys.prefix(SharedTierPurge.batch)
    connection.send([Array("DEL".utf8)] + batch) { [self] reply in
      count(.del, reply)
      guard case .integer(let removed) = reply else { return completion(nil) }
      deleteKeys(keys.dropFirst(batch.count), deleted: deleted + Int(removed), completion: completion)
    }
  }

  /// One `SCAN` round, its keys deleted, then the next, until the cursor comes back to 0.
  private func scan(cursor: [UInt8], round: Int, deleted: Int, completion: @escaping (Int?) -> Void) {
    guard round < SharedTierPurge.maxScanRounds else { return completion(deleted) }
    let command = [
      Array("SCAN".utf8), cursor, Array("MATCH".utf8), SharedTierPurge.answerPattern(prefix: plan.prefix),
      Array("COUNT".utf8), Array(String(SharedTierPurge.batch).utf8),
    ]
    connection.send(command) { [self] reply in
      guard let page = SharedTierPurge.scanPage(reply) else {
        count(.del, reply)
        return completion(nil)
      }
      deleteKeys(page.keys[...], deleted: deleted) { [self] total in
        guard let total else { return completion(nil) }
        if page.cursor == Array("0".utf8) { return completion(total) }
        scan(cursor: page.cursor, round: round + 1, deleted: total, completion: completion)
      }
    }
  }

  /// One `ZSCAN` round of the index: the entries `selection` selects are deleted and their
  /// members removed (in one pipeline), then the next round, until the cursor comes back to
  /// 0. With plain members a `MATCH` glob on the path prefix narrows the round in the server;
  /// sealed members are opened and filtered here (no glob can see inside them), which is
  /// bounded per round like the rest. `completion` gets the held ids the index did not name
  /// and the count deleted (nil when a command failed).
  private func scanIndex(
    _ selection: SharedTierPurgeSelection, cursor: [UInt8], round: Int, left: Set<String>, deleted: Int,
    completion: @escaping (Set<String>, Int?) -> Void
  ) {
    guard round < SharedTierPurge.maxScanRounds else { return completion(left, deleted) }
    var command = [Array("ZSCAN".utf8), plan.indexKey, cursor]
    if plan.sealer == nil { command += [Array("MATCH".utf8), selection.pattern] }
    command += [Array("COUNT".utf8), Array(String(SharedTierPurge.batch).utf8)]
    connection.send(command) { [self] reply in
      count(.index, reply)
      guard let page = SharedTierIndex.scanPage(reply) else { return completion(left, nil) }
      var left = left
      var keys: [[UInt8]] = []
      var members: [[UInt8]] = []
      for member in page.members {
        guard let entry = SharedTierIndex.entry(member: member, sealer: plan.sealer), selection.selects(entry)
        else { continue }
        keys.append(plan.key(entry.id))
        members.append(member)
        left.remove(entry.id)
      }
      deleteSelected(keys: keys, members: members, deleted: deleted) { [self] total in
        guard let total else { return completion(left, nil) }
        if page.cursor == Array("0".utf8) { return completion(left, total) }
        scanIndex(selection, cursor: page.cursor, round: round + 1, left: left, deleted: total, completion: completion)
      }
    }
  }

  /// Each batch's `DEL` of the entries, then the `ZREM` of their members, all in one
  /// pipeline: a member goes only after its entry's delete was sent (one whose entry survived
  /// a failed delete would still be trimmed at expiry). `completion` hears the running count
  /// after the last delete's reply (replies come in order), or nil when one failed.
  private func deleteSelected(
    keys: [[UInt8]], members: [[UInt8]], deleted: Int, completion: @escaping (Int?) -> Void
  ) {
    guard !keys.isEmpty else { return completion(deleted) }
    var total: Int? = deleted
    var start = 0
    while start < keys.count {
      let end = min(start + SharedTierPurge.batch, keys.count)
      let last = end == keys.count
      connection.send([Array("DEL".utf8)] + keys[start..<end]) { [self] reply in
        count(.del, reply)
        if case .integer(let removed) = reply, let sum = total { total = sum + Int(removed) } else { total = nil }
        if last { completion(total) }
      }
      connection.send([Array("ZREM".utf8), plan.indexKey] + members[start..<end]) { [self] reply in
        count(.index, reply)
      }
      start = end
    }
  }
}
