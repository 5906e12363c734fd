import GatehouseConfig
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging

/// One finished request, as the access log records it (Docs/logs.md). Header values, bodies and
/// credentials are never part of it (the query is logged with sensitive values masked, and
/// `User-Agent` is the one header value written).
public struct AccessRecord: Sendable {
  public var requestID: [UInt8]
  public var method: HTTPMethod
  /// The client's protocol: `HTTP/1.1` (or `HTTP/1.0`), `HTTP/2`.
  public var version: HTTPVersion
  public var path: ArraySlice<UInt8>
  /// The bytes after `?`; nil without one. Masked as it is written (`QueryMask`).
  public var query: ArraySlice<UInt8>?
  public var route: String?
  /// The upstream the request's route sends to; nil without one.
  public var upstream: String?
  public var status: Int
  public var upstreamStatus: Int?
  /// Why the gateway answered itself; nil for an answer the upstream gave.
  public var reason: LocalAnswerReason?
  public var cache: String?
  public var durationNanoseconds: UInt64
  /// From sending the request upstream to the answer's head; nil when none came.
  public var upstreamNanoseconds: UInt64?
  /// From sending the request upstream to the end of the answer's body; nil when it did not
  /// arrive whole (or the answer was none of the upstream's).
  public var upstreamEndNanoseconds: UInt64?
  /// Everything written to the client for this answer: status line, header fields and body
  /// as sent (with chunked framing).
  public var bytes: Int64
  /// The answer's body alone, as sent (after compression or the envelope, without chunked
  /// framing); 0 for a HEAD request or a bodiless status.
  public var bodyBytes: Int64
  /// The peer address, or the first `X-Forwarded-For` hop behind a trusted proxy.
  public var client: ArraySlice<UInt8>
  public var userAgent: ArraySlice<UInt8>?
  /// Why a bearer token was refused on a JWT route (`jwt_error`, written only then): the
  /// verifier's reason, never the token or a claim.
  public var jwtError: String?
  /// A WebSocket tunnel's bytes (`bytes_in`: client to upstream, `bytes_out`: upstream to
  /// client, after the handshake), written only for a tunnel.
  public var tunnelBytes: (in: Int64, out: Int64)?

  public init(
    requestID: [UInt8], method: HTTPMethod, version: HTTPVersion = .http1_1, path: ArraySlice<UInt8>,
    query: ArraySlice<UInt8>? = nil,
    route: String?, upstream: String? = nil, status: Int, upstreamStatus: Int?, reason: LocalAnswerReason? = nil,
    cache: String?, durationNanoseconds: UInt64, upstreamNanoseconds: UInt64? = nil, bytes: Int64,
    bodyBytes: Int64 = 0, client: ArraySlice<UInt8> = [], userAgent: ArraySlice<UInt8>? = nil
  ) {
    self.requestID = requestID
    self.method = method
    self.version = version
    self.path = path
    self.query = query
    self.route = route
    self.upstream = upstream
    self.status = status
    self.upstreamStatus = upstreamStatus
    self.reason = reason
    self.cache = cache
    self.durationNanoseconds = durationNanoseconds
    self.upstreamNanoseconds = upstreamNanoseconds
    self.bytes = bytes
    self.bodyBytes = bodyBytes
    self.client = client
    self.userAgent = userAgent
  }
}

/// Collects a loop's access lines and hands them to the logger in batches, so a busy loop
/// makes one `write` per batch instead of one per request.
public struct AccessLogBuffer {
  public private(set) var pending: [UInt8] = []
  public let flushThreshold: Int
  /// The query parameters whose values are masked (`log.mask_query`).
  public var queryMask: QueryMask

  public init(flushThreshold: Int = 32 * 1024, queryMask: QueryMask = QueryMask(names: LogConfig.defaultMaskedQuery)) {
    self.flushThreshold = flushThreshold
    self.queryMask = queryMask
  }

  public var needsFlush: Bool { pending.count >= flushThreshold }

  public mutating func append(_ record: AccessRecord) {
    Logger.appendPrefix(level: .info, msg: "access", to: &pending)
    pending.append(contentsOf: #","request_id":"#.utf8)
    JSONText.appendString(bytes: record.requestID, to: &pending)
    pending.append(contentsOf: #","method":"#.utf8)
    JSONText.appendString(record.method.name, to: &pending)
    pending.append(contentsOf: #","protocol":"#.utf8)
    // Literal bytes: no String made per line.
    if record.version == .http2 {
      pending.append(contentsOf: #""HTTP/2""#.utf8)
    } else if record.version == .http1_0 {
      pending.append(contentsOf: #""HTTP/1.0""#.utf8)
    } else {
      pending.append(contentsOf: #""HTTP/1.1""#.utf8)
    }
    pending.append(contentsOf: #","path":"#.utf8)
    JSONText.appendString(bytes: record.path, to: &pending)
    pending.append(contentsOf: #","query":"#.utf8)
    if let query = record.query { queryMask.appendJSONString(query, to: &pending) } else { null() }
    pending.append(contentsOf: #","route":"#.utf8)
    if let route = record.route { JSONText.appendString(route, to: &pending) } else { null() }
    pending.append(contentsOf: #","upstream":"#.utf8)
    if let upstream = record.upstream { JSONText.appendString(upstream, to: &pending) } else { null() }
    pending.append(contentsOf: #","status":"#.utf8)
    HTTPSerializer.appendDecimal(Int64(record.status), to: &pending)
    pending.append(contentsOf: #","upstream_status":"#.utf8)
    if let status = record.upstreamStatus {
      HTTPSerializer.appendDecimal(Int64(status), to: &pending)
    } else {
      null()
    }
    pending.append(contentsOf: #","reason":"#.utf8)
    if let reason = record.reason { JSONText.appendString(reason.rawValue, to: &pending) } else { null() }
    if let jwtError = record.jwtError {
      pending.append(contentsOf: #","jwt_error":"#.utf8)
      JSONText.appendString(jwtError, to: &pending)
    }
    if let tunnel = record.tunnelBytes {
      pending.append(contentsOf: #","bytes_in":"#.utf8)
      HTTPSerializer.appendDecimal(tunnel.in, to: &pending)
      pending.append(contentsOf: #","bytes_out":"#.utf8)
      HTTPSerializer.appendDecimal(tunnel.out, to: &pending)
    }
    pending.append(contentsOf: #","cache":"#.utf8)
    if let cache = record.cache { JSONText.appendString(cache, to: &pending) } else { null() }
    pending.append(contentsOf: #","duration_ms":"#.utf8)
    appendMilliseconds(record.durationNanoseconds)
    pending.append(contentsOf: #","upstream_ms":"#.utf8)
    if let upstream = record.upstreamNanoseconds { appendMilliseconds(upstream) } else { null() }
    pending.append(contentsOf: #","upstream_end_ms":"#.utf8)
    if let end = record.upstreamEndNanoseconds { appendMilliseconds(end) } else { null() }
    pending.append(contentsOf: #","bytes":"#.utf8)
    HTTPSerializer.appendDecimal(record.bytes, to: &pending)
    pending.append(contentsOf: #","body_bytes":"#.utf8)
    HTTPSerializer.appendDecimal(record.bodyBytes, to: &pending)
    pending.append(contentsOf: #","client":"#.utf8)
    JSONText.appendString(bytes: record.client, to: &pending)
    pending.append(contentsOf: #","user_agent":"#.utf8)
    if let agent = record.userAgent { JSONText.appendString(bytes: agent, to: &pending) } else { null() }
    pending.append(contentsOf: "}\n".utf8)
  }

  /// Milliseconds with three decimals, written as integer parts to avoid Double formatting.
  private mutating func appendMilliseconds(_ nanoseconds: UInt64) {
    let micros = nanoseconds / 1000
    HTTPSerializer.appendDecimal(Int64(micros / 1000), to: &pending)
    pending.append(0x2E)
    let fraction = Int(micros % 1000)
    pending.append(0x30 &+ UInt8(fraction / 100))
    pending.append(0x30 &+ UInt8(fraction / 10 % 10))
    pending.append(0x30 &+ UInt8(fraction % 10))
  }

  private mutating func null() { pending.append(contentsOf: "null".utf8) }

  /// Gives the batch to `logger` and empties the buffer.
  public mutating func flush(to logger: Logger) {
    guard !pending.isEmpty else { return }
    logger.writeLine(pending)
    pending.removeAll(keepingCapacity: true)
  }
}
