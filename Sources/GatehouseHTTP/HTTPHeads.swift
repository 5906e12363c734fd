/// How a message's body is delimited (RFC 9112 §6.3).
public enum HTTPBodyFraming: Sendable, Hashable {
  /// No body at all (no framing headers, responses to HEAD, 1xx/204/304).
  case none
  case contentLength(Int64)
  case chunked
  /// A response body that ends when the connection closes.
  case untilClose
}

/// A parsed request line and header section.
public struct HTTPRequestHead: Sendable, Hashable {
  public var method: HTTPMethod
  /// The request target as sent (origin form: path and query); shares the head's storage.
  public var target: ArraySlice<UInt8> {
    didSet { queryMark = Self.queryMark(in: target) }
  }
  /// Where `?` is in `target`, found once: routing and the upstream target read the path
  /// and the query of every request.
  @usableFromInline var queryMark: Int?
  public var version: HTTPVersion
  public var headers: HTTPHeaders
  public var bodyFraming: HTTPBodyFraming
  /// Whether the connection may carry another request after this one.
  public var keepAlive: Bool
  /// `Expect: 100-continue` was sent (HTTP/1.1 only).
  public var expectsContinue: Bool

  public init(
    method: HTTPMethod, target: String, version: HTTPVersion = .http1_1,
    headers: HTTPHeaders = HTTPHeaders(), bodyFraming: HTTPBodyFraming = .none,
    keepAlive: Bool = true, expectsContinue: Bool = false
  ) {
    self.method = method
    self.target = ArraySlice(target.utf8)
    queryMark = Self.queryMark(in: self.target)
    self.version = version
    self.headers = headers
    self.bodyFraming = bodyFraming
    self.keepAlive = keepAlive
    self.expectsContinue = expectsContinue
  }

  @usableFromInline
  init(
    method: HTTPMethod, target: ArraySlice<UInt8>, version: HTTPVersion, headers: HTTPHeaders,
    bodyFraming: HTTPBodyFraming, keepAlive: Bool, expectsContinue: Bool
  ) {
    self.method = method
    self.target = target
    queryMark = Self.queryMark(in: target)
    self.version = version
    self.headers = headers
    self.bodyFraming = bodyFraming
    self.keepAlive = keepAlive
    self.expectsContinue = expectsContinue
  }

  public var targetString: String { String(decoding: target, as: UTF8.self) }

  /// The target up to the first "?".
  public var path: ArraySlice<UInt8> {
    if let q = queryMark { return target[..<q] }
    return target
  }

  /// The bytes after the first "?", or nil when there is no query.
  public var query: ArraySlice<UInt8>? {
    guard let q = queryMark else { return nil }
    return target[(q + 1)...]
  }

  @usableFromInline
  static func queryMark(in target: ArraySlice<UInt8>) -> Int? {
    target.withUnsafeBufferPointer { bytes in
      for i in bytes.indices where bytes[i] == ASCII.question { return target.startIndex + i }
      return nil
    }
  }
}

/// A parsed status line and header section.
public struct HTTPResponseHead: Sendable, Hashable {
  public var version: HTTPVersion
  public var status: Int
  public var reason: ArraySlice<UInt8>
  public var headers: HTTPHeaders
  public var bodyFraming: HTTPBodyFraming
  /// The declared Content-Length even where the body is absent (responses to HEAD, 304).
  public var contentLength: Int64?
  public var keepAlive: Bool

  public init(
    status: Int, reason: String = "", version: HTTPVersion = .http1_1,
    headers: HTTPHeaders = HTTPHeaders(), bodyFraming: HTTPBodyFraming = .none,
    contentLength: Int64? = nil, keepAlive: Bool = true
  ) {
    self.version = version
    self.status = status
    self.reason = ArraySlice(reason.utf8)
    self.headers = headers
    self.bodyFraming = bodyFraming
    self.contentLength = contentLength
    self.keepAlive = keepAlive
  }

  @usableFromInline
  init(
    version: HTTPVersion, status: Int, reason: ArraySlice<UInt8>, headers: HTTPHeaders,
    bodyFraming: HTTPBodyFraming, contentLength: Int64?, keepAlive: Bool
  ) {
    self.version = version
    self.status = status
    self.reason = reason
    self.headers = headers
    self.bodyFraming = bodyFraming
    self.contentLength = contentLength
    self.keepAlive = keepAlive
  }

  public var reasonString: String { String(decoding: reason, as: UTF8.self) }

  /// 1xx responses come before the final one and carry no body.
  public var isInformational: Bool { status >= 100 && status < 200 }
}
