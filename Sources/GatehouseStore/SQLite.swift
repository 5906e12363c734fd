import CGatehouseSQLite

// A small SQLite layer in the spirit of GRDB's Core: one final class per C handle, init
// throws and deinit frees, every result code goes through `SQLiteConnection.check`.
// Neither class is Sendable on purpose: a connection (and its statements) belongs to one
// thread at a time; sharing one goes through a Mutex owned by the caller.

/// How a connection is opened.
enum SQLiteOpenMode {
  /// Read and write, creating the file when absent (the writer).
  case readWriteCreate
  /// Read-only (readers and the admin connection).
  case readOnly
}

/// One `sqlite3*` handle and its prepared statement cache.
final class SQLiteConnection {
  let handle: OpaquePointer
  let path: String
  private var statementCache: [String: SQLiteStatement] = [:]

  init(path: String, mode: SQLiteOpenMode, busyTimeoutMs: Int32 = 5000) throws(StoreError) {
    var flags: Int32 = SQLITE_OPEN_NOMUTEX
    switch mode {
    case .readWriteCreate:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
      // Made here, not by SQLite: its default mode lets every local user read the file.
      OwnerOnlyFile.createIfAbsent(path)
    case .readOnly: flags |= SQLITE_OPEN_READONLY
    }
    var db: OpaquePointer?
    let code = sqlite3_open_v2(path, &db, flags, nil)
    guard let db else {
      throw StoreError(kind: .cannotOpen, resultCode: code, message: "sqlite3_open_v2 returned no handle for \(path)")
    }
    guard code == SQLITE_OK else {
      // The handle exists even on failure and must be closed; take the message first.
      let message = String(cString: sqlite3_errmsg(db))
      let extended = sqlite3_extended_errcode(db)
      let systemErrno = Self.systemErrno(db, code: extended)
      sqlite3_close_v2(db)
      throw StoreError(
        kind: Self.kind(for: extended), resultCode: extended, message: "\(message) (\(path))", systemErrno: systemErrno)
    }
    self.handle = db
    self.path = path
    sqlite3_extended_result_codes(db, 1)
    sqlite3_busy_timeout(db, busyTimeoutMs)
  }

  deinit {
    // Statements must be finalized before the handle closes; close_v2 would otherwise keep
    // a zombie handle alive until the last statement goes away.
    statementCache.removeAll()
    sqlite3_close_v2(handle)
  }

  /// Maps a result code to the error kind callers act on (damage vs environment vs other).
  static func kind(for code: Int32) -> StoreError.Kind {
    switch code & 0xFF {
    case SQLITE_CORRUPT, SQLITE_NOTADB: return .corrupt
    case SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_READONLY: return .cannotOpen
    default: return .sqlite
    }
  }

  /// The errno of the failed system call behind an I/O-class code. SQLite keeps the last
  /// errno of any failed call, including harmless probes (a missing journal), so it is only
  /// taken for the codes where the failure was a system call.
  static func systemErrno(_ db: OpaquePointer, code: Int32) -> Int32 {
    switch code & 0xFF {
    case SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_PERM: return sqlite3_system_errno(db)
    default: return 0
    }
  }

  /// The single place where a result code becomes an error: anything but OK, ROW and DONE
  /// throws a `StoreError` with SQLite's message and the SQL.
  @discardableResult
  func check(_ code: Int32, sql: String?) throws(StoreError) -> Int32 {
    switch code {
    case SQLITE_OK, SQLITE_ROW, SQLITE_DONE: return code
    default:
      let message = String(cString: sqlite3_errmsg(handle))
      throw StoreError(
        kind: Self.kind(for: code), resultCode: code, message: message, sql: sql,
        systemErrno: Self.systemErrno(handle, code: code))
    }
  }

  /// Runs one or more statements without results (pragmas, DDL).
  func execute(_ sql: String) throws(StoreError) {
    try check(sqlite3_exec(handle, sql, nil, nil, nil), sql: sql)
  }

  /// A prepared statement kept for the life of the connection; reset before it is returned.
  func cachedStatement(_ sql: String) throws(StoreError) -> SQLiteStatement {
    if let statement = statementCache[sql] {
      statement.reset()
      return statement
    }
    let statement = try SQLiteStatement(connection: self, sql: sql)
    statementCache[sql] = statement
    return statement
  }

  /// A statement not kept in the cache (one-off queries).
  func makeStatement(_ sql: String) throws(StoreError) -> SQLiteStatement {
    try SQLiteStatement(connection: self, sql: sql)
  }

  /// The first column of the first row as an integer (pragmas, counts).
  func scalarInt(_ sql: String) throws(StoreError) -> Int64? {
    let statement = try makeStatement(sql)
    guard try statement.step() else { return nil }
    return statement.isNull(0) ? nil : statement.int64(0)
  }

  /// The first column of every row as text (`PRAGMA integrity_check`).
  func strings(_ sql: String) throws(StoreError) -> [String] {
    let statement = try makeStatement(sql)
    var rows: [String] = []
    while try statement.step() { rows.append(statement.string(0)) }
    return rows
  }

  /// Rows changed by the last INSERT, UPDATE or DELETE.
  var changes: Int { Int(sqlite3_changes(handle)) }

  /// Rows changed by every INSERT, UPDATE or DELETE since the connection opened.
  var totalChanges: Int64 { sqlite3_total_changes64(handle) }

  /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back when it throws.
  /// IMMEDIATE takes the write lock up front so a batch never fails half-way on a lock
  /// upgrade.
  func inTransaction<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
    try execute("BEGIN IMMEDIATE")
    do {
      let result = try body()
      try execute("COMMIT")
      return result
    } catch {
      // A failed COMMIT may leave the transaction open; a rollback error adds nothing.
      if sqlite3_get_autocommit(handle) == 0 { sqlite3_exec(handle, "ROLLBACK", nil, nil, nil) }
      throw error
    }
  }

  /// Result of a checkpoint: WAL frames in the log and frames copied into the database.
  struct CheckpointResult {
    var logFrames: Int32
    var checkpointedFrames: Int32
    /// True when readers kept the checkpoint from finishing (SQLITE_BUSY); not an error.
    var busy: Bool
  }

  /// Copies WAL frames back into the database file. PASSIVE never waits; TRUNCATE waits
  /// (up to the busy timeout) for readers and then truncates the WAL file to zero bytes.
  func checkpoint(truncate: Bool) throws(StoreError) -> CheckpointResult {
    var logFrames: Int32 = 0
    var checkpointed: Int32 = 0
    let mode = truncate ? SQLITE_CHECKPOINT_TRUNCATE : SQLITE_CHECKPOINT_PASSIVE
    let code = sqlite3_wal_checkpoint_v2(handle, nil, mode, &logFrames, &checkpointed)
    if code == SQLITE_BUSY || code == SQLITE_LOCKED {
      return CheckpointResult(logFrames: logFrames, checkpointedFrames: checkpointed, busy: true)
    }
    try check(code, sql: truncate ? "wal_checkpoint(TRUNCATE)" : "wal_checkpoint(PASSIVE)")
    return CheckpointResult(logFrames: logFrames, checkpointedFrames: checkpointed, busy: false)
  }
}

/// One `sqlite3_stmt*`. Parameter and column indexes are as SQLite counts them: bind from 1,
/// columns from 0.
final class SQLiteStatement {
  let handle: OpaquePointer
  let sql: String
  // Unowned: the connection owns its cached statements and outlives them; the handle is
  // only used to read error messages.
  private unowned let connection: SQLiteConnection

  init(connection: SQLiteConnection, sql: String) throws(StoreError) {
    var statement: OpaquePointer?
    try connection.check(sqlite3_prepare_v3(connection.handle, sql, -1, 0, &statement, nil), sql: sql)
    guard let statement else {
      throw StoreError(kind: .invalidArgument, message: "empty statement", sql: sql)
    }
    self.handle = statement
    self.sql = sql
    self.connection = connection
  }

  deinit { sqlite3_finalize(handle) }

  /// Resets the statement (ending its read transaction) and clears its bindings.
  func reset() {
    sqlite3_reset(handle)
    sqlite3_clear_bindings(handle)
  }

  /// Steps once: true when a row is available, false when done.
  func step() throws(StoreError) -> Bool {
    try connection.check(sqlite3_step(handle), sql: sql) == SQLITE_ROW
  }

  /// Steps until done (statements without results).
  func run() throws(StoreError) {
    while try step() {}
  }

  // MARK: Binding

  func bind(_ value: Int64, at index: Int32) throws(StoreError) {
    try connection.check(sqlite3_bind_int64(handle, index, value), sql: sql)
  }

  func bind(_ value: Int, at index: Int32) throws(StoreError) {
    try bind(Int64(value), at: index)
  }

  func bind(_ value: Double, at index: Int32) throws(StoreError) {
    try connection.check(sqlite3_bind_double(handle, index, value), sql: sql)
  }

  func bind(_ value: String, at index: Int32) throws(StoreError) {
    try bind(textBytes: Array(value.utf8), at: index)
  }

  /// Binds bytes as TEXT without validating them as UTF-8 (used for the prefix upper
  /// bound, which is compared byte-wise).
  func bind(textBytes: [UInt8], at index: Int32) throws(StoreError) {
    let code = textBytes.withUnsafeBufferPointer { buffer -> Int32 in
      // An empty buffer may have a nil base address, which SQLite would bind as NULL.
      guard let base = buffer.baseAddress, buffer.count > 0 else {
        return sqlite3_bind_text(handle, index, "", 0, nil)
      }
      return base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
        sqlite3_bind_text(handle, index, $0, Int32(buffer.count), gh_sqlite_transient())
      }
    }
    try connection.check(code, sql: sql)
  }

  func bind(blob: [UInt8], at index: Int32) throws(StoreError) {
    let code = blob.withUnsafeBytes { buffer -> Int32 in
      guard let base = buffer.baseAddress, buffer.count > 0 else {
        return sqlite3_bind_zeroblob(handle, index, 0)
      }
      return sqlite3_bind_blob64(handle, index, base, UInt64(buffer.count), gh_sqlite_transient())
    }
    try connection.check(code, sql: sql)
  }

  func bindNull(at index: Int32) throws(StoreError) {
    try connection.check(sqlite3_bind_null(handle, index), sql: sql)
  }

  func bind(_ value: Int64?, at index: Int32) throws(StoreError) {
    if let value { try bind(value, at: index) } else { try bindNull(at: index) }
  }

  func bind(_ value: String?, at index: Int32) throws(StoreError) {
    if let value { try bind(value, at: index) } else { try bindNull(at: index) }
  }

  func bind(blob: [UInt8]?, at index: Int32) throws(StoreError) {
    if let blob { try bind(blob: blob, at: index) } else { try bindNull(at: index) }
  }

  // MARK: Columns

  func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

  func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

  func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }

  func string(_ column: Int32) -> String {
    guard let text = sqlite3_column_text(handle, column) else { return "" }
    let count = Int(sqlite3_column_bytes(handle, column))
    return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
  }

  func optionalString(_ column: Int32) -> String? { isNull(column) ? nil : string(column) }

  func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }

  func blob(_ column: Int32) -> [UInt8] {
    // column_blob before column_bytes, as SQLite documents, so no type conversion sneaks in.
    guard let bytes = sqlite3_column_blob(handle, column) else { return [] }
    let count = Int(sqlite3_column_bytes(handle, column))
    return Array(UnsafeRawBufferPointer(start: bytes, count: count))
  }

  func optionalBlob(_ column: Int32) -> [UInt8]? { isNull(column) ? nil : blob(column) }
}
