import GatehouseSharedTier
import GatehouseStore
import Testing

@testable import GatehouseCore

/// The purge index's pure parts: members (plain and sealed), the glob, `ZSCAN` pages, which
/// entries a prefix or route purge selects, and when a write tends the index.
@Suite struct SharedTierIndexTests {
  static let id = String(repeating: "ab", count: 32)
  static let entry = SharedTierIndex.Entry(path: "/api/v1/users/42", upstream: "api", method: "GET", id: id)
  static let sealer = SharedRecordSealer(secret: "a-secret-of-some-length-0123456789")

  @Test func aPlainMemberStartsWithThePathAndReadsBack() throws {
    let member = try #require(SharedTierIndex.member(Self.entry, sealer: nil))
    #expect(member == Array("/api/v1/users/42\0api\0GET\0\(Self.id)".utf8))
    #expect(SharedTierIndex.entry(member: member, sealer: nil) == Self.entry)
  }

  @Test func aSealedMemberHidesThePathIsTheSameOnEveryWriteAndOpensOnlyWithItsKey() throws {
    let member = try #require(SharedTierIndex.member(Self.entry, sealer: Self.sealer))
    #expect(!member.holds(Array("/users".utf8)))
    #expect(!member.holds(Array("api".utf8)))
    #expect(Array(member.prefix(65)) == Array(Self.id.utf8) + [0])
    // One member per entry, whichever replica (with the same secret) writes it.
    let again = SharedRecordSealer(secret: "a-secret-of-some-length-0123456789")
    #expect(SharedTierIndex.member(Self.entry, sealer: again) == member)
    #expect(SharedTierIndex.entry(member: member, sealer: Self.sealer) == Self.entry)

    let other = SharedRecordSealer(secret: "another-secret-of-some-length-012345")
    #expect(SharedTierIndex.entry(member: member, sealer: other) == nil)
    #expect(SharedTierIndex.entry(member: member, sealer: nil) == nil)
    let plain = try #require(SharedTierIndex.member(Self.entry, sealer: nil))
    #expect(SharedTierIndex.entry(member: plain, sealer: Self.sealer) == nil)
    // Moved to another id: the id is the additional data.
    var moved = member
    moved.replaceSubrange(0..<64, with: Array(String(repeating: "cd", count: 32).utf8))
    #expect(SharedTierIndex.entry(member: moved, sealer: Self.sealer) == nil)
    // Every flipped byte of the sealed part is refused.
    for index in 65..<member.count {
      var flipped = member
      flipped[index] ^= 0x01
      #expect(SharedTierIndex.entry(member: flipped, sealer: Self.sealer) == nil)
    }
  }

  @Test func theMembersNonceDependsOnThePlaintextAsWellAsTheId() throws {
    let first = try #require(Self.sealer.sealIndexEntry(Array("/a\0api\0GET".utf8), id: Self.id))
    let second = try #require(Self.sealer.sealIndexEntry(Array("/b\0api\0GET".utf8), id: Self.id))
    // One id, two plaintexts: two nonces, so GCM never reuses one, whatever maps ids to
    // plaintexts.
    #expect(first.prefix(12) != second.prefix(12))
    // The same id and plaintext: the same bytes, on every replica.
    #expect(Self.sealer.sealIndexEntry(Array("/a\0api\0GET".utf8), id: Self.id) == first)
    let other = String(repeating: "cd", count: 32)
    #expect(
      try #require(Self.sealer.sealIndexEntry(Array("/a\0api\0GET".utf8), id: other)).prefix(12) != first.prefix(12))
  }

  @Test func sealedMembersShowThePathsLengthOnlyTo32Bytes() throws {
    var lengths: Set<Int> = []
    for length in 1...100 {
      var entry = Self.entry
      entry.path = "/" + String(repeating: "p", count: length - 1)
      let member = try #require(SharedTierIndex.member(entry, sealer: Self.sealer))
      let plaintext = member.count - 65 - SharedRecordSealer.overhead
      #expect(plaintext % SharedTierIndex.sealedPaddingBlock == 0)
      #expect(SharedTierIndex.entry(member: member, sealer: Self.sealer) == entry)
      lengths.insert(member.count)
    }
    #expect(lengths.count == 4, "100 path lengths, 4 member lengths")
    // A member sealed without padding (written before it was padded) still opens.
    let unpadded = try #require(Self.sealer.sealIndexEntry(Array("/api/v1/users/42\0api\0GET".utf8), id: Self.id))
    #expect(SharedTierIndex.entry(member: Array("\(Self.id)\0".utf8) + unpadded, sealer: Self.sealer) == Self.entry)
  }

  @Test func entriesOverABoundOrWithABadByteAreNotIndexed() {
    var entry = Self.entry
    entry.path = "/" + String(repeating: "a", count: SharedTierIndex.maxPathBytes - 1)
    #expect(SharedTierIndex.member(entry, sealer: nil) != nil)
    entry.path += "a"
    #expect(SharedTierIndex.member(entry, sealer: nil) == nil)
    #expect(SharedTierIndex.member(entry, sealer: Self.sealer) == nil)
    for path in ["/a\0b", "/a b", "/a\nb", "/a\u{7F}"] {
      entry.path = path
      #expect(SharedTierIndex.member(entry, sealer: nil) == nil, "\(path.debugDescription)")
    }
    entry = Self.entry
    entry.upstream = String(repeating: "u", count: SharedTierIndex.maxUpstreamBytes + 1)
    #expect(SharedTierIndex.member(entry, sealer: nil) == nil)
    entry.upstream = "a\0b"
    #expect(SharedTierIndex.member(entry, sealer: nil) == nil)
    entry.upstream = ""
    #expect(SharedTierIndex.member(entry, sealer: nil) == nil)
    entry.upstream = "api überall"
    #expect(
      SharedTierIndex.member(entry, sealer: nil).flatMap { SharedTierIndex.entry(member: $0, sealer: nil) } == entry)
    entry = Self.entry
    entry.method = "G ET"
    #expect(SharedTierIndex.member(entry, sealer: nil) == nil)
    entry = Self.entry
    entry.id = "not-an-id"
    #expect(SharedTierIndex.member(entry, sealer: nil) == nil)
  }

  @Test func foreignMembersAreRefused() {
    for text in [
      "", "/a", "/a\0api\0GET", "/a\0api\0GET\0\(Self.id)\0x", "/a\0api\0GET\0\(Self.id.uppercased())",
      "/a b\0api\0GET\0\(Self.id)", "/a\0\0GET\0\(Self.id)", "/a\0api\0\0\(Self.id)",
    ] {
      #expect(SharedTierIndex.entry(member: Array(text.utf8), sealer: nil) == nil, "\(text.debugDescription)")
    }
    #expect(SharedTierIndex.entry(member: Array("\(Self.id)\0".utf8) + [1, 2, 3], sealer: Self.sealer) == nil)
    #expect(SharedTierIndex.entry(member: Array(Self.id.utf8), sealer: Self.sealer) == nil)
  }

  @Test func theGlobMatchesThePrefixLiterally() {
    #expect(SharedTierIndex.globEscaped(Array(#"/a*b?[c]\d"#.utf8)) == Array(#"/a\*b\?\[c\]\\d"#.utf8))
    #expect(SharedTierPurgeSelection.prefix("/items/[1]").pattern == Array(#"/items/\[1\]*"#.utf8))
  }

  @Test func aZScanReplyIsReadOrRefused() {
    let page = RedisReply.array([
      .bulk(Array("17".utf8)), .array([.bulk([0x61]), .bulk(Array("1".utf8)), .bulk([0x62]), .bulk(Array("2".utf8))]),
    ])
    let read = SharedTierIndex.scanPage(page)
    #expect(read?.cursor == Array("17".utf8) && read?.members == [[0x61], [0x62]])
    #expect(SharedTierIndex.scanPage(.array([.bulk(Array("0".utf8)), .array([])]))?.members == [])
    #expect(
      SharedTierIndex.scanPage(.array([.bulk([0x30]), .array([.bulk([0x61])])])) == nil, "a member without a score")
    #expect(SharedTierIndex.scanPage(.array([.bulk([0x30]), .array([.integer(1), .bulk([0x31])])])) == nil)
    #expect(SharedTierIndex.scanPage(.error("WRONGTYPE")) == nil)
    #expect(SharedTierIndex.scanPage(.failure(.timedOut)) == nil)
  }

  @Test func aPrefixSelectsWhatTheStoresPrefixPurgeRemoves() {
    let selection = SharedTierPurgeSelection.prefix("/api/v1/users/4")
    #expect(selection.selects(Self.entry))
    var entry = Self.entry
    entry.path = "/api/v1/users/4"
    #expect(selection.selects(entry))
    entry.path = "/api/v1/users/"
    #expect(!selection.selects(entry))
    entry.path = "/API/v1/users/42"
    #expect(!selection.selects(entry), "byte for byte, as the store compares")
    entry.path = "/api/v1/users/42"
    entry.upstream = "other"
    #expect(selection.selects(entry), "any upstream, as the store's prefix purge")
  }

  @Test func aRouteSelectsWhatTheLocalRoutePurgeRemoves() throws {
    let routes = CacheEntryRoutes(config: try loadConfig(CacheEntryRoutesTests.config))
    let pass = try #require(SharedTierPurgeSelection.route("pass", routes: routes))
    #expect(pass.pathPrefix == "/pass")
    func entry(_ path: String, _ upstream: String = "other") -> SharedTierIndex.Entry {
      .init(path: path, upstream: upstream, method: "GET", id: Self.id)
    }
    #expect(pass.selects(entry("/pass")))
    #expect(pass.selects(entry("/pass/a/b")))
    #expect(!pass.selects(entry("/passage")), "the literal prefix alone takes in other paths")
    #expect(!pass.selects(entry("/pass/a", "api")), "another upstream")
    let user = try #require(SharedTierPurgeSelection.route("user", routes: routes))
    #expect(user.selects(entry("/api/v1/users/42", "api")))
    #expect(!user.selects(entry("/api/v1/users/current", "api")), "the rewrite of `me` fits first")
    #expect(!user.selects(entry("/api/v1/users", "api")))
    #expect(SharedTierPurgeSelection.route("hello", routes: routes) == nil, "a stub stores nothing")
    #expect(SharedTierPurgeSelection.route("nope", routes: routes) == nil)
  }

  @Test func aWriteTrimsAtMostOnceASecondAndPushesTheExpiryPastItsEntry() {
    var upkeep = SharedTierIndexUpkeep()
    let hour: Int64 = 3_600_000
    let slack = SharedTierIndexUpkeep.expirySlackMs
    let allowance = SharedTierIndexUpkeep.clockAllowanceMs
    // The first write of a loop: trim, and an expiry past its entry's.
    #expect(
      upkeep.afterWrite(nowMs: 10_000, entryExpiresAtMs: 10_000 + hour)
        == .init(trimThroughMs: 10_000 - allowance, keyExpiryMs: hour + slack))
    // Within the second, an entry the index key outlives: nothing.
    #expect(upkeep.afterWrite(nowMs: 10_500, entryExpiresAtMs: 10_500 + hour) == nil)
    #expect(upkeep.afterWrite(nowMs: 10_999, entryExpiresAtMs: 10_999 + 1000) == nil)
    // A second later: trimmed again; the expiry stays where it was (it covers the entry).
    #expect(
      upkeep.afterWrite(nowMs: 11_000, entryExpiresAtMs: 11_000 + hour)
        == .init(trimThroughMs: 11_000 - allowance, keyExpiryMs: hour + slack - 1000))
    // An entry that would outlive the key: at once, with a later expiry.
    #expect(
      upkeep.afterWrite(nowMs: 11_100, entryExpiresAtMs: 11_100 + 2 * hour)
        == .init(trimThroughMs: 11_100 - allowance, keyExpiryMs: 2 * hour + slack))
    // Never cut short by a shorter-lived entry.
    #expect(upkeep.keyExpiresAtMs == 11_100 + 2 * hour + slack)
    #expect(upkeep.afterWrite(nowMs: 12_200, entryExpiresAtMs: 12_200 + 1000)?.keyExpiryMs == 2 * hour + slack - 1100)
    // The clock went back: due again rather than never.
    #expect(upkeep.afterWrite(nowMs: 5_000, entryExpiresAtMs: 5_000 + 1000) != nil)
  }

  @Test func membersAreTrimmedOnlyAMinutePastTheirScore() {
    // The server starts an entry's TTL when it runs the `SET`, after the writer scored it: a
    // second's allowance would trim members of entries that still live.
    #expect(SharedTierIndexUpkeep.clockAllowanceMs >= 60_000)
    var upkeep = SharedTierIndexUpkeep()
    #expect(upkeep.afterWrite(nowMs: 100_000, entryExpiresAtMs: 200_000)?.trimThroughMs == 40_000)
  }

  @Test func aPurgeOfEverythingMakesTheNextWritesUpkeepDueAtOnce() {
    var upkeep = SharedTierIndexUpkeep()
    let hour: Int64 = 3_600_000
    #expect(upkeep.afterWrite(nowMs: 10_000, entryExpiresAtMs: 10_000 + hour) != nil)
    #expect(upkeep.afterWrite(nowMs: 10_100, entryExpiresAtMs: 10_100 + hour) == nil)
    // The index was dropped: the next write makes a key without an expiry, so it gets one now.
    upkeep.indexDropped()
    let work = upkeep.afterWrite(nowMs: 10_200, entryExpiresAtMs: 10_200 + hour)
    #expect(work?.keyExpiryMs == hour + SharedTierIndexUpkeep.expirySlackMs)
  }

  @Test func anUpkeepTrimsCapsAndGivesTheKeyAnExpiryEveryTime() {
    let work = SharedTierIndexUpkeep.Work(trimThroughMs: 1234, keyExpiryMs: 5678)
    let commands = work.commands(key: Array("p:ix".utf8)).map { $0.map { String(decoding: $0, as: UTF8.self) } }
    #expect(
      commands == [
        ["ZREMRANGEBYSCORE", "p:ix", "-inf", "1234"],
        // Ranks 0 … card − max − 1: the members beyond the cap, soonest to expire first.
        ["ZREMRANGEBYRANK", "p:ix", "0", "-\(SharedTierIndexUpkeep.maxMembers + 1)"],
        ["PEXPIRE", "p:ix", "5678", "NX"],
        ["PEXPIRE", "p:ix", "5678", "GT"],
      ])
    #expect(SharedTierIndexUpkeep.maxMembers == 1_000_000)
    #expect(
      SharedTierIndexUpkeep.maxMembers <= SharedTierPurge.maxScanRounds * SharedTierPurge.batch / 4,
      "a capped index is scanned well within the round cap")
    var small = SharedTierIndexUpkeep(maxMembers: 5)
    #expect(small.afterWrite(nowMs: 0, entryExpiresAtMs: 1)?.commands(key: [0x6B])[1].last == Array("-6".utf8))
  }

  @Test func aRoundsMembersGoBeforeTheirEntriesInBatches() {
    let keys = (0..<1001).map { Array("p:k\($0)".utf8) }
    let members = (0..<1001).map { Array("m\($0)".utf8) }
    let commands = SharedTierPurge.selectedDeletes(keys: keys, members: members, indexKey: Array("p:ix".utf8))
    // Each command: its name, first and last argument, and length.
    let outline = commands.map { command in
      [command[0], command[1], command[command.count - 1]].map { String(decoding: $0, as: UTF8.self) } + [
        "\(command.count)"
      ]
    }
    #expect(
      outline == [
        ["ZREM", "p:ix", "m499", "502"], ["DEL", "p:k0", "p:k499", "501"],
        ["ZREM", "p:ix", "m999", "502"], ["DEL", "p:k500", "p:k999", "501"],
        ["ZREM", "p:ix", "m1000", "3"], ["DEL", "p:k1000", "p:k1000", "2"],
      ])
    #expect(commands.first?[2] == members[0])
    #expect(SharedTierPurge.selectedDeletes(keys: [], members: [], indexKey: Array("p:ix".utf8)).isEmpty)
  }

  @Test func purgingEverythingUnlinksTheIndex() {
    #expect(SharedTierPurge.dropIndex(Array("p:ix".utf8)) == [Array("UNLINK".utf8), Array("p:ix".utf8)])
  }

  @Test func theFullPurgesPatternSkipsTheIndex() {
    let pattern = SharedTierPurge.answerPattern(prefix: Array("test:".utf8))
    #expect(pattern == Array("test:[0-9a-f]*".utf8))
    #expect(SharedTierIndex.keySuffix.first.map { !Array("0123456789abcdef".utf8).contains($0) } == true)
  }
}

extension [UInt8] {
  fileprivate func holds(_ needle: [UInt8]) -> Bool {
    guard needle.count <= count else { return false }
    return (0...(count - needle.count)).contains { self[$0..<($0 + needle.count)].elementsEqual(needle) }
  }
}
