import Foundation
import Testing

@testable import GatehouseStore

@Suite struct DamageControlTests {
  private func asideFiles(_ directory: TemporaryDirectory) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains(".corrupt-") }.sorted()
  }

  @Test func garbageFileIsMovedAsideAndReplaced() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let garbage = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
    try writeFile(path, garbage)
    let store = try makeStore(directory)
    defer { store.close() }
    #expect(store.warnings.count == 1)
    #expect(store.warnings[0].contains("moved it to") && store.warnings[0].contains(".corrupt-"))
    let aside = try asideFiles(directory)
    #expect(aside.count == 1)
    #expect(fileBytes(directory.file(aside[0])) == garbage)  // kept byte for byte
    store.remember(key: key("/fresh"), status: 200, headers: [], body: [1])
    store.flush()
    #expect(try store.makeReader().lookup(key("/fresh")) != nil)
  }

  @Test func truncatedDatabaseIsMovedAside() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let store = try makeStore(directory)
    for index in 0..<300 {
      store.remember(key: key("/t/\(index)"), status: 200, headers: [], body: [UInt8](repeating: 9, count: 3000))
    }
    store.close()  // checkpoints (TRUNCATE): everything is in the main file
    let full = fileBytes(path)
    #expect(full.count > 500_000)
    try writeFile(path, full.prefix(full.count / 2))

    let reopened = try makeStore(directory)
    defer { reopened.close() }
    #expect(reopened.warnings.count == 1)
    #expect(try asideFiles(directory).count == 1)
    #expect(reopened.stats().entries == 0)
  }

  @Test func headerOnlyTruncationIsMovedAside() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    try makeStore(directory).close()
    try writeFile(path, fileBytes(path).prefix(50))
    let store = try makeStore(directory)
    defer { store.close() }
    #expect(store.warnings.count == 1)
    #expect(try asideFiles(directory).count == 1)
  }

  @Test func zeroLengthFileIsAnEmptyStoreNotDamage() throws {
    // SQLite treats an empty file as an empty database: nothing is lost, nothing to move.
    let directory = try TemporaryDirectory()
    try writeFile(directory.file("store.sqlite"), [])
    let store = try makeStore(directory)
    defer { store.close() }
    #expect(store.warnings.isEmpty)
    #expect(try asideFiles(directory).isEmpty)
    store.remember(key: key("/z"), status: 200, headers: [], body: [1])
    store.flush()
    #expect(store.stats().entries == 1)
  }

  @Test func foreignSQLiteDatabaseIsMovedAsideNotAltered() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    do {
      let other = try SQLiteConnection(path: path, mode: .readWriteCreate)
      try other.execute("CREATE TABLE invoices (id INTEGER); INSERT INTO invoices VALUES (42)")
    }
    let store = try makeStore(directory)
    defer { store.close() }
    #expect(store.warnings.count == 1)
    let aside = try asideFiles(directory)
    #expect(aside.count == 1)
    let moved = try SQLiteConnection(path: directory.file(aside[0]), mode: .readOnly)
    #expect(try moved.scalarInt("SELECT id FROM invoices") == 42)
    #expect(try moved.scalarInt("SELECT count(*) FROM sqlite_schema WHERE name = 'cache_entries'") == 0)
  }

  @Test func unwritableOrMissingDirectoryIsAClearError() throws {
    let directory = try TemporaryDirectory()
    // Root ignores mode bits, so use a directory the kernel refuses writes to.
    let unwritable: String
    if geteuid() == 0 {
      unwritable = "/proc/self"
    } else {
      unwritable = directory.file("locked")
      try FileManager.default.createDirectory(atPath: unwritable, withIntermediateDirectories: false)
      chmod(unwritable, 0o555)
    }
    defer { chmod(unwritable, 0o755) }
    for path in [unwritable + "/store.sqlite", directory.file("missing/store.sqlite")] {
      #expect {
        try Store.open(Store.Configuration(path: path, maxBytes: 1000))
      } throws: { error in
        guard let error = error as? StoreError else { return false }
        return error.kind == .cannotOpen && error.message.contains("store directory")
      }
    }
    // A directory where the file should be is not moved aside either.
    try FileManager.default.createDirectory(atPath: directory.file("dir.sqlite"), withIntermediateDirectories: false)
    #expect {
      try makeStore(directory, name: "dir.sqlite")
    } throws: { error in
      (error as? StoreError)?.kind == .cannotOpen
    }
    #expect(try asideFiles(directory).isEmpty)
  }

  @Test func repeatedDamageNeverOverwritesAnEarlierAsideFile() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    for round in 0..<3 {
      try writeFile(path, [UInt8](repeating: UInt8(round + 1), count: 4096))
      try makeStore(directory).close()
    }
    let aside = try asideFiles(directory).filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
    #expect(aside.count == 3)
    #expect(Set(aside.map { fileBytes(directory.file($0)).first }) == [1, 2, 3])
  }
}
