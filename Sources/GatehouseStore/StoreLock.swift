import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// An advisory `flock` on `<store path>.lock`, held by the process that writes the store for
/// as long as its store is open, so a second gateway on the same file can tell.
///
/// Why a separate file and not the database itself: SQLite locks the database with POSIX
/// `fcntl` locks, and closing *any* descriptor of a file drops every POSIX lock the process
/// holds on it; a descriptor of our own on the database would put SQLite's locks at risk.
/// `flock` on another file never interacts with them, and the kernel drops it when the
/// process dies, so a crashed gateway never leaves a stale lock behind.
final class StoreLock: Sendable {
  let storePath: String
  /// `<store path>.lock`.
  let path: String
  /// Why the lock file could not be opened (then nothing can be checked), or nil.
  let unavailable: String?
  private let state: Mutex<(descriptor: Int32, held: Bool)>

  init(storePath: String) {
    self.storePath = storePath
    path = storePath + ".lock"
    // Read-write so the holder can write its pid; read-only still allows flock (a lock file
    // left by another user is readable but not writable). Owner-only when created here, like
    // the database; an existing lock file keeps its mode.
    var descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, OwnerOnlyFile.mode)
    if descriptor < 0 { descriptor = open(path, O_RDONLY | O_CLOEXEC) }
    unavailable = descriptor < 0 ? StoreFile.errnoText(errno) : nil
    state = Mutex((descriptor, false))
  }

  deinit { release() }

  /// Takes the lock if it is free; true when this process holds it (now or already).
  /// Never waits.
  func tryAcquire() -> Bool {
    state.withLock { state in
      if state.held { return true }
      guard state.descriptor >= 0, flock(state.descriptor, LOCK_EX | LOCK_NB) == 0 else { return false }
      state.held = true
      // Best effort: the pid only makes the other process's warning more useful.
      let text = Array("\(getpid())\n".utf8)
      if ftruncate(state.descriptor, 0) == 0 {
        _ = text.withUnsafeBytes { pwrite(state.descriptor, $0.baseAddress, $0.count, 0) }
      }
      return true
    }
  }

  /// "pid N" as the holder wrote it in the lock file, or nil when it cannot be told.
  func holder() -> String? {
    state.withLock { state -> String? in
      guard state.descriptor >= 0 else { return nil }
      var buffer = [UInt8](repeating: 0, count: 24)
      let count = buffer.withUnsafeMutableBytes { pread(state.descriptor, $0.baseAddress, $0.count, 0) }
      guard count > 0 else { return nil }
      let digits = buffer.prefix(count).prefix { $0 >= 0x30 && $0 <= 0x39 }
      return digits.isEmpty ? nil : "pid " + String(decoding: digits, as: UTF8.self)
    }
  }

  /// Lets go of the lock and closes the file; idempotent. The lock file itself stays: removing
  /// it would let a process that opened it just before lock a file nobody else can see.
  func release() {
    state.withLock { state in
      guard state.descriptor >= 0 else { return }
      // Closing the only descriptor of the open file drops the flock.
      close(state.descriptor)
      state = (-1, false)
    }
  }
}

/// Decides, from the clock alone, what to say while another process holds the store's lock.
///
/// Why a grace period rather than a warning at once or a refusal: a restart where the new
/// gateway starts before the old one has drained (up to `limits.drain_timeout_ms`, 10 s by
/// default) overlaps on the file for a while. The new gateway uses the store from the start
/// (SQLite keeps the file consistent with two writers; only the size accounting of each is
/// off) and takes the lock when the old one exits, so an overlap shorter than the grace
/// period is silent. Past it, two gateways really share the file, and the operator is told.
struct SharedFileWatch: Equatable {
  /// What the caller should log after an observation.
  enum Event: Equatable {
    case none
    /// The other process still holds the lock after the grace period (said once).
    case warnShared
    /// This process got the lock; `afterWarning` when the sharing had been reported.
    case tookOver(afterWarning: Bool)
  }

  let sinceMs: Int64
  let graceMs: Int64
  private(set) var warned = false

  init(sinceMs: Int64, graceMs: Int64) {
    self.sinceMs = sinceMs
    self.graceMs = graceMs
  }

  mutating func observe(acquired: Bool, nowMs: Int64) -> Event {
    if acquired { return .tookOver(afterWarning: warned) }
    guard !warned, nowMs - sinceMs >= graceMs else { return .none }
    warned = true
    return .warnShared
  }
}

extension SharedFileWatch {
  static func sharedMessage(_ lock: StoreLock) -> String {
    let holder = lock.holder().map { " (\($0))" } ?? ""
    return "store file \(lock.storePath) is also used by another process\(holder), which holds \(lock.path): "
      + "both write to it, so store.max_bytes is not held and /admin/cache counts only this process's writes; "
      + "give each gateway its own store.path. This gateway keeps using the file and takes the lock when the "
      + "other process exits"
  }

  static func tookOverMessage(storePath: String) -> String {
    "store file \(storePath): the other process let go of its lock; this gateway is now its only writer"
  }
}
