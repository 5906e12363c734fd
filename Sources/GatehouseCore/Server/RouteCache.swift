import GatehouseHTTP
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// One loop's cache work for exchanges on routes with a `cache` block: the lookup before
/// the upstream (a fresh or stale-while-revalidate answer, else a share of the exchange
/// already with the upstream for the key), stored answers that stand in for a failing
/// upstream (`stale_if_error_s`), keeping good answers, and the table of collapsed exchanges.
/// It decides and reads; writing answers and feeding the exchange machine is the session's.
/// Confined to its loop.
final class RouteCache {
  /// unowned(unsafe): the loop context owns this and outlives it.
  private unowned(unsafe) let context: LoopContext
  private let store: LoopStore?
  /// GETs with the upstream that others wait for, by cache id (see `RequestCollapsing`).
  private var collapsing: [String: CollapseGroup] = [:]
  /// The last stored answer put through an envelope and what that gave (see
  /// `envelopeOutcome`).
  private var lastRendered: RenderedStoredAnswer?
  /// The served head of the last stored answer served (see `servedForm`).
  private var lastServed: ServedStoredHead?
  /// The lines added to the last stored answer served, and what they say: most answers
  /// from the store in a second say the same (`HIT`, the same age).
  private var lastLines: (result: CacheResult, age: Int64, lines: [UInt8])?
  /// What large stored answers served here looked like, for HEADs and met conditions.
  private var shapes = KeptAnswerShapes()

  private final class ServedStoredHead {
    /// Held so that its buffer stays the one compared (see `Array.sharesBuffer`).
    let headers: StoredHeaders
    let status: Int
    let bodyCount: Int
    let head: HTTPResponseHead
    let initialAge: Int64

    init(headers: StoredHeaders, status: Int, bodyCount: Int, head: HTTPResponseHead, initialAge: Int64) {
      self.headers = headers
      self.status = status
      self.bodyCount = bodyCount
      self.head = head
      self.initialAge = initialAge
    }
  }

  // Classes, not structs: looking a memo up then costs one retain, not one per field.
  private final class RenderedStoredAnswer {
    let body: [UInt8]
    /// The stored headers it was rendered with: the same buffer has the same type and coding.
    let headers: StoredHeaders
    let status: Int
    let contentType: ArraySlice<UInt8>?
    let contentEncoding: ArraySlice<UInt8>?
    let policy: EnvelopePolicy
    let outcome: EnvelopeOutcome

    init(
      body: [UInt8], headers: StoredHeaders, status: Int, contentType: ArraySlice<UInt8>?,
      contentEncoding: ArraySlice<UInt8>?, policy: EnvelopePolicy, outcome: EnvelopeOutcome
    ) {
      self.body = body
      self.headers = headers
      self.status = status
      self.contentType = contentType
      self.contentEncoding = contentEncoding
      self.policy = policy
      self.outcome = outcome
    }
  }

  /// Stored bodies up to this size have their envelope remembered (the recent answers keep
  /// no larger ones either).
  static let rememberedRenderBytes = 256 << 10

  init(context: LoopContext, store: LoopStore?) {
    self.context = context
    self.store = store
  }

  /// Looks the request up: its key (or why it has none), then a stored answer the route
  /// may serve without the upstream (`fresh_s`, `stale_while_revalidate_s`), else a share
  /// of the exchange already with the upstream for the key (collapsed forwarding).
  func lookUp(_ exchange: Exchange, for session: ClientSession) -> ExchangeMachine.StoreResult {
    guard let routeIndex = exchange.routeIndex, let cache = exchange.snapshot.routePlans[routeIndex].cache,
      let store, let upstreamName = exchange.snapshot.routePlans[routeIndex].upstreamName
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
      if let shaped = shapedAnswer(for: exchange, id: key.id),
        case .fresh = cache.beforeUpstream(
          ageMs: StoreEntryRules.elapsedMs(since: shaped.stored.storedAtMs, nowMs: now))
      {
        exchange.storedShape = shaped
        return .fresh
      }
      if exchange.head.method != .head, let size = store.knownLargeBodySize(id: key.id),
        !context.shared.bufferedAnswerMightFit(size, limit: exchange.snapshot.bufferedBytes)
      {
        // Read whole from the file for each request, a large entry would cost the loop its
        // size in work for every request refused after the read.
        context.shared.warnBufferedBudgetSpent(limit: exchange.snapshot.bufferedBytes)
        return .overloaded
      }
      if let stored = store.lookup(id: key.id, nowMs: now) {
        switch cache.beforeUpstream(ageMs: StoreEntryRules.elapsedMs(since: stored.storedAtMs, nowMs: now)) {
        case .fresh:
          exchange.storedAnswer = stored
          return .fresh
        case .staleWhileRevalidate where CacheStorability.allowsStale(stored.headers):
          exchange.storedAnswer = stored
          exchange.revalidation = stored
          return .staleWhileRevalidate
        case .staleWhileRevalidate, .none:
          break
        }
        // No longer to be served as it is: the upstream is asked whether it is still
        // current (a `304` renews it without sending the body again).
        if !StoreEntryRules.validatorLines(stored).isEmpty { exchange.revalidation = stored }
      }
    }
    return joinCollapsed(exchange, of: session, cache: cache, routeIndex: routeIndex) ? .joinedCollapsed : .miss
  }

  /// A stored answer as it is served at `nowMs` (`StoreEntryRules.servedForm`). Its head
  /// depends on the stored status, headers and body length only, so a stored answer served
  /// over and over (a hot entry, an outage) has it made once while it is the last one
  /// served: the same headers buffer, status and length give the same head. The lines that
  /// change with time (`Age`) are made for each answer.
  func servedForm(_ stored: StoredAnswer, result: CacheResult, nowMs: Int64) -> (
    head: HTTPResponseHead, extra: [UInt8]
  ) {
    let head: HTTPResponseHead
    let initialAge: Int64
    if let last = lastServed, last.status == stored.status, last.bodyCount == stored.body.count,
      last.headers.sharesBuffer(with: stored.headers)
    {
      (head, initialAge) = (last.head, last.initialAge)
    } else {
      (head, initialAge) = StoreEntryRules.servedHead(stored)
      lastServed = ServedStoredHead(
        headers: stored.headers, status: stored.status, bodyCount: stored.body.count, head: head,
        initialAge: initialAge)
    }
    let age = StoreEntryRules.servedAge(initialAge: initialAge, storedAtMs: stored.storedAtMs, nowMs: nowMs)
    if let last = lastLines, last.result == result, last.age == age { return (head, last.lines) }
    let lines = StoreEntryRules.servedLines(result: result, age: age)
    lastLines = (result, age, lines)
    return (head, lines)
  }

  /// A stored answer through the route's envelope (`passThrough` without one); `head`: its
  /// served form. A stored answer served over and over (a hot entry, an outage) is checked
  /// and wrapped once while it is the last one: the remembered body array pins its buffer
  /// (a shared buffer is copied before it is written), so a body in that same buffer, with
  /// the same status, type, coding and envelope settings, renders the same. The same stored
  /// headers buffer has the same type and coding, so they are only looked up when it differs.
  func envelopeOutcome(of stored: StoredAnswer, head: HTTPResponseHead, policy: EnvelopePolicy?)
    -> EnvelopeOutcome
  {
    guard let policy else { return .passThrough }
    let last = lastRendered
    if let last, last.status == stored.status, last.body.sharesBuffer(with: stored.body),
      last.headers.sharesBuffer(with: stored.headers), last.policy == policy
    {
      return last.outcome
    }
    let contentType = ForwardingRules.field(head.headers, "content-type")
    let contentEncoding = ForwardingRules.field(head.headers, "content-encoding")
    if let last, last.status == stored.status, last.body.sharesBuffer(with: stored.body),
      last.contentType == contentType, last.contentEncoding == contentEncoding, last.policy == policy
    {
      return last.outcome
    }
    let outcome = EnvelopeRenderer.render(
      status: stored.status, reason: HTTPStatusPhrase.reason(for: stored.status), contentType: contentType,
      contentEncoding: contentEncoding, body: stored.body, truncated: false, policy: policy)
    lastRendered =
      stored.body.count <= Self.rememberedRenderBytes
      ? RenderedStoredAnswer(
        body: stored.body, headers: stored.headers, status: stored.status, contentType: contentType,
        contentEncoding: contentEncoding,
        policy: policy, outcome: outcome)
      : nil
    return outcome
  }

  /// A large stored answer for `exchange` by the shape this loop last served its body in
  /// (with the same envelope settings and coding), when that needs no read of the body: the
  /// request needs none (`KeptAnswerShape.answersWithoutBody`), or the loop keeps the body as
  /// sent. Else nil.
  private func shapedAnswer(for exchange: Exchange, id: String) -> ShapedStoredAnswer? {
    let request = exchange.head
    guard shapes.count > 0, let stored = store?.lookupLargeHead(id: id),
      let (shape, body) = shapes.shape(
        for: shapeKey(stored.bodyDigest, status: stored.status, headers: stored.headers, exchange))
    else { return nil }
    let (head, initialAge) = StoreEntryRules.servedHead(
      status: stored.status, headers: stored.headers, bodyCount: stored.bodyCount)
    guard body != nil || shape.answersWithoutBody(request, upstream: head) else { return nil }
    return ShapedStoredAnswer(stored: stored, head: head, initialAge: initialAge, shape: shape, body: body)
  }

  private func shapeKey(_ digest: [UInt8], status: Int, headers: StoredHeaders, _ exchange: Exchange)
    -> KeptAnswerShapes.Key
  {
    KeptAnswerShapes.Key(
      bodyDigest: digest, status: status, headers: headers, policy: exchange.envelope,
      acceptsGzip: exchange.acceptsGzip)
  }

  /// Remembers how a stored answer read from the file was served to `exchange` (`body`: the
  /// bytes as sent), when its body is too large for the loop's memory of recent answers
  /// (smaller ones are read from there, at no cost worth saving).
  func rememberShape(_ shape: KeptAnswerShape, body: [UInt8]?, of stored: StoredAnswer, exchange: Exchange) {
    guard let digest = stored.bodyDigest, stored.body.count > Self.rememberedRenderBytes else { return }
    shapes.remember(shape, body: body, for: shapeKey(digest, status: stored.status, headers: stored.headers, exchange))
  }

  /// Finds a stored answer that may stand in for a failed upstream (`staleAnswer`) and
  /// puts it in `exchange.storedAnswer`, or in `exchange.storedShape` when the request
  /// needs no body from a large one. Returns whether there is one.
  func findStaleAnswer(for exchange: Exchange) -> Bool {
    exchange.storedAnswer = nil
    exchange.storedShape = nil
    if let key = exchange.cacheKey, let routeIndex = exchange.routeIndex,
      let cache = exchange.snapshot.routePlans[routeIndex].cache, cache.staleIfErrorMs > 0,
      let shaped = shapedAnswer(for: exchange, id: key.id),
      cache.allowsStaleIfError(
        ageMs: StoreEntryRules.elapsedMs(since: shaped.stored.storedAtMs, nowMs: RFC3339.nowMilliseconds())),
      CacheStorability.allowsStale(shaped.stored.headers)
    {
      exchange.storedShape = shaped
      return true
    }
    exchange.storedAnswer = staleAnswer(for: exchange)
    return exchange.storedAnswer != nil
  }

  /// A stored answer young enough for `stale_if_error_s`, when the upstream failed.
  func staleAnswer(for exchange: Exchange) -> StoredAnswer? {
    guard let key = exchange.cacheKey, let routeIndex = exchange.routeIndex,
      let cache = exchange.snapshot.routePlans[routeIndex].cache, cache.staleIfErrorMs > 0,
      let store
    else { return nil }
    let now = RFC3339.nowMilliseconds()
    guard let stored = store.lookup(id: key.id, nowMs: now),
      cache.allowsStaleIfError(ageMs: StoreEntryRules.elapsedMs(since: stored.storedAtMs, nowMs: now)),
      CacheStorability.allowsStale(stored.headers)
    else { return nil }
    return stored
  }

  func remember(_ answer: (head: HTTPResponseHead, body: [UInt8]), exchange: Exchange) {
    guard let key = exchange.cacheKey, let store,
      let kept = StoreEntryRules.keptForm(
        answer.head, body: answer.body, gzipEntry: StoreEntryRules.isGzipEntry(exchange))
    else { return }
    let queued = store.remember(
      key: key, status: kept.head.status, headers: kept.head.headers, body: kept.body, decoded: kept.decoded,
      nowMs: RFC3339.nowMilliseconds())
    if let queued, let routeIndex = exchange.routeIndex, let policy = exchange.snapshot.routePlans[routeIndex].cache {
      context.writeBehind(queued, key: key, policy: policy)
    }
    // Should the connection turn out to carry answers nobody asked for, this one is in doubt.
    exchange.upstream?.lastStoredKey = key
  }

  // MARK: Collapsed forwarding

  /// Joins the GET for the same cache key that is already with the upstream, or becomes the
  /// one later requests join. Returns true when this request waits for another's answer.
  private func joinCollapsed(
    _ exchange: Exchange, of session: ClientSession, cache: CachePolicy, routeIndex: Int
  ) -> Bool {
    guard let key = exchange.cacheKey,
      RequestCollapsing.isCollapsible(
        method: exchange.head.method, hasBody: ForwardingRules.hasBody(exchange.head), enabled: cache.collapse)
    else { return false }
    guard let group = collapsing[key.id], group.isLive else {
      collapsing[key.id] = CollapseGroup(leader: exchange, routeIndex: routeIndex)
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
    group.add(session, exchange)
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
    guard let key = exchange.cacheKey, let group = collapsing[key.id], group.isLed(by: exchange) else {
      return nil
    }
    collapsing[key.id] = nil
    return CollapseGroup.Release(group: group, outcome: exchange.collapseOutcome ?? .retry)
  }
}
