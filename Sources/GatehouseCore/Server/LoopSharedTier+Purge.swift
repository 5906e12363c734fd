import GatehouseSharedTier
import GatehouseStore

/// What a purge (`gatehouse admin cache purge`) removes from the shared tier: best effort,
/// asynchronous, after the local purge answered (see `Docs/shared-tier.md`).
enum SharedTierPurge: Sendable, Equatable {
  /// These entries (an id; the entries a prefix or route purge found in this replica's store).
  case ids([String])
  /// Every stored answer under `shared.prefix` (`SCAN` + `DEL`), rate-limit counters kept.
  case all

  /// `DEL`s carry at most this many keys, so one command stays small.
  static let batch = 500
  /// A full purge scans at most this many rounds (`SCAN … COUNT batch`): about five million
  /// keys, so a runaway scan on a huge keyspace ends.
  static let maxScanRounds = 10_000

  /// The `SCAN` pattern for stored answers: the prefix, glob characters escaped, then a hex
  /// digit (a cache key id; the rate-limit counters, `rl:…`, do not match).
  static func answerPattern(prefix: [UInt8]) -> [UInt8] {
    var pattern: [UInt8] = []
    for byte in prefix {
      if byte == UInt8(ascii: "*") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[")
        || byte == UInt8(ascii: "]") || byte == UInt8(ascii: "\\")
      {
        pattern.append(UInt8(ascii: "\\"))
      }
      pattern.append(byte)
    }
    return pattern + Array("[0-9a-f]*".utf8)
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
    case .all:
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
}
