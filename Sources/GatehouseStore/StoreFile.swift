import CGatehouseSQLite

#if canImport(Glibc)
  import Glibc
#endif

/// Opening the store file, with damage control: a file that is damaged (SQLite says corrupt
/// or not a database, `quick_check` fails, or it is a foreign database) is renamed to
/// `<path>.corrupt-<UTC time>` (its `-wal` and `-shm` companions too) and a fresh store is
/// created in its place. Nothing is ever deleted. Conditions the caller must fix throw instead
/// and leave the file where it is: directory missing or not writable, path is a directory,
/// file not readable and writable by this user, a full or read-only file system, an I/O
/// error, file locked, schema from a newer build. Moving the file would only hide those
/// and lose the data it holds from the gateway's view.
enum StoreFile {
  /// A writer connection ready for use, plus warnings for the caller's log.
  struct Opened {
    var connection: SQLiteConnection
    var warnings: [String]
    /// The store's lock (`<path>.lock`).
    var lock: StoreLock
    /// False when another process holds the lock: the file is shared. True when this
    /// process holds it, and when the lock file cannot be opened (nothing can be checked).
    var lockHeld: Bool
  }

  /// What a failed open says about the file.
  enum Failure: Equatable {
    /// The file is damaged: move it aside.
    case damage
    /// Reading or writing failed below SQLite (an I/O error, a full disk, the WAL locking
    /// protocol): the file may be sound, a read-only probe decides.
    case unclear
    /// Something the operator must fix; the file is left in place.
    case condition
  }

  /// Only a verdict on the bytes is damage. I/O failures say nothing about the file: on a
  /// full disk the first open fails creating `-shm`, and a sound file must not be moved.
  static func classify(_ error: StoreError) -> Failure {
    if error.kind == .corrupt { return .damage }
    guard error.kind == .sqlite else { return .condition }
    switch error.resultCode & 0xFF {
    case SQLITE_CORRUPT, SQLITE_NOTADB: return .damage
    case SQLITE_IOERR, SQLITE_FULL, SQLITE_PROTOCOL: return .unclear
    default: return .condition
    }
  }

  /// `opener` is the writable open (a parameter so tests can make it fail); the read-only
  /// probe always opens the real file.
  static func openWriter(
    path: String, busyTimeoutMs: Int32, now: Int64,
    opener: (String, Int32) throws(StoreError) -> SQLiteConnection = { (path, timeout) throws(StoreError) in
      try SQLiteConnection(path: path, mode: .readWriteCreate, busyTimeoutMs: timeout)
    }
  ) throws(StoreError) -> Opened {
    guard !path.isEmpty else { throw StoreError(kind: .invalidArgument, message: "store path is empty") }
    let directory = parentDirectory(of: path)
    var info = stat()
    if stat(directory, &info) != 0 || (info.st_mode & S_IFMT) != S_IFDIR {
      throw StoreError(kind: .cannotOpen, message: "store directory \(directory) does not exist")
    }
    // SQLite needs to create -wal and -shm next to the file, so the directory must be writable.
    if access(directory, W_OK | X_OK) != 0 {
      throw StoreError(
        kind: .cannotOpen, message: "store directory \(directory) is not writable: \(errnoText(errno))")
    }
    let exists = lstat(path, &info) == 0
    if exists && (info.st_mode & S_IFMT) != S_IFREG {
      throw StoreError(kind: .cannotOpen, message: "store path \(path) exists and is not a regular file")
    }
    // A file this user cannot read or write (say, left owned by root by a `sudo` run) is a
    // permission problem, not damage: SQLite would fail on it, and moving it would hide data.
    if exists && access(path, R_OK | W_OK) != 0 {
      throw StoreError(
        kind: .cannotOpen,
        message: "store file \(path) is not readable and writable by this user (\(errnoText(errno))); "
          + "left in place: fix its owner or mode")
    }
    let lock = StoreLock(storePath: path)
    var warnings: [String] = []
    if let reason = lock.unavailable {
      warnings.append(
        "cannot open the store lock file \(lock.path) (\(reason)): a second gateway on this file goes unnoticed")
    }
    // Without the lock file nothing can be checked; damage control then works as it did
    // before there was a lock, since the common case is one gateway.
    let lockHeld = lock.tryAcquire() || lock.unavailable != nil

    func prepare() throws(StoreError) -> SQLiteConnection {
      try openAndPrepare(path: path, busyTimeoutMs: busyTimeoutMs, opener: opener)
    }
    let damage: StoreError
    do {
      return Opened(connection: try prepare(), warnings: warnings, lock: lock, lockHeld: lockHeld)
    } catch {
      switch classify(error) {
      case .condition: throw leftInPlace(error, path: path)
      case .damage: damage = error
      case .unclear:
        guard let found = probeDamage(path: path, busyTimeoutMs: busyTimeoutMs) else {
          throw leftInPlace(error, path: path)
        }
        damage = found
      }
    }
    // Another process has the file open and reads it as sound: moving it under its feet
    // would split the data between two files.
    guard lockHeld else {
      throw StoreError(
        kind: .cannotOpen,
        message: "store file \(path) looks damaged (\(damage.message)) but another process holds \(lock.path); "
          + "left in place")
    }
    let aside = try moveAside(path: path, now: now)
    let moved = "store file \(path) could not be used (\(damage.message)); moved it to \(aside)"
    do {
      warnings.append(moved + " and created a new store")
      return Opened(connection: try prepare(), warnings: warnings, lock: lock, lockHeld: lockHeld)
    } catch {
      // The caller logs only the error, so the error must say the file was moved.
      throw StoreError(
        kind: error.kind, resultCode: error.resultCode,
        message: moved + ", but a new store could not be created: \(error.message)", sql: error.sql,
        systemErrno: error.systemErrno)
    }
  }

  /// Opens, checks the file, sets WAL and the pragmas, and migrates.
  private static func openAndPrepare(
    path: String, busyTimeoutMs: Int32, opener: (String, Int32) throws(StoreError) -> SQLiteConnection
  ) throws(StoreError) -> SQLiteConnection {
    let db = try opener(path, busyTimeoutMs)
    try quickCheck(db)
    try StoreSchema.configureWriter(db)
    try StoreSchema.migrate(db)
    try StoreSchema.addReadIndexes(db)
    return db
  }

  /// quick_check reads every page (not the index consistency checks of integrity_check),
  /// so a truncated or overwritten file is caught here rather than on a later request.
  private static func quickCheck(_ db: SQLiteConnection) throws(StoreError) {
    let check = try db.strings("PRAGMA quick_check")
    guard check == ["ok"] else {
      throw StoreError(kind: .corrupt, message: "quick_check: \(check.prefix(3).joined(separator: "; "))")
    }
  }

  /// After an unclear failure: opens the file read-only (no `-wal` growth, no writes) and runs
  /// quick_check. Returns the damage found, or nil when the file reads as sound or could not
  /// be read for a reason that is not damage (then nothing proves it damaged).
  static func probeDamage(path: String, busyTimeoutMs: Int32) -> StoreError? {
    do throws(StoreError) {
      let db = try SQLiteConnection(path: path, mode: .readOnly, busyTimeoutMs: busyTimeoutMs)
      try quickCheck(db)
      return nil
    } catch {
      return classify(error) == .damage ? error : nil
    }
  }

  /// The error for a file left in place, naming the cause an operator acts on.
  static func leftInPlace(_ error: StoreError, path: String) -> StoreError {
    guard error.resultCode != 0 else { return error }  // our own checks already say it
    return StoreError(
      kind: error.kind, resultCode: error.resultCode,
      message: "store file \(path) left in place: \(cause(of: error)) (\(error.message))", sql: error.sql,
      systemErrno: error.systemErrno)
  }

  /// A few words on what the operator must look at, from the errno first (an I/O error on
  /// a full disk is `ENOSPC`), else from SQLite's code.
  static func cause(of error: StoreError) -> String {
    switch error.systemErrno {
    case ENOSPC, EDQUOT: return "the file system is full"
    case EROFS: return "the file system is read-only"
    case EACCES, EPERM: return "permission denied"
    default: break
    }
    switch error.resultCode & 0xFF {
    case SQLITE_FULL: return "the file system is full"
    case SQLITE_READONLY: return "the file cannot be written"
    case SQLITE_PERM, SQLITE_CANTOPEN: return "the file cannot be opened"
    case SQLITE_BUSY, SQLITE_LOCKED, SQLITE_PROTOCOL: return "the file is locked by another process"
    case SQLITE_IOERR:
      return error.systemErrno == 0 ? "an I/O error" : "an I/O error: \(errnoText(error.systemErrno))"
    case SQLITE_NOMEM: return "out of memory"
    default: return "it cannot be used"
    }
  }

  /// Renames the file and its WAL companions; returns the new name of the main file.
  private static func moveAside(path: String, now: Int64) throws(StoreError) -> String {
    var aside = "\(path).corrupt-\(compactUTC(millis: now))"
    var suffix = 1
    while access(aside, F_OK) == 0 {
      aside = "\(path).corrupt-\(compactUTC(millis: now))-\(suffix)"
      suffix += 1
    }
    if access(path, F_OK) == 0 && rename(path, aside) != 0 {
      throw StoreError(kind: .cannotOpen, message: "could not move damaged store \(path) aside: \(errnoText(errno))")
    }
    for companion in ["-wal", "-shm", "-journal"] where access(path + companion, F_OK) == 0 {
      _ = rename(path + companion, aside + companion)
    }
    return aside
  }

  static func parentDirectory(of path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    let parent = String(path[..<slash])
    return parent.isEmpty ? "/" : parent
  }

  /// `20250102T030405Z`: sortable, no characters that need quoting in a file name.
  static func compactUTC(millis: Int64) -> String {
    var seconds = time_t(millis / 1000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
    return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T"
      + "\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
  }

  static func errnoText(_ code: Int32) -> String { String(cString: strerror(code)) }
}

/// Milliseconds since the Unix epoch from the system clock.
@Sendable func systemMillis() -> Int64 {
  var now = timespec()
  clock_gettime(CLOCK_REALTIME, &now)
  return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}
