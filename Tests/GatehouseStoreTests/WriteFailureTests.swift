import Foundation
import Synchronization
import Testing

@testable import GatehouseStore

/// Commits that fail (a full disk, made here with `PRAGMA max_page_count` on the writer's
/// connection): token writes are kept and retried until they are on disk, cache writes are
/// counted as lost, and the caller hears once when writes start failing and once when they
/// work again.
@Suite struct WriteFailureTests {
  /// Larger than a page, so saving it needs new pages, which a capped file does not have.
  static let bigValue = String(repeating: "v", count: 32 * 1024)
  static let noLimit = "PRAGMA max_page_count = 1073741823"
  /// SQLite raises a limit below the current size to the current size: nothing can grow.
  static let full = "PRAGMA max_page_count = 1"

  final class Events: Sendable {
    private let list = Mutex<[StoreEvent]>([])
    func append(_ event: StoreEvent) { list.withLock { $0.append(event) } }
    var all: [StoreEvent] { list.withLock { $0 } }
    var failing: Int {
      all.filter { if case .writesFailing = $0 { return true } else { return false } }.count
    }
    var recovered: Int {
      all.filter { if case .writesRecovered = $0 { return true } else { return false } }.count
    }
  }

  static func open(_ directory: TemporaryDirectory, events: Events) throws -> Store {
    try makeStore(directory) { configuration in
      configuration.writeRetryMinMs = 10
      configuration.writeRetryMaxMs = 100
      configuration.onEvent = { events.append($0) }
    }
  }

  static func save(_ store: Store, _ value: String) throws {
    try store.saveToken(
      name: "api", value: value, expiresAtMs: nil, refreshedAtMs: 1, state: "valid", lastError: nil)
  }

  static func storedValue(_ store: Store) throws -> String? {
    try store.loadTokens().tokens.first { $0.name == "api" }?.value
  }

  /// Polls `condition` every 20 ms for up to `seconds`.
  static func eventually(seconds: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
      if try condition() { return true }
      usleep(20_000)
    }
    return try condition()
  }

  @Test func tokenSavedWhileCommitsFailReachesTheFileOnceTheyWorkWithoutAnotherWrite() throws {
    let directory = try TemporaryDirectory()
    let events = Events()
    let store = try Self.open(directory, events: events)
    try Self.save(store, "old")
    store.flush()

    store.executeOnWriter(Self.full)
    try Self.save(store, "first-" + Self.bigValue)
    store.remember(key: key("/lost"), status: 200, headers: [], body: Array(Self.bigValue.utf8))
    store.flush()
    // A newer save while the first is still waiting replaces it.
    try Self.save(store, "newest-" + Self.bigValue)
    store.flush()

    #expect(try Self.storedValue(store) == "old")
    #expect(store.stats().pendingTokenWrites == 1)
    #expect(store.stats().writeErrors >= 1, "the cache write is lost and counted")
    #expect(events.failing == 1, "one warning per episode: \(events.all)")
    #expect(events.recovered == 0)

    // Space comes back; nothing else is written: the writer must wake up by itself.
    store.executeOnWriter(Self.noLimit)
    #expect(try Self.eventually { try Self.storedValue(store) == "newest-" + Self.bigValue })
    #expect(Self.eventually { events.recovered == 1 })
    #expect(store.stats().pendingTokenWrites == 0)
    #expect(events.failing == 1)
    store.close()

    let reopened = try makeStore(directory)
    #expect(try Self.storedValue(reopened) == "newest-" + Self.bigValue)
    #expect(reopened.stats().entries == 0, "the cache write was dropped, as documented")
  }

  @Test func aCommittedWriteSupersedesTheKeptOne() throws {
    let directory = try TemporaryDirectory()
    let events = Events()
    let store = try makeStore(directory) { configuration in
      // Long enough that only the committed batch can settle the kept write.
      configuration.writeRetryMinMs = 600_000
      configuration.writeRetryMaxMs = 600_000
      configuration.onEvent = { events.append($0) }
    }
    store.executeOnWriter(Self.full)
    try Self.save(store, "failed-" + Self.bigValue)
    store.flush()
    #expect(store.stats().pendingTokenWrites == 1)

    store.executeOnWriter(Self.noLimit)
    try Self.save(store, "committed")
    store.flush()

    #expect(try Self.storedValue(store) == "committed")
    #expect(store.stats().pendingTokenWrites == 0)
    #expect(events.all.contains(.writesRecovered(failedCommits: 1)))
  }

  @Test func closingWithTokenWritesNoCommitTakesNamesThem() throws {
    let directory = try TemporaryDirectory()
    let events = Events()
    let store = try Self.open(directory, events: events)
    store.executeOnWriter(Self.full)
    try Self.save(store, Self.bigValue)
    store.flush()
    store.close()

    #expect(events.all.last == .tokenWritesLost(names: ["api"]))
    if case .writesFailing(let error, let pending) = events.all.first {
      #expect(error.contains("full"), "\(error)")
      #expect(pending == 1)
      #expect(!error.contains(Self.bigValue.prefix(64)), "no stored value in the message")
    } else {
      Issue.record("no writesFailing event: \(events.all)")
    }
  }

  // MARK: The rules on their own

  @Test func keptTokenWritesAreTheNewestPerToken() {
    func token(_ name: String, _ value: String) -> WriterItem {
      .token(
        PendingToken(
          name: name, value: Array(value.utf8), nonce: nil, tag: nil, encrypted: false, expiresAtMs: nil,
          refreshedAtMs: nil, state: "valid", lastError: nil))
    }
    func describe(_ writes: PendingTokenWrites) -> [String] {
      writes.ordered.map { name, write in
        switch write {
        case .save(let token): return "\(name)=\(String(decoding: token.value, as: UTF8.self))"
        case .delete: return "\(name) deleted"
        }
      }
    }
    var writes = PendingTokenWrites()
    writes.keep(failed: [token("b", "1"), .barrier(WriterReply()), token("a", "1"), token("b", "2")])
    #expect(describe(writes) == ["a=1", "b=2"])
    writes.keep(failed: [.deleteToken("a"), token("c", "1")])
    #expect(describe(writes) == ["a deleted", "b=2", "c=1"])
    writes.supersede(committed: [token("b", "3"), .touches([:])])
    #expect(describe(writes) == ["a deleted", "c=1"])
  }

  @Test func retryWaitsDoubleUpToTheBoundAndStartOverAfterAReset() {
    var backoff = RetryBackoff(minMs: 100, maxMs: 1000)
    #expect(!backoff.isDue(nowMs: 0))
    #expect(backoff.msUntilDue(nowMs: 0) == nil)
    var waits: [Int64] = []
    for _ in 0..<6 {
      backoff.failed(nowMs: 5000)
      waits.append(backoff.msUntilDue(nowMs: 5000)!)
    }
    #expect(waits == [100, 200, 400, 800, 1000, 1000])
    #expect(!backoff.isDue(nowMs: 5999))
    #expect(backoff.isDue(nowMs: 6000))
    backoff.reset()
    #expect(!backoff.isDue(nowMs: 1 << 40))
    backoff.failed(nowMs: 0)
    #expect(backoff.msUntilDue(nowMs: 0) == 100)
  }

  @Test func anEpisodeStartsAtTheFirstFailureAndEndsAtACommitThatWrote() {
    var health = WriteHealth()
    var outcomes: [String] = []
    func succeeded(changedRows: Bool) { outcomes.append("ok \(health.commitSucceeded(changedRows: changedRows) ?? 0)") }
    func failed() { outcomes.append(health.commitFailed() ? "starts" : "continues") }

    succeeded(changedRows: true)
    failed()
    failed()
    // An empty commit (a flush, a pragma) succeeds even on a full disk: it proves nothing.
    succeeded(changedRows: false)
    failed()
    succeeded(changedRows: true)
    failed()

    #expect(outcomes == ["ok 0", "starts", "continues", "ok 0", "continues", "ok 3", "starts"])
    #expect(health.isFailing)
  }
}
