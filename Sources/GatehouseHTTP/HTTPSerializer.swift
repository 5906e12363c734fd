/// Writes request and response heads and chunk framing. The body framing of every message
/// Gatehouse sends is chosen here and only here (`framing(...)`), and the matching
/// Content-Length or Transfer-Encoding field is written by the serializer itself: fields of
/// those names handed in by callers are dropped, so no message can carry two framings.
public enum HTTPSerializer {
  /// A field that would break the message it is written into.
  public struct Error: Swift.Error, Hashable, Sendable, CustomStringConvertible {
    public let fieldName: String
    public let problem: String
    public var description: String { "header \(fieldName): \(problem)" }
  }

  /// Picks the framing for an outgoing body: nothing where the message may not have a body;
  /// Content-Length when the length is known; chunked for HTTP/1.1 peers; else close-delimited.
  public static func framing(bodyLength: Int64?, allowsBody: Bool, peerVersion: HTTPVersion)
    -> HTTPBodyFraming
  {
    guard allowsBody else { return .none }
    if let length = bodyLength { return .contentLength(length) }
    return peerVersion.minor >= 1 ? .chunked : .untilClose
  }

  /// Whether a response with this status may carry a body (RFC 9110 §6.4.1).
  public static func statusAllowsBody(_ status: Int) -> Bool {
    status >= 200 && status != 204 && status != 304
  }

  /// Appends `METHOD target HTTP/1.1`, the headers, the framing field and the empty line.
  public static func writeRequestHead(
    method: HTTPMethod, target: ArraySlice<UInt8>, headers: HTTPHeaders,
    framing: HTTPBodyFraming, into buffer: inout [UInt8]
  ) throws(Error) {
    try target.withUnsafeBufferPointer { bytes throws(Error) in
      for byte in bytes where !ASCII.isTargetByte(byte) {
        throw Error(fieldName: ":target", problem: "contains a byte that is not visible ASCII")
      }
      appendMethod(method, to: &buffer)
      buffer.append(ASCII.space)
      buffer.append(contentsOf: bytes)
    }
    append(" HTTP/1.1\r\n", to: &buffer)
    try writeFields(headers, framing: framing, into: &buffer)
  }

  /// Appends `HTTP/1.1 status reason`, the headers, the framing field and the empty line.
  /// `Content-Length` is still written for `.none` framing when `headContentLength` is given
  /// (responses to HEAD carry the length the GET would have).
  public static func writeResponseHead(
    status: Int, reason: String? = nil, headers: HTTPHeaders, framing: HTTPBodyFraming,
    headContentLength: Int64? = nil, into buffer: inout [UInt8]
  ) throws(Error) {
    guard status >= 100 && status <= 999 else {
      throw Error(fieldName: ":status", problem: "not a three-digit status")
    }
    append("HTTP/1.1 ", to: &buffer)
    appendDecimal(Int64(status), to: &buffer)
    buffer.append(ASCII.space)
    let phrase = reason ?? HTTPStatusPhrase.reason(for: status)
    for byte in phrase.utf8 where !ASCII.isFieldValueByte(byte) {
      throw Error(fieldName: ":reason", problem: "contains a control byte")
    }
    buffer.append(contentsOf: phrase.utf8)
    append("\r\n", to: &buffer)
    if case .none = framing, let length = headContentLength {
      try writeFields(headers, framing: .contentLength(length), into: &buffer)
    } else {
      try writeFields(headers, framing: framing, into: &buffer)
    }
  }

  static func writeFields(_ headers: HTTPHeaders, framing: HTTPBodyFraming, into buffer: inout [UInt8])
    throws(Error)
  {
    try headers.storage.withUnsafeBufferPointer { bytes throws(Error) in
      for r in headers.ranges {
        let name = UnsafeBufferPointer(rebasing: bytes[Int(r.nameStart)..<Int(r.nameEnd)])
        let value = UnsafeBufferPointer(rebasing: bytes[Int(r.valueStart)..<Int(r.valueEnd)])
        if let problem = problem(name: name, value: value) {
          throw Error(fieldName: String(decoding: name, as: UTF8.self), problem: problem)
        }
        if isFramingField(name) { continue }
        buffer.append(contentsOf: name)
        buffer.append(ASCII.colon)
        buffer.append(ASCII.space)
        buffer.append(contentsOf: value)
        buffer.append(ASCII.cr)
        buffer.append(ASCII.lf)
      }
    }
    switch framing {
    case .none, .untilClose:
      break
    case .contentLength(let length):
      append("Content-Length: ", to: &buffer)
      appendDecimal(length, to: &buffer)
      append("\r\n", to: &buffer)
    case .chunked:
      append("Transfer-Encoding: chunked\r\n", to: &buffer)
    }
    append("\r\n", to: &buffer)
  }

  /// CR, LF and NUL would let a value start a new line or cut one short on some peers;
  /// other controls are refused too, matching what the parser accepts.
  static func problem(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> String? {
    if name.isEmpty { return "empty name" }
    for byte in name where !ASCII.isTokenChar(byte) { return "name contains an invalid byte" }
    for byte in value where !ASCII.isFieldValueByte(byte) {
      return byte == ASCII.cr || byte == ASCII.lf || byte == 0
        ? "value contains CR, LF or NUL" : "value contains a control byte"
    }
    if let first = value.first, ASCII.isWhitespace(first) { return "value starts with whitespace" }
    if let last = value.last, ASCII.isWhitespace(last) { return "value ends with whitespace" }
    return nil
  }

  static func isFramingField(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    ASCII.equalsLowercase(name, 0, name.count, "content-length")
      || ASCII.equalsLowercase(name, 0, name.count, "transfer-encoding")
  }

  /// Appends the size line of a chunk of `size` bytes (size > 0).
  public static func writeChunkHeader(size: Int, into buffer: inout [UInt8]) {
    precondition(size > 0, "a zero-size chunk ends the body; use writeLastChunk")
    appendHex(UInt64(size), to: &buffer)
    buffer.append(ASCII.cr)
    buffer.append(ASCII.lf)
  }

  /// Appends the CRLF that closes a chunk's data.
  public static func writeChunkTrailer(into buffer: inout [UInt8]) {
    buffer.append(ASCII.cr)
    buffer.append(ASCII.lf)
  }

  /// Appends the last chunk and an empty trailer section.
  public static func writeLastChunk(into buffer: inout [UInt8]) {
    append("0\r\n\r\n", to: &buffer)
  }

  /// The common methods are written from static strings, without making a String.
  public static func appendMethod(_ method: HTTPMethod, to buffer: inout [UInt8]) {
    switch method {
    case .get: append("GET", to: &buffer)
    case .head: append("HEAD", to: &buffer)
    case .post: append("POST", to: &buffer)
    case .put: append("PUT", to: &buffer)
    case .delete: append("DELETE", to: &buffer)
    case .options: append("OPTIONS", to: &buffer)
    case .patch: append("PATCH", to: &buffer)
    case .trace: append("TRACE", to: &buffer)
    case .connect: append("CONNECT", to: &buffer)
    case .other(let name): buffer.append(contentsOf: name.utf8)
    }
  }

  @inline(__always)
  static func append(_ literal: StaticString, to buffer: inout [UInt8]) {
    buffer.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }

  /// Decimal digits without going through String.
  public static func appendDecimal(_ value: Int64, to buffer: inout [UInt8]) {
    precondition(value >= 0)
    if value < 10 {
      buffer.append(0x30 &+ UInt8(value))
      return
    }
    var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // room for 24 digits, as bytes
    var count = 0
    var rest = UInt64(value)
    withUnsafeMutableBytes(of: &digits) { raw in
      while rest > 0 {
        raw[23 - count] = 0x30 &+ UInt8(rest % 10)
        rest /= 10
        count += 1
      }
      buffer.append(contentsOf: raw[(24 - count)...])
    }
  }

  static func appendHex(_ value: UInt64, to buffer: inout [UInt8]) {
    var shift = 60
    while shift > 0 && (value >> UInt64(shift)) & 0xF == 0 { shift -= 4 }
    while shift >= 0 {
      let nibble = UInt8((value >> UInt64(shift)) & 0xF)
      buffer.append(nibble < 10 ? 0x30 &+ nibble : 0x57 &+ nibble)
      shift -= 4
    }
  }
}

/// Reason phrases of the registered statuses (RFC 9110 §15 and the IANA registry), for
/// answers Gatehouse writes itself and for upstream answers that came without one (the
/// envelope's `message` falls back to it, so `410` reads "Gone", not a class name).
public enum HTTPStatusPhrase {
  public static func reason(for status: Int) -> String {
    switch status {
    case 100: return "Continue"
    case 101: return "Switching Protocols"
    case 102: return "Processing"
    case 103: return "Early Hints"
    case 200: return "OK"
    case 201: return "Created"
    case 202: return "Accepted"
    case 203: return "Non-Authoritative Information"
    case 204: return "No Content"
    case 205: return "Reset Content"
    case 206: return "Partial Content"
    case 207: return "Multi-Status"
    case 208: return "Already Reported"
    case 226: return "IM Used"
    case 300: return "Multiple Choices"
    case 301: return "Moved Permanently"
    case 302: return "Found"
    case 303: return "See Other"
    case 304: return "Not Modified"
    case 305: return "Use Proxy"
    case 307: return "Temporary Redirect"
    case 308: return "Permanent Redirect"
    case 400: return "Bad Request"
    case 401: return "Unauthorized"
    case 402: return "Payment Required"
    case 403: return "Forbidden"
    case 404: return "Not Found"
    case 405: return "Method Not Allowed"
    case 406: return "Not Acceptable"
    case 407: return "Proxy Authentication Required"
    case 408: return "Request Timeout"
    case 409: return "Conflict"
    case 410: return "Gone"
    case 411: return "Length Required"
    case 412: return "Precondition Failed"
    case 413: return "Content Too Large"
    case 414: return "URI Too Long"
    case 415: return "Unsupported Media Type"
    case 416: return "Range Not Satisfiable"
    case 417: return "Expectation Failed"
    // RFC 9110 §15.5.19 reserves 418 without a phrase; this is the one every client knows.
    case 418: return "I'm a teapot"
    case 421: return "Misdirected Request"
    case 422: return "Unprocessable Content"
    case 423: return "Locked"
    case 424: return "Failed Dependency"
    case 425: return "Too Early"
    case 426: return "Upgrade Required"
    case 428: return "Precondition Required"
    case 429: return "Too Many Requests"
    case 431: return "Request Header Fields Too Large"
    case 451: return "Unavailable For Legal Reasons"
    case 500: return "Internal Server Error"
    case 501: return "Not Implemented"
    case 502: return "Bad Gateway"
    case 503: return "Service Unavailable"
    case 504: return "Gateway Timeout"
    case 505: return "HTTP Version Not Supported"
    case 506: return "Variant Also Negotiates"
    case 507: return "Insufficient Storage"
    case 508: return "Loop Detected"
    case 510: return "Not Extended"
    case 511: return "Network Authentication Required"
    default:
      switch status / 100 {
      case 1: return "Informational"
      case 2: return "Success"
      case 3: return "Redirection"
      case 4: return "Client Error"
      default: return "Server Error"
      }
    }
  }
}
