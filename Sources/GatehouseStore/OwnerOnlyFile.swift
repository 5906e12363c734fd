#if canImport(Glibc)
  import Glibc
#endif

/// The mode the store's files get when the gateway creates them: owner read and write only.
///
/// Why: the store holds backend answers and token values (in clear without
/// `store.secret_key`), which other local users must not read. SQLite would create a missing
/// database 0644 (less the umask), and it gives `-wal` and `-shm` the mode of the database
/// file, so creating the database owner-only before SQLite opens it covers all three. A file
/// that already exists keeps the mode its operator gave it (a shared group, say): only new
/// files are made owner-only.
enum OwnerOnlyFile {
  static let mode: mode_t = 0o600

  /// Creates `path` empty with `mode` when nothing is there (SQLite reads an empty file as a
  /// new database). Never follows a symbolic link and never touches an existing file. Other
  /// failures are left to the open that follows, which reports them with its own context.
  static func createIfAbsent(_ path: String) {
    // ":memory:" and "" are SQLite's private databases, not files.
    guard !path.isEmpty, path != ":memory:" else { return }
    let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
    if descriptor >= 0 { close(descriptor) }
  }
}
