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
  /// Every stored answer under `shared.prefix` (`SCAN` + `DEL`) and the index (`UNLINK`),
  /// rate-limit counters kept.
  case all

  /// `DEL`s and `ZREM`s carry at most this many keys, so one command stays small; a scan
  /// round asks for about this many.
  static let batch = 500
  /// A scan (the full purge's `SCAN`, a selected purge's `ZSCAN`) runs at most this many
  /// rounds: about five million keys, so a runaway scan on a huge keyspace ends (with a
  /// warning, `SharedTierWarnings.scanStopped`). The index's cap
  /// (`SharedTierIndexUpkeep.maxMembers`) keeps its scans far within it.
  static let maxScanRounds = 10_000

  /// The `SCAN` pattern for stored answers: the prefix, glob characters escaped, then a hex
  /// digit (a cache key id; the rate-limit counters, `rl:…`, and the index, `ix`, do not match).
  static func answerPattern(prefix: [UInt8]) -> [UInt8] {
    SharedTierIndex.globEscaped(prefix) + Array("[0-9a-f]*".utf8)
  }

  /// Drops the index when everything is purged: `UNLINK`, so a server holding millions of
  /// members frees them in the background instead of blocking every replica's commands for
  /// as long (`DEL` frees a sorted set member by member before it answers).
  static func dropIndex(_ indexKey: [UInt8]) -> [[UInt8]] { [Array("UNLINK".utf8), indexKey] }

  /// The commands that delete a scan round's selected entries, in the order they are sent:
  /// per batch of `batch`, the `ZREM` of the members, then the `DEL` of their entries. In
  /// that order no interleaving with another replica's `SET` + `ZADD` of the same entry ends
  /// with the entry stored and its member gone: a `SET` after the `DEL` comes with a `ZADD`
  /// after the `ZREM`. (The other order could: `DEL`, their `SET`, their `ZADD`, `ZREM`.)
  /// Stored answers are deleted with `DEL`, not `UNLINK`: a record is one string, which the
  /// server frees at once either way.
  static func selectedDeletes(keys: [[UInt8]], members: [[UInt8]], indexKey: [UInt8]) -> [[[UInt8]]] {
    var commands: [[[UInt8]]] = []
    var start = 0
    while start < keys.count {
      let end = min(start + batch, keys.count)
      commands.append([Array("ZREM".utf8), indexKey] + members[start..<end])
      commands.append([Array("DEL".utf8)] + keys[start..<end])
      start = end
    }
    return commands
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

/// What a purge's deletes in the tier came to (tests; logs warn about a scan stopped short).
struct SharedTierPurgeResult: Sendable, Equatable {
  /// Keys the tier deleted (stored answers; not index members).
  var deleted = 0
  /// Scan rounds sent (`SCAN` or `ZSCAN`).
  var rounds = 0
  /// The scan ran `maxScanRounds` rounds and stopped with the cursor not back at 0.
  var stoppedAtRoundCap = false
  /// A command failed (error reply, timeout, down): what it would have led to was not sent.
  var failed = false
}

/// A selected purge in progress, shared by its rounds' completions and changed in place:
/// a purge of a large prefix may hold hundreds of thousands of ids, which must not be copied
/// (or sorted) per round.
private final class SelectedPurge {
  let selection: SharedTierPurgeSelection
  /// The ids this replica held that the index has not named yet.
  var held: Set<String>
  var result = SharedTierPurgeResult()
  let completion: (SharedTierPurgeResult) -> Void

  init(selection: SharedTierPurgeSelection, held: Set<String>, completion: @escaping (SharedTierPurgeResult) -> Void) {
    self.selection = selection
    self.held = held
    self.completion = completion
  }
}

extension LoopSharedTier {
  /// Deletes what `purge` names, in batches; nothing waits for it. `completion` (tests,
  /// logs) hears what the tier deleted and how the scan ended.
  func purge(_ purge: SharedTierPurge, completion: @escaping (SharedTierPurgeResult) -> Void = { _ in }) {
    switch purge {
    case .ids(let ids):
      let keys = ids.filter(isCacheID).map { plan.key($0) }
      deleteKeys(keys[...], result: SharedTierPurgeResult(), completion: completion)
    case .selected(let selection, let heldHere):
      // The index first; then what this replica held that the index did not name.
      let run = SelectedPurge(selection: selection, held: Set(heldHere.filter(isCacheID)), completion: completion)
      scanIndex(run, cursor: Array("0".utf8))
    case .all:
      // Before the scan: a write after this purge starts a new index, whose expiry this
      // loop's next write sets at once.
      indexUpkeep.indexDropped()
      connection.send(SharedTierPurge.dropIndex(plan.indexKey)) { [self] reply in count(.index, reply) }
      scan(cursor: Array("0".utf8), result: SharedTierPurgeResult(), completion: completion)
    }
  }

  /// `DEL`s `keys` a batch at a time, each after the previous one's reply.
  private func deleteKeys(
    _ keys: ArraySlice<[UInt8]>, result: SharedTierPurgeResult, completion: @escaping (SharedTierPurgeResult) -> Void
  ) {
    guard !keys.isEmpty else { return completion(result) }
    let batch = keys.prefix(SharedTierPurge.batch)
    connection.send([Array("DEL".utf8)] + batch) { [self] reply in
      count(.del, reply)
      var result = result
      guard case .integer(let removed) = reply else {
        result.failed = true
        return completion(result)
      }
      result.deleted += Int(removed)
      deleteKeys(keys.dropFirst(batch.count), result: result, completion: completion)
    }
  }

  /// One `SCAN` round, its keys deleted, then the next, until the cursor comes back to 0.
  private func scan(
    cursor: [UInt8], result: SharedTierPurgeResult, completion: @escaping (SharedTierPurgeResult) -> Void
  ) {
    var result = result
    guard result.rounds < maxScanRounds else {
      result.stoppedAtRoundCap = true
      warnings.scanStopped(scan: "keys", rounds: result.rounds, deleted: result.deleted)
      return completion(result)
    }
    result.rounds += 1
    let command = [
      Array("SCAN".utf8), cursor, Array("MATCH".utf8), SharedTierPurge.answerPattern(prefix: plan.prefix),
      Array("COUNT".utf8), Array(String(scanCount).utf8),
    ]
    connection.send(command) { [self] reply in
      guard let page = SharedTierPurge.scanPage(reply) else {
        count(.del, reply)
        var failed = result
        failed.failed = true
        return completion(failed)
      }
      deleteKeys(page.keys[...], result: result) { [self] result in
        if result.failed || page.cursor == Array("0".utf8) { return completion(result) }
        scan(cursor: page.cursor, result: result, completion: completion)
      }
    }
  }

  /// One `ZSCAN` round of the index: the entries `run.selection` selects are deleted and
  /// their members removed (in one pipeline), then the next round, until the cursor comes
  /// back to 0; then the held ids the index did not name (also after a failure, or at the
  /// round cap). With plain members a `MATCH` glob on the path prefix narrows the round in
  /// the server; sealed members are opened and filtered here (no glob can see inside them),
  /// which is bounded per round like the rest.
  private func scanIndex(_ run: SelectedPurge, cursor: [UInt8]) {
    guard run.result.rounds < maxScanRounds else {
      run.result.stoppedAtRoundCap = true
      warnings.scanStopped(
        scan: "index", rounds: run.result.rounds, deleted: run.result.deleted, heldLeft: run.held.count)
      return deleteHeld(run)
    }
    run.result.rounds += 1
    var command = [Array("ZSCAN".utf8), plan.indexKey, cursor]
    if plan.sealer == nil { command += [Array("MATCH".utf8), run.selection.pattern] }
    command += [Array("COUNT".utf8), Array(String(scanCount).utf8)]
    connection.send(command) { [self] reply in
      count(.index, reply)
      guard let page = SharedTierIndex.scanPage(reply) else {
        run.result.failed = true
        return deleteHeld(run)
      }
      var keys: [[UInt8]] = []
      var members: [[UInt8]] = []
      for member in page.members {
        guard let entry = SharedTierIndex.entry(member: member, sealer: plan.sealer), run.selection.selects(entry)
        else { continue }
        keys.append(plan.key(entry.id))
        members.append(member)
        run.held.remove(entry.id)
      }
      deleteSelected(keys: keys, members: members) { [self] removed in
        guard let removed else {
          run.result.failed = true
          return deleteHeld(run)
        }
        run.result.deleted += removed
        if page.cursor == Array("0".utf8) { return deleteHeld(run) }
        scanIndex(run, cursor: page.cursor)
      }
    }
  }

  /// The ids this replica held that the index did not name, in any order.
  private func deleteHeld(_ run: SelectedPurge) {
    let keys = run.held.map { plan.key($0) }
    run.held = []
    deleteKeys(keys[...], result: run.result, completion: run.completion)
  }

  /// A round's `ZREM`s and `DEL`s (`SharedTierPurge.selectedDeletes`), all in one pipeline.
  /// `completion` hears how many entries the `DEL`s removed after the last one's reply
  /// (replies come in order), or nil when one failed.
  private func deleteSelected(keys: [[UInt8]], members: [[UInt8]], completion: @escaping (Int?) -> Void) {
    let commands = SharedTierPurge.selectedDeletes(keys: keys, members: members, indexKey: plan.indexKey)
    guard let lastDelete = commands.lastIndex(where: Self.isDelete) else { return completion(0) }
    var total: Int? = 0
    for (index, command) in commands.enumerated() {
      guard Self.isDelete(command) else {
        connection.send(command) { [self] reply in count(.index, reply) }
        continue
      }
      connection.send(command) { [self] reply in
        count(.del, reply)
        if case .integer(let removed) = reply, let sum = total { total = sum + Int(removed) } else { total = nil }
        if index == lastDelete { completion(total) }
      }
    }
  }

  private static func isDelete(_ command: [[UInt8]]) -> Bool { command.first == Array("DEL".utf8) }
}
