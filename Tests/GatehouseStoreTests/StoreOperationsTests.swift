import Foundation
import Testing

@testable import GatehouseStore

@Suite struct StoreOperationsTests {
  private func seed(_ store: Store, paths: [String]) {
    for path in paths {
      store.remember(key: key(path, query: "x=1"), status: 200, headers: [("A", "b")], body: Array(path.utf8))
    }
    store.flush()
  }

  @Test func listPagesByPathThenIdWithOpaqueCursor() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    let users = (0..<25).map { "/users/\($0)" }
    seed(store, paths: users + ["/orders/1", "/usersX", "/user"])

    var seen: [CacheEntrySummary] = []
    var cursor: String? = nil
    var pages = 0
    repeat {
      let page = try store.list(prefix: "/users/", limit: 10, cursor: cursor)
      seen += page.entries
      cursor = page.nextCursor
      pages += 1
    } while cursor != nil && pages < 10
    #expect(pages == 3)
    #expect(seen.map(\.path) == users.sorted())
    #expect(seen.allSatisfy { $0.method == "GET" && $0.upstream == "api" && $0.query == "x=1" && $0.status == 200 })
    #expect(try store.list(prefix: "/users", limit: 100).entries.count == 26)
    #expect(try store.list(limit: 100).entries.count == 28)
    #expect(try store.list(prefix: "/nothing").entries.isEmpty)
    #expect(try store.list(prefix: "/orders/", limit: 1).nextCursor == nil)

    #expect(throws: StoreError.self) { try store.list(cursor: "garbage") }
    #expect(throws: StoreError.self) { try store.list(cursor: "zz." + String(repeating: "a", count: 64)) }
  }

  @Test func cursorFromAnotherPrefixDoesNotWidenTheListing() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    seed(store, paths: ["/a/1", "/a/2", "/b/1", "/b/2"])
    let fromA = try #require(try store.list(prefix: "/a/", limit: 1).nextCursor)
    #expect(try store.list(prefix: "/b/", limit: 10, cursor: fromA).entries.map(\.path) == ["/b/1", "/b/2"])
  }

  @Test func entryDetailCarriesHeadersAndBody() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let store = try makeStore(directory, clock: clock)
    defer { store.close() }
    let k = CacheKey(
      method: "GET", upstream: "api", path: "/img", query: "", vary: [("Accept-Language", "en")], clientID: "ios")
    store.remember(key: k, status: 200, headers: [("Content-Type", "image/png")], body: [0x89, 0x50, 0xFF])
    store.flush()
    let detail = try #require(try store.entry(id: k.id))
    #expect(detail.summary.id == k.id && detail.summary.path == "/img" && detail.summary.bytes > 3)
    #expect(detail.summary.storedAtMs == clock.millis && detail.summary.lastAccessMs == clock.millis)
    #expect(detail.vary == k.varyPart)
    #expect(detail.headers.first?.name == "Content-Type" && detail.headers.first?.value == "image/png")
    #expect(detail.body == [0x89, 0x50, 0xFF])
    #expect(detail.bodySHA256 == StoreCrypto.hex(StoreCrypto.sha256([0x89, 0x50, 0xFF])))
    #expect(try store.entry(id: key("/absent").id) == nil)
    #expect(try store.entry(id: "'; DROP TABLE cache_entries; --") == nil)
  }

  @Test func purgesReturnCountsAndKeepStatsExact() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    seed(store, paths: ["/p/1", "/p/2", "/p/3", "/q/1", "/q/2", "/r"])
    #expect(store.stats().entries == 6)

    #expect(try store.purge(id: key("/r", query: "x=1").id) == 1)
    #expect(try store.purge(id: key("/r", query: "x=1").id) == 0)
    #expect(try store.purge(id: "nope") == 0)
    #expect(try store.purge(prefix: "/p/") == 3)
    #expect(store.stats().entries == 2)
    let remaining = try store.list().entries.reduce(Int64(0)) { $0 + $1.bytes }
    #expect(store.stats().bytes == remaining)
    #expect(try store.purgeAll() == 2)
    #expect(store.stats().entries == 0 && store.stats().bytes == 0)
    #expect(try store.list().entries.isEmpty)
  }

  @Test func purgeAllCountsTheRowsDeletedNotTheRowsThisStoreWrote() throws {
    // Two stores on one file, as two gateways: each counts only the rows it wrote.
    let directory = try TemporaryDirectory()
    let first = try makeStore(directory)
    defer { first.close() }
    let second = try makeStore(directory)
    defer { second.close() }
    seed(first, paths: ["/a/1", "/a/2", "/a/3"])
    seed(second, paths: ["/b/1", "/b/2"])
    #expect(try first.purgeAll() == 5)
    #expect(first.stats().entries == 0 && first.stats().bytes == 0)
    #expect(try first.list().entries.isEmpty)
  }

  @Test func purgeAfterCloseThrowsClosed() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    store.close()
    #expect {
      try store.purgeAll()
    } throws: { error in
      (error as? StoreError)?.kind == .closed
    }
    #expect(!store.remember(key: key("/late"), status: 200, headers: [], body: []))
    #expect(store.stats().droppedWrites == 1)
    store.flush()  // returns at once
    store.close()  // idempotent
  }

  @Test func integrityCheckReportsOK() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    seed(store, paths: ["/i/1"])
    #expect(try store.checkIntegrity() == ["ok"])
  }
}

@Suite struct TokenStoreTests {
  @Test func plaintextTokensRoundTrip() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory)
    defer { store.close() }
    try store.saveToken(
      name: "api", value: "abc", expiresAtMs: 1000, refreshedAtMs: 500, state: "valid", lastError: nil)
    try store.saveToken(
      name: "partner", value: "", expiresAtMs: nil, refreshedAtMs: nil, state: "error", lastError: "HTTP 500")
    store.flush()
    let loaded = try store.loadTokens()
    #expect(loaded.warnings.isEmpty)
    #expect(
      loaded.tokens == [
        StoredToken(name: "api", value: "abc", expiresAtMs: 1000, refreshedAtMs: 500, state: "valid", lastError: nil),
        StoredToken(
          name: "partner", value: "", expiresAtMs: nil, refreshedAtMs: nil, state: "error", lastError: "HTTP 500"),
      ])
    store.deleteToken(name: "partner")
    try store.saveToken(name: "api", value: "new", expiresAtMs: nil, refreshedAtMs: 9, state: "valid", lastError: nil)
    store.flush()
    #expect(try store.loadTokens().tokens.map(\.value) == ["new"])
  }

  @Test func encryptedTokensRoundTripAcrossReopen() throws {
    let directory = try TemporaryDirectory()
    var store = try makeStore(directory, secretKey: "k1")
    try store.saveToken(name: "api", value: "v-123", expiresAtMs: 7, refreshedAtMs: 3, state: "valid", lastError: nil)
    store.close()
    store = try makeStore(directory, secretKey: "k1")
    defer { store.close() }
    let loaded = try store.loadTokens()
    #expect(loaded.warnings.isEmpty)
    #expect(loaded.tokens.first?.value == "v-123" && loaded.tokens.first?.expiresAtMs == 7)
  }

  @Test func wrongOrMissingKeyGivesMissingAndAWarning() throws {
    let directory = try TemporaryDirectory()
    var store = try makeStore(directory, secretKey: "right")
    try store.saveToken(
      name: "api", value: "hidden", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    store.close()

    store = try makeStore(directory, secretKey: "wrong")
    var loaded = try store.loadTokens()
    #expect(loaded.tokens.isEmpty)
    #expect(loaded.warnings.count == 1 && loaded.warnings[0].contains("api"))
    #expect(!loaded.warnings[0].contains("hidden"))
    store.close()

    store = try makeStore(directory, secretKey: nil)
    loaded = try store.loadTokens()
    #expect(loaded.tokens.isEmpty && loaded.warnings.count == 1)
    // A plaintext token stored without a key still loads once a key is set, with a warning.
    try store.saveToken(name: "plain", value: "p", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    store.close()
    store = try makeStore(directory, secretKey: "right")
    defer { store.close() }
    loaded = try store.loadTokens()
    #expect(loaded.tokens.map(\.name) == ["api", "plain"])
    #expect(loaded.warnings.count == 1)
  }

  @Test func ciphertextMovedToAnotherNameDoesNotOpen() throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory, secretKey: "k")
    defer { store.close() }
    try store.saveToken(
      name: "a", value: "secret-a", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    try store.saveToken(
      name: "b", value: "secret-b", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    store.flush()
    let db = try SQLiteConnection(path: directory.file("store.sqlite"), mode: .readWriteCreate)
    try db.execute(
      "UPDATE tokens SET (value, nonce, tag) = (SELECT value, nonce, tag FROM tokens WHERE name = 'a') WHERE name = 'b'"
    )
    let loaded = try store.loadTokens()
    #expect(loaded.tokens.map(\.name) == ["a"])
    #expect(loaded.warnings.count == 1 && loaded.warnings[0].contains("token b"))
  }

  @Test func canaryPlaintextNeverReachesTheFiles() throws {
    let directory = try TemporaryDirectory()
    let canary = "CANARY-7f3a9c1e-token-value-that-must-not-leak"
    let store = try makeStore(directory, secretKey: "disk-secret")
    for round in 0..<20 {
      try store.saveToken(
        name: "api", value: canary, expiresAtMs: Int64(round), refreshedAtMs: nil, state: "valid", lastError: nil)
    }
    store.flush()
    let walBefore = fileBytes(directory.file("store.sqlite-wal"))
    #expect(!walBefore.isEmpty)
    #expect(!walBefore.contains(subsequence: Array(canary.utf8)))
    // Force the WAL into the main file, then look at both.
    let db = try SQLiteConnection(path: directory.file("store.sqlite"), mode: .readWriteCreate)
    #expect(try !db.checkpoint(truncate: false).busy)
    let main = fileBytes(directory.file("store.sqlite"))
    let wal = fileBytes(directory.file("store.sqlite-wal"))
    #expect(main.count > 0)
    #expect(!main.contains(subsequence: Array(canary.utf8)))
    #expect(!wal.contains(subsequence: Array(canary.utf8)))
    #expect(try store.loadTokens().tokens.first?.value == canary)
    store.close()
    #expect(!fileBytes(directory.file("store.sqlite")).contains(subsequence: Array(canary.utf8)))

    // Control: the same check finds the canary when encryption is off, so the scan works.
    let plain = try makeStore(directory, name: "plain.sqlite")
    try plain.saveToken(
      name: "api", value: canary, expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    plain.flush()
    #expect(fileBytes(directory.file("plain.sqlite-wal")).contains(subsequence: Array(canary.utf8)))
    plain.close()
  }
}
