import Foundation
import Testing

@testable import GatehouseStore

@Suite struct SQLiteLayerTests {
  @Test func errorsCarryTheSQLAndSQLiteMessage() throws {
    let directory = try TemporaryDirectory()
    let db = try SQLiteConnection(path: directory.file("t.sqlite"), mode: .readWriteCreate)
    do {
      try db.execute("SELECT * FROM nowhere")
      Issue.record("expected an error")
    } catch {
      #expect(error.kind == .sqlite)
      #expect(error.resultCode == 1)
      #expect(error.message.contains("no such table: nowhere"))
      #expect(error.sql == "SELECT * FROM nowhere")
      #expect(error.description.contains("no such table"))
    }
  }

  @Test func bindAndColumnRoundTrip() throws {
    let directory = try TemporaryDirectory()
    let db = try SQLiteConnection(path: directory.file("t.sqlite"), mode: .readWriteCreate)
    try db.execute("CREATE TABLE t (i INTEGER, d REAL, s TEXT, b BLOB, n TEXT)")
    let insert = try db.cachedStatement("INSERT INTO t VALUES (?, ?, ?, ?, ?)")
    try insert.bind(Int64.max, at: 1)
    try insert.bind(2.5, at: 2)
    try insert.bind("héllo\u{0}world", at: 3)
    try insert.bind(blob: [0, 1, 2, 255], at: 4)
    try insert.bind(nil as String?, at: 5)
    try insert.run()
    // Empty values must be stored as empty, not NULL.
    let empty = try db.cachedStatement("INSERT INTO t VALUES (?, ?, ?, ?, ?)")
    #expect(empty === insert)
    try empty.bind(0, at: 1)
    try empty.bind(0.0, at: 2)
    try empty.bind("", at: 3)
    try empty.bind(blob: [], at: 4)
    try empty.bind("x", at: 5)
    try empty.run()

    let select = try db.makeStatement("SELECT i, d, s, b, n FROM t ORDER BY rowid")
    #expect(try select.step())
    #expect(select.int64(0) == Int64.max)
    #expect(select.double(1) == 2.5)
    #expect(select.string(2) == "héllo\u{0}world")
    #expect(select.blob(3) == [0, 1, 2, 255])
    #expect(select.isNull(4) && select.optionalString(4) == nil)
    #expect(try select.step())
    #expect(!select.isNull(2) && select.string(2) == "")
    #expect(!select.isNull(3) && select.blob(3) == [])
    #expect(try !select.step())
  }

  @Test func transactionsCommitAndRollBack() throws {
    let directory = try TemporaryDirectory()
    let db = try SQLiteConnection(path: directory.file("t.sqlite"), mode: .readWriteCreate)
    try db.execute("CREATE TABLE t (v INTEGER)")
    try db.inTransaction { () throws(StoreError) in try db.execute("INSERT INTO t VALUES (1)") }
    #expect(throws: StoreError.self) {
      try db.inTransaction { () throws(StoreError) in
        try db.execute("INSERT INTO t VALUES (2)")
        try db.execute("INSERT INTO missing VALUES (3)")
      }
    }
    #expect(try db.scalarInt("SELECT count(*) FROM t") == 1)
  }

  @Test func writerPragmasAndMigrations() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let store = try makeStore(directory)
    store.close()
    let db = try SQLiteConnection(path: path, mode: .readWriteCreate)
    #expect(try db.strings("PRAGMA journal_mode") == ["wal"])
    #expect(try db.scalarInt("PRAGMA user_version") == StoreSchema.currentVersion)
    #expect(try db.scalarInt("PRAGMA application_id") == StoreSchema.applicationID)
    let tables = try db.strings("SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') ORDER BY name")
    #expect(tables.contains("cache_entries") && tables.contains("tokens"))
    #expect(tables.contains("cache_entries_lru") && tables.contains("cache_entries_path"))

    let opened = try StoreFile.openWriter(path: path, busyTimeoutMs: 100, now: 0)
    #expect(try opened.connection.scalarInt("PRAGMA synchronous") == 1)  // NORMAL
    #expect(try opened.connection.scalarInt("PRAGMA foreign_keys") == 1)
    #expect(opened.warnings.isEmpty)
  }

  @Test func newerSchemaIsRefusedNotMovedAside() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    try makeStore(directory).close()
    let db = try SQLiteConnection(path: path, mode: .readWriteCreate)
    try db.execute("PRAGMA user_version = 99")
    #expect {
      try makeStore(directory)
    } throws: { error in
      (error as? StoreError)?.kind == .unsupportedSchema
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).allSatisfy { !$0.contains("corrupt") })
  }

  @Test func idleWriterTruncatesTheWAL() async throws {
    let directory = try TemporaryDirectory()
    let store = try makeStore(directory) { $0.idleCheckpointMs = 50 }
    defer { store.close() }
    for index in 0..<200 {
      store.remember(key: key("/wal/\(index)"), status: 200, headers: [], body: [UInt8](repeating: 7, count: 2000))
    }
    store.flush()
    #expect((fileSize(directory.file("store.sqlite-wal")) ?? 0) > 0)
    var size = fileSize(directory.file("store.sqlite-wal"))
    for _ in 0..<100 where size != 0 {
      try await Task.sleep(for: .milliseconds(20))
      size = fileSize(directory.file("store.sqlite-wal"))
    }
    #expect(size == 0)
  }
}
