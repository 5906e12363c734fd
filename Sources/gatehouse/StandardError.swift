#if canImport(Glibc)
  import Glibc
#endif

/// Writes diagnostics to standard error without Foundation.
enum FileHandleStandardError {
  static func write(_ text: String) {
    var text = text
    text.withUTF8 { bytes in
      _ = Glibc.write(2, bytes.baseAddress, bytes.count)
    }
  }
}
