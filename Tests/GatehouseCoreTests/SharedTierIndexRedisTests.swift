import Dispatch
import Foundation
import GatehouseConfig
import GatehouseLogging
import GatehouseNet
import GatehouseSharedTier
import GatehouseStore
import Glibc
import Testing

@testable import GatehouseCore

/// A loop's shared tier (`LoopSharedTier`) writing to and purging a real `redis-server`:
/// what a purge removes (glob characters in the prefix, several scan rounds, no index), what
/// the index's upkeep keeps and drops, and the warnings. One loop, no gateway process, so
/// each test takes milliseconds. Skipped when `redis-server` is missing.
@Suite(.enabled(if: IndexTestRedis.isAvailable, "redis-server is not installed"))
struct SharedTierIndexRedisTests {
  static let secret = "index-redis-test-secret-0123456789"

  @Test(arguments: [false, true])
  func aPrefixWithGlobCharactersPurgesExactlyItsEntries(sealed: Bool) throws {
    let tier = try TierHarness(sealed: sealed)
    defer { tier.shutdown() }
    let paths = [
      "/g/a*b/1", "/g/a*b/2", "/g/aXb/1", "/g/a?c/1", "/g/abc/1", "/g/[x]/1", "/g/x/1", #"/g/\d/1"#, "/g/d/1",
      #"/g/\\d/1"#,
    ]
    let ids = try tier.write(paths)
    #expect(try tier.indexed() == paths.count)
    // A replica that never held them: only the index reaches them.
    var left = Set(paths)
    for (prefix, gone) in [
      ("/g/a*b/", ["/g/a*b/1", "/g/a*b/2"]), ("/g/a?c/", ["/g/a?c/1"]), ("/g/[x]/", ["/g/[x]/1"]),
      (#"/g/\d"#, [#"/g/\d/1"#]), (#"/g/\\"#, [#"/g/\\d/1"#]),
    ] {
      let result = try tier.purge(.selected(.prefix(prefix), heldHere: []))
      #expect(result.deleted == gone.count && !result.failed, "\(prefix)")
      left.subtract(gone)
      #expect(try tier.stored(ids) == left, "\(prefix)")
      #expect(try tier.indexed() == left.count, "\(prefix)")
    }
    #expect(left == ["/g/aXb/1", "/g/abc/1", "/g/x/1", "/g/d/1"])
  }

  @Test func purgingEverythingDropsTheIndexAndTheNextWriteGivesTheNewOneAnExpiry() throws {
    let tier = try TierHarness()
    defer { tier.shutdown() }
    let ids = try tier.write(["/a/1", "/a/2", "/b/1"])
    _ = try tier.command("SET", "t:rl:key:1", "3")
    #expect(try tier.indexed() == 3)

    let result = try tier.purge(.all)
    #expect(result.deleted == 3 && !result.failed)
    #expect(try tier.command("EXISTS", "t:ix") == .integer(0))
    #expect(try tier.stored(ids).isEmpty)
    #expect(try tier.command("GET", "t:rl:key:1") == .bulk(Array("3".utf8)), "rate counters are kept")

    // Well within a second of the last upkeep, and an entry the remembered key expiry
    // covers: the new index still gets an expiry at once.
    try tier.write(["/a/3"], ttlMs: 600_000)
    #expect(try tier.indexed() == 1)
    guard case .integer(let ttl) = try tier.command("PTTL", "t:ix") else { throw IndexTestFailure("PTTL") }
    #expect(ttl > 600_000 && ttl <= 600_000 + SharedTierIndexUpkeep.expirySlackMs, "PTTL \(ttl)")
  }

  @Test func aPurgeFallsBackToTheIdsHeldHereWhenTheIndexIsGoneOrLacksThem() throws {
    let tier = try TierHarness()
    defer { tier.shutdown() }
    let ids = try tier.write(["/h/1", "/h/2", "/h/3", "/o/1"])
    _ = try tier.command("DEL", "t:ix")

    // The index deleted by hand: the ids this replica held go; `/h/3`, held by no one here, stays.
    let result = try tier.purge(.selected(.prefix("/h/"), heldHere: [ids["/h/1"]!, ids["/h/2"]!, "not-an-id"]))
    #expect(result.deleted == 2 && !result.failed)
    #expect(try tier.stored(ids) == ["/h/3", "/o/1"])

    // An index that lacks one (a path with a space is not indexed): the index's entries
    // and the held one.
    let more = try tier.write(["/h/a b", "/h/4"])
    #expect(try tier.indexed() == 1)
    let again = try tier.purge(.selected(.prefix("/h/"), heldHere: [more["/h/a b"]!]))
    #expect(again.deleted == 2)
    #expect(try tier.stored(more).isEmpty)
    #expect(try tier.stored(ids) == ["/h/3", "/o/1"])
  }

  @Test(arguments: [false, true])
  func aPurgeWalksTheIndexOverManyRounds(sealed: Bool) throws {
    let tier = try TierHarness(sealed: sealed)
    defer { tier.shutdown() }
    // Over 128 members the server keeps a hash table and honours `COUNT`: rounds of about 10.
    try tier.set(\.scanCount, 10)
    let purged = try tier.write((0..<150).map { "/p/\($0)" })
    let kept = try tier.write((0..<150).map { "/q/\($0)" })
    #expect(try tier.indexed() == 300)

    let result = try tier.purge(.selected(.prefix("/p/"), heldHere: []))
    #expect(result.rounds > 5, "rounds: \(result.rounds)")
    #expect(result.deleted == 150 && !result.stoppedAtRoundCap && !result.failed)
    #expect(try tier.stored(purged).isEmpty)
    #expect(try tier.stored(kept).count == 150)
    #expect(try tier.indexed() == 150)
  }

  @Test func aScanStoppedAtTheRoundCapIsLoggedWithItsCounts() throws {
    let tier = try TierHarness()
    defer { tier.shutdown() }
    try tier.set(\.scanCount, 10)
    try tier.set(\.maxScanRounds, 2)
    let ids = try tier.write((0..<200).map { "/p/\($0)" })

    let result = try tier.purge(.selected(.prefix("/p/"), heldHere: [ids["/p/0"]!]))
    #expect(result.stoppedAtRoundCap && result.rounds == 2 && !result.failed)
    let left = try tier.stored(ids).count
    #expect(left > 0 && left < 200, "stored: \(left)")
    #expect(try tier.stored(ids).contains("/p/0") == false, "the held id still goes")
    let lines = tier.log.lines().filter { $0.contains(SharedTierWarnings.scanStopped) }
    #expect(lines.count == 1)
    #expect(lines.first?.contains(#""scan":"index","rounds":2,"deleted":"#) == true, "\(lines)")
    #expect(lines.first?.contains(#""held_left":"#) == true, "\(lines)")

    // The full purge stops the same way; its line is held back (one per 10 s).
    let all = try tier.purge(.all)
    #expect(all.stoppedAtRoundCap && all.rounds == 2)
    #expect(tier.log.lines().filter { $0.contains(SharedTierWarnings.scanStopped) }.count == 1)
  }

  @Test func aRewriteWithAShorterTTLNeverLowersTheMembersScore() throws {
    let tier = try TierHarness()
    defer { tier.shutdown() }
    let ids = try tier.write(["/s/1"], ttlMs: 3_600_000)
    let member = try tier.members().first!
    let first = try tier.score(member)
    try tier.write(["/s/1"], ttlMs: 60_000)
    #expect(try tier.members() == [member], "the same member")
    #expect(try tier.score(member) == first, "not lowered")
    try tier.write(["/s/1"], ttlMs: 7_200_000)
    #expect(try tier.score(member) > first + 3_000_000, "raised")
    #expect(try tier.stored(ids) == ["/s/1"])
  }

  @Test func theUpkeepKeepsMembersAMinutePastTheirScore() throws {
    let tier = try TierHarness()
    defer { tier.shutdown() }
    let now = RFC3339.nowMilliseconds()
    _ = try tier.command(
      "ZADD", "t:ix", String(now - 30_000), "expired-30s-ago", String(now - 90_000), "expired-90s-ago")
    try tier.write(["/k/1"])
    // The entry may still live in the server (its TTL started later than the writer scored it).
    #expect(try tier.members().map { String(decoding: $0, as: UTF8.self) }.contains("expired-30s-ago"))
    #expect(try !tier.members().map { String(decoding: $0, as: UTF8.self) }.contains("expired-90s-ago"))
  }

  @Test func theIndexIsCappedDroppingTheMembersThatExpireSoonest() throws {
    let tier = try TierHarness()
    defer { tier.shutdown() }
    try tier.set(\.indexUpkeep, SharedTierIndexUpkeep(maxMembers: 5))
    let later = RFC3339.nowMilliseconds() + 7_200_000
    var command = ["ZADD", "t:ix"]
    for index in 0..<7 { command += [String(later + Int64(index)), "m\(index)"] }
    _ = try tier.command(command)
    // An hour's entry: it expires before all seven, so it goes first, then m0 and m1.
    try tier.write(["/c/1"], ttlMs: 3_600_000)
    #expect(try tier.members().map { String(decoding: $0, as: UTF8.self) } == ["m2", "m3", "m4", "m5", "m6"])
    let lines = tier.log.lines().filter { $0.contains(SharedTierWarnings.indexCapped) }
    #expect(lines.count == 1 && lines.first?.contains(#""dropped":3,"max_members":5"#) == true, "\(lines)")
  }
}

struct IndexTestFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// A `LoopSharedTier` on its own loop, on its own `redis-server`, with blocking helpers.
/// Keys are under `t:`; every entry is a GET of upstream `api`.
final class TierHarness: @unchecked Sendable {
  let redis: IndexTestRedis
  let group: EventLoopGroup
  let loop: EventLoop
  let log = PipeLogger(level: .warn)
  private let box: UncheckedBox<LoopSharedTier?>

  init(sealed: Bool = false) throws {
    redis = try IndexTestRedis()
    let url = try SharedTierURL(parsing: "redis://127.0.0.1:\(redis.port)/0")
    let plan = try SharedTierPlan(
      SharedTierConfig(url: url, prefix: "t:", timeout: .seconds(5)),
      secretKey: sealed ? SecretValue(SharedTierIndexRedisTests.secret) : nil)
    group = try EventLoopGroup(loopCount: 1)
    loop = group.loops[0]
    let loop = loop
    let warnings = SharedTierWarnings(logger: log.logger)
    box = UncheckedBox(nil)
    let box = box
    try runOnLoop(loop) {
      let tier = LoopSharedTier(plan: plan, loop: loop, warnings: warnings)
      box.value = tier
      tier.start()
    }
    guard waitFor(timeout: .seconds(10), { (try? runOnLoop(loop) { box.value!.health.isUp }) ?? false }) else {
      throw IndexTestFailure("the tier's connection did not come up")
    }
  }

  func shutdown() {
    let box = box
    _ = try? runOnLoop(loop) { box.value?.stop() }
    group.shutdown()
    redis.kill()
  }

  func set<Value>(_ property: ReferenceWritableKeyPath<LoopSharedTier, Value>, _ value: Value) throws {
    let box = box
    let value = UncheckedBox(value)
    try runOnLoop(loop) { box.value![keyPath: property] = value.value }
  }

  /// Runs `body` on the loop with a completion, and waits for it.
  private func completed<T>(_ body: @escaping (LoopSharedTier, @escaping (T) -> Void) -> Void) throws -> T {
    let box = box
    let outcome = UncheckedBox<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    try runOnLoop(loop) {
      body(box.value!) { value in
        outcome.value = value
        done.signal()
      }
    }
    guard done.wait(timeout: .now() + 20) == .success else { throw IndexTestFailure("no completion") }
    return try runOnLoop(loop) { outcome.value! }
  }

  func command(_ arguments: [String]) throws -> RedisReply {
    try completed { tier, completion in tier.connection.send(arguments.map { Array($0.utf8) }, completion: completion) }
  }

  func command(_ arguments: String...) throws -> RedisReply { try command(arguments) }

  /// Writes an entry for each path behind (as the gateway does) and waits until the server
  /// ran every command; their ids, by path.
  @discardableResult
  func write(_ paths: [String], ttlMs: Int64 = 3_600_000) throws -> [String: String] {
    var ids: [String: String] = [:]
    let keys = paths.map { CacheKey(method: "GET", upstream: "api", path: $0, query: "") }
    for (path, key) in zip(paths, keys) { ids[path] = key.id }
    let box = box
    try runOnLoop(loop) {
      for key in keys {
        let answer = StoredAnswer(status: 200, headers: [], body: Array(key.path.utf8), storedAtMs: 1000)
        box.value!.write(answer, key: key, ttlMs: ttlMs)
      }
    }
    // Replies come in order: once this one is back, the writes ran.
    _ = try command("PING")
    return ids
  }

  func purge(_ purge: SharedTierPurge) throws -> SharedTierPurgeResult {
    let result: SharedTierPurgeResult = try completed { tier, completion in tier.purge(purge, completion: completion) }
    return result
  }

  /// The paths of `ids` whose entries the server holds.
  func stored(_ ids: [String: String]) throws -> Set<String> {
    var paths: Set<String> = []
    for (path, id) in ids where try command("EXISTS", "t:\(id)") == .integer(1) { paths.insert(path) }
    return paths
  }

  func indexed() throws -> Int {
    guard case .integer(let count) = try command("ZCARD", "t:ix") else { throw IndexTestFailure("ZCARD") }
    return Int(count)
  }

  /// The index's members, lowest score first.
  func members() throws -> [[UInt8]] {
    guard case .array(let items) = try command("ZRANGE", "t:ix", "0", "-1") else { throw IndexTestFailure("ZRANGE") }
    return items.compactMap { item -> [UInt8]? in
      guard case .bulk(let member) = item else { return nil }
      return member
    }
  }

  func score(_ member: [UInt8]) throws -> Int64 {
    let reply: RedisReply = try completed { tier, completion in
      tier.connection.send([Array("ZSCORE".utf8), Array("t:ix".utf8), member], completion: completion)
    }
    guard case .bulk(let text) = reply, let score = Int64(String(decoding: text, as: UTF8.self)) else {
      throw IndexTestFailure("ZSCORE")
    }
    return score
  }
}

/// A `redis-server` on a free loopback port, without persistence, killed at the end.
final class IndexTestRedis: @unchecked Sendable {
  static let binary = "/usr/bin/redis-server"
  static var isAvailable: Bool { access(binary, X_OK) == 0 }
  let port: UInt16
  private let process = Process()

  init() throws {
    let listener = try TCPListener(address: .loopback(port: 0), reusePort: false)
    port = listener.localPort
    listener.close()
    process.executableURL = URL(fileURLWithPath: Self.binary)
    process.arguments = ["--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    let port = port
    guard waitFor(timeout: .seconds(10), { loopbackAccepts(port: port) }) else {
      kill()
      throw IndexTestFailure("redis-server did not listen on \(port)")
    }
  }

  deinit { kill() }

  func kill() {
    guard process.isRunning else { return }
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }
}
