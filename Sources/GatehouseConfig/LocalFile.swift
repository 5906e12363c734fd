#if canImport(Glibc)
  import Glibc
#endif

/// Reading small local files (the config, token files) and the process environment with the C
/// library alone, so the gateway needs no Foundation (and none of the ICU data Foundation
/// brings) to start. Messages name the path, never the content.
public enum LocalFile {
  /// Why a file could not be read, in words for `check` output and token `last_error`:
  /// `reason` alone ("no such file"), `description` with what failed and the path.
  public struct Failure: Error, Equatable, CustomStringConvertible {
    public let reason: String
    public let description: String

    init(reason: String, description: String) {
      self.reason = reason
      self.description = description
    }

    init(_ step: String, _ path: String, _ reason: String) {
      self.reason = reason
      description = "cannot \(step) \(path): \(reason)"
    }
  }

  /// The whole file at `path` (following symlinks), refused when larger than `maxBytes`.
  /// Reads until end of file rather than trusting the size `fstat` gives: files under /proc
  /// and some mounted secrets report 0.
  package static func read(path: String, maxBytes: Int) -> Result<[UInt8], Failure> {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return .failure(Failure("open", path, describe(errno))) }
    defer { close(fd) }
    var info = stat()
    if fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
      return .failure(Failure("read", path, describe(EISDIR)))
    }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    while bytes.count <= maxBytes {
      let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
      if count == 0 { return .success(bytes) }
      if count < 0 {
        if errno == EINTR { continue }
        return .failure(Failure("read", path, describe(errno)))
      }
      bytes.append(contentsOf: chunk[0..<count])
    }
    let reason = "larger than \(maxBytes) bytes"
    return .failure(Failure(reason: reason, description: "\(path) is \(reason)"))
  }

  /// A short reason for the errors opening or reading a file can give.
  public static func describe(_ code: Int32) -> String {
    switch code {
    case ENOENT: "no such file"
    case EACCES, EPERM: "permission denied"
    case EISDIR: "it is a directory"
    case ENOTDIR: "a path component is not a directory"
    case ELOOP: "too many symbolic links"
    default: String(cString: strerror(code))
    }
  }

  /// `path` made absolute against `workingDirectory`, with empty and `.` segments dropped.
  /// `..` is kept: resolving it without the file system would be wrong across symlinks
  /// (Kubernetes mounts config maps through them).
  public static func absolutePath(_ path: String, workingDirectory: String) -> String {
    let joined = path.hasPrefix("/") ? path : workingDirectory + "/" + path
    let segments = joined.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }
    return "/" + segments.joined(separator: "/")
  }

  /// The process's working directory, or "/" if it cannot be read (deleted, or too deep).
  public static func workingDirectory() -> String {
    guard let pointer = getcwd(nil, 0) else { return "/" }
    defer { free(pointer) }
    return String(cString: pointer)
  }

  /// The process environment as a dictionary (for `${VAR}` in the config). A name set twice
  /// keeps its first value, as `getenv` reads it.
  public static func processEnvironment() -> [String: String] {
    var result: [String: String] = [:]
    var entry = environ
    while let pointer = entry.pointee {
      let text = String(cString: pointer)
      if let equals = text.firstIndex(of: "=") {
        let name = String(text[..<equals])
        if result[name] == nil { result[name] = String(text[text.index(after: equals)...]) }
      }
      entry += 1
    }
    return result
  }
}
