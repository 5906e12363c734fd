import GatehouseHTTP

/// One finished request, as the access log records it (SPEC §8). Header values, bodies and
/// credentials are never part of it.
public struct AccessRecord: Sendable {
  public var requestID: [UInt8]
  public var method: HTTPMethod
  public var path: ArraySlice<UInt8>
  public var route: String?
  public var status: Int
  public var upstreamStatus: Int?
  public var cache: String?
  public var durationNanoseconds: UInt64
  public var bytes: Int64

  public init(
    requestID: [UInt8], method: HTTPMethod, path: ArraySlice<UInt8>, route: String?, status: Int,
    upstreamStatus: Int?, cache: String?, durationNanoseconds: UInt64, bytes: Int64
  ) {
    self.requestID = requestID
    self.method = method
    self.path = path
    self.route = route
    self.status = status
    self.upstreamStatus = upstreamStatus
    self.cache = cache
    self.durationNanoseconds = durationNanoseconds
    self.bytes = bytes
  }
}

/// Collects a loop's access lines and hands them to the logger in batches, so a busy loop
/// makes one `write` per batch instead of one per request.
public struct AccessLogBuffer {
  public private(set) var pending: [UInt8] = []
  public let flushThreshold: Int

  public init(flushThreshold: Int = 32 * 1024) {
    self.flushThreshold = flushThreshold
  }

  public var needsFlush: Bool { pending.count >= flushThreshold }

  public mutating func append(_ record: AccessRecord) {
    Logger.appendPrefix(level: .info, msg: "access", to: &pending)
    pending.append(contentsOf: #","request_id":"#.utf8)
    JSONText.appendString(bytes: record.requestID, to: &pending)
    pending.append(contentsOf: #","method":"#.utf8)
    JSONText.appendString(record.method.name, to: &pending)
    pending.append(contentsOf: #","path":"#.utf8)
    JSONText.appendString(bytes: record.path, to: &pending)
    pending.append(contentsOf: #","route":"#.utf8)
    if let route = record.route { JSONText.appendString(route, to: &pending) } else { null() }
    pending.append(contentsOf: #","status":"#.utf8)
    HTTPSerializer.appendDecimal(Int64(record.status), to: &pending)
    pending.append(contentsOf: #","upstream_status":"#.utf8)
    if let status = record.upstreamStatus {
      HTTPSerializer.appendDecimal(Int64(status), to: &pending)
    } else {
      null()
    }
    pending.append(contentsOf: #","cache":"#.utf8)
    if let cache = record.cache { JSONText.appendString(cache, to: &pending) } else { null() }
    pending.append(contentsOf: #","duration_ms":"#.utf8)
    // Milliseconds with three decimals, written as integer parts to avoid Double formatting.
    let micros = record.durationNanoseconds / 1000
    HTTPSerializer.appendDecimal(Int64(micros / 1000), to: &pending)
    pending.append(0x2E)
    let fraction = Int(micros % 1000)
    pending.append(0x30 &+ UInt8(fraction / 100))
    pending.append(0x30 &+ UInt8(fraction / 10 % 10))
    pending.append(0x30 &+ UInt8(fraction % 10))
    pending.append(contentsOf: #","bytes":"#.utf8)
    HTTPSerializer.appendDecimal(record.bytes, to: &pending)
    pending.append(contentsOf: "}\n".utf8)
  }

  private mutating func null() { pending.append(contentsOf: "null".utf8) }

  /// Gives the batch to `logger` and empties the buffer.
  public mutating func flush(to logger: Logger) {
    guard !pending.isEmpty else { return }
    logger.writeLine(pending)
    pending.removeAll(keepingCapacity: true)
  }
}
