#if canImport(Glibc)
  import Glibc
#endif

/// Finds where a header section ends — the first empty line after a non-empty one — across
/// pieces of input, and enforces the line and size limits while it looks, so an endless
/// head is refused as soon as it passes a limit rather than when it ends.
///
/// Positions are relative to the first byte of the section. Bare LF also ends a line here;
/// the head parser refuses it afterwards with a precise error.
@usableFromInline
struct HeadBoundaryScanner: Sendable {
  @usableFromInline var scanned = 0
  @usableFromInline var lineStart = 0
  /// Empty lines before the first content line are skipped (RFC 9112 §2.2) in heads;
  /// a trailer section starts with this set, since its first empty line ends it.
  @usableFromInline var sawContent: Bool
  /// Non-empty lines seen, used to size the field array in one allocation.
  @usableFromInline var contentLines = 0
  @usableFromInline let isRequestHead: Bool

  @usableFromInline
  init(forTrailers: Bool, isRequestHead: Bool) {
    sawContent = forTrailers
    self.isRequestHead = isRequestHead
  }

  /// Scans `count` bytes at `base` (the whole section so far, of which the first `scanned`
  /// were already examined). Returns the end of the section (one past its final LF), or nil.
  @usableFromInline
  mutating func scan(_ base: UnsafePointer<UInt8>, count: Int, limits: HTTPLimits) throws(HTTPParseError)
    -> Int?
  {
    while scanned < count {
      // A request line starts with a method token: a first byte that cannot (a TLS
      // ClientHello's 0x16 sent to a plain port, binary noise) is refused at once, not after
      // the header timeout while the scan waits for a line end that may never come.
      if isRequestHead && !sawContent && scanned == lineStart {
        let first = base[lineStart]
        if first != ASCII.cr && first != ASCII.lf && !ASCII.isTokenChar(first) { throw .invalidMethod }
      }
      guard let found = memchr(base + scanned, Int32(ASCII.lf), count - scanned) else {
        scanned = count
        // A CR at the end may be the line's own CRLF cut in two: it is not content, and
        // counting it would make the verdict depend on where the stream was split.
        let pendingCR = count > lineStart && base[count - 1] == ASCII.cr ? 1 : 0
        try checkOpenLine(length: count - lineStart - pendingCR, total: count - pendingCR, limits: limits)
        return nil
      }
      let lf = UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
      var contentEnd = lf
      if lf > lineStart && base[lf - 1] == ASCII.cr { contentEnd -= 1 }
      let length = contentEnd - lineStart
      try checkOpenLine(length: length, total: lf + 1, limits: limits)
      lineStart = lf + 1
      scanned = lf + 1
      if length == 0 {
        if sawContent { return lf + 1 }
      } else {
        sawContent = true
        contentLines += 1
      }
    }
    return nil
  }

  @inline(__always)
  private func checkOpenLine(length: Int, total: Int, limits: HTTPLimits) throws(HTTPParseError) {
    if length > limits.maxLineLength {
      throw isRequestHead && contentLines == 0 ? .requestLineTooLong : .headersTooLarge
    }
    if total > limits.maxHeaderBytes { throw .headersTooLarge }
  }
}

/// Collects a header section that may arrive in pieces: parsed in place when one piece
/// holds it whole, copied into its own buffer otherwise.
@usableFromInline
struct HeadAccumulator: Sendable {
  @usableFromInline var buffer: [UInt8] = []
  @usableFromInline var scanner: HeadBoundaryScanner
  @usableFromInline let forTrailers: Bool
  @usableFromInline let isRequestHead: Bool

  @usableFromInline
  init(forTrailers: Bool, isRequestHead: Bool) {
    self.forTrailers = forTrailers
    self.isRequestHead = isRequestHead
    scanner = HeadBoundaryScanner(forTrailers: forTrailers, isRequestHead: isRequestHead)
  }

  @usableFromInline var isEmpty: Bool { buffer.isEmpty && scanner.scanned == 0 }

  @usableFromInline
  mutating func reset() {
    buffer.removeAll(keepingCapacity: true)
    scanner = HeadBoundaryScanner(forTrailers: forTrailers, isRequestHead: isRequestHead)
  }

  /// Takes bytes from `input`; returns the complete section (its bytes, its content line
  /// count, and how many bytes of `input` belonged to it), or nil after consuming all of
  /// `input` when the section is not complete yet.
  @usableFromInline
  mutating func take(_ input: UnsafeRawBufferPointer, limits: HTTPLimits) throws(HTTPParseError)
    -> (section: [UInt8], lines: Int, consumed: Int)?
  {
    let bytes = input.bindMemory(to: UInt8.self)
    guard let base = bytes.baseAddress, bytes.count > 0 else { return nil }
    if buffer.isEmpty {
      if let end = try scanner.scan(base, count: bytes.count, limits: limits) {
        let section = Array(UnsafeBufferPointer(start: base, count: end))
        let lines = scanner.contentLines
        reset()
        return (section, lines, end)
      }
      buffer.append(contentsOf: bytes)
      return nil
    }
    // Never copy more than could still fit; anything past the limit fails the scan anyway.
    let room = max(0, limits.maxHeaderBytes + 1 - buffer.count)
    let taken = min(room, bytes.count)
    let previous = buffer.count
    buffer.append(contentsOf: UnsafeBufferPointer(start: base, count: taken))
    let found = try buffer.withUnsafeBufferPointer { all throws(HTTPParseError) in
      try scanner.scan(all.baseAddress!, count: all.count, limits: limits)
    }
    guard let end = found else {
      // Bytes were left out because the buffer is full: the section cannot end within the
      // limit, whatever those bytes are.
      if taken < bytes.count { throw .headersTooLarge }
      return nil
    }
    buffer.removeSubrange(end...)
    let section = buffer
    let lines = scanner.contentLines
    buffer = []
    scanner = HeadBoundaryScanner(forTrailers: forTrailers, isRequestHead: isRequestHead)
    return (section, lines, end - previous)
  }
}
