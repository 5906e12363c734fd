import CGatehouseSQLite

#if canImport(Glibc)
  import Glibc
#endif

/// Opening the store file, with damage control: a file that is corrupt, truncated, not
/// SQLite, unreadable or a foreign database is renamed to `<path>.corrupt-<UTC time>` (its
/// `-wal` and `-shm` companions too) and a fresh store is created in its place. Nothing is
/// ever deleted. Conditions the caller must fix (directory missing or not writable, path is
/// a directory, file locked by another process, schema from a newer build) throw instead.
enum StoreFile {
  /// A writer connection ready for use, plus warnings for the caller's log.
  struct Opened {
    var connection: SQLiteConnection
    var warnings: [String]
  }

  static func openWriter(path: String, busyTimeoutMs: Int32, now: Int64) throws(StoreError) -> Opened {
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

    do throws(StoreError) {
      if exists && access(path, R_OK | W_OK) != 0 {
        throw StoreError(kind: .corrupt, message: "store file is not readable and writable: \(errnoText(errno))")
      }
      return Opened(connection: try openAndPrepare(path: path, busyTimeoutMs: busyTimeoutMs), warnings: [])
    } catch {
      guard isDamage(error) else { throw error }
      let aside = try moveAside(path: path, now: now)
      let warning =
        "store file \(path) could not be used (\(error.message)); moved it to \(aside) and created a new store"
      return Opened(connection: try openAndPrepare(path: path, busyTimeoutMs: busyTimeoutMs), warnings: [warning])
    }
  }

  /// Opens, checks the file, sets WAL and the pragmas, and migrates.
  private static func openAndPrepare(path: String, busyTimeoutMs: Int32) throws(StoreError) -> SQLiteConnection {
    let db = try SQLiteConnection(path: path, mode: .readWriteCreate, busyTimeoutMs: busyTimeoutMs)
    // quick_check reads every page (not the index consistency checks of integrity_check),
    // so a truncated or overwritten file is caught here rather than on a later request.
    let check = try db.strings("PRAGMA quick_check")
    guard check == ["ok"] else {
      throw StoreError(kind: .corrupt, message: "quick_check: \(check.prefix(3).joined(separator: "; "))")
    }
    try StoreSchema.configureWriter(db)
    try StoreSchema.migrate(db)
    return db
  }

  /// Damage means the file itself is bad; lock contention, a newer schema or an unusable
  /// directory are not damage and moving the file would only hide the problem.
  private static func isDamage(_ error: StoreError) -> Bool {
    if error.kind == .corrupt { return true }
    if error.kind == .sqlite {
      switch error.resultCode & 0xFF {
      case SQLITE_IOERR, SQLITE_FORMAT, SQLITE_RANGE, SQLITE_PROTOCOL: return true
      default: return false
      }
    }
    return false
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
