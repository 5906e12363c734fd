/// Parses a complete header section (as found by `HeadBoundaryScanner`) byte by byte, and
/// derives the message framing from it. Every loop below stops at the section's final LF,
/// which no byte class accepts, so indexes stay in bounds without a check per byte.
@usableFromInline
enum HeadParser {
  @usableFromInline typealias FieldRange = HTTPHeaders.FieldRange

  // MARK: Requests

  @usableFromInline
  static func parseRequest(_ section: [UInt8], lines: Int, limits: HTTPLimits) throws(HTTPParseError)
    -> HTTPRequestHead
  {
    try section.withUnsafeBufferPointer { p throws(HTTPParseError) in
      var i = try skipLeadingEmptyLines(p)
      let methodStart = i
      while ASCII.isTokenChar(p[i]) { i += 1 }
      guard i > methodStart, p[i] == ASCII.space else { throw .invalidMethod }
      let method = HTTPMethod.parse(p, methodStart, i)
      i += 1
      let origin = try RequestTarget.read(p, &i, method: method, refusingConnectAndTrace: limits.refusesConnectAndTrace)
      i += 1
      let version = try parseVersion(p, &i)
      guard p[i] == ASCII.cr else { throw p[i] == ASCII.lf ? .bareLF : .invalidVersion }
      guard p[i + 1] == ASCII.lf else { throw .bareCR }
      i += 2
      let ranges = try parseFieldLines(p, from: i, capacity: lines, limits: limits)
      let framing = try RequestFraming(p, ranges, version: version, limits: limits)
      let headers = HTTPHeaders(
        storage: section, ranges: ranges, mayListConnectionOptions: framing.connectionListsOtherNames)
      return HTTPRequestHead(
        method: method, target: origin.map { section[$0] } ?? ArraySlice([0x2F]), version: version,
        headers: headers, bodyFraming: framing.body, keepAlive: framing.keepAlive,
        expectsContinue: framing.expectsContinue)
    }
  }

  // MARK: Responses

  @usableFromInline
  static func parseResponse(
    _ section: [UInt8], lines: Int, limits: HTTPLimits, requestWasHEAD: Bool
  ) throws(HTTPParseError) -> HTTPResponseHead {
    try section.withUnsafeBufferPointer { p throws(HTTPParseError) in
      var i = try skipLeadingEmptyLines(p)
      let version = try parseVersion(p, &i)
      guard p[i] == ASCII.space else { throw .invalidStatusLine }
      i += 1
      guard ASCII.isDigit(p[i]), ASCII.isDigit(p[i + 1]), ASCII.isDigit(p[i + 2]) else {
        throw .invalidStatusLine
      }
      let status = Int(p[i] &- 0x30) * 100 + Int(p[i + 1] &- 0x30) * 10 + Int(p[i + 2] &- 0x30)
      guard status >= 100 && status <= 599 else { throw .invalidStatusLine }
      i += 3
      var reasonStart = i
      if p[i] == ASCII.space {
        i += 1
        reasonStart = i
        while ASCII.isFieldValueByte(p[i]) { i += 1 }
      }
      let reasonEnd = i
      guard p[i] == ASCII.cr else { throw p[i] == ASCII.lf ? .bareLF : .invalidStatusLine }
      guard p[i + 1] == ASCII.lf else { throw .bareCR }
      i += 2
      let ranges = try parseFieldLines(p, from: i, capacity: lines, limits: limits)
      let framing = try ResponseFraming(
        p, ranges, version: version, status: status, requestWasHEAD: requestWasHEAD, limits: limits)
      return HTTPResponseHead(
        version: version, status: status, reason: section[reasonStart..<reasonEnd],
        headers: HTTPHeaders(
          storage: section, ranges: ranges, mayListConnectionOptions: framing.connectionListsOtherNames),
        bodyFraming: framing.body,
        contentLength: framing.contentLength, keepAlive: framing.keepAlive)
    }
  }

  // MARK: Shared pieces

  /// RFC 9112 §2.2: empty lines before the start line are ignored, but each must be CRLF.
  static func skipLeadingEmptyLines(_ p: UnsafeBufferPointer<UInt8>) throws(HTTPParseError) -> Int {
    var i = 0
    while p[i] == ASCII.cr || p[i] == ASCII.lf {
      guard p[i] == ASCII.cr, i + 1 < p.count, p[i + 1] == ASCII.lf else { throw .invalidLeadingLine }
      i += 2
    }
    return i
  }

  /// "HTTP/" DIGIT "." DIGIT; only major version 1 is spoken here.
  static func parseVersion(_ p: UnsafeBufferPointer<UInt8>, _ i: inout Int) throws(HTTPParseError)
    -> HTTPVersion
  {
    guard i + 8 <= p.count,
      p[i] == 0x48, p[i + 1] == 0x54, p[i + 2] == 0x54, p[i + 3] == 0x50, p[i + 4] == 0x2F,
      ASCII.isDigit(p[i + 5]), p[i + 6] == 0x2E, ASCII.isDigit(p[i + 7])
    else { throw .invalidVersion }
    let version = HTTPVersion(major: p[i + 5] &- 0x30, minor: p[i + 7] &- 0x30)
    i += 8
    guard version.major == 1 else { throw .unsupportedVersion }
    return version
  }

  /// Header (or trailer) field lines up to and including the empty line that ends them.
  @usableFromInline
  static func parseFieldLines(
    _ p: UnsafeBufferPointer<UInt8>, from start: Int, capacity: Int, limits: HTTPLimits
  ) throws(HTTPParseError) -> [FieldRange] {
    var ranges: [FieldRange] = []
    ranges.reserveCapacity(capacity)
    var i = start
    while true {
      let first = p[i]
      if first == ASCII.cr {
        guard p[i + 1] == ASCII.lf else { throw .bareCR }
        return ranges
      }
      if first == ASCII.lf { throw .bareLF }
      if ASCII.isWhitespace(first) { throw .obsoleteLineFolding }
      let nameStart = i
      while ASCII.isTokenChar(p[i]) { i += 1 }
      let stop = p[i]
      if stop != ASCII.colon {
        if ASCII.isWhitespace(stop) { throw .whitespaceBeforeColon }
        if stop == ASCII.cr || stop == ASCII.lf { throw .missingColon }
        throw .invalidHeaderName
      }
      guard i > nameStart else { throw .invalidHeaderName }
      let nameEnd = i
      i += 1
      while ASCII.isWhitespace(p[i]) { i += 1 }
      let valueStart = i
      // Eight bytes a step while all are plain value bytes (most of a value); the byte loop
      // then finds the end (CR) or a byte that does not belong, as before.
      if let base = p.baseAddress {
        while i &+ 8 <= p.count, ASCII.allPlainValueBytes(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) {
          i &+= 8
        }
      }
      while ASCII.isFieldValueByte(p[i]) { i += 1 }
      guard p[i] == ASCII.cr else { throw p[i] == ASCII.lf ? .bareLF : .invalidHeaderValue }
      guard p[i + 1] == ASCII.lf else { throw .bareCR }
      var valueEnd = i
      while valueEnd > valueStart && ASCII.isWhitespace(p[valueEnd - 1]) { valueEnd -= 1 }
      guard ranges.count < limits.maxHeaderCount else { throw .tooManyHeaders }
      ranges.append(
        FieldRange(nameStart: nameStart, nameEnd: nameEnd, valueStart: valueStart, valueEnd: valueEnd))
      i += 2
    }
  }
}

/// The framing-relevant fields of a head, read once: Content-Length, Transfer-Encoding,
/// Connection, and for requests Host and Expect.
struct FramingFields {
  var contentLength: Int64?
  var transferEncodingChunked = false
  var sawTransferEncoding = false
  var connectionClose = false
  var connectionKeepAlive = false
  /// A Connection field names something besides `close` and `keep-alive`.
  var connectionListsOtherNames = false
  var hostCount = 0
  var expectsContinue = false

  init(
    _ p: UnsafeBufferPointer<UInt8>, _ ranges: [HTTPHeaders.FieldRange], isRequest: Bool
  ) throws(HTTPParseError) {
    for r in ranges {
      let nameStart = Int(r.nameStart)
      let nameEnd = Int(r.nameEnd)
      let valueStart = Int(r.valueStart)
      let valueEnd = Int(r.valueEnd)
      switch nameEnd - nameStart {
      case 4 where isRequest && ASCII.equalsLowercase(p, nameStart, nameEnd, "host"):
        hostCount += 1
        guard hostCount == 1 else { throw .duplicateHost }
        for j in valueStart..<valueEnd where !ASCII.isHostChar(p[j]) { throw .invalidHost }
      case 6 where isRequest && ASCII.equalsLowercase(p, nameStart, nameEnd, "expect"):
        if ASCII.equalsLowercase(p, valueStart, valueEnd, "100-continue") { expectsContinue = true }
      case 10 where ASCII.equalsLowercase(p, nameStart, nameEnd, "connection"):
        readConnectionTokens(p, valueStart, valueEnd)
      case 14 where ASCII.equalsLowercase(p, nameStart, nameEnd, "content-length"):
        guard contentLength == nil else { throw .duplicateContentLength }
        contentLength = try Self.parseContentLength(p, valueStart, valueEnd)
      case 17 where ASCII.equalsLowercase(p, nameStart, nameEnd, "transfer-encoding"):
        guard !sawTransferEncoding else { throw .duplicateTransferEncoding }
        sawTransferEncoding = true
        try classifyTransferEncoding(p, valueStart, valueEnd)
      default:
        continue
      }
    }
  }

  /// 1*DIGIT and nothing else: no sign, no spaces, no list (`5, 5`), at most 2^63-1.
  static func parseContentLength(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int)
    throws(HTTPParseError) -> Int64
  {
    guard end > start else { throw .invalidContentLength }
    var value: Int64 = 0
    for j in start..<end {
      let byte = p[j]
      guard ASCII.isDigit(byte) else { throw .invalidContentLength }
      let (times10, o1) = value.multipliedReportingOverflow(by: 10)
      let (sum, o2) = times10.addingReportingOverflow(Int64(byte &- 0x30))
      guard !o1 && !o2 else { throw .invalidContentLength }
      value = sum
    }
    return value
  }

  /// Only a lone `chunked` is accepted. A list of valid codings is "not implemented" (501);
  /// anything that is not even a list of tokens is a bad request.
  mutating func classifyTransferEncoding(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int)
    throws(HTTPParseError)
  {
    if ASCII.equalsLowercase(p, start, end, "chunked") {
      transferEncodingChunked = true
      return
    }
    var j = start
    while true {
      while j < end && ASCII.isWhitespace(p[j]) { j += 1 }
      let tokenStart = j
      while j < end && ASCII.isTokenChar(p[j]) { j += 1 }
      guard j > tokenStart else { throw .invalidTransferEncoding }
      while j < end && ASCII.isWhitespace(p[j]) { j += 1 }
      if j == end { throw .unsupportedTransferEncoding }
      guard p[j] == ASCII.comma else { throw .invalidTransferEncoding }
      j += 1
    }
  }

  mutating func readConnectionTokens(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int) {
    var j = start
    while j < end {
      while j < end && (ASCII.isWhitespace(p[j]) || p[j] == ASCII.comma) { j += 1 }
      let tokenStart = j
      while j < end && p[j] != ASCII.comma { j += 1 }
      var tokenEnd = j
      while tokenEnd > tokenStart && ASCII.isWhitespace(p[tokenEnd - 1]) { tokenEnd -= 1 }
      if ASCII.equalsLowercase(p, tokenStart, tokenEnd, "close") {
        connectionClose = true
      } else if ASCII.equalsLowercase(p, tokenStart, tokenEnd, "keep-alive") {
        connectionKeepAlive = true
      } else if tokenEnd > tokenStart {
        connectionListsOtherNames = true
      }
    }
  }

  func keepAlive(_ version: HTTPVersion) -> Bool {
    if connectionClose { return false }
    return version.minor >= 1 || connectionKeepAlive
  }
}

/// RFC 9112 §6.1–6.3 for requests, strictly: anything two parties could read differently
/// is refused.
struct RequestFraming {
  var body: HTTPBodyFraming
  var keepAlive: Bool
  var expectsContinue: Bool
  var connectionListsOtherNames: Bool

  init(
    _ p: UnsafeBufferPointer<UInt8>, _ ranges: [HTTPHeaders.FieldRange], version: HTTPVersion,
    limits: HTTPLimits
  ) throws(HTTPParseError) {
    let fields = try FramingFields(p, ranges, isRequest: true)
    if version.minor >= 1 && fields.hostCount == 0 { throw .missingHost }
    if fields.sawTransferEncoding {
      // An HTTP/1.0 peer cannot have meant chunked; a front proxy may have read it otherwise.
      guard version.minor >= 1 else { throw .transferEncodingInHTTP10 }
      guard fields.contentLength == nil else { throw .contentLengthWithTransferEncoding }
      body = .chunked
    } else if let length = fields.contentLength {
      if let max = limits.maxBodyBytes, length > max { throw .bodyTooLarge }
      body = .contentLength(length)
    } else {
      body = .none
    }
    keepAlive = fields.keepAlive(version)
    expectsContinue = fields.expectsContinue && version.minor >= 1
    connectionListsOtherNames = fields.connectionListsOtherNames
  }
}

/// RFC 9112 §6.3 for responses, with the same refusals as requests for ambiguous framing.
struct ResponseFraming {
  var body: HTTPBodyFraming
  var contentLength: Int64?
  var keepAlive: Bool
  var connectionListsOtherNames: Bool

  init(
    _ p: UnsafeBufferPointer<UInt8>, _ ranges: [HTTPHeaders.FieldRange], version: HTTPVersion,
    status: Int, requestWasHEAD: Bool, limits: HTTPLimits
  ) throws(HTTPParseError) {
    let fields = try FramingFields(p, ranges, isRequest: false)
    contentLength = fields.contentLength
    keepAlive = fields.keepAlive(version)
    connectionListsOtherNames = fields.connectionListsOtherNames
    if fields.sawTransferEncoding {
      guard version.minor >= 1 else { throw .transferEncodingInHTTP10 }
      guard fields.contentLength == nil else { throw .contentLengthWithTransferEncoding }
    }
    body = Self.body(
      status: status, requestWasHEAD: requestWasHEAD, chunked: fields.sawTransferEncoding,
      contentLength: fields.contentLength)
    switch body {
    case .contentLength(let length):
      if let max = limits.maxBodyBytes, length > max { throw .bodyTooLarge }
    case .untilClose:
      keepAlive = false
    case .none, .chunked:
      break
    }
  }

  /// How an answer's body is framed (RFC 9112 §6.3): none for 1xx, 204, 304 and answers
  /// to HEAD; else chunked, a length, or until the connection closes.
  static func body(status: Int, requestWasHEAD: Bool, chunked: Bool, contentLength: Int64?) -> HTTPBodyFraming {
    if status < 200 || status == 204 || status == 304 || requestWasHEAD { return .none }
    if chunked { return .chunked }
    if let length = contentLength { return .contentLength(length) }
    return .untilClose
  }
}
