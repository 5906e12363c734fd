import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseNet
import GatehouseStore

/// One client connection. Requests are parsed as bytes arrive and run one at a time as an
/// `Exchange`; pipelined requests wait (their bytes held, reading paused) until the answer
/// before them is complete, so answers go out in order.
///
/// The proxy flow: `startExchange` → `sendUpstream` → request body
/// (`ClientSession+RequestBody.swift`) →
/// `upstreamDidRead` (`beginResponse`, body, `completeResponse`, in
/// `ClientSession+UpstreamAnswer.swift`) → `finishExchange`. The store, envelope and token
/// parts are in `ClientSession+Store.swift`, `ClientSession+Envelope.swift` and
/// `ClientSession+Tokens.swift`, output and deadlines in `ClientSession+Deadlines.swift`;
/// `Exchange` is in `Exchange.swift`.
final class ClientSession: ConnectionDelegate, UpstreamExchangeOwner {
  /// unowned(unsafe): a loop context lives as long as its loop, longer than anything on it,
  /// and plain `unowned` would cost an atomic reference-count operation per access.
  unowned(unsafe) let context: LoopContext
  /// The context's loop, kept here for the same reason: reading it through the context
  /// retained and released it on every deadline update.
  unowned(unsafe) let loop: EventLoop
  var connection: BufferedConnection?
  private var parser: HTTPRequestParser
  let clientAddress: [UInt8]
  /// Input that arrived while an exchange was in flight; parsed once it is finished.
  var held: [UInt8] = []
  var exchange: Exchange?
  /// Set once the connection must end after the current answer.
  var closeAfterResponse = false
  var closed = false
  /// Inside `consume`: finishing an exchange there must not re-enter the parse loop.
  var consuming = false
  /// Bytes followed the last request head in the read that brought it.
  var inputFollowsHead = false
  var sawAnyByte = false
  /// Monotonic nanoseconds when `deadlineKind` expires; 0 for none.
  var deadline: UInt64 = 0
  var deadlineKind = DeadlineKind.header
  /// What the client had acknowledged when the running `.idle` or `.clientWrite` deadline
  /// was armed: one that acknowledged more meanwhile is slow, not gone (`setWriteDeadline`).
  var writeMark: Int64 = ClientSession.noWriteMark
  var pausedReasons: Set<PauseReason> = []
  /// Held pipelined requests wait for the client to read what it was sent.
  var resumeOnDrain = false
  /// Budget bytes (`limits.buffered_bytes`) of answers written but not yet taken by the client.
  var heldBufferCharge = 0
  /// When the client stopped taking the answer of an exchange that holds an upstream
  /// connection (loop time; 0 while it reads). See `UpstreamPool.evictStalledReaderIfDue`.
  var stalledSince: UInt64 = 0

  enum DeadlineKind {
    case header
    case idle
    /// The upstream has the head; the client must keep sending the body (idle timeout).
    case requestUpload
    case upstreamResponse
    /// The client stopped reading an answer (its queue is full): it must drain within the
    /// idle timeout. The upstream's response timeout does not run meanwhile.
    case clientWrite
    case stubDelay
    /// The request is pipelined behind other answers: it waits at most
    /// `PipelinePolicy.queuePatienceNanoseconds` for its turn, then goes alone.
    case pipelineWait
    /// Every connection the upstream's `max_connections` allows is busy: the request waits
    /// for one up to the upstream's queue timeout.
    case connectionQueue
  }

  enum PauseReason: Hashable {
    case pipelining
    case upstreamBackpressure
  }

  /// The client came in over TLS: `X-Forwarded-Proto: https`.
  let secure: Bool

  init(context: LoopContext, peer: String, secure: Bool) {
    self.context = context
    loop = context.loop
    self.secure = secure
    parser = HTTPRequestParser(limits: context.snapshot.limits)
    clientAddress = Array(peer.utf8)
  }

  func start() {
    setDeadline(.header, nanoseconds: context.snapshot.headerTimeoutNanoseconds)
  }

  // MARK: Input from the client

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    sawAnyByte = true
    if !held.isEmpty {
      held.append(contentsOf: bytes)
      return
    }
    consume(bytes)
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    do {
      if case .end? = try parser.finish() { requestEnded() }
    } catch {
      connection.abort()
      return
    }
    // A client may half-close after sending its request; the answer still goes out.
    closeAfterResponse = true
    if exchange == nil { connection.close() }
  }

  /// Parses as many events as `bytes` hold. Bytes after a complete request that is still
  /// being answered are held, and reading pauses until the answer is complete.
  func consume(_ bytes: UnsafeRawBufferPointer) {
    consuming = true
    defer { consuming = false }
    var offset = 0
    // Once the connection is to end after an answer that is done, nothing more is read from
    // it: a request behind would be forwarded and its answer never delivered.
    while !closed && !(exchange == nil && closeAfterResponse) {
      if exchange == nil, offset < bytes.count, connection?.isAboveHighWatermark == true {
        held.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
        setClientReadingPaused(true, reason: .pipelining)
        resumeOnDrain = true
        return
      }
      if let exchange, exchange.requestComplete {
        if offset < bytes.count {
          held.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
          setClientReadingPaused(true, reason: .pipelining)
        }
        return
      }
      let start = offset
      let step: (step: HTTPParseStep, consumed: Int)
      do {
        step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        refuse(error)
        return
      }
      offset += step.consumed
      switch step.step {
      case .needMore:
        if exchange == nil && !parser.isIdle && deadlineKind != .header {
          setDeadline(.header, nanoseconds: context.snapshot.headerTimeoutNanoseconds)
        }
        return
      case .head:
        // A client that sent its body without waiting for 100 Continue has it (or part of it)
        // right behind the head: it is read and dropped after a local answer, as ever.
        inputFollowsHead = offset < bytes.count
        startExchange(parser.takeHead())
      case .body(let range):
        exchange?.requestBodyStarted = true
        forwardRequestBody(
          UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)]))
      case .end:
        requestEnded()
      }
    }
  }

  /// A request the parser refused: an envelope with the parse error's status, then close.
  private func refuse(_ error: HTTPParseError) {
    closeAfterResponse = true
    if exchange?.responseStarted == true {
      // Part of an answer is out: cutting the connection is the only honest signal left
      // (the exchange is recorded when the connection reports its end).
      abort()
      return
    }
    if let exchange, exchange.responseComplete {
      // The gateway already answered (a 401, a 429) while the body was still coming: a
      // second answer would be one too many; the exchange ends with the one it got.
      let waiters = detachWaiters(of: exchange)
      self.exchange = nil
      defer { waiters?.release() }
      record(exchange, status: exchange.status)
      connection?.close()
      return
    }
    let requestID = exchange?.requestID ?? context.requestIDs.next()
    var out: [UInt8] = []
    let body = GatewayResponse.writeFailure(
      .badRequest(error), requestID: requestID, closeConnection: true, into: &out)
    if let upstream = exchange?.upstream { exchange?.pool?.discard(upstream, by: self) }
    let dropped = exchange
    let waiters = exchange.flatMap(detachWaiters)
    exchange = nil
    defer { waiters?.release() }
    _ = connection?.write(out)
    if let dropped {
      // A body that failed to parse: the request's own line, with the status it got.
      dropped.bytesSent = Int64(out.count)
      dropped.bodyBytes = Int64(body)
      dropped.reason = .badRequest
      record(dropped, status: error.status)
    } else {
      logLocal(status: error.status, reason: .badRequest, requestID: requestID, bytes: out.count, bodyBytes: body)
    }
    connection?.close()
  }

  // MARK: Exchanges

  private func startExchange(_ head: HTTPRequestHead) {
    let snapshot = context.snapshot
    let requestID = Self.requestID(from: head) ?? context.requestIDs.next()
    var name = head.method.name
    let match = name.withUTF8 { method in
      head.path.withUnsafeBytes { path in snapshot.routeTable.match(method: UnsafeRawBufferPointer(method), path: path)
      }
    }
    exchange = Exchange(
      head: head, requestID: requestID, snapshot: snapshot, routeIndex: match?.routeIndex,
      startedAt: loop.iterationTime)
    // Known before the client checks, so their 401 and 429 follow the route's envelope
    // settings (`always_200`) like every other answer of the route.
    if let match { exchange?.envelope = snapshot.routePlans[match.routeIndex].envelope }
    deadline = 0
    if !snapshot.clients.isEmpty, let exchange {
      switch snapshot.clients.verdict(for: head.headers) {
      case .anonymous:
        break
      case .missing:
        respondLocally(failure: .clientKeyMissing, reason: .clientKeyMissing, extraHeaders: Self.apiKeyChallenge)
        return
      case .invalid:
        respondLocally(failure: .clientKeyInvalid, reason: .clientKeyInvalid, extraHeaders: Self.apiKeyChallenge)
        return
      case .client(let index):
        let client = snapshot.clients.clients[index]
        exchange.clientID = client.id
        if let bucket = client.bucket,
          case .limited(let seconds) = snapshot.rateLimiter.take(bucket: bucket, nowMs: RateLimiter.clockMs())
        {
          respondLocally(
            failure: .rateLimited, reason: .rateLimited, extraHeaders: Array("Retry-After: \(seconds)\r\n".utf8))
          return
        }
      }
    }
    guard let match else {
      respondLocally(
        failure: .noRoute(method: head.method.name, path: String(decoding: head.path, as: UTF8.self)), reason: .noRoute)
      return
    }
    let plan = snapshot.routePlans[match.routeIndex]
    // Enveloped answers are compressed per client; stored ones may be gzip that a client
    // without gzip must get decoded.
    if plan.envelope != nil || plan.cache != nil, let value = head.headers.firstValue(lowercaseName: "accept-encoding")
    {
      exchange?.acceptsGzip = AcceptEncoding.acceptsGzip(value)
    }
    switch plan.stubMode {
    case .always:
      answerWithStub(plan)
      return
    case .off, .fallback:
      break
    }
    guard plan.upstreamIndex != nil else {
      respondLocally(failure: .upstreamUnavailable, reason: .noUpstream)
      return
    }
    if snapshot.routeTable.rewriteCarriesEncodedDelimiter(for: match, requestPath: head.path) {
      respondLocally(failure: .badRequest(.invalidTarget), reason: .badRequest)
      return
    }
    exchange?.upstreamTarget = snapshot.routeTable.upstreamPath(
      for: match, requestPath: head.path, query: head.query)
    if Self.hasBody(head) { exchange?.bodyDeadline = loop.iterationTime &+ snapshot.bodyTimeoutNanoseconds }
    if plan.token != nil && Self.hasBody(head) { exchange?.requestBodyCopy = [] }
    if let cache = plan.cache, let exchange {
      if answerFromStoreBeforeUpstream(exchange, plan: plan, cache: cache) { return }
      if waitForCollapsedExchange(exchange, cache: cache, routeIndex: match.routeIndex) { return }
    }
    sendUpstream(fresh: false)
  }

  /// Leases a connection and writes the request head (and, on a retry, nothing else: only
  /// bodiless requests are retried).
  func sendUpstream(fresh: Bool) {
    guard let exchange, let routeIndex = exchange.routeIndex else { return }
    let plan = exchange.snapshot.routePlans[routeIndex]
    // After a reload a request sent again (a retry, a dropped pipelined one) stays with the
    // pool it started on, as requests in flight finish on the config they started with; one
    // never sent (it waited for a token, or behind a collapsed request) takes the running
    // config's pool for its upstream.
    let startedOn = exchange.snapshot === context.snapshot ? nil : exchange.pool
    guard let upstreamIndex = plan.upstreamIndex,
      let pool = startedOn ?? context.pool(upstreamIndex, of: exchange.snapshot)
    else {
      upstreamFailed(.unavailable, reason: .noUpstream)
      return
    }
    var token: UpstreamRequestWriter.TokenLine?
    if let use = plan.token {
      guard let grant = exchange.tokenGrant ?? context.usableToken(use.name, index: use.index) else {
        waitForToken(use)
        return
      }
      exchange.tokenGrant = nil
      exchange.tokenSerial = grant.serial
      exchange.sentToken = grant.bytes
      token = UpstreamRequestWriter.TokenLine(prefix: use.linePrefix, value: grant.bytes, suffix: use.lineSuffix)
    }
    // An upstream the health checks call down is skipped without a connect attempt, as one
    // with an open circuit is, but counted as what it is (`unhealthy`): the circuit did not
    // open (without health checks the map is empty, and no name is hashed per request). A
    // retry on a fresh connection asks the circuit whether a retry makes sense now (the
    // failure being retried may have opened it, or be one of many); it never takes a trial.
    let now = loop.iterationTime
    var skip: UpstreamFailure?
    if !context.upstreamHealthy.isEmpty && context.upstreamHealthy[pool.plan.name] == false {
      skip = .unhealthy
    } else if fresh || !exchange.breakersAdmitted {
      switch pool.breakersDecide(route: plan.name, retry: fresh, now: now) {
      case .attempt, .attemptAsTrial: break
      case .reject: skip = .circuitOpen
      // On probation, with the check out: a request with a stored answer takes it.
      case .attemptUnlessAnswerable: skip = staleAnswer(for: exchange) != nil ? .circuitOpen : nil
      }
    }
    if let skip {
      self.exchange?.pool = pool
      upstreamFailed(skip)
      return
    }
    exchange.breakersAdmitted = true
    // A body is read ahead (all of it, or its first `body_buffer_bytes`) before a
    // connection is leased: a client that sends slowly holds no upstream connection.
    if !fresh && exchange.attempts == 0 && !exchange.bodyBuffered && !exchange.requestComplete
      && exchange.snapshot.bodyBufferBytes > 0 && Self.hasBody(exchange.head)
    {
      exchange.bufferingBody = true
      sendContinueIfAsked(exchange)
      if exchange.pendingBody.count >= exchange.snapshot.bodyBufferBytes {
        bodyReadAhead(exchange)
      } else {
        setUploadDeadline()
      }
      return
    }
    if !pool.hasRoom(fresh: fresh) {
      waitForConnection(exchange, on: pool, fresh: fresh)
      return
    }
    let upstream: UpstreamConnection
    // A bodiless GET may be written behind another request on a busy connection (see
    // `PipelinePolicy`); a retry goes alone on a fresh connection.
    let method = exchange.head.method
    let pipelined =
      !fresh && pool.plan.pipelineDepth > 1
      && PipelinePolicy.mayJoin(
        method: exchange.head.method, hasBody: Self.hasBody(exchange.head),
        isResend: exchange.pipelineDropped || exchange.tokenRetried)
    do {
      if pipelined {
        let joined: Bool
        (upstream, joined) = try pool.leaseForPipelining(for: self)
        exchange.waitedBehindAnother = joined
        if joined { context.metrics.pipelined &+= 1 }
      } else {
        upstream = try pool.lease(for: self, fresh: fresh)
      }
    } catch {
      context.shared.warnCannotOpenUpstream(pool.plan.name, error: error)
      upstreamFailed(.unavailable)
      return
    }
    // `exchange` is still `self.exchange`: nothing since the guard could have replaced it.
    exchange.pool = pool
    exchange.upstream = upstream
    sendContinueIfAsked(exchange)
    if exchange.attempts > 0 {
      // A retry: the parser may hold part of the earlier answer, and what was learnt from
      // it belongs to that attempt. (A new exchange's are new.)
      exchange.responseParser = HTTPResponseParser(limits: Exchange.upstreamResponseLimits)
      exchange.upstreamStatus = nil
      exchange.responseBytesReceived = false
    }
    exchange.attempts += 1
    exchange.upstreamWasReused = upstream.useCount > 0
    exchange.sentAt = now
    exchange.headAt = 0
    let upstreamMethod = exchange.envelope != nil && method == .head ? HTTPMethod.get : method
    exchange.suppressBody = upstreamMethod != method
    exchange.responseParser.requestWasHEAD = upstreamMethod == .head
    let framing = Self.upstreamFraming(exchange.head.bodyFraming)
    exchange.rechunkRequest = framing == .chunked
    context.scratch.removeAll(keepingCapacity: true)
    UpstreamRequestWriter.write(
      head: exchange.head, method: upstreamMethod, target: exchange.upstreamTarget, hostHeader: pool.plan.hostHeader,
      plan: plan.headerPlan, token: token,
      acceptsGzip: Self.asksUpstreamForGzip(plan, clientTakesGzip: exchange.acceptsGzip),
      sharedAnswer: exchange.hasCacheKey, clientAddress: clientAddress,
      forwardedProto: secure ? "https" : "http", requestID: exchange.requestID, framing: framing,
      into: &context.scratch)
    if pipelined {
      context.scratch.withUnsafeBytes { pool.writePipelined($0, on: upstream) }
    } else {
      context.scratch.withUnsafeBytes { _ = upstream.connection?.write($0) }
    }
    // A retry sends the kept body again; body bytes that arrived while the token was
    // being fetched follow the head now.
    if exchange.attempts > 1 || exchange.tokenRetried, let copy = exchange.requestBodyCopy, !copy.isEmpty {
      writeRequestBody(copy, to: upstream, exchange: exchange)
    } else if !exchange.pendingBody.isEmpty {
      writeRequestBody(exchange.pendingBody, to: upstream, exchange: exchange)
    }
    exchange.pendingBody = []
    // Reading stopped once the read-ahead was full; the rest now streams to the upstream.
    setClientReadingPaused(false, reason: .upstreamBackpressure)
    if exchange.requestComplete && exchange.rechunkRequest, let connection = upstream.connection {
      var last: [UInt8] = []
      HTTPSerializer.writeLastChunk(into: &last)
      _ = connection.write(last)
    }
    // The response timeout starts once the whole request is with the upstream.
    if exchange.requestComplete {
      armResponseDeadline(exchange, pool: pool)
    } else {
      setUploadDeadline()
    }
  }

  // MARK: Answers made here

  private func answerWithStub(_ plan: RoutePlan) {
    exchange?.reason = .stub
    guard plan.stub.delay > .zero else {
      respondLocally(status: plan.stub.status, body: plan.stub.body)
      return
    }
    exchange?.waitingForStub = true
    setDeadline(.stubDelay, after: plan.stub.delay)
  }

  /// `reason` says why, for the access line and `gatehouse_local_answers_total`.
  func respondLocally(failure: GatewayResponse.Failure, reason: LocalAnswerReason, extraHeaders: [UInt8] = []) {
    exchange?.reason = reason
    // On `always_200` routes the gateway's own errors also travel as HTTP 200, the status
    // only in `code`.
    let status = exchange?.envelope?.httpStatus(failure.status) ?? failure.status
    // On a route with a cache this answer did not come from the store: say so, as every
    // answer of such a route does.
    respondLocally(
      status: status, body: GatewayResponse.errorBody(status: failure.status, message: failure.message),
      extraHeaders: Self.cacheLines(exchange?.cacheResult) + extraHeaders)
  }

  /// Writes a whole answer made by the gateway (the caller has set the exchange's `reason`).
  /// The request's body, if not read yet, is read and dropped so the connection can carry
  /// the next request.
  func respondLocally(status: Int, body: [UInt8], extraHeaders: [UInt8] = []) {
    guard let exchange else { return }
    // A client still waiting for 100 Continue will not send its body: the connection ends
    // after this answer rather than wait for a body that is not coming (RFC 9110 §10.1.1).
    let withheld = bodyWithheld(exchange)
    let close = closeAfterResponse || !exchange.head.keepAlive || context.draining || withheld
    context.output.removeAll(keepingCapacity: true)
    GatewayResponse.write(
      status: status, body: body, requestID: exchange.requestID, closeConnection: close,
      headOnly: exchange.head.method == .head, extraHeaders: extraHeaders, into: &context.output)
    self.exchange?.status = status
    self.exchange?.bytesSent = Int64(context.output.count)
    self.exchange?.bodyBytes =
      exchange.head.method == .head || !HTTPSerializer.statusAllowsBody(status) ? 0 : Int64(body.count)
    self.exchange?.responseComplete = true
    self.exchange?.closeClient = close
    flushOutput()
    if withheld {
      // Whatever it sends after all is read and dropped while the connection lingers.
      exchange.bodyLeftUnread = true
      exchange.requestComplete = true
    }
    if exchange.requestComplete {
      finishExchange()
    } else {
      // Reading may have stopped for the upstream's sake (a full read-ahead).
      setClientReadingPaused(false, reason: .upstreamBackpressure)
      // The body is read and dropped so the connection can carry the next request, but not
      // for ever: a client that declared one and sends nothing (or drips it) would hold the
      // connection without a deadline. It gets the idle timeout to finish.
      setWriteDeadline(.idle)
    }
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    closed = true
    if let pool = exchange?.queuedOn {
      exchange?.queuedOn = nil
      pool.leaveQueue(self)
    }
    if let exchange, let upstream = exchange.upstream {
      self.exchange?.upstream = nil
      exchange.pool?.discard(upstream, by: self)
    }
    if let exchange {
      // A request the connection ended under still gets its access line and its count:
      // with the status already sent, else nginx's 499 (the client went away first) or
      // 444 (the gateway closed without an answer: drain timeout, a cut stream).
      let unanswered = reason == .closedByOwner ? 444 : 499
      record(exchange, status: exchange.responseStarted || exchange.responseComplete ? exchange.status : unanswered)
    }
    let waiters = exchange.flatMap(detachWaiters)
    exchange = nil
    defer { waiters?.release() }
    releaseHeldBufferCharge()
    self.connection = nil
    context.sessionClosed(self)
  }

  /// Counts a finished (or abandoned) exchange and writes its access line.
  func record(_ exchange: Exchange, status: Int) {
    settleBufferCharge(exchange)
    let elapsed = EventLoop.monotonicNanoseconds() &- exchange.startedAt
    if let result = exchange.cacheResult { context.metrics.cacheResults[result.metricLabel, default: 0] &+= 1 }
    context.recordRequest(
      snapshot: exchange.snapshot, routeIndex: exchange.routeIndex, status: status, nanoseconds: elapsed)
    let plan = exchange.routeIndex.map { exchange.snapshot.routePlans[$0] }
    if let reason = exchange.reason { context.metrics.countLocalAnswer(route: plan?.name ?? "", reason: reason) }
    guard context.snapshot.accessLogEnabled else { return }
    let head = exchange.head
    let proxies = context.snapshot.trustedProxies
    context.logAccess(
      AccessRecord(
        requestID: exchange.requestID, method: head.method, path: head.path, query: head.query, route: plan?.name,
        upstream: exchange.pool?.plan.name ?? plan?.upstreamName, status: status,
        upstreamStatus: exchange.upstreamStatus, reason: exchange.reason, cache: exchange.cacheResult?.rawValue,
        durationNanoseconds: elapsed,
        upstreamNanoseconds: exchange.headAt != 0 ? exchange.headAt &- exchange.sentAt : nil,
        bytes: exchange.bytesSent, bodyBytes: exchange.bodyBytes,
        // The forwarded field is looked up only when some proxy is trusted.
        client: proxies.client(
          peer: clientAddress,
          forwardedFor: proxies.isEmpty ? nil : head.headers.firstValue(lowercaseName: "x-forwarded-for")),
        userAgent: head.headers.firstValue(lowercaseName: "user-agent")))
  }

  /// The line of an answer made before any request head was whole (a parse error, the
  /// header timeout): no method, path or route to tell.
  func logLocal(status: Int, reason: LocalAnswerReason, requestID: [UInt8], bytes: Int, bodyBytes: Int) {
    context.metrics.unrouted.record(status: status, nanoseconds: 0)
    context.metrics.countLocalAnswer(route: "", reason: reason)
    guard context.snapshot.accessLogEnabled else { return }
    context.logAccess(
      AccessRecord(
        requestID: requestID, method: .other("-"), path: ArraySlice("-".utf8), route: nil, status: status,
        upstreamStatus: nil, reason: reason, cache: nil, durationNanoseconds: 0, bytes: Int64(bytes),
        bodyBytes: Int64(bodyBytes), client: clientAddress[...]))
  }

  // MARK: Pure decisions

  /// RFC 9110 §11.6.1: a 401 names the scheme that would get through; client keys are also
  /// accepted as `Authorization: ApiKey <key>`.
  static let apiKeyChallenge = Array("WWW-Authenticate: ApiKey\r\n".utf8)

  static func hasBody(_ head: HTTPRequestHead) -> Bool {
    switch head.bodyFraming {
    case .none, .contentLength(0): return false
    case .contentLength, .chunked, .untilClose: return true
    }
  }

  /// The upstream gets the body framed as the client framed it: a length stays a length,
  /// chunked stays chunked (re-encoded, trailers dropped).
  static func upstreamFraming(_ requestFraming: HTTPBodyFraming) -> HTTPBodyFraming {
    switch requestFraming {
    case .none: return .none
    case .contentLength(let length): return .contentLength(length)
    case .chunked, .untilClose: return .chunked
    }
  }

  /// Whether the upstream is asked for gzip (on routes whose `Accept-Encoding` the gateway
  /// normalizes). Only where the body passes through: an enveloped body must be read whole
  /// or validated as it streams, and a gzip one can only be read whole, so a large answer
  /// that streams wrapped when plain would fail when gzip. The gateway compresses the
  /// envelope itself for clients that take gzip.
  /// Never on a route with a token: an error answer may echo the token, and only a plain
  /// body can be masked as it streams.
  static func asksUpstreamForGzip(_ plan: RoutePlan, clientTakesGzip: Bool) -> Bool {
    clientTakesGzip && plan.envelope == nil && plan.token == nil
  }

  /// A client's own X-Request-Id is kept when it is plain and short.
  static func requestID(from head: HTTPRequestHead) -> [UInt8]? {
    guard let index = head.headers.firstIndex(lowercaseName: "x-request-id") else { return nil }
    let value = head.headers.valueBytes(at: index)
    return RequestIDGenerator.isAcceptable(value) ? Array(value) : nil
  }
}
