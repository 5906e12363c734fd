import GatehouseConfig

#if canImport(Glibc)
  import Glibc
#endif

/// Reading `file` tokens: the whole file is the value, minus one trailing newline (editors and `echo` add
/// one). Changes are noticed by comparing `Stamp`s, polled on the control loop: polling works on every file
/// system, including the symlink swaps Kubernetes uses for mounted secrets, which inotify on the path misses.
enum TokenFile {
  /// A token file is a credential, not a document; anything larger is a mistake (a wrong path).
  static let maxBytes = 64 * 1024

  /// What identifies one version of the file. ctime is included so that a `chmod` that makes an unreadable
  /// file readable is noticed, though it changes neither mtime nor size.
  enum Stamp: Equatable {
    case present(device: UInt64, inode: UInt64, size: Int64, modified: timespec, changed: timespec)
    case absent(errno: Int32)

    static func == (lhs: Stamp, rhs: Stamp) -> Bool {
      switch (lhs, rhs) {
      case (.present(let d1, let i1, let s1, let m1, let c1), .present(let d2, let i2, let s2, let m2, let c2)):
        return d1 == d2 && i1 == i2 && s1 == s2 && m1.tv_sec == m2.tv_sec && m1.tv_nsec == m2.tv_nsec
          && c1.tv_sec == c2.tv_sec && c1.tv_nsec == c2.tv_nsec
      case (.absent(let e1), .absent(let e2)):
        return e1 == e2
      case (.present, _), (.absent, _):
        return false
      }
    }
  }

  /// The file's current stamp (following symlinks).
  static func stamp(path: String) -> Stamp {
    var info = stat()
    guard stat(path, &info) == 0 else { return .absent(errno: errno) }
    return .present(
      device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
      modified: info.st_mtim, changed: info.st_ctim)
  }

  /// The token in the file, or why it cannot be read. Messages name the path, never the content.
  static func read(path: String) -> Result<SecretValue, TokenFetchError> {
    var bytes: [UInt8]
    switch LocalFile.read(path: path, maxBytes: maxBytes) {
    case .success(let contents): bytes = contents
    case .failure(let failure): return .failure(TokenFetchError(failure.description))
    }
    if bytes.last == 0x0A {
      bytes.removeLast()
      if bytes.last == 0x0D { bytes.removeLast() }
    }
    guard let text = String(validating: bytes, as: UTF8.self) else {
      return .failure(TokenFetchError("\(path) is not valid UTF-8"))
    }
    return .success(SecretValue(text))
  }
}
