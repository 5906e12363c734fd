import GatehouseSharedTier
import GatehouseStore

/// The shared tier's purge index (`Docs/shared-tier.md`, "The purge index"): one
/// sorted set, `prefix+"ix"`, with a member per entry any replica wrote behind, naming what a
/// prefix or route purge decides on (the upstream path, the upstream, the method) and the
/// entry's id, scored by the entry's expiry (Unix ms). The tier's keys are ids, which say
/// nothing about paths; this is how a purge on one replica finds its siblings' entries.
///
/// The pure parts: member encoding, the glob that narrows a scan, reading `ZSCAN` pages.
enum SharedTierIndex {
  /// After `shared.prefix`. Not a hex digit first, so the full purge's `SCAN` pattern
  /// (`prefix[0-9a-f]*`) never takes the index for a stored answer.
  static let keySuffix: [UInt8] = Array("ix".utf8)
  /// Between a member's fields. Indexed paths, upstream names and methods never hold it (they
  /// are checked), so splitting on it is unambiguous.
  static let separator: UInt8 = 0
  /// Members come from request paths, so each field is bounded; an entry over a bound is
  /// simply not indexed (it is purged as before the index: by the replicas that hold it, or
  /// at its TTL). 1 KiB takes every path a client normally sends and keeps a `ZSCAN` page of
  /// 500 members far below the connection's reply bound (8 MiB).
  static let maxPathBytes = 1024
  static let maxUpstreamBytes = 128
  static let maxMethodBytes = 16
  /// A sealed member's plaintext is padded with ␀ to a multiple of this, so the member's
  /// length tells a reader of the tier the path's length only to within 32 bytes. The
  /// plaintext ends with the method, never ␀, so the padding comes off unambiguously.
  static let sealedPaddingBlock = 32

  /// What one member names.
  struct Entry: Sendable, Equatable {
    var path: String
    var upstream: String
    var method: String
    var id: String
  }

  /// The member for `entry`, or nil when it is not indexed (a field over its bound or with
  /// a byte it may not hold, or not an id).
  ///
  /// Plain: `path ␀ upstream ␀ method ␀ id`; the path comes first so a purge's `MATCH` glob
  /// narrows the scan in the server. With `store.secret_key`: `id ␀ sealed(path ␀ upstream ␀
  /// method ␀…)`, padded (`sealedPaddingBlock`), so the tier holds no path in the clear (the
  /// records are sealed too); such an index is filtered here, after opening each member,
  /// since no glob can see inside.
  static func member(_ entry: Entry, sealer: SharedRecordSealer?) -> [UInt8]? {
    guard isCacheID(entry.id), validPath(entry.path.utf8), validUpstream(entry.upstream.utf8),
      validMethod(entry.method.utf8)
    else { return nil }
    var fields = Array(entry.path.utf8)
    fields.append(separator)
    fields += entry.upstream.utf8
    fields.append(separator)
    fields += entry.method.utf8
    guard let sealer else {
      fields.append(separator)
      return fields + entry.id.utf8
    }
    let padding = (sealedPaddingBlock - fields.count % sealedPaddingBlock) % sealedPaddingBlock
    fields += repeatElement(separator, count: padding)
    guard let sealed = sealer.sealIndexEntry(fields, id: entry.id) else { return nil }
    return Array(entry.id.utf8) + [separator] + sealed
  }

  /// The entry `member` names, or nil for anything `member(_:sealer:)` would not have
  /// written with this `sealer` (another program's bytes, a plain member where a key is set,
  /// a sealed one under another key).
  static func entry(member: [UInt8], sealer: SharedRecordSealer?) -> Entry? {
    let idLength = 64
    guard let sealer else {
      let fields = member.split(separator: separator, omittingEmptySubsequences: false)
      guard fields.count == 4 else { return nil }
      return entry(fields: fields[0..<3], id: String(decoding: fields[3], as: UTF8.self))
    }
    guard member.count > idLength + 1, member[idLength] == separator else { return nil }
    let id = String(decoding: member[..<idLength], as: UTF8.self)
    guard isCacheID(id), let opened = sealer.openIndexEntry(Array(member[(idLength + 1)...]), id: id) else {
      return nil
    }
    // Without the padding (a member written before it was padded has none).
    let unpadded = opened[..<(opened.lastIndex { $0 != separator }.map { $0 + 1 } ?? 0)]
    let fields = unpadded.split(separator: separator, omittingEmptySubsequences: false)
    guard fields.count == 3 else { return nil }
    return entry(fields: fields[...], id: id)
  }

  private static func entry(fields: ArraySlice<ArraySlice<UInt8>>, id: String) -> Entry? {
    let path = fields[fields.startIndex]
    let upstream = fields[fields.startIndex + 1]
    let method = fields[fields.startIndex + 2]
    guard isCacheID(id), validPath(path), validUpstream(upstream), validMethod(method) else { return nil }
    return Entry(
      path: String(decoding: path, as: UTF8.self), upstream: String(decoding: upstream, as: UTF8.self),
      method: String(decoding: method, as: UTF8.self), id: id)
  }

  /// What a request target may hold (visible ASCII), which is what the gateway sends upstream.
  static func validPath(_ bytes: some Collection<UInt8>) -> Bool {
    bytes.count <= maxPathBytes && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
  }

  /// A config name: any UTF-8 but control bytes.
  static func validUpstream(_ bytes: some Collection<UInt8>) -> Bool {
    !bytes.isEmpty && bytes.count <= maxUpstreamBytes && bytes.allSatisfy { $0 >= 0x20 && $0 != 0x7F }
  }

  /// An HTTP method is a token: visible ASCII.
  static func validMethod(_ bytes: some Collection<UInt8>) -> Bool {
    !bytes.isEmpty && bytes.count <= maxMethodBytes && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
  }

  /// `bytes` as a Redis glob that matches them literally: `*`, `?`, `[`, `]` and `\` escaped.
  static func globEscaped(_ bytes: some Sequence<UInt8>) -> [UInt8] {
    var pattern: [UInt8] = []
    for byte in bytes {
      if byte == UInt8(ascii: "*") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[")
        || byte == UInt8(ascii: "]") || byte == UInt8(ascii: "\\")
      {
        pattern.append(UInt8(ascii: "\\"))
      }
      pattern.append(byte)
    }
    return pattern
  }

  /// The next cursor and the members of one `ZSCAN` reply (member, score, member, score…;
  /// the scores are dropped); nil when it is not one.
  static func scanPage(_ reply: RedisReply) -> (cursor: [UInt8], members: [[UInt8]])? {
    guard case .array(let parts) = reply, parts.count == 2, case .bulk(let cursor) = parts[0],
      case .array(let items) = parts[1], items.count % 2 == 0
    else { return nil }
    var members: [[UInt8]] = []
    members.reserveCapacity(items.count / 2)
    for pair in stride(from: 0, to: items.count, by: 2) {
      guard case .bulk(let member) = items[pair], case .bulk = items[pair + 1] else { return nil }
      members.append(member)
    }
    return (cursor, members)
  }
}

/// Which of the index's entries a prefix or route purge removes: exactly those the local
/// purge removes from a store (`Store.purge(prefix:)`, `CacheAdministration`'s route purge),
/// decided with the purging replica's config.
struct SharedTierPurgeSelection: Sendable {
  enum Rule: Sendable {
    /// The upstream path starts with the prefix, byte for byte.
    case prefix
    /// The running config maps the entry to this route (`CacheEntryRoutes`).
    case route(String, CacheEntryRoutes)
  }

  let rule: Rule
  /// Every selected entry's path starts with this: the prefix, or the route's literal prefix.
  let pathPrefix: String

  static func prefix(_ prefix: String) -> Self { Self(rule: .prefix, pathPrefix: prefix) }

  /// nil when the route has no entries (no such route, or no upstream).
  static func route(_ name: String, routes: CacheEntryRoutes) -> Self? {
    routes.literalPrefix(route: name).map { Self(rule: .route(name, routes), pathPrefix: $0) }
  }

  /// The `MATCH` glob for plain members: the path prefix, escaped, then anything. The glob
  /// only narrows what the server sends back; `selects` decides.
  var pattern: [UInt8] { SharedTierIndex.globEscaped(pathPrefix.utf8) + [UInt8(ascii: "*")] }

  func selects(_ entry: SharedTierIndex.Entry) -> Bool {
    guard entry.path.utf8.starts(with: pathPrefix.utf8) else { return false }
    switch rule {
    case .prefix: return true
    case .route(let name, let routes):
      return routes.route(upstream: entry.upstream, method: entry.method, path: entry.path) == name
    }
  }
}

/// When a loop's write also tends the index, so it neither grows without bound nor outlives
/// its entries: members whose entries expired are trimmed (`ZREMRANGEBYSCORE`), and members
/// over `maxMembers` dropped, soonest to expire first (`ZREMRANGEBYRANK`), at most once a
/// second per loop, and the index key's own expiry is pushed past the longest-lived entry
/// this loop wrote. Each loop does this for what it writes; the server takes the largest
/// expiry (`PEXPIRE … GT`), so one replica never cuts short another's longer-lived members.
struct SharedTierIndexUpkeep: Sendable {
  /// Trims run at most this often per loop.
  static let intervalMs: Int64 = 1000
  /// The index outlives its longest-lived member by this much, so the expiry is pushed about
  /// once a minute per loop, not on every write.
  static let expirySlackMs: Int64 = 60_000
  /// Scores are the writers' wall clocks at queue time, while the server starts an entry's
  /// TTL when it runs the `SET` (later, after a backed-up pipeline) and replicas' clocks
  /// differ a little (NTP). A member is trimmed only this long after its score, so none goes
  /// while its entry lives; one kept too long costs a purge a `DEL` of a missing key.
  static let clockAllowanceMs: Int64 = 60_000
  /// The most members the index keeps (`Docs/shared-tier.md`, "The purge index": about
  /// 200–250 bytes of the server's memory each for a 20-byte path). Cache-busting query
  /// strings make entries the server's `maxmemory` policy evicts while their members, in a
  /// set every write touches, stay; past this the soonest to expire go first. It also keeps
  /// a purge's scan well within `SharedTierPurge.maxScanRounds`.
  static let maxMembers = 1_000_000

  /// The commands one upkeep sends: trim scores up to `trimThroughMs` and members over
  /// `maxMembers`, and make the key expire in `keyExpiryMs` unless it already expires later.
  struct Work: Sendable, Equatable {
    let trimThroughMs: Int64
    let keyExpiryMs: Int64
    var maxMembers = SharedTierIndexUpkeep.maxMembers

    /// In order, for the index at `key`. `ZREMRANGEBYRANK key 0 -(max+1)` removes the
    /// lowest-scored members beyond the `max` highest, nothing while there are `max` or
    /// fewer: the cap in one command, no `ZCARD` round trip (and two replicas capping at once
    /// do not both take the excess). `PEXPIRE … GT` alone never sets an expiry on a key that
    /// has none (it counts as infinite), and `ZADD` makes the key without one; `NX` covers
    /// that, on every upkeep, so an index recreated by a write (after a purge of everything,
    /// a flush, an eviction) gets an expiry at the next upkeep. Together: the later of the
    /// two, whichever replica asked first. Relative, so the server's clock decides.
    func commands(key: [UInt8]) -> [[[UInt8]]] {
      let expiry = Array(String(keyExpiryMs).utf8)
      return [
        [Array("ZREMRANGEBYSCORE".utf8), key, Array("-inf".utf8), Array(String(trimThroughMs).utf8)],
        [Array("ZREMRANGEBYRANK".utf8), key, Array("0".utf8), Array(String(-(maxMembers + 1)).utf8)],
        [Array("PEXPIRE".utf8), key, expiry, Array("NX".utf8)],
        [Array("PEXPIRE".utf8), key, expiry, Array("GT".utf8)],
      ]
    }
  }

  /// `maxMembers`, unless a test asks for fewer.
  let maxMembers: Int
  private var lastUpkeepMs: Int64?
  /// The index key's expiry this loop last asked for (Unix ms).
  private(set) var keyExpiresAtMs: Int64 = .min

  init(maxMembers: Int = Self.maxMembers) { self.maxMembers = maxMembers }

  /// After a member expiring at `entryExpiresAtMs` was added at `nowMs`: the upkeep due, if any.
  /// Due a second after the last one (or when the clock went back), or at once when the
  /// entry would outlive the index key.
  mutating func afterWrite(nowMs: Int64, entryExpiresAtMs: Int64) -> Work? {
    let due = lastUpkeepMs.map { nowMs - $0 >= Self.intervalMs || nowMs < $0 } ?? true
    let outlives = entryExpiresAtMs > keyExpiresAtMs
    guard due || outlives else { return nil }
    if outlives { keyExpiresAtMs = entryExpiresAtMs + Self.expirySlackMs }
    lastUpkeepMs = nowMs
    return Work(
      trimThroughMs: nowMs - Self.clockAllowanceMs, keyExpiryMs: max(1, keyExpiresAtMs - nowMs), maxMembers: maxMembers)
  }

  /// This loop dropped the index (a purge of everything): the next write starts a new key,
  /// which has no expiry, so its upkeep is due at once rather than up to a second later.
  mutating func indexDropped() {
    keyExpiresAtMs = .min
  }
}
