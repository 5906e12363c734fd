import Foundation
import GatehouseStore
import Testing

@testable import GatehouseCore
@testable import GatehouseLogging

/// A loop's memory of recent store answers stays within its bounds whatever clients ask
/// for: entries, bytes, time (an idle loop lets go of everything).
@Suite struct RecentAnswersTests {
  static func answer(_ bodyBytes: Int) -> StoredAnswer {
    StoredAnswer(
      status: 200, headers: [(name: "Content-Type", value: "application/json")],
      body: [UInt8](repeating: 0x61, count: bodyBytes), storedAtMs: 0)
  }

  @Test func manyLargeAnswersStayWithinTheByteBound() {
    var recent = RecentAnswers()
    for index in 0..<1000 {
      recent.insert(Self.answer(250_000), id: "k\(index)", nowMs: 10)
      #expect(recent.bytes <= recent.limits.maxBytes)
    }
    #expect(recent.count > 0 && recent.count <= recent.limits.maxBytes / 250_000)
    // The newest answer is always kept.
    #expect(recent.lookup("k999", nowMs: 10)?.body.count == 250_000)
  }

  @Test func entriesAreBoundedInNumberAndBodiesInSize() {
    var recent = RecentAnswers(limits: RecentAnswers.Limits(maxEntries: 8))
    for index in 0..<50 { recent.insert(Self.answer(10), id: "k\(index)", nowMs: 10) }
    #expect(recent.count <= 8)
    recent.insert(Self.answer(recent.limits.maxBody + 1), id: "huge", nowMs: 10)
    #expect(recent.lookup("huge", nowMs: 10) == nil)
  }

  @Test func expiredAnswersAreNotServedAndAreLetGoOf() {
    var recent = RecentAnswers()
    recent.insert(Self.answer(100), id: "a", nowMs: 1000)
    recent.insert(Self.answer(100), id: "b", nowMs: 1500)
    #expect(recent.lookup("a", nowMs: 1999) != nil)
    #expect(recent.lookup("a", nowMs: 2000) == nil)
    recent.sweep(nowMs: 2000)
    #expect(recent.count == 1)
    recent.sweep(nowMs: 3000)
    #expect(recent.count == 0 && recent.bytes == 0)
  }

  @Test func replacingAndRemovingKeepTheByteCountExact() {
    var recent = RecentAnswers()
    recent.insert(Self.answer(100), id: "a", nowMs: 0)
    recent.insert(Self.answer(300), id: "a", nowMs: 0)
    #expect(recent.count == 1)
    #expect(recent.bytes == RecentAnswers.footprint(Self.answer(300)))
    recent.remove("a")
    #expect(recent.bytes == 0)
  }
}

/// The per-loop memo of cache keys keeps small inputs only: a key from a long query or a
/// long `vary` value is computed each time (its memo entry would hold it three times over).
@Suite struct CacheKeyMemoTests {
  @Test func keysFromLargeInputsAreComputedButNotRemembered() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-memo-\(UUID())").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let store = try Store.open(Store.Configuration(path: directory + "/store.sqlite", maxBytes: 1 << 20))
    defer { store.close() }
    let loopStore = LoopStore(store: store, logger: Logger(level: .error))
    func inputs(_ target: String, _ vary: String) -> LoopStore.KeyInputs {
      LoopStore.KeyInputs(
        upstream: "api", target: Array(target.utf8), varyNames: ["accept-language"], vary: ["=" + vary],
        clientID: nil, host: nil, scope: nil, gzip: false)
    }
    let small = loopStore.key(inputs("/users?page=1", "en"))
    #expect(loopStore.memoizedKeyCount == 1)
    #expect(loopStore.key(inputs("/users?page=1", "en")).id == small.id)
    let longQuery = "/users?q=" + String(repeating: "x", count: 4000)
    let long = loopStore.key(inputs(longQuery, "en"))
    let longVary = loopStore.key(inputs("/users?page=1", String(repeating: "de,", count: 600)))
    #expect(loopStore.memoizedKeyCount == 1)
    #expect(loopStore.key(inputs(longQuery, "en")).id == long.id)
    #expect(long.id != small.id && longVary.id != small.id)
  }
}
