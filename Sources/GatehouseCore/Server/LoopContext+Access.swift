import GatehouseHTTP
import GatehouseLogging
import GatehouseNet

/// How a loop counts its finished requests and writes their access lines.
extension LoopContext {
  /// Counters for a finished request of `snapshot`'s route `routeIndex` (nil: unrouted).
  func recordRequest(
    snapshot requestSnapshot: GatewaySnapshot, routeIndex: Int?, status: Int, nanoseconds: UInt64, http2: Bool = false
  ) {
    let counters: RouteCounters
    if let routeIndex {
      counters =
        requestSnapshot === snapshot
        ? metrics.routeSlots[routeIndex] : metrics.counters(forRoute: requestSnapshot.routePlans[routeIndex].name)
    } else {
      counters = metrics.unrouted
    }
    counters.record(status: status, nanoseconds: nanoseconds, http2: http2)
  }

  /// Counts a finished (or abandoned) exchange and writes its access line (`client`: the
  /// peer's address).
  func record(_ exchange: Exchange, status: Int, client: [UInt8]) {
    let elapsed = EventLoop.monotonicNanoseconds() &- exchange.startedAt
    if let result = exchange.cacheResult { metrics.cacheResults.count(result) }
    recordRequest(
      snapshot: exchange.snapshot, routeIndex: exchange.routeIndex, status: status, nanoseconds: elapsed,
      http2: exchange.head.version == .http2)
    let plan = exchange.routeIndex.map { exchange.snapshot.routePlans[$0] }
    if let reason = exchange.reason { metrics.countLocalAnswer(route: plan?.name ?? "", reason: reason) }
    guard snapshot.accessLogEnabled else { return }
    let head = exchange.head
    let proxies = snapshot.trustedProxies
    var line = AccessRecord(
      requestID: exchange.requestID, method: head.method, version: head.version, path: head.path, query: head.query,
      route: plan?.name,
      upstream: exchange.pool?.plan.name ?? plan?.upstreamName, status: status,
      upstreamStatus: exchange.upstreamStatus, reason: exchange.reason, cache: exchange.cacheResult?.rawValue,
      durationNanoseconds: elapsed,
      upstreamNanoseconds: exchange.headAt != 0 ? exchange.headAt &- exchange.sentAt : nil,
      bytes: exchange.bytesSent, bodyBytes: exchange.bodyBytes,
      // The forwarded field is looked up only when some proxy is trusted.
      client: proxies.client(
        peer: client,
        forwardedFor: proxies.isEmpty ? nil : head.headers.firstValue(lowercaseName: "x-forwarded-for")),
      userAgent: head.headers.firstValue(lowercaseName: "user-agent"))
    if exchange.endAt != 0 { line.upstreamEndNanoseconds = exchange.endAt &- exchange.sentAt }
    line.jwtError = exchange.bearer?.problem
    if let tunnel = exchange.tunnel { line.tunnelBytes = (tunnel.bytesIn, tunnel.bytesOut) }
    logAccess(line)
  }

  /// The line of an answer made before any request head was whole (a parse error, the
  /// header timeout): no method, path or route to tell.
  func recordUnrouted(
    status: Int, reason: LocalAnswerReason, requestID: [UInt8], bytes: Int, bodyBytes: Int, client: [UInt8],
    version: HTTPVersion = .http1_1
  ) {
    metrics.unrouted.record(status: status, nanoseconds: 0, http2: version == .http2)
    metrics.countLocalAnswer(route: "", reason: reason)
    guard snapshot.accessLogEnabled else { return }
    logAccess(
      AccessRecord(
        requestID: requestID, method: .other("-"), version: version, path: ArraySlice("-".utf8), route: nil,
        status: status,
        upstreamStatus: nil, reason: reason, cache: nil, durationNanoseconds: 0, bytes: Int64(bytes),
        bodyBytes: Int64(bodyBytes), client: client[...]))
  }
}
