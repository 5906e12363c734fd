import Foundation
import Testing

@testable import GatehouseStore

@Suite struct StoreCacheTests {
  @Test func rememberedAnswersReadBack() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let store = try makeStore(directory, clock: clock)
    defer { store.close() }
    let reader = try store.makeReader()
    let k = key("/users/1", query: "b=2&a=1")
    #expect(reader.lookup(k) == nil)
    let headers: StoredHeaders = [("Content-Type", "application/json"), ("X-Odd", "a:b\r\nc"), ("Empty", "")]
    #expect(store.remember(key: k, status: 203, headers: headers, body: Array("{\"id\":1}".utf8)))
    store.flush()
    let found = try #require(reader.lookup(id: k.id))
    #expect(found.status == 203)
    #expect(found.headers.map(\.name) == headers.map(\.name))
    #expect(found.headers.map(\.value) == headers.map(\.value))
    #expect(found.body == Array("{\"id\":1}".utf8))
    #expect(found.storedAtMs == clock.millis)
    #expect(reader.lookup(id: "not-an-id") == nil)
    let stats = store.stats()
    #expect(stats.entries == 1 && stats.writes == 1 && stats.readErrors == 0)
    #expect(stats.bytes == Int64(HeaderBlock.encode(headers).count + 8))
  }

  /// A row's head without its body: the same status, headers, age and digest as the whole
  /// row, the body's length, and a newer age once the unchanged body is stored again. The
  /// columns stored after the body come from the covering index (in the row they lie past
  /// the body's overflow pages), which a file made without it gets when it is opened.
  @Test func aRowsHeadIsReadWithoutItsBody() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    var store = try makeStore(directory, clock: clock)
    var reader = try store.makeReader()
    let k = key("/large")
    let body = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    #expect(reader.lookupHead(id: k.id) == nil)
    store.remember(
      key: k, status: 200, headers: [("Content-Type", "application/json"), ("ETag", "\"v1\"")], body: body)
    store.flush()
    let whole = try #require(reader.lookup(id: k.id))
    var head = try #require(reader.lookupHead(id: k.id))
    #expect(head.status == 200 && head.bodyCount == body.count && head.storedAtMs == whole.storedAtMs)
    #expect(head.headers.map(\.name) == whole.headers.map(\.name))
    #expect(head.headers.map(\.value) == whole.headers.map(\.value))
    #expect(head.bodyDigest == whole.bodyDigest && whole.bodyDigest == StoreCrypto.sha256(body))
    #expect(reader.lookupHead(id: "not-an-id") == nil)

    clock.advance(5000)
    store.remember(key: k, status: 200, headers: [], body: body)
    store.flush()
    head = try #require(reader.lookupHead(id: k.id))
    #expect(head.storedAtMs == clock.millis)

    let path = directory.file("store.sqlite")
    func plan() throws -> [String] {
      let db = try SQLiteConnection(path: path, mode: .readOnly)
      let statement = try db.makeStatement("EXPLAIN QUERY PLAN " + StoreReader.headQuery)
      var details: [String] = []
      while try statement.step() { details.append(statement.string(3)) }
      return details
    }
    #expect(try plan().contains { $0.contains("COVERING INDEX cache_entries_head") })

    store.close()
    try SQLiteConnection(path: path, mode: .readWriteCreate).execute("DROP INDEX cache_entries_head")
    #expect(throws: StoreError.self) { try plan() }
    store = try makeStore(directory, clock: clock)
    defer { store.close() }
    reader = try store.makeReader()
    #expect(try plan().contains { $0.contains("COVERING INDEX cache_entries_head") })
    #expect(reader.lookupHead(id: k.id)?.bodyCount == body.count)
  }

  @Test func unchangedBodyOnlyRefreshesStoredAt() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let store = try makeStore(directory, clock: clock)
    defer { store.close() }
    let reader = try store.makeReader()
    let k = key("/same")
    store.remember(key: k, status: 200, headers: [("Date", "one")], body: [1, 2, 3])
    store.flush()
    clock.advance(5000)
    store.remember(key: k, status: 200, headers: [("Date", "two")], body: [1, 2, 3])
    store.flush()
    var found = try #require(reader.lookup(k))
    #expect(found.storedAtMs == clock.millis)
    #expect(found.headers.first?.value == "one")  // row not rewritten
    #expect(store.stats().writes == 1 && store.stats().unchangedWrites == 1)

    store.remember(key: k, status: 200, headers: [("Date", "three")], body: [1, 2, 4])
    store.flush()
    found = try #require(reader.lookup(k))
    #expect(found.body == [1, 2, 4] && found.headers.first?.value == "three")
    #expect(store.stats().writes == 2 && store.stats().entries == 1)
  }

  /// A stored answer confirmed by the upstream (`304`): new headers and age, the body as it
  /// was, the byte count following the headers; an entry gone meanwhile stays gone.
  @Test func aRenewalReplacesHeadersAndAgeButNotTheBody() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let store = try makeStore(directory, clock: clock)
    defer { store.close() }
    let reader = try store.makeReader()
    let k = key("/renewed")
    let body = Array(#"{"items":[1,2,3]}"#.utf8)
    store.remember(key: k, status: 200, headers: [("ETag", #""v1""#)], body: body)
    store.flush()
    clock.advance(7000)
    let renewed: StoredHeaders = [("ETag", #""v1""#), ("Cache-Control", "max-age=120")]
    #expect(store.renew(key: k, headers: renewed))
    #expect(store.renew(key: key("/never-stored"), headers: renewed))
    store.flush()

    let found = try #require(reader.lookup(k))
    #expect(found.body == body && found.status == 200)
    #expect(found.headers.map(\.value) == renewed.map(\.value))
    #expect(found.storedAtMs == clock.millis)
    #expect(reader.lookup(key("/never-stored")) == nil)
    let stats = store.stats()
    #expect(stats.entries == 1 && stats.writes == 1 && stats.unchangedWrites == 1)
    #expect(stats.bytes == Int64(HeaderBlock.encode(renewed).count + body.count))
  }

  @Test func evictionKeepsBytesUnderTheLimitLeastRecentlyUsedFirst() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    // Each entry is 1000 body bytes and no headers: 5 fit in 5000.
    let store = try makeStore(directory, maxBytes: 5000, clock: clock) { $0.touchBatchSize = 1000 }
    defer { store.close() }
    let reader = try store.makeReader()
    for index in 0..<5 {
      clock.advance(10)
      store.remember(key: key("/lru/\(index)"), status: 200, headers: [], body: [UInt8](repeating: 1, count: 1000))
    }
    store.flush()
    #expect(store.stats().entries == 5 && store.stats().evictions == 0)

    // Read entry 0 so it becomes the most recently used; the access reaches the writer.
    clock.advance(10)
    #expect(reader.lookup(key("/lru/0")) != nil)
    reader.flushTouches()
    clock.advance(10)
    store.remember(key: key("/lru/5"), status: 200, headers: [], body: [UInt8](repeating: 1, count: 1000))
    store.remember(key: key("/lru/6"), status: 200, headers: [], body: [UInt8](repeating: 1, count: 1000))
    store.flush()

    let stats = store.stats()
    #expect(stats.bytes <= 5000 && stats.entries == 5 && stats.evictions == 2)
    #expect(reader.lookup(key("/lru/0")) != nil)
    #expect(reader.lookup(key("/lru/1")) == nil)
    #expect(reader.lookup(key("/lru/2")) == nil)
    #expect(reader.lookup(key("/lru/3")) != nil)
    #expect(reader.lookup(key("/lru/6")) != nil)

    // An entry larger than the whole store is never written and evicts nothing.
    store.remember(key: key("/huge"), status: 200, headers: [], body: [UInt8](repeating: 1, count: 6000))
    store.flush()
    #expect(store.stats().oversizeSkipped == 1 && store.stats().entries == 5)
  }

  @Test func aSmallerMaxBytesEvictsDownToItAtOnce() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let store = try makeStore(directory, maxBytes: 10_000, clock: clock)
    defer { store.close() }
    let reader = try store.makeReader()
    for index in 0..<6 {
      clock.advance(10)
      store.remember(key: key("/size/\(index)"), status: 200, headers: [], body: [UInt8](repeating: 1, count: 1000))
    }
    store.flush()

    #expect(!store.setMaxBytes(0))
    #expect(store.setMaxBytes(2500))
    store.flush()

    let stats = store.stats()
    #expect(stats.maxBytes == 2500 && stats.bytes <= 2500 && stats.entries == 2 && stats.evictions == 4)
    // The least recently used went first.
    #expect(reader.lookup(key("/size/3")) == nil)
    #expect(reader.lookup(key("/size/4")) != nil && reader.lookup(key("/size/5")) != nil)
    // Answers above the new size are no longer stored.
    store.remember(key: key("/size/big"), status: 200, headers: [], body: [UInt8](repeating: 1, count: 3000))
    store.flush()
    #expect(store.stats().oversizeSkipped == 1)
  }

  @Test func totalsSurviveReopen() throws {
    let directory = try TemporaryDirectory()
    var store = try makeStore(directory)
    for index in 0..<10 {
      store.remember(
        key: key("/r/\(index)"), status: 200, headers: [("A", "b")], body: [UInt8](repeating: 0, count: index))
    }
    store.close()
    let before = store.stats()
    store = try makeStore(directory)
    defer { store.close() }
    #expect(store.stats().entries == 10 && store.stats().bytes == before.bytes)
  }

  @Test func fullQueueDropsAndCountsWithoutBlocking() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let store = try makeStore(directory) { $0.queueCapacity = 8 }
    defer { store.close() }
    // Hold the write lock from another connection so the writer is stuck in BEGIN IMMEDIATE.
    let blocker = try SQLiteConnection(path: path, mode: .readWriteCreate)
    try blocker.execute("BEGIN IMMEDIATE")
    #expect(store.remember(key: key("/q/first"), status: 200, headers: [], body: [1]))
    var waited = 0
    while store.stats().queueDepth > 0 && waited < 500 {
      usleep(2000)
      waited += 1
    }
    let start = ContinuousClock.now
    var accepted = 0
    for index in 0..<100 where store.remember(key: key("/q/\(index)"), status: 200, headers: [], body: [1]) {
      accepted += 1
    }
    #expect(ContinuousClock.now - start < .milliseconds(500))
    #expect(accepted == 8)
    #expect(store.stats().droppedWrites == 92)
    try blocker.execute("COMMIT")
    store.flush()
    #expect(store.stats().entries == 9)
  }

  @Test func damagedRowIsAMissAndAReadError() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    let k = key("/broken")
    store.remember(key: k, status: 200, headers: [("A", "b")], body: [1])
    store.flush()
    let db = try SQLiteConnection(path: directory.file("store.sqlite"), mode: .readWriteCreate)
    try db.execute("UPDATE cache_entries SET headers = x'000000FF41'")
    let reader = try store.makeReader()
    #expect(reader.lookup(k) == nil)
    #expect(store.stats().readErrors == 1)
    // The row is removed, so the same answer is stored whole again rather than only
    // confirmed (same body and status) over damaged headers.
    store.flush()
    #expect(store.stats().entries == 0)
    store.remember(key: k, status: 200, headers: [("A", "b")], body: [1])
    store.flush()
    #expect(try #require(reader.lookup(k)).headers.first?.value == "b")
  }

  @Test func bodyThatNoLongerMatchesItsDigestIsNeverServed() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    let k = key("/rotted")
    let body = Array(#"{"balance":100}"#.utf8)
    store.remember(key: k, status: 200, headers: [], body: body)
    store.flush()
    let db = try SQLiteConnection(path: directory.file("store.sqlite"), mode: .readWriteCreate)
    // One digit flipped, as a bad disk block would: the row still reads without an error.
    try db.execute(#"UPDATE cache_entries SET body = CAST('{"balance":900}' AS BLOB)"#)
    let reader = try store.makeReader()
    #expect(reader.lookup(k) == nil)
    #expect(store.stats().readErrors == 1)
    store.flush()
    #expect(store.stats().entries == 0)
    store.remember(key: k, status: 200, headers: [], body: body)
    store.flush()
    #expect(try #require(reader.lookup(k)).body == body)
    #expect(store.stats().readErrors == 1)
  }

  @Test func damagedRowRewrittenSinceItWasReadIsKept() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    let k = key("/raced")
    store.remember(key: k, status: 200, headers: [], body: [1, 2, 3])
    store.flush()
    let db = try SQLiteConnection(path: directory.file("store.sqlite"), mode: .readWriteCreate)
    try db.execute("UPDATE cache_entries SET body = x'010209'")
    // A new answer is queued before the reader reports the damage, and cannot be committed
    // before the reader looks: another connection holds the write lock.
    let blocker = try SQLiteConnection(path: directory.file("store.sqlite"), mode: .readWriteCreate)
    try blocker.execute("BEGIN IMMEDIATE")
    store.remember(key: k, status: 200, headers: [], body: [4, 5])
    let reader = try store.makeReader()
    #expect(reader.lookup(k) == nil)
    try blocker.execute("COMMIT")
    store.flush()
    #expect(try #require(reader.lookup(k)).body == [4, 5])
    #expect(store.stats().entries == 1)
  }

  @Test func readersOnManyThreadsWhileWriting() async throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    for index in 0..<50 {
      store.remember(key: key("/c/\(index)"), status: 200, headers: [], body: Array("v\(index)".utf8))
    }
    store.flush()
    try await withThrowingTaskGroup(of: Int.self) { group in
      for _ in 0..<4 {
        group.addTask {
          let reader = try store.makeReader()
          var hits = 0
          for round in 0..<200 {
            if let found = reader.lookup(key("/c/\(round % 50)")), found.body == Array("v\(round % 50)".utf8) {
              hits += 1
            }
          }
          return hits
        }
      }
      group.addTask {
        for index in 50..<400 {
          store.remember(key: key("/c/\(index)"), status: 200, headers: [], body: [UInt8](repeating: 3, count: 500))
        }
        store.flush()
        return 0
      }
      var hits = 0
      for try await count in group { hits += count }
      #expect(hits == 800)
    }
    #expect(store.stats().readErrors == 0 && store.stats().entries == 400)
  }
}

@Suite struct WriterQueueTests {
  private func write(_ bytes: Int) -> WriterItem {
    .cache(PendingCacheWrite(key: key("/w"), status: 200, headers: [], body: [UInt8](repeating: 0, count: bytes)))
  }

  @Test func boundedByCountAndBytesButNeverForControlItems() {
    let queue = WriterQueue(capacity: 3, maxPendingBytes: 1000)
    #expect(queue.enqueue(write(10)) == .accepted)
    #expect(queue.enqueue(.touches(["a": 1])) == .accepted)
    #expect(queue.enqueue(write(10)) == .accepted)
    #expect(queue.enqueue(write(10)) == .full)
    #expect(queue.enqueue(.barrier(WriterReply<Void>())) == .accepted)
    #expect(queue.take(limit: 2)?.count == 2)
    #expect(queue.enqueue(write(2000)) == .full)  // over the byte bound with others waiting
    #expect(queue.take(limit: 10)?.count == 2)
    #expect(queue.take(limit: 10) == nil)
    #expect(queue.enqueue(write(2000)) == .accepted)  // alone, a large write still passes
    #expect(queue.enqueue(.stop) == .accepted)
    #expect(queue.enqueue(write(1)) == .closed)
    #expect(queue.depth == 2)
  }
}
