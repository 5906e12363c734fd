import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// A session's use of the store: answers kept, answers served from it, and requests that
/// share one upstream exchange (collapsed forwarding).
extension ClientSession {
  /// Looks the request up: its key (or why it has none), then a stored answer the route
  /// may serve without the upstream (`fresh_s`, `stale_while_revalidate_s`), else a share
  /// of the exchange already with the upstream for the key (collapsed forwarding).
  func lookUpStore(_ exchange: Exchange) -> ExchangeMachine.StoreResult {
    guard let routeIndex = exchange.routeIndex, let cache = exchange.snapshot.routePlans[routeIndex].cache,
      let store = context.store, let upstreamName = exchange.snapshot.routePlans[routeIndex].upstreamName
    else { return .miss }
    let plan = exchange.snapshot.routePlans[routeIndex]
    // A GET or HEAD with a body is no request for the shared answer: the body may change
    // what the upstream answers, and the key does not hold it. Never looked up, stored or
    // collapsed.
    guard exchange.head.method == .get || exchange.head.method == .head, !ForwardingRules.hasBody(exchange.head) else {
      exchange.cacheResult = .bypass
      return .miss
    }
    // Credentials of the client's own that reach the backend make the answer theirs. A
    // keyed field the client's `Connection` names is dropped on the way, so the key would
    // hold a value the upstream never saw.
    if StoreEntryRules.forwardsClientCredentials(exchange, plan: plan, keyed: cache.vary)
      || StoreEntryRules.connectionNamesKeyedField(exchange.head, keyed: cache.vary)
    {
      exchange.cacheResult = .bypass
      return .miss
    }
    let key = store.key(StoreEntryRules.cacheKeyInputs(exchange, upstream: upstreamName, vary: cache.vary))
    exchange.cacheKey = key
    exchange.cacheResult = .miss
    if cache.answersWithoutUpstream {
      let now = RFC3339.nowMilliseconds()
      if let stored = store.lookup(id: key.id, nowMs: now) {
        switch cache.beforeUpstream(ageMs: now - stored.storedAtMs) {
        case .fresh:
          exchange.storedAnswer = stored
          return .fresh
        case .staleWhileRevalidate where CacheStorability.allowsStale(stored.headers):
          exchange.storedAnswer = stored
          return .staleWhileRevalidate
        case .staleWhileRevalidate, .none:
          break
        }
      }
    }
    return joinCollapsedExchange(exchange, cache: cache, routeIndex: routeIndex) ? .joinedCollapsed : .miss
  }

  /// A stored answer young enough for `stale_if_error_s`, when the upstream failed.
  func staleAnswer(for exchange: Exchange) -> StoredAnswer? {
    guard let key = exchange.cacheKey, let routeIndex = exchange.routeIndex,
      let cache = exchange.snapshot.routePlans[routeIndex].cache, cache.staleIfErrorMs > 0,
      let store = context.store
    else { return nil }
    let now = RFC3339.nowMilliseconds()
    guard let stored = store.lookup(id: key.id, nowMs: now), cache.allowsStaleIfError(ageMs: now - stored.storedAtMs),
      CacheStorability.allowsStale(stored.headers)
    else { return nil }
    return stored
  }

  /// The complete upstream answer of a request with a cache key, when it may be stored
  /// (raw: the envelope is applied when it is served, so envelope settings can change).
  func storableAnswer(_ exchange: Exchange) -> (head: HTTPResponseHead, body: [UInt8])? {
    guard exchange.hasCacheKey, let status = exchange.upstreamStatus, !exchange.answerFollowsDoubt else { return nil }
    switch exchange.bodyPlan {
    case .buffer:
      guard let head = exchange.bufferedHead, !exchange.bufferedTruncated,
        !exchange.answerParser.requestWasHEAD,
        CacheStorability.isStorable(status: status, headers: head.headers, keyed: StoreEntryRules.keyedNames(exchange))
      else { return nil }
      return (head, exchange.bufferedBody)
    case .passThrough:
      guard let tee = exchange.teeBody, let head = exchange.storableHead else { return nil }
      return (head, tee)
    case .streamWrapped:
      return nil
    }
  }

  func rememberAnswer(_ answer: (head: HTTPResponseHead, body: [UInt8]), exchange: Exchange) {
    guard let key = exchange.cacheKey, let store = context.store,
      let kept = StoreEntryRules.keptForm(
        answer.head, body: answer.body, gzipEntry: StoreEntryRules.isGzipEntry(exchange))
    else { return }
    store.remember(
      key: key, status: kept.head.status, headers: kept.head.headers, body: kept.body, nowMs: RFC3339.nowMilliseconds())
    // Should the connection turn out to carry answers nobody asked for, this one is in doubt.
    exchange.upstream?.lastStoredKey = key
  }

  // MARK: Collapsed forwarding

  /// Joins the GET for the same cache key that is already with the upstream, or becomes the
  /// one later requests join. Returns true when this request waits for another's answer.
  func joinCollapsedExchange(_ exchange: Exchange, cache: CachePolicy, routeIndex: Int) -> Bool {
    guard let key = exchange.cacheKey,
      RequestCollapsing.isCollapsible(
        method: exchange.head.method, hasBody: ForwardingRules.hasBody(exchange.head), enabled: cache.collapse)
    else { return false }
    guard let group = context.collapsing[key.id], group.isLive else {
      context.collapsing[key.id] = CollapseGroup(leader: exchange, routeIndex: routeIndex)
      exchange.collapseRole = .leading
      return false
    }
    // Another route or an older config may answer differently: go alone.
    guard group.admits(exchange, routeIndex: routeIndex),
      let upstreamIndex = exchange.snapshot.routePlans[routeIndex].upstreamIndex,
      let pool = context.pool(upstreamIndex, of: exchange.snapshot),
      RequestCollapsing.mayWait(
        circuit: pool.circuit,
        routeSound: pool.routeCircuits.isSound(route: exchange.snapshot.routePlans[routeIndex].name),
        healthy: context.upstreamHealthy[pool.plan.name])
    else { return false }
    group.add(self, exchange)
    exchange.collapseRole = .waiting
    context.metrics.collapsed &+= 1
    exchange.collapsePatience = EventLoop.nanoseconds(
      of: RequestCollapsing.waiterPatience(
        connectTimeout: pool.plan.connectTimeout, answerTimeout: pool.plan.answerTimeout))
    return true
  }

  /// Takes a leading exchange's group out of the loop's table (so a new request for the key
  /// leads anew); the caller releases the waiters when it is done with the exchange.
  func detachWaiters(of exchange: Exchange) -> CollapseGroup.Release? {
    guard exchange.collapseRole == .leading else { return nil }
    exchange.collapseRole = .none
    guard let key = exchange.cacheKey, let group = context.collapsing[key.id], group.isLed(by: exchange) else {
      return nil
    }
    context.collapsing[key.id] = nil
    return CollapseGroup.Release(group: group, outcome: exchange.collapseOutcome ?? .retry)
  }

  /// The exchange this request waited for has ended with `outcome`.
  func collapsedExchangeEnded(_ waiter: Exchange, outcome: CollapseOutcome) {
    guard exchange === waiter, waiter.collapseRole == .waiting, !closed else { return }
    waiter.collapseRole = .none
    switch outcome {
    case .answer(let answer):
      waiter.upstreamStatus = answer.head.status
      waiter.collapsedAnswer = answer
      run(.collapsedEnded(.answered))
    case .failed(let failure):
      upstreamFailed(failure)
    case .retry:
      run(.collapsedEnded(.retry))
    }
  }

  /// Answers from the store: the stored upstream answer, through the route's envelope.
  func serveStored(_ stored: StoredAnswer, result: CacheResult) {
    guard let exchange else { return }
    exchange.cacheResult = result
    // The gateway says how old the answer is now: the Age and Warning the upstream sent
    // with it (from a cache in front of it) described it then. That Age is where the
    // answer's age started (RFC 9111 §4.2.3), so it is added to the time spent in the store.
    var initialAge: Int64 = 0
    let fields = stored.headers.filter { field in
      let name = field.name.lowercased()
      // delta-seconds only (digits); longer than 10 digits is capped like any huge value,
      // so a hostile one cannot overflow the sum.
      if name == "age", initialAge == 0, !field.value.isEmpty, field.value.utf8.allSatisfy({ $0 &- 0x30 < 10 }) {
        initialAge =
          field.value.utf8.count > 10
          ? StoreEntryRules.maxInitialAge : min(Int64(field.value) ?? 0, StoreEntryRules.maxInitialAge)
      }
      return name != "age" && name != "warning"
    }
    let head = HTTPResponseHead(
      status: stored.status, headers: HTTPHeaders(fields.map { ($0.name, $0.value) }),
      bodyFraming: .contentLength(Int64(stored.body.count)))
    var extra = StoreEntryRules.cacheLines(result)
    // RFC 9111 §5.1: every answer from the store says how old it is.
    let age = initialAge + max(0, (RFC3339.nowMilliseconds() - stored.storedAtMs) / 1000)
    extra.append(contentsOf: "Age: \(age)\r\n".utf8)
    if result == .stale { extra.append(contentsOf: "Warning: 110 - \"Response is Stale\"\r\n".utf8) }
    var outcome = EnvelopeOutcome.passThrough
    if let policy = exchange.envelope {
      outcome = EnvelopeRenderer.render(
        status: stored.status, reason: HTTPStatusPhrase.reason(for: stored.status),
        contentType: ForwardingRules.field(head.headers, "content-type"),
        contentEncoding: ForwardingRules.field(head.headers, "content-encoding"),
        body: stored.body, truncated: false, policy: policy)
    }
    writeKeptAnswer(head: head, body: stored.body, outcome: outcome, extra: extra)
  }

  /// Writes a whole upstream answer kept in memory (stored, or shared by a collapsed
  /// exchange): `outcome` is its envelope, rendered by the caller.
  func writeKeptAnswer(head: HTTPResponseHead, body: [UInt8], outcome: EnvelopeOutcome, extra: [UInt8]) {
    guard let exchange else { return }
    let close = beginAnswer(.whole)
    switch outcome {
    case .json(let status, let json), .unusable(let status, let json):
      guard chargeKeptAnswer(json.count, exchange: exchange) else { return }
      answers.writeKeptEnveloped(
        status: status, json: json, upstream: head, extra: extra, close: close, exchange: exchange)
    case .passThrough:
      var body = body
      var except: HeaderNameSet?
      if !exchange.acceptsGzip, let coding = ForwardingRules.field(head.headers, "content-encoding"),
        EnvelopeRenderer.isGzip(coding)
      {
        // Kept gzip (another client asked for it) goes to a client without gzip decoded,
        // as the upstream would have answered it (RFC 9110 §12.5.3).
        guard let decoded = try? GzipDecoder.decode(body, maxOutputBytes: StoreEntryRules.maxDecodedKeptBody) else {
          // Not an answer from the store after all (nor a `STALE` one): the entry cannot
          // be served, so it goes, and the next request asks the upstream.
          if exchange.cacheResult == .hit || exchange.cacheResult == .stale {
            exchange.cacheResult = .miss
            if let key = exchange.cacheKey { context.store?.forget(key: key) }
          }
          respondLocally(failure: .upstreamUnavailable, reason: .storedAnswerUnusable)
          return
        }
        body = decoded
        except = StoreEntryRules.contentEncodingField
      }
      guard chargeKeptAnswer(body.count, exchange: exchange) else { return }
      answers.writeKept(head: head, body: body, extra: extra, except: except, close: close, exchange: exchange)
    }
    flushOutput()
  }

  /// Answers from the store and those handed to collapsed waiters are written whole, a copy
  /// per client: one that does not read keeps its copy queued. So each copy of this size or
  /// more is taken out of `limits.buffered_bytes` until the client has it (smaller ones
  /// leave at once and cost nothing to count).
  static let chargedKeptAnswerBytes = 64 << 10

  /// Takes a kept answer's `count` bytes out of the budget; false, with a 503 `gateway
  /// overloaded` written instead, when it is spent.
  private func chargeKeptAnswer(_ count: Int, exchange: Exchange) -> Bool {
    guard count >= Self.chargedKeptAnswerBytes, exchange.head.method != .head else { return true }
    if context.shared.chargeBufferedAnswer(count, limit: exchange.snapshot.bufferedBytes) {
      exchange.bufferCharge += count
      return true
    }
    context.shared.warnAboutLimit(
      "buffered answers reached limits.buffered_bytes", ["limit": .int(exchange.snapshot.bufferedBytes)])
    respondLocally(failure: .overloaded, reason: .overloaded)
    return false
  }

}
