import GatehouseCompression
import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseJSON
import GatehouseNet
import GatehouseStore

/// One client connection. Requests are parsed as bytes arrive and run one at a time as an
/// `Exchange`; pipelined requests wait (their bytes held, reading paused) until the answer
/// before them is complete, so answers go out in order.
///
/// The session is the client's side of an exchange: `startExchange` gathers the request's
/// and route's facts, and its `ExchangeDriver` feeds them and every later event to the
/// exchange's `ExchangeMachine` and performs what it says, asking the session for answers
/// (`respondLocally`, answers from the store in `+Store`), output and deadlines (`+Deadlines`).
/// The upstream's answer is read by its `UpstreamAnswerReader`; the bytes for the client are
/// staged by the loop's `AnswerWriter`.
final class ClientSession: ServerResponder, UpstreamExchangeOwner {
  /// unowned(unsafe): a loop context lives as long as its loop, longer than anything on it,
  /// and plain `unowned` would cost an atomic reference-count operation per access.
  unowned(unsafe) let context: LoopContext
  /// The context's loop, kept here for the same reason: reading it through the context
  /// retained and released it on every deadline update.
  unowned(unsafe) let loop: EventLoop
  /// The loop's answer writer, which stages the bytes of each step in the loop's output
  /// buffer (unowned(unsafe) for the reason `context` is).
  unowned(unsafe) let answers: AnswerWriter
  /// The loop's cache work: lookups, stale answers, collapsed exchanges.
  unowned(unsafe) let routeCache: RouteCache
  /// The HTTP/1.1 connection: parsing, pipelining order, keep-alive, 100-continue, pausing
  /// and the connection's own deadlines. Nil for a session of an HTTP/2 stream, whose
  /// connection (`HTTP2ServerConnection`) holds the stream and, through it, the session.
  private(set) var http1: HTTP1ServerConnection?
  /// What the exchange's answer goes through: the HTTP/1.1 connection, or the HTTP/2
  /// stream. Read without reference counting: it is used at every step of an exchange, and
  /// a strong reference costs a retain and a release per access; it lives as long as the
  /// session is in use.
  private(set) unowned(unsafe) var server: (any ExchangeChannel)!
  /// The stream of a session of an HTTP/2 stream, held so that `server` stays valid for
  /// as long as anything holds the session (the stream lets go of the session when it closes).
  private var stream: HTTP2StreamChannel?
  /// The HTTP version of the client's requests, for the access line and metrics.
  let version: HTTPVersion
  /// The exchange's driver and the reader of its upstream answers, made in `init` and
  /// read like `server` (without reference counting).
  private var partsStorage: (driver: ExchangeDriver, reader: UpstreamAnswerReader)?
  private(set) unowned(unsafe) var driver: ExchangeDriver!
  private(set) unowned(unsafe) var reader: UpstreamAnswerReader!
  /// Bumped whenever the exchange starts or ends, so `run` can tell cheaply that the one it
  /// works on is over (an identity check of the optional reference retains and releases it).
  var exchangeSerial = 0
  let clientAddress: [UInt8]
  var exchange: Exchange? {
    didSet { exchangeSerial &+= 1 }
  }
  var closed = false
  /// What the responder deadline (`server.setResponderDeadline`) stands for.
  var deadlineKind = DeadlineKind.exchange
  /// Budget bytes (`limits.buffered_bytes`) of answers written but not yet taken by the client.
  var heldBufferCharge = 0
  /// When the client stopped taking the answer of an exchange that holds an upstream
  /// connection (loop time; 0 while it reads). See `UpstreamPool.evictStalledReaderIfDue`.
  var stalledSince: UInt64 = 0

  /// What the session's deadline is for.
  enum DeadlineKind {
    /// The one the exchange machine's phase calls for (`ExchangeMachine.deadline`).
    case exchange
    /// The request is pipelined behind other answers on its upstream connection: it waits
    /// at most `PipelinePolicy.queuePatienceNanoseconds` for its turn, then goes alone.
    case pipelineWait
  }

  /// The client came in over TLS: `X-Forwarded-Proto: https`.
  let secure: Bool

  /// A session of an HTTP/1.1 connection.
  init(context: LoopContext, answers: AnswerWriter, routeCache: RouteCache, peer: String, secure: Bool) {
    self.context = context
    self.answers = answers
    self.routeCache = routeCache
    loop = context.loop
    self.secure = secure
    clientAddress = Array(peer.utf8)
    version = .http1_1
    let server = HTTP1ServerConnection(
      responder: self, loop: context.loop, parserLimits: context.snapshot.limits,
      limits: Self.serverLimits(context.snapshot))
    http1 = server
    self.server = server
    makeParts()
  }

  /// A session of one HTTP/2 stream: `channel` holds it while the stream lives.
  init(
    context: LoopContext, answers: AnswerWriter, routeCache: RouteCache, clientAddress: [UInt8], secure: Bool,
    channel: HTTP2StreamChannel
  ) {
    self.context = context
    self.answers = answers
    self.routeCache = routeCache
    loop = context.loop
    self.secure = secure
    self.clientAddress = clientAddress
    version = .http2
    stream = channel
    server = channel
    makeParts()
  }

  private func makeParts() {
    let parts = (driver: ExchangeDriver(session: self), reader: UpstreamAnswerReader(session: self))
    partsStorage = parts
    driver = parts.driver
    reader = parts.reader
  }

  /// A proxy times request bodies itself (`limits.body_timeout_ms`, the idle timeout
  /// between pieces): the header timeout covers only the head.
  static func serverLimits(_ snapshot: GatewaySnapshot) -> HTTP1ServerLimits {
    HTTP1ServerLimits(
      headerTimeoutNanoseconds: snapshot.headerTimeoutNanoseconds,
      idleTimeoutNanoseconds: snapshot.idleTimeoutNanoseconds)
  }

  var connection: BufferedConnection? { http1?.connection }

  /// `connection` (whose delegate is `http1`) is registered.
  func start(_ connection: BufferedConnection, initial: UnsafeRawBufferPointer? = nil) {
    http1?.start(connection)
    if let initial, !initial.isEmpty { http1?.connection(connection, didRead: initial) }
  }

  /// The deadline the loop's sweep compares: the connection's or the exchange's (a
  /// tunnel's, once the connection is one: `+Tunnel`).
  var deadline: UInt64 {
    if let tunnel = exchange?.tunnel { return tunnel.deadline }
    return http1?.deadline ?? 0
  }

  func checkDeadline(now: UInt64) {
    if let tunnel = exchange?.tunnel {
      checkTunnelDeadline(tunnel, now: now)
      return
    }
    http1?.checkDeadline(now: now)
  }

  // MARK: The connection's events

  func serverReceivedHead(_ head: HTTPRequestHead) {
    startExchange(head)
  }

  func serverReceivedBody(_ bytes: UnsafeRawBufferPointer) {
    driver.forwardRequestBody(bytes)
  }

  func serverReceivedEnd() {
    // A bodiless request was complete from its head on: nothing for the machine to hear.
    guard let exchange, !exchange.machine.requestComplete else { return }
    driver.run(.clientEnd, on: exchange)
  }

  /// A request the parser refused: an envelope with the parse error's status (the
  /// connection then closes).
  func serverRefusedRequest(_ error: HTTPParseError) {
    let requestID = exchange?.requestID ?? context.requestIDs.next()
    var out: [UInt8] = []
    let body = GatewayAnswer.writeFailure(
      .badRequest(error), requestID: requestID, closeConnection: true, into: &out)
    let dropped = exchange
    if let exchange {
      // The request ends here: its place in a queue and its upstream connection go.
      performEnd(of: exchange)
    }
    let waiters = exchange.flatMap(routeCache.detachWaiters)
    exchange = nil
    defer { waiters?.release() }
    server.write(out)
    if let dropped {
      // A body that failed to parse: the request's own line, with the status it got.
      dropped.bytesSent = Int64(out.count)
      dropped.bodyBytes = Int64(body)
      dropped.reason = .badRequest
      record(dropped, status: error.status)
    } else {
      logLocal(status: error.status, reason: .badRequest, requestID: requestID, bytes: out.count, bodyBytes: body)
    }
  }

  /// Part of a request head came, not all of it in time: a 408 (the connection then closes).
  func serverRequestTimedOut() {
    let requestID = context.requestIDs.next()
    var out: [UInt8] = []
    let body = GatewayAnswer.writeFailure(.headerTimeout, requestID: requestID, closeConnection: true, into: &out)
    server.write(out)
    logLocal(status: 408, reason: .requestTimeout, requestID: requestID, bytes: out.count, bodyBytes: body)
  }

  func serverResponderDeadlinePassed() {
    switch deadlineKind {
    case .exchange: driver.exchangeDeadlinePassed()
    case .pipelineWait: driver.pipelineWaitPassed()
    }
  }

  /// Both the request and its answer are complete: the exchange is counted and logged.
  func serverExchangeFinished() {
    guard let exchange else { return }
    // Waiters are answered once this session is done with the exchange (their answers
    // use the loop's output buffer too).
    let waiters = routeCache.detachWaiters(of: exchange)
    defer { waiters?.release() }
    record(exchange, status: exchange.status)
    self.exchange = nil
  }

  /// The HTTP/2 stream whose exchange finished is over; the session will serve another
  /// stream of the connection. The exchange was recorded when it finished: only the
  /// answer's hold on the buffer budget is left to let go.
  func serverStreamEnded() {
    releaseHeldBufferCharge()
    stalledSince = 0
  }

  func serverClosed(reason: ConnectionCloseReason, answerStarted: Bool) {
    closed = true
    if let exchange {
      // A request the connection ended under still gets its access line and its count:
      // with the status already sent, else nginx's 499 (the client went away first) or
      // 444 (the gateway closed without an answer: drain timeout, a cut stream).
      let answered = exchange.machine.answerBegan || exchange.machine.phase == .answeredLocally
      let unanswered = reason == .closedByOwner ? 444 : 499
      performEnd(of: exchange)
      record(exchange, status: answered ? exchange.status : unanswered)
    }
    let waiters = exchange.flatMap(routeCache.detachWaiters)
    exchange = nil
    defer { waiters?.release() }
    releaseHeldBufferCharge()
    context.connectionClosed(self)
  }

  /// The exchange ends with its client: what the machine says of that (leaving a queue,
  /// discarding the upstream connection), short of its finish, which the caller records.
  private func performEnd(of exchange: Exchange) {
    for action in exchange.machine.handle(.clientGone) {
      switch action {
      case .leaveQueue:
        exchange.pool?.leaveQueue(self)
      case .discardUpstream:
        if let upstream = exchange.upstream {
          exchange.upstream = nil
          exchange.pool?.discard(upstream, by: self)
        }
      default:
        break
      }
    }
  }

  // MARK: Exchanges

  /// A request head is whole: the exchange starts with what the machine needs to know of
  /// the request and its route.
  private func startExchange(_ head: HTTPRequestHead) {
    let snapshot = context.snapshot
    // A reload's timeouts apply from the next request on.
    if let http1,
      http1.limits.headerTimeoutNanoseconds != snapshot.headerTimeoutNanoseconds
        || http1.limits.idleTimeoutNanoseconds != snapshot.idleTimeoutNanoseconds
    {
      http1.limits = Self.serverLimits(snapshot)
    }
    let requestID = ForwardingRules.requestID(from: head) ?? context.requestIDs.next()
    var name = head.method.name
    let match = name.withUTF8 { method in
      head.path.withUnsafeBytes { path in snapshot.routeTable.match(method: UnsafeRawBufferPointer(method), path: path)
      }
    }
    let exchange = Exchange(
      head: head, requestID: requestID, snapshot: snapshot, routeIndex: match?.routeIndex,
      startedAt: loop.iterationTime)
    self.exchange = exchange
    deadlineKind = .exchange
    let hasBody = ForwardingRules.hasBody(head)
    var facts = ExchangeMachine.RequestFacts(
      idempotent: head.method.isIdempotent, isHEAD: head.method == .head, hasBody: hasBody,
      expectsContinue: head.expectsContinue, bodyFollowsHead: server.inputFollowsHead)
    // Known before the client checks, so their 401 and 429 follow the route's envelope
    // settings (`always_200`) like every other answer of the route.
    if let match { exchange.envelope = snapshot.routePlans[match.routeIndex].envelope }
    if !snapshot.clients.isEmpty {
      switch snapshot.clients.verdict(for: head.headers) {
      case .anonymous:
        break
      case .missing:
        facts.refusal = .clientKeyMissing
      case .invalid:
        facts.refusal = .clientKeyInvalid
      case .client(let index):
        let client = snapshot.clients.clients[index]
        exchange.clientID = client.id
        // Docs/shared-tier.md: with a shared tier the limit is counted there, across replicas; the
        // machine waits for the count (`ExchangeDriver+RateLimit.swift`).
        if let bucket = client.bucket, context.sharedTier != nil {
          exchange.rateLimitBucket = bucket
          facts.awaitsRateLimit = true
        } else if let bucket = client.bucket,
          case .limited(let seconds) = snapshot.rateLimiter.take(bucket: bucket, nowMs: RateLimiter.clockMs())
        {
          exchange.retryAfterSeconds = seconds
          facts.refusal = .rateLimited
        }
      }
    }
    // Docs/jwt.md: the bearer token is checked before anything else the route does.
    if let match, facts.refusal == nil, let jwt = snapshot.routePlans[match.routeIndex].jwt {
      let admission = BearerAdmission()
      exchange.bearer = admission
      switch context.admitBearer(head, plan: jwt, admission: admission) {
      case .admitted:
        break
      case .refused(let refusal):
        facts.refusal = refusal
      case .awaitKeys:
        facts.awaitsSigningKeys = true
      }
    }
    // Docs/websockets.md: a WebSocket handshake, on a route that takes them (`+Tunnel`).
    if facts.refusal == nil {
      (facts.upgrade, facts.refusal) = webSocketVerdict(
        head, plan: match.map { snapshot.routePlans[$0.routeIndex] }, exchange: exchange)
    }
    if let match, facts.refusal == nil {
      let plan = snapshot.routePlans[match.routeIndex]
      var route = ExchangeMachine.RouteFacts()
      switch plan.stubMode {
      case .always: route.stub = .always(delayed: plan.stub.delay > .zero)
      case .fallback: route.stub = .fallback
      case .off: route.stub = .off
      }
      route.hasUpstream = plan.upstreamIndex != nil
      route.usesToken = plan.token != nil
      // Usually a value is at hand: taken now, it spares the machine a step. Only for a
      // request that goes straight to the upstream (no store, no body to read ahead): one
      // that may wait first takes the value current when it is sent.
      if let use = plan.token, plan.cache == nil, !hasBody, !facts.awaitsRateLimit, !facts.awaitsSigningKeys,
        let grant = context.usableToken(use.name, index: use.index)
      {
        exchange.tokenGrant = grant
        route.tokenAtHand = true
      }
      // A handshake's answer is a tunnel or the upstream's refusal: never a stored answer.
      route.usesStore = plan.cache != nil && !facts.upgrade
      route.usesSharedTier =
        !facts.upgrade && context.sharedTier != nil && (plan.cache?.staleIfErrorMs ?? 0) > 0
      route.enveloped = plan.envelope != nil
      if hasBody {
        route.bodyReadAhead = snapshot.bodyBufferBytes
        route.replayLimit = plan.token != nil ? ForwardingRules.maxReplayBody : 0
        route.pendingLimit = ForwardingRules.maxPendingBody
      }
      // Enveloped answers are compressed per client; stored ones may be gzip that a client
      // without gzip must get decoded.
      if plan.envelope != nil || plan.cache != nil,
        let value = head.headers.firstValue(lowercaseName: "accept-encoding")
      {
        exchange.acceptsGzip = AcceptEncoding.acceptsGzip(value)
      }
      if route.hasUpstream, plan.stubMode != .always {
        route.badTarget = snapshot.routeTable.rewriteCarriesEncodedDelimiter(for: match, requestPath: head.path)
        // A route without a base path or a rewrite sends the request's own target: its
        // bytes are used as they are, without a copy, when they are exactly the path and
        // the query (origin form). A route with a store builds its own array: the loop's key
        // memo keeps the target, and a slice would keep the whole request head alive.
        if plan.cache == nil, snapshot.routeTable.sendsTargetUnchanged(match), !head.path.isEmpty,
          head.target.count == head.path.count + (head.query.map { $0.count + 1 } ?? 0)
        {
          exchange.upstreamTarget = head.target
        } else {
          exchange.upstreamTarget =
            snapshot.routeTable.upstreamPath(
              for: match, requestPath: head.path, query: head.query)[...]
        }
      }
      if hasBody { exchange.bodyDeadline = loop.iterationTime &+ snapshot.bodyTimeoutNanoseconds }
      if plan.token != nil && hasBody { exchange.requestBodyCopy = [] }
      facts.route = route
    }
    driver.run(.started(facts), on: exchange)
  }

  // MARK: Answers made here

  /// `reason` says why, for the access line and `gatehouse_local_answers_total`.
  func respondLocally(failure: GatewayAnswer.Failure, reason: LocalAnswerReason, extraHeaders: [UInt8] = []) {
    exchange?.reason = reason
    // On `always_200` routes the gateway's own errors also travel as HTTP 200, the status
    // only in `code`.
    let status = exchange?.envelope?.httpStatus(failure.status) ?? failure.status
    // On a route with a cache this answer did not come from the store: say so, as every
    // answer of such a route does.
    respondLocally(
      status: status, body: GatewayAnswer.errorBody(status: failure.status, message: failure.message),
      extraHeaders: StoreEntryRules.cacheLines(exchange?.cacheResult) + extraHeaders)
  }

  /// Writes a whole answer made by the gateway (the caller has set the exchange's `reason`).
  /// What follows (the exchange's end, or reading the rest of the body) is the machine's.
  func respondLocally(status: Int, body: [UInt8], extraHeaders: [UInt8] = []) {
    guard let exchange else { return }
    let close = beginAnswer(.whole)
    answers.writeLocal(status: status, body: body, extraHeaders: extraHeaders, close: close, exchange: exchange)
    flushOutput()
  }

  /// Counts a finished (or abandoned) exchange and writes its access line; its share of
  /// the buffered-answer budget passes to the session.
  func record(_ exchange: Exchange, status: Int) {
    releaseWebSocketSlot(of: exchange)
    settleBufferCharge(exchange)
    context.record(exchange, status: status, client: clientAddress)
  }

  func logLocal(status: Int, reason: LocalAnswerReason, requestID: [UInt8], bytes: Int, bodyBytes: Int) {
    context.recordUnrouted(
      status: status, reason: reason, requestID: requestID, bytes: bytes, bodyBytes: bodyBytes, client: clientAddress,
      version: version)
  }

  // MARK: The upstream connection's events, for the exchange's driver and reader

  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer) -> Int {
    reader.upstreamDidRead(upstream, bytes)
  }

  func upstreamDidReadEOF(_ upstream: UpstreamConnection) {
    reader.upstreamDidReadEOF(upstream)
  }

  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason) {
    driver.upstreamDidClose(upstream, reason: reason)
  }

  func upstreamDroppedQueuedRequest(_ upstream: UpstreamConnection) {
    driver.upstreamDroppedQueuedRequest(upstream)
  }

  /// The exchange's tries so far, this one included once it is leased.
  var upstreamTryNumber: Int { max(1, (exchange?.machine.attempts ?? 0) + 1) }

  /// `pool` has room for the request this session queued there.
  func connectionRoomAvailable(on pool: UpstreamPool) {
    driver.connectionRoomAvailable(on: pool)
  }
}
