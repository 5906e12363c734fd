import GatehouseSharedTier
import GatehouseStore

/// The shared tier's purge index (SPEC §14; `Docs/shared-tier.md`, "The purge index"): one
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
  /// method)`, so the tier holds no path in the clear (the records are sealed too); such an
  /// index is filtered here, after opening each member, since no glob can see inside.
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
    let fields = opened.split(separator: separator, omittingEmptySubsequences: false)
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
/// its entries: members whose entries expired are trimmed (`ZREMRANGEBYSCORE`) at most once a
/// second per loop, and the index key's own expiry is pushed past the longest-lived entry this
/// loop wrote. Each loop does this for what it writes; the server takes the largest expiry
/// (`PEXPIRE … GT`), so one replica never cuts short another's longer-lived members.
struct SharedTierIndexUpkeep: Sendable {
  /// Trims run at most this often per loop.
  static let intervalMs: Int64 = 1000
  /// The index outlives its longest-lived member by this much, so the expiry is pushed about
  /// once a minute per loop, not on every write.
  static let expirySlackMs: Int64 = 60_000
  /// Scores are the writers' wall clocks (kept in step by NTP, as for rate windows); a member
  /// is trimmed only this long after its expiry, so a replica whose clock runs a little ahead
  /// does not drop members whose entries still live.
  static let clockAllowanceMs: Int64 = 1000

  /// The commands one upkeep sends: trim scores up to `trimThroughMs`, and make the key
  /// expire in `keyExpiryMs` unless it already expires later.
  struct Work: Sendable, Equatable {
    let trimThroughMs: Int64
    let keyExpiryMs: Int64
  }

  private var lastUpkeepMs: Int64?
  /// The index key's expiry this loop last asked for (Unix ms).
  private(set) var keyExpiresAtMs: Int64 = .min

  /// After a member expiring at `entryExpiresAtMs` was added at `nowMs`: the upkeep due, if any.
  /// Due a second after the last one (or when the clock went back), or at once when the
  /// entry would outlive the index key.
  mutating func afterWrite(nowMs: Int64, entryExpiresAtMs: Int64) -> Work? {
    let due = lastUpkeepMs.map { nowMs - $0 >= Self.intervalMs || nowMs < $0 } ?? true
    let outlives = entryExpiresAtMs > keyExpiresAtMs
    guard due || outlives else { return nil }
    if outlives { keyExpiresAtMs = entryExpiresAtMs + Self.expirySlackMs }
    lastUpkeepMs = nowMs
    return Work(trimThroughMs: nowMs - Self.clockAllowanceMs, keyExpiryMs: max(1, keyExpiresAtMs - nowMs))
  }
}
