extension HTTPResponseParser {
  /// Reads back a head the gateway wrote itself: an HTTP/2 stream turns the gateway's
  /// HTTP/1.1 answer into HEADERS (`HTTP2StreamChannel`). The head must be whole at the
  /// start of `input` and have the form the gateway writes: `HTTP/1.1`, a final status and
  /// a reason, `name: value` lines with token names and values of field-value bytes, framed
  /// by `Content-Length` digits or `Transfer-Encoding: chunked`. Each field goes to `field`
  /// as it is read (names as written, values trimmed), with no copy and no `HTTPHeaders`
  /// made, after the status goes to `begin`; the parser then reads the head's body as after
  /// a `.head` from `parse`, and is closed at its end (one answer only).
  ///
  /// Returns the status and the bytes the head took; or nil, with the parser untouched,
  /// when it is not between messages or the head is not whole or not of that form (an
  /// informational head, a head split over two writes, anything unusual). The fields
  /// handed over so far are then to be dropped, and `parse` reads the same bytes with every
  /// check: this is only the quick way for what those checks would pass.
  public mutating func readWrittenHead(
    _ input: UnsafeRawBufferPointer, begin: (_ status: Int) -> Void,
    field: (_ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>) -> Void
  ) -> (status: Int, consumed: Int)? {
    guard isIdle, input.count >= 16, let base = input.baseAddress?.assumingMemoryBound(to: UInt8.self) else {
      return nil
    }
    let p = UnsafeBufferPointer(start: base, count: input.count)
    // "HTTP/1.1 " and three digits.
    guard p[0] == 0x48, p[1] == 0x54, p[2] == 0x54, p[3] == 0x50, p[4] == 0x2F, p[5] == 0x31, p[6] == 0x2E,
      p[7] == 0x31, p[8] == ASCII.space, ASCII.isDigit(p[9]), ASCII.isDigit(p[10]), ASCII.isDigit(p[11])
    else { return nil }
    let status = Int(p[9] &- 0x30) * 100 + Int(p[10] &- 0x30) * 10 + Int(p[11] &- 0x30)
    guard status >= 200, status <= 599 else { return nil }
    var i = 12
    // A reason follows a space; no space, no reason.
    if p[i] == ASCII.space {
      i += 1
      while i < p.count, ASCII.isFieldValueByte(p[i]) { i += 1 }
    }
    guard i + 1 < p.count, p[i] == ASCII.cr, p[i + 1] == ASCII.lf else { return nil }
    i += 2
    begin(status)
    var contentLength: Int64?
    var chunked = false
    var count = 0
    // The strict parser's size limits, a little tighter: a head near them takes its way.
    guard i < limits.maxLineLength else { return nil }
    while true {
      guard i + 1 < p.count, i < limits.maxHeaderBytes else { return nil }
      if p[i] == ASCII.cr {
        guard p[i + 1] == ASCII.lf else { return nil }
        i += 2
        break
      }
      let nameStart = i
      while i < p.count, ASCII.isTokenChar(p[i]) { i += 1 }
      guard i > nameStart, i < p.count, p[i] == ASCII.colon else { return nil }
      let nameEnd = i
      i += 1
      while i < p.count, ASCII.isWhitespace(p[i]) { i += 1 }
      let valueStart = i
      // Eight bytes a step while all are plain value bytes, as the strict parser does.
      while i &+ 8 <= p.count, ASCII.allPlainValueBytes(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) {
        i &+= 8
      }
      while i < p.count, ASCII.isFieldValueByte(p[i]) { i += 1 }
      guard i + 1 < p.count, p[i] == ASCII.cr, p[i + 1] == ASCII.lf, i - nameStart < limits.maxLineLength else {
        return nil
      }
      var valueEnd = i
      while valueEnd > valueStart, ASCII.isWhitespace(p[valueEnd - 1]) { valueEnd -= 1 }
      i += 2
      count += 1
      guard count <= limits.maxHeaderCount else { return nil }
      let name = UnsafeBufferPointer(rebasing: p[nameStart..<nameEnd])
      let value = UnsafeBufferPointer(rebasing: p[valueStart..<valueEnd])
      switch name.count {
      case 14 where ASCIIBytes.equalsLowercase(name, "content-length"):
        guard contentLength == nil, let length = Self.decimal(value) else { return nil }
        contentLength = length
      case 17 where ASCIIBytes.equalsLowercase(name, "transfer-encoding"):
        guard !chunked, ASCIIBytes.equalsLowercase(value, "chunked") else { return nil }
        chunked = true
      default:
        break
      }
      field(name, value)
    }
    guard !chunked || contentLength == nil, i <= limits.maxHeaderBytes else { return nil }
    let framing = ResponseFraming.body(
      status: status, requestWasHEAD: requestWasHEAD, chunked: chunked, contentLength: contentLength)
    if case .contentLength(let length) = framing, let max = limits.maxBodyBytes, length > max { return nil }
    // What follows the body on a connection is not read here (a stream carries one
    // answer): the parser stops at its end.
    keepAlive = false
    pendingTrailers = nil
    enterBody(framing)
    return (status, i)
  }

  /// One to eighteen decimal digits and nothing else (no sign, no list): the length the
  /// gateway writes.
  static func decimal(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
    guard !bytes.isEmpty, bytes.count <= 18 else { return nil }
    var value: Int64 = 0
    for byte in bytes {
      guard ASCII.isDigit(byte) else { return nil }
      value = value * 10 + Int64(byte &- 0x30)
    }
    return value
  }
}
