#if canImport(Glibc)
  import Glibc
#endif

/// Decodes a chunked body (RFC 9112 §7.1) fed in arbitrary pieces. Data comes out as ranges
/// of the input, never copied; only a chunk-size line or trailer section that straddles two
/// pieces is buffered, and both are bounded.
public struct HTTPChunkedDecoder: Sendable {
  public enum Event: Sendable, Hashable {
    /// Body bytes: a range of the buffer passed to `decode`.
    case data(Range<Int>)
    /// The last chunk and the trailer section (nil when empty) have been read.
    case end(HTTPHeaders?)
  }

  @usableFromInline
  enum State: Sendable {
    case sizeLine
    case data(remaining: Int64)
    case dataCR
    case dataLF
    case trailers
    case done
  }

  @usableFromInline var state = State.sizeLine
  @usableFromInline var lineBuffer: [UInt8] = []
  @usableFromInline var trailers = HeadAccumulator(forTrailers: true, isRequestHead: false)
  @usableFromInline var total: Int64 = 0
  public let limits: HTTPLimits

  public init(limits: HTTPLimits = HTTPLimits()) {
    self.limits = limits
  }

  /// True once the last chunk and trailers have been read.
  public var isDone: Bool {
    if case .done = state { return true }
    return false
  }

  /// The longest chunk-size line accepted: 16 hex digits, extensions, CRLF.
  var maxSizeLine: Int { 16 + limits.maxChunkExtensionBytes + 2 }

  /// Consumes bytes until one event is ready or the input is used up. Returns the event (or
  /// nil) and how many bytes of `input` were consumed.
  public mutating func decode(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
    event: Event?, consumed: Int
  ) {
    let bytes = input.bindMemory(to: UInt8.self)
    let count = bytes.count
    var i = 0
    while true {
      switch state {
      case .sizeLine:
        guard i < count else { return (nil, i) }
        guard let found = memchr(bytes.baseAddress! + i, Int32(ASCII.lf), count - i) else {
          lineBuffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[i...]))
          if lineBuffer.count > maxSizeLine { throw .chunkExtensionTooLong }
          return (nil, count)
        }
        let lf = UnsafeRawPointer(bytes.baseAddress!).distance(to: UnsafeRawPointer(found))
        let size: UInt64
        if lineBuffer.isEmpty {
          // The same bound as for a line that arrives in pieces, so the verdict never
          // depends on where the stream was cut.
          guard lf + 1 - i <= maxSizeLine else { throw .chunkExtensionTooLong }
          size = try parseSizeLine(UnsafeBufferPointer(rebasing: bytes[i...lf]))
        } else {
          lineBuffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[i...lf]))
          guard lineBuffer.count <= maxSizeLine else { throw .chunkExtensionTooLong }
          size = try lineBuffer.withUnsafeBufferPointer { line throws(HTTPParseError) in
            try parseSizeLine(line)
          }
          lineBuffer.removeAll(keepingCapacity: true)
        }
        i = lf + 1
        if size == 0 {
          state = .trailers
        } else {
          let (sum, overflow) = total.addingReportingOverflow(Int64(size))
          guard !overflow else { throw .chunkSizeOverflow }
          if let max = limits.maxBodyBytes, sum > max { throw .bodyTooLarge }
          total = sum
          state = .data(remaining: Int64(size))
        }
      case .data(let remaining):
        guard i < count else { return (nil, i) }
        let n = Int(min(remaining, Int64(count - i)))
        state = remaining == Int64(n) ? .dataCR : .data(remaining: remaining - Int64(n))
        return (.data(i..<(i + n)), i + n)
      case .dataCR:
        guard i < count else { return (nil, i) }
        guard bytes[i] == ASCII.cr else { throw .missingChunkCRLF }
        i += 1
        state = .dataLF
      case .dataLF:
        guard i < count else { return (nil, i) }
        guard bytes[i] == ASCII.lf else { throw .missingChunkCRLF }
        i += 1
        state = .sizeLine
      case .trailers:
        guard i < count else { return (nil, i) }
        // The usual case: no trailers, just the final CRLF.
        if trailers.isEmpty && count - i >= 2 && bytes[i] == ASCII.cr && bytes[i + 1] == ASCII.lf {
          state = .done
          return (.end(nil), i + 2)
        }
        guard let taken = try trailers.take(UnsafeRawBufferPointer(rebasing: input[i...]), limits: limits)
        else { return (nil, count) }
        state = .done
        let fields = try Self.parseTrailers(taken.section, lines: taken.lines, limits: limits)
        return (.end(fields), i + taken.consumed)
      case .done:
        return (nil, i)
      }
    }
  }

  /// 1*HEXDIG, then extensions, then CRLF. No sign, prefix, padding or separators.
  func parseSizeLine(_ line: UnsafeBufferPointer<UInt8>) throws(HTTPParseError) -> UInt64 {
    let count = line.count
    guard count >= 2, line[count - 2] == ASCII.cr else { throw .bareLF }
    let end = count - 2
    var i = 0
    var size: UInt64 = 0
    while i < end, let digit = ASCII.hexValue(line[i]) {
      // 2^60 is far above any body we would accept and keeps the shift from overflowing.
      guard size < (1 << 59) else { throw .chunkSizeOverflow }
      size = size << 4 | digit
      i += 1
    }
    guard i > 0 else { throw .invalidChunkSize }
    if i < end {
      guard end - i <= limits.maxChunkExtensionBytes else { throw .chunkExtensionTooLong }
      try Self.validateExtensions(line, from: i, to: end)
    }
    return size
  }

  /// chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ( token / quoted-string ) ] )
  static func validateExtensions(_ p: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int)
    throws(HTTPParseError)
  {
    var i = start
    @inline(__always) func skipWhitespace() { while i < end && ASCII.isWhitespace(p[i]) { i += 1 } }
    while i < end {
      skipWhitespace()
      // Anything but ";" after the size (a space before CRLF included) is junk.
      guard i < end, p[i] == ASCII.semicolon else { throw .invalidChunkSize }
      i += 1
      skipWhitespace()
      let nameStart = i
      while i < end && ASCII.isTokenChar(p[i]) { i += 1 }
      guard i > nameStart else { throw .invalidChunkExtension }
      // Whitespace is allowed before "=", never at the end of the line.
      var afterSpace = i
      while afterSpace < end && ASCII.isWhitespace(p[afterSpace]) { afterSpace += 1 }
      guard afterSpace < end, p[afterSpace] == ASCII.equals else {
        if afterSpace == end && afterSpace > i { throw .invalidChunkExtension }
        continue
      }
      i = afterSpace + 1
      skipWhitespace()
      guard i < end else { throw .invalidChunkExtension }
      if p[i] == ASCII.quote {
        i += 1
        var closed = false
        while i < end {
          let byte = p[i]
          if byte == ASCII.quote {
            closed = true
            i += 1
            break
          }
          if byte == ASCII.backslash {
            guard i + 1 < end, ASCII.isFieldValueByte(p[i + 1]) else { throw .invalidChunkExtension }
            i += 2
            continue
          }
          guard ASCII.isFieldValueByte(byte) else { throw .invalidChunkExtension }
          i += 1
        }
        guard closed else { throw .invalidChunkExtension }
      } else {
        let valueStart = i
        while i < end && ASCII.isTokenChar(p[i]) { i += 1 }
        guard i > valueStart else { throw .invalidChunkExtension }
      }
      var next = i
      while next < end && ASCII.isWhitespace(p[next]) { next += 1 }
      if next == end && next > i { throw .invalidChunkExtension }
    }
  }

  /// Fields that change how a message is framed, routed or authorized must come in the
  /// head, where every hop reads them; in trailers they are refused, never merged.
  static let forbiddenTrailerNames: [StaticString] = [
    "content-length", "transfer-encoding", "host", "authorization", "proxy-authorization",
    "connection", "keep-alive", "te", "trailer", "upgrade", "content-encoding", "content-type",
    "content-range", "cookie", "set-cookie", "expect",
  ]

  static func parseTrailers(_ section: [UInt8], lines: Int, limits: HTTPLimits) throws(HTTPParseError)
    -> HTTPHeaders?
  {
    let ranges = try section.withUnsafeBufferPointer { p throws(HTTPParseError) in
      let ranges = try HeadParser.parseFieldLines(p, from: 0, capacity: lines, limits: limits)
      for r in ranges {
        for name in forbiddenTrailerNames
        where ASCII.equalsLowercase(p, Int(r.nameStart), Int(r.nameEnd), name) {
          throw .forbiddenTrailer
        }
      }
      return ranges
    }
    return ranges.isEmpty ? nil : HTTPHeaders(storage: section, ranges: ranges)
  }
}
