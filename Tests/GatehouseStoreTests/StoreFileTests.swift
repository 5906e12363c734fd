import CGatehouseSQLite
import Foundation
import Testing

@testable import GatehouseStore

/// Which failures at open move the file aside (damage) and which leave it in place.
@Suite struct StoreFileFailureTests {
  private func asideFiles(_ directory: TemporaryDirectory) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains(".corrupt-") }
  }

  /// An error as `SQLiteConnection` builds it from a result code.
  private func sqliteError(_ code: Int32, errno: Int32 = 0) -> StoreError {
    StoreError(kind: SQLiteConnection.kind(for: code), resultCode: code, message: "test", systemErrno: errno)
  }

  /// A genuine SQLITE_FULL from SQLite: a write past `max_page_count`, as on a full disk.
  private func realFullError(in directory: TemporaryDirectory) throws -> StoreError {
    let db = try SQLiteConnection(path: directory.file("full.sqlite"), mode: .readWriteCreate)
    try db.execute("CREATE TABLE filler (x BLOB); PRAGMA max_page_count = 3")
    do {
      try db.execute("INSERT INTO filler VALUES (zeroblob(100000))")
    } catch {
      return error
    }
    throw StoreError(kind: .sqlite, message: "expected SQLITE_FULL")
  }

  /// A sound store holding one answer and one token.
  private func seedSoundStore(_ directory: TemporaryDirectory) throws {
    let store = try makeStore(directory)
    store.remember(key: key("/kept"), status: 200, headers: [], body: [1, 2, 3])
    try store.saveToken(
      name: "api", value: "tok-A", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    store.close()
  }

  @Test func classifyTellsDamageFromConditions() throws {
    let directory = try TemporaryDirectory()
    let full = try realFullError(in: directory)
    #expect(full.resultCode == SQLITE_FULL)
    let table: [(StoreError, StoreFile.Failure)] = [
      // The bytes themselves are bad.
      (StoreError(kind: .corrupt, message: "quick_check: page 3 is never used"), .damage),
      (StoreError(kind: .corrupt, message: "not a Gatehouse store (foreign SQLite database)"), .damage),
      (sqliteError(SQLITE_CORRUPT), .damage),
      (sqliteError(SQLITE_NOTADB), .damage),
      (sqliteError(SQLITE_CORRUPT | (1 << 8)), .damage),  // CORRUPT_VTAB
      // Below SQLite: the file may be sound, a read-only probe decides.
      (sqliteError(SQLITE_IOERR), .unclear),
      (sqliteError(SQLITE_IOERR | (1 << 8)), .unclear),  // IOERR_READ
      (sqliteError(SQLITE_IOERR | (3 << 8)), .unclear),  // IOERR_WRITE
      (sqliteError(SQLITE_IOERR | (19 << 8), errno: ENOSPC), .unclear),  // IOERR_SHMSIZE
      (sqliteError(SQLITE_FULL), .unclear),
      (full, .unclear),
      (sqliteError(SQLITE_PROTOCOL), .unclear),
      // For the operator to fix.
      (sqliteError(SQLITE_BUSY), .condition),
      (sqliteError(SQLITE_BUSY | (1 << 8)), .condition),  // BUSY_RECOVERY
      (sqliteError(SQLITE_LOCKED), .condition),
      (sqliteError(SQLITE_CANTOPEN), .condition),
      (sqliteError(SQLITE_PERM), .condition),
      (sqliteError(SQLITE_READONLY), .condition),
      (sqliteError(SQLITE_READONLY | (4 << 8)), .condition),  // READONLY_DBMOVED
      (sqliteError(SQLITE_RANGE), .condition),
      (sqliteError(SQLITE_FORMAT), .condition),
      (sqliteError(SQLITE_NOMEM), .condition),
      (sqliteError(SQLITE_ERROR), .condition),
      (StoreError(kind: .unsupportedSchema, message: "store schema version 9 is newer"), .condition),
      (StoreError(kind: .cannotOpen, message: "store file is not readable and writable"), .condition),
    ]
    for (error, expected) in table {
      #expect(StoreFile.classify(error) == expected, "\(error)")
    }
  }

  @Test func theCauseNamesWhatTheOperatorFixes() throws {
    let directory = try TemporaryDirectory()
    let table: [(StoreError, String)] = [
      (try realFullError(in: directory), "the file system is full"),
      (sqliteError(SQLITE_IOERR | (19 << 8), errno: ENOSPC), "the file system is full"),
      (sqliteError(SQLITE_IOERR | (3 << 8), errno: EDQUOT), "the file system is full"),
      (sqliteError(SQLITE_CANTOPEN, errno: EACCES), "permission denied"),
      (sqliteError(SQLITE_READONLY, errno: EROFS), "the file system is read-only"),
      (sqliteError(SQLITE_BUSY), "the file is locked by another process"),
      (sqliteError(SQLITE_IOERR | (1 << 8), errno: EIO), "an I/O error: Input/output error"),
      (sqliteError(SQLITE_IOERR), "an I/O error"),
    ]
    for (error, cause) in table {
      #expect(StoreFile.cause(of: error) == cause, "\(error)")
    }
  }

  @Test func anIOErrorOnASoundStoreLeavesItInPlace() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    try seedSoundStore(directory)
    let before = fileBytes(path)
    // A directory where SQLite looks for a hot journal: reading it fails (EISDIR), a real
    // SQLITE_IOERR on a file that is perfectly sound, like the failure on a full disk.
    try FileManager.default.createDirectory(atPath: path + "-journal", withIntermediateDirectories: false)
    #expect {
      try makeStore(directory)
    } throws: { error in
      guard let error = error as? StoreError else { return false }
      return error.resultCode & 0xFF == SQLITE_IOERR && error.message.contains("store file \(path) left in place")
    }
    #expect(try asideFiles(directory).isEmpty)
    let same = fileBytes(path) == before  // a Bool: a failure does not print the bytes
    #expect(same, "the file changed")

    try FileManager.default.removeItem(atPath: path + "-journal")
    let store = try makeStore(directory)
    defer { store.close() }
    #expect(store.warnings.isEmpty)
    #expect(try store.makeReader().lookup(key("/kept"))?.body == [1, 2, 3])
    #expect(try store.loadTokens().tokens.map(\.value) == ["tok-A"])
  }

  @Test func aFullDiskAtOpenLeavesTheStoreInPlaceAndSaysSo() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    try seedSoundStore(directory)
    let before = fileBytes(path)
    #expect {
      _ = try StoreFile.openWriter(path: path, busyTimeoutMs: 1000, now: 0) { path, timeout throws(StoreError) in
        let db = try SQLiteConnection(path: path, mode: .readWriteCreate, busyTimeoutMs: timeout)
        // The file may not grow: the first write fails with SQLITE_FULL, as on a full disk.
        let pages = try db.scalarInt("PRAGMA page_count") ?? 1
        try db.execute("PRAGMA max_page_count = \(pages)")
        try db.execute("CREATE TABLE filler (x BLOB); INSERT INTO filler VALUES (zeroblob(100000))")
        return db
      }
    } throws: { error in
      guard let error = error as? StoreError else { return false }
      return error.resultCode == SQLITE_FULL && error.message.contains("left in place: the file system is full")
    }
    #expect(try asideFiles(directory).isEmpty)
    let same = fileBytes(path) == before  // a Bool: a failure does not print the bytes
    #expect(same, "the file changed")
  }

  @Test func damageBehindAnIOErrorIsFoundByTheProbeAndMovedAside() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let garbage = [UInt8](repeating: 0x5A, count: 8192)
    try writeFile(path, garbage)
    var opens = 0
    let opened = try StoreFile.openWriter(path: path, busyTimeoutMs: 1000, now: 0) { path, timeout throws(StoreError) in
      opens += 1
      if opens == 1 { throw StoreError(kind: .sqlite, resultCode: SQLITE_IOERR | (1 << 8), message: "disk I/O error") }
      return try SQLiteConnection(path: path, mode: .readWriteCreate, busyTimeoutMs: timeout)
    }
    #expect(opened.warnings.count == 1 && opened.warnings[0].contains("moved it to"))
    let aside = try asideFiles(directory)
    #expect(aside.count == 1)
    let same = fileBytes(directory.file(aside[0])) == garbage  // a Bool: a failure does not print the bytes
    #expect(same, "not kept byte for byte")
  }

  @Test func aMoveIsReportedEvenWhenTheNewStoreCannotBeCreated() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let garbage = [UInt8](repeating: 0xA5, count: 8192)
    try writeFile(path, garbage)
    let full = try realFullError(in: directory)
    var opens = 0
    #expect {
      _ = try StoreFile.openWriter(path: path, busyTimeoutMs: 1000, now: 0) { path, timeout throws(StoreError) in
        opens += 1
        if opens == 2 { throw full }  // the disk filled between the two opens
        return try SQLiteConnection(path: path, mode: .readWriteCreate, busyTimeoutMs: timeout)
      }
    } throws: { error in
      guard let error = error as? StoreError else { return false }
      return error.resultCode == SQLITE_FULL && error.message.contains("moved it to \(path).corrupt-")
        && error.message.contains("a new store could not be created")
    }
    let aside = try asideFiles(directory)
    #expect(aside.count == 1)
    let same = fileBytes(directory.file(aside[0])) == garbage  // a Bool: a failure does not print the bytes
    #expect(same, "not kept byte for byte")
  }

  @Test func theProbeJudgesTheBytesNotTheFailuresAroundThem() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    try seedSoundStore(directory)
    #expect(StoreFile.probeDamage(path: path, busyTimeoutMs: 1000) == nil)
    try FileManager.default.createDirectory(atPath: path + "-journal", withIntermediateDirectories: false)
    #expect(StoreFile.probeDamage(path: path, busyTimeoutMs: 1000) == nil)  // unreadable is not damaged
    try FileManager.default.removeItem(atPath: path + "-journal")
    try writeFile(path, fileBytes(path).prefix(50))
    #expect(StoreFile.probeDamage(path: path, busyTimeoutMs: 1000)?.kind == .corrupt)
  }

  /// F10: a sound file the gateway's user cannot write (left owned by root by a `sudo` run).
  @Test(
    .enabled(
      if: geteuid() != 0 || FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
      "needs a user the file is denied to: as root that takes /usr/bin/setpriv"))
  func aStoreFileThisUserCannotWriteIsLeftInPlace() throws {
    let directory = try TemporaryDirectory()
    let storeDirectory = directory.file("service")
    try FileManager.default.createDirectory(atPath: storeDirectory, withIntermediateDirectories: false)
    let path = storeDirectory + "/store.sqlite"
    do {
      let store = try Store.open(Store.Configuration(path: path, maxBytes: 1 << 20))
      store.remember(key: key("/kept"), status: 200, headers: [], body: [7])
      store.close()
    }
    let before = fileBytes(path)
    #expect(!before.isEmpty)
    let failure: String
    if geteuid() == 0 {
      // Root reads and writes any file whatever its mode, so the service user is `nobody`
      // (through setpriv, in the crash writer's `open` mode): it owns the directory, and the
      // file stays root's with mode 0644.
      #expect(chown(storeDirectory, 65534, 65534) == 0)
      let writer = try #require(CrashTests.writerPath(), "GatehouseStoreCrashWriter not built next to the tests")
      failure = try runCapturingOutput(
        "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", writer, "open", path])
    } else {
      chmod(path, 0o444)
      do {
        _ = try Store.open(Store.Configuration(path: path, maxBytes: 1 << 20))
        failure = "opened"
      } catch {
        failure = "error \(error)"
      }
    }
    #expect(failure.hasPrefix("error ") && failure.contains("is not readable and writable by this user"), "\(failure)")
    #expect(failure.contains("left in place"))
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: storeDirectory).filter { $0.contains(".corrupt-") }
        .isEmpty)
    let same = fileBytes(path) == before  // a Bool: a failure does not print the bytes
    #expect(same, "the file changed")
  }

  /// Runs a short-lived process (30 s watchdog) and returns its standard output.
  private func runCapturingOutput(_ executable: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    try process.run()
    let deadline = ContinuousClock.now + .seconds(30)
    while process.isRunning && ContinuousClock.now < deadline { usleep(5000) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
    return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  }
}
