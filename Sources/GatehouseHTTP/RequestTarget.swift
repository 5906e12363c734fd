/// Reads the request target of a request line (RFC 9112 §3.2) and decides whether it is one
/// the gateway serves. Whatever passes is an origin-form `/path[?query]`: routing never sees
/// anything else.
///
/// - origin-form `/path?query` is read as it is;
/// - absolute-form `http(s)://authority[/path][?query]` is read as its path and query (`/`
///   when the path is empty), as §3.2.2 asks of a server; the authority must be a plain host
///   and port (no user info, which RFC 9110 §4.2.4 says to treat as an error);
/// - asterisk-form `*` (`OPTIONS *`) and authority-form (`CONNECT host:port`) are refused:
///   the gateway is not a forward proxy, and a server-wide OPTIONS has no route to go to.
///
/// The path is held to RFC 3986 (`pchar` and `/`, every `%` followed by two hex digits) and
/// may not contain a `.` or `..` segment, however it is spelled; the query is only held to
/// visible ASCII without `#`, like nginx and HAProxy do, because the gateway forwards it
/// unread. Each byte of the path costs one mask test; dot segments are looked for only where
/// a segment starts with `.` or `%`.
enum RequestTarget {
  static let slash: UInt8 = 0x2F
  static let dot: UInt8 = 0x2E
  static let percent: UInt8 = 0x25
  static let asterisk: UInt8 = 0x2A

  /// Reads the target that starts at `i` and leaves `i` on the space after it. Returns where
  /// the origin-form path and query are in `p`, or nil for an absolute-form target with an
  /// empty path (which means `/`).
  static func read(
    _ p: UnsafeBufferPointer<UInt8>, _ i: inout Int, method: HTTPMethod, refusingConnectAndTrace: Bool = true
  ) throws(HTTPParseError) -> Range<Int>? {
    // CONNECT asks for a tunnel and TRACE echoes the request back, with whatever credential
    // the gateway injected for the backend: neither is ever forwarded (nginx refuses both).
    if refusingConnectAndTrace {
      switch method {
      case .connect, .trace: throw .methodNotSupported
      case .get, .head, .post, .put, .delete, .options, .patch, .other: break
      }
    }
    if p[i] != slash {
      if p[i] == asterisk && p[i + 1] == ASCII.space { throw method == .options ? .asteriskForm : .invalidTarget }
      try skipSchemeAndAuthority(p, &i)
      if p[i] == ASCII.space { return nil }
    }
    let start = i
    try readPath(p, &i)
    if p[i] == ASCII.question {
      i += 1
      while ASCII.isTargetByte(p[i]) { i += 1 }
    }
    guard p[i] == ASCII.space else { throw .invalidTarget }
    return start..<i
  }

  /// `http://` or `https://` (any case), then a non-empty authority of host characters; stops
  /// on the `/` that starts the path or the space that ends the target. `http://host?q` (an
  /// empty path with a query) has no slice in the head's bytes to stand for `/?q`, so it is
  /// refused rather than rebuilt. Every comparison stops at the head's final LF, which
  /// matches nothing here.
  static func skipSchemeAndAuthority(_ p: UnsafeBufferPointer<UInt8>, _ i: inout Int) throws(HTTPParseError) {
    var j = i
    guard hasLowercasePrefix(p, &j, "http") else { throw .invalidTarget }
    if ASCII.lower(p[j]) == 0x73 { j += 1 }  // "s"
    guard hasLowercasePrefix(p, &j, "://") else { throw .invalidTarget }
    let authorityStart = j
    while ASCII.isHostChar(p[j]) { j += 1 }
    guard j > authorityStart, p[j] == slash || p[j] == ASCII.space else { throw .invalidTarget }
    i = j
  }

  /// The path from its leading `/` up to the `?` or the byte that ends it.
  static func readPath(_ p: UnsafeBufferPointer<UInt8>, _ i: inout Int) throws(HTTPParseError) {
    while true {
      let byte = p[i]
      if ASCII.isPathChar(byte) {
        i += 1
      } else if byte == slash {
        let next = p[i + 1]
        if (next == dot || next == percent) && isDotSegment(p, i + 1) { throw .dotSegment }
        i += 1
      } else if byte == percent {
        guard let high = ASCII.hexValue(p[i + 1]), let low = ASCII.hexValue(p[i + 2]) else { throw .invalidTarget }
        if isRefusedEscape(p, i, value: UInt8(truncatingIfNeeded: high << 4 | low)) { throw .invalidTarget }
        // An encoded `/` or `\` starts a segment too, for servers that decode first.
        if (isEscape(p, i, 0x32, 0x66) || isEscape(p, i, 0x35, 0x63)) && isDotSegment(p, i + 3) {
          throw .dotSegment
        }
        i += 3
      } else {
        return
      }
    }
  }

  /// Whether the escape at `i`, which decodes to `value`, is one no path worth serving
  /// holds: NUL (C code ends the path there, so `..%00x` is `..` to it), or the start of
  /// overlong UTF-8, which no valid UTF-8 holds and lenient decoders read as the ASCII byte
  /// it spells (`%C0%AE` is `.`, `%C0%AF` is `/`): a lead byte C0 or C1, E0 before a
  /// continuation byte below A0, F0 before one below 90. Costs nothing but at a `%`.
  static func isRefusedEscape(_ p: UnsafeBufferPointer<UInt8>, _ i: Int, value: UInt8) -> Bool {
    switch value {
    case 0x00, 0xC0, 0xC1:
      return true
    case 0xE0, 0xF0:
      guard p[i + 3] == percent, let high = ASCII.hexValue(p[i + 4]), let low = ASCII.hexValue(p[i + 5]) else {
        return false
      }
      let next = high << 4 | low
      return value == 0xE0 ? (0x80..<0xA0).contains(next) : (0x80..<0x90).contains(next)
    default:
      return false
    }
  }

  /// Whether the segment starting at `start` (after a `/`, `%2F` or `%5C`) is `.` or `..`,
  /// each dot written as `.` or `%2E` (either case), ended by `/`, `?`, the end of the
  /// target, `;` (servlet containers drop `;parameters` before resolving, so `..;x` is `..`
  /// to them), an encoded `/` or `\` (`%2F`, `%5C`: servers that decode before resolving
  /// read `..%2F` as `../`), an encoded `;` (`%3B`, dropped with what follows by servlet
  /// containers that decode first), an encoded NUL (`%00`, where C code ends the path), an
  /// encoded `?` or `#` (`%3F`, `%23`: a backend that decodes before it splits off the query
  /// or fragment reads `..%3F` as `..`), or encoded white space (`%20`, `%09`, `%0A`, `%0D`,
  /// which some servers trim). A backend or a framework resolving such a segment would reach
  /// a path that no route allowed, with the credentials of the route that matched.
  static func isDotSegment(_ p: UnsafeBufferPointer<UInt8>, _ start: Int) -> Bool {
    var j = start
    var dots = 0
    while dots < 3 {
      if p[j] == dot {
        j += 1
      } else if isEscape(p, j, 0x32, 0x65) {  // %2E
        j += 3
      } else {
        break
      }
      dots += 1
    }
    guard dots == 1 || dots == 2 else { return false }
    switch p[j] {
    case slash, ASCII.question, ASCII.space, ASCII.semicolon: return true
    default:
      // %2F, %5C, %3B, %00, %3F, %23, %20, %09, %0A, %0D
      return isEscape(p, j, 0x32, 0x66) || isEscape(p, j, 0x35, 0x63) || isEscape(p, j, 0x33, 0x62)
        || isEscape(p, j, 0x30, 0x30) || isEscape(p, j, 0x33, 0x66) || isEscape(p, j, 0x32, 0x33)
        || isEscape(p, j, 0x32, 0x30) || isEscape(p, j, 0x30, 0x39) || isEscape(p, j, 0x30, 0x61)
        || isEscape(p, j, 0x30, 0x64)
    }
  }

  /// `%`, `high`, then `low` in either case (`low` is a lowercase hex letter).
  @inline(__always)
  static func isEscape(_ p: UnsafeBufferPointer<UInt8>, _ j: Int, _ high: UInt8, _ low: UInt8) -> Bool {
    p[j] == percent && p[j + 1] == high && ASCII.lower(p[j + 2]) == low
  }

  /// Compares and advances past `lowercase` while the bytes match it, ignoring ASCII case.
  static func hasLowercasePrefix(_ p: UnsafeBufferPointer<UInt8>, _ j: inout Int, _ lowercase: StaticString)
    -> Bool
  {
    let expected = lowercase.utf8Start
    for k in 0..<lowercase.utf8CodeUnitCount {
      guard ASCII.lower(p[j]) == expected[k] else { return false }
      j += 1
    }
    return true
  }
}
