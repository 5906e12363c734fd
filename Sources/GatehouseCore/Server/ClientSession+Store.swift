import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// A session's use of the store: answers kept, answers served from it, and requests that
/// share one upstream exchange (collapsed forwarding).
extension ClientSession {
  // MARK: Collapsed forwarding

  /// The exchange this request waited for has ended with `outcome`.
  func collapsedExchangeEnded(_ waiter: Exchange, outcome: CollapseOutcome) {
    guard exchange === waiter, waiter.collapseRole == .waiting, !closed else { return }
    waiter.collapseRole = .none
    switch outcome {
    case .answer(let answer):
      waiter.upstreamStatus = answer.head.status
      waiter.collapsedAnswer = answer
      driver.run(.collapsedEnded(.answered))
    case .failed(let failure):
      driver.upstreamFailed(failure)
    case .retry:
      driver.run(.collapsedEnded(.retry))
    }
  }

  /// Answers from the store: the stored upstream answer, through the route's envelope.
  func serveStored(_ stored: StoredAnswer, result: CacheResult) {
    guard let exchange else { return }
    exchange.cacheResult = result
    // Refused before any work when the budget cannot take it: wrapping and copying a large
    // answer costs the loop milliseconds, which a flood of requests for it must not buy.
    if chargesKeptAnswer(stored.body.count, exchange: exchange),
      !context.shared.bufferedAnswerMightFit(stored.body.count, limit: exchange.snapshot.bufferedBytes)
    {
      context.shared.warnBufferedBudgetSpent(limit: exchange.snapshot.bufferedBytes)
      respondLocally(failure: .overloaded, reason: .overloaded)
      return
    }
    let (head, extra) = routeCache.servedForm(stored, result: result, nowMs: RFC3339.nowMilliseconds())
    let kept = writeKeptAnswer(
      head: head, body: stored.body,
      outcome: routeCache.envelopeOutcome(of: stored, head: head, policy: exchange.envelope), extra: extra)
    if let kept { routeCache.rememberShape(kept.shape, body: kept.body, of: stored, exchange: exchange) }
  }

  /// Answers from the store by a large answer's shape (`KeptAnswerShapes`): nothing is read
  /// from the file, wrapped or tagged; a body kept as sent is copied (and charged).
  func serveShaped(_ shaped: ShapedStoredAnswer, result: CacheResult) {
    guard let exchange else { return }
    exchange.cacheResult = result
    let age = StoreEntryRules.servedAge(
      initialAge: shaped.initialAge, storedAtMs: shaped.stored.storedAtMs, nowMs: RFC3339.nowMilliseconds())
    let close = beginAnswer(.whole)
    let sendsBody = !shaped.shape.answersWithoutBody(exchange.head, upstream: shaped.head)
    if sendsBody, let body = shaped.body {
      guard chargeKeptAnswer(body.count, exchange: exchange) else { return }
    }
    answers.writeShaped(
      shaped.shape, body: sendsBody ? shaped.body : nil, upstream: shaped.head,
      extra: StoreEntryRules.servedLines(result: result, age: age), close: close, exchange: exchange)
    flushOutput()
  }

  /// Writes a whole upstream answer kept in memory (stored, or shared by a collapsed
  /// exchange): `outcome` is its envelope, rendered by the caller. Returns the shape of
  /// what it wrote and its body as sent (nil when it answered otherwise: the budget spent,
  /// a body it could not decode).
  @discardableResult
  func writeKeptAnswer(head: HTTPResponseHead, body: [UInt8], outcome: EnvelopeOutcome, extra: [UInt8])
    -> (shape: KeptAnswerShape, body: [UInt8])?
  {
    guard let exchange else { return nil }
    let close = beginAnswer(.whole)
    let kept: (shape: KeptAnswerShape, body: [UInt8])?
    switch outcome {
    case .json(let status, let json), .unusable(let status, let json):
      guard chargeKeptAnswer(json.count, exchange: exchange) else { return nil }
      answers.writeKeptEnveloped(
        status: status, json: json, upstream: head, extra: extra, close: close, exchange: exchange)
      kept = answers.lastKept
    case .passThrough:
      var body = body
      var decoded = false
      if !exchange.acceptsGzip, let coding = ForwardingRules.field(head.headers, "content-encoding"),
        EnvelopeRenderer.isGzip(coding)
      {
        // Kept gzip (another client asked for it) goes to a client without gzip decoded,
        // as the upstream would have answered it (RFC 9110 §12.5.3).
        guard let plain = try? GzipDecoder.decode(body, maxOutputBytes: StoreEntryRules.maxDecodedKeptBody) else {
          // Not an answer from the store after all (nor a `STALE` one): the entry cannot
          // be served, so it goes, and the next request asks the upstream.
          if exchange.cacheResult == .hit || exchange.cacheResult == .stale {
            exchange.cacheResult = .miss
            if let key = exchange.cacheKey { context.store?.forget(key: key) }
          }
          respondLocally(failure: .upstreamUnavailable, reason: .storedAnswerUnusable)
          return nil
        }
        body = plain
        decoded = true
      }
      guard chargeKeptAnswer(body.count, exchange: exchange) else { return nil }
      answers.writeKept(head: head, body: body, extra: extra, decoded: decoded, close: close, exchange: exchange)
      kept = answers.lastKept
    }
    flushOutput()
    return kept
  }

  /// Answers from the store and those handed to collapsed waiters are written whole, a copy
  /// per client: one that does not read keeps its copy queued. So each copy of this size or
  /// more is taken out of `limits.buffered_bytes` until the client has it (smaller ones
  /// leave at once and cost nothing to count); on an HTTP/2 stream every copy is, since a
  /// connection's many streams could each keep one.
  static let chargedKeptAnswerBytes = 64 << 10

  /// Whether a kept answer of `count` bytes is taken out of the budget (see
  /// `chargedKeptAnswerBytes`; a HEAD sends no body).
  private func chargesKeptAnswer(_ count: Int, exchange: Exchange) -> Bool {
    (count >= Self.chargedKeptAnswerBytes || server.sharesConnection) && exchange.head.method != .head
  }

  /// Takes a kept answer's `count` bytes out of the budget; false, with a 503 `gateway
  /// overloaded` written instead, when it is spent.
  private func chargeKeptAnswer(_ count: Int, exchange: Exchange) -> Bool {
    guard chargesKeptAnswer(count, exchange: exchange) else { return true }
    if context.shared.chargeBufferedAnswer(count, limit: exchange.snapshot.bufferedBytes) {
      exchange.bufferCharge += count
      return true
    }
    context.shared.warnBufferedBudgetSpent(limit: exchange.snapshot.bufferedBytes)
    respondLocally(failure: .overloaded, reason: .overloaded)
    return false
  }

}
