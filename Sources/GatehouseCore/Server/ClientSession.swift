import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseNet
import GatehouseStore

/// One client connection. Requests are parsed as bytes arrive and run one at a time as an
/// `Exchange`; pipelined requests wait (their bytes held, reading paused) until the answer
/// before them is complete, so answers go out in order.
///
/// The proxy flow reads top to bottom: `startExchange` → `sendUpstream` → request body →
/// `upstreamDidRead` (`beginResponse`, body, `completeResponse`) → `finishExchange`. The
/// store, envelope and token parts of the flow are in `ClientSession+Store.swift`,
/// `ClientSession+Envelope.swift` and `ClientSession+Tokens.swift`; `Exchange` in
/// `Exchange.swift`.
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
  private var held: [UInt8] = []
  var exchange: Exchange?
  /// Set once the connection must end after the current answer.
  var closeAfterResponse = false
  var closed = false
  /// Inside `consume`: finishing an exchange there must not re-enter the parse loop.
  private var consuming = false
  /// Bytes followed the last request head in the read that brought it.
  private var inputFollowsHead = false
  private var sawAnyByte = false
  /// Monotonic nanoseconds when `deadlineKind` expires; 0 for none.
  private(set) var deadline: UInt64 = 0
  private var deadlineKind = DeadlineKind.header
  /// What the client had acknowledged when the running `.idle` or `.clientWrite` deadline
  /// was armed: one that acknowledged more meanwhile is slow, not gone (`setWriteDeadline`).
  private var writeMark: Int64 = ClientSession.noWriteMark
  private var pausedReasons: Set<PauseReason> = []
  /// Held pipelined requests wait for the client to read what it was sent.
  private var resumeOnDrain = false

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
  private func consume(_ bytes: UnsafeRawBufferPointer) {
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
    GatewayResponse.writeFailure(.badRequest(error), requestID: requestID, closeConnection: true, into: &out)
    if let upstream = exchange?.upstream { exchange?.pool?.discard(upstream, by: self) }
    let dropped = exchange
    let waiters = exchange.flatMap(detachWaiters)
    exchange = nil
    defer { waiters?.release() }
    _ = connection?.write(out)
    if let dropped {
      // A body that failed to parse: the request's own line, with the status it got.
      dropped.bytesSent = Int64(out.count)
      record(dropped, status: error.status)
    } else {
      logLocal(status: error.status, requestID: requestID, head: nil, bytes: out.count)
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
        respondLocally(failure: .clientKeyMissing, extraHeaders: Self.apiKeyChallenge)
        return
      case .invalid:
        respondLocally(failure: .clientKeyInvalid, extraHeaders: Self.apiKeyChallenge)
        return
      case .client(let index):
        let client = snapshot.clients.clients[index]
        exchange.clientID = client.id
        if let bucket = client.bucket,
          case .limited(let seconds) = snapshot.rateLimiter.take(bucket: bucket, nowMs: RateLimiter.clockMs())
        {
          respondLocally(failure: .rateLimited, extraHeaders: Array("Retry-After: \(seconds)\r\n".utf8))
          return
        }
      }
    }
    guard let match else {
      respondLocally(
        failure: .noRoute(method: head.method.name, path: String(decoding: head.path, as: UTF8.self)))
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
      respondLocally(failure: .upstreamUnavailable)
      return
    }
    exchange?.upstreamTarget = snapshot.routeTable.upstreamPath(
      for: match, requestPath: head.path, query: head.query)
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
      upstreamFailed(.unavailable)
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
    // An upstream the health checks call down is skipped like one with an open circuit
    // (without health checks the map is empty, and no name is hashed per request). A retry
    // on a fresh connection asks the circuit whether a retry makes sense now (the failure
    // being retried may have opened it, or be one of many); it never takes a trial.
    let now = loop.iterationTime
    var skip = !context.upstreamHealthy.isEmpty && context.upstreamHealthy[pool.plan.name] == false
    if !skip && fresh {
      skip = !pool.circuit.allowsRetry(now: now)
    } else if !skip {
      switch pool.circuit.decide(now: now) {
      case .attempt, .attemptAsTrial: break
      case .reject: skip = true
      // On probation, with the check out: a request with a stored answer takes it.
      case .attemptUnlessAnswerable: skip = staleAnswer(for: exchange) != nil
      }
    }
    if skip {
      self.exchange?.pool = pool
      upstreamFailed(.circuitOpen)
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
      context.shared.logger.warn("cannot open upstream connection", ["error": .string("\(error)")])
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
    let upstreamMethod = exchange.envelope != nil && method == .head ? HTTPMethod.get : method
    exchange.suppressBody = upstreamMethod != method
    exchange.responseParser.requestWasHEAD = upstreamMethod == .head
    let framing = Self.upstreamFraming(exchange.head.bodyFraming)
    exchange.rechunkRequest = framing == .chunked
    context.scratch.removeAll(keepingCapacity: true)
    UpstreamRequestWriter.write(
      head: exchange.head, method: upstreamMethod, target: exchange.upstreamTarget, hostHeader: pool.plan.hostHeader,
      plan: plan.headerPlan, token: token, acceptsGzip: exchange.acceptsGzip, clientAddress: clientAddress,
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
    if exchange.requestComplete && exchange.rechunkRequest, let connection = upstream.connection {
      var last: [UInt8] = []
      HTTPSerializer.writeLastChunk(into: &last)
      _ = connection.write(last)
    }
    // The response timeout starts once the whole request is with the upstream.
    if exchange.requestComplete {
      armResponseDeadline(exchange, pool: pool)
    } else {
      setDeadline(.requestUpload, nanoseconds: context.snapshot.idleTimeoutNanoseconds)
    }
  }

  private func forwardRequestBody(_ bytes: UnsafeRawBufferPointer) {
    guard let exchange, !exchange.responseComplete else { return }
    // Routes with a token keep a small body, so a request rejected for its token can be sent again.
    if exchange.requestBodyCopy != nil {
      if exchange.requestBodyCopy!.count + bytes.count <= Self.maxReplayBody {
        exchange.requestBodyCopy!.append(contentsOf: bytes)
      } else {
        exchange.requestBodyCopy = nil
      }
    }
    guard let upstream = exchange.upstream?.connection else {
      guard exchange.waitingForToken else { return }
      // The token is being fetched: hold the body (bounded) until the upstream gets the head.
      exchange.pendingBody.append(contentsOf: bytes)
      if exchange.pendingBody.count > Self.maxPendingBody {
        exchange.waitingForToken = false
        closeAfterResponse = true
        respondLocally(failure: .tokenUnavailable)
      }
      return
    }
    if deadlineKind == .requestUpload {
      setDeadline(.requestUpload, nanoseconds: context.snapshot.idleTimeoutNanoseconds)
    }
    if exchange.rechunkRequest {
      var frame: [UInt8] = []
      HTTPSerializer.writeChunkHeader(size: bytes.count, into: &frame)
      frame.append(contentsOf: bytes)
      HTTPSerializer.writeChunkTrailer(into: &frame)
      _ = upstream.write(frame)
    } else {
      _ = upstream.write(bytes)
    }
  }

  private func requestEnded() {
    guard exchange != nil else { return }
    exchange?.requestComplete = true
    if deadlineKind == .requestUpload, let exchange, let pool = exchange.pool {
      armResponseDeadline(exchange, pool: pool)
    }
    if let exchange, exchange.rechunkRequest, !exchange.responseComplete,
      let upstream = exchange.upstream?.connection
    {
      var last: [UInt8] = []
      HTTPSerializer.writeLastChunk(into: &last)
      _ = upstream.write(last)
    }
    if exchange?.responseComplete == true { finishExchange() }
  }

  /// The whole request is with the upstream: its answer is due within the response
  /// timeout, and one pipelined behind other answers gets its turn within the queue's
  /// patience or goes alone (a slow answer in front must not hold it for long).
  private func armResponseDeadline(_ exchange: Exchange, pool: UpstreamPool) {
    let timeout = pool.plan.responseTimeoutNanoseconds
    if exchange.waitedBehindAnother, exchange.upstream?.owner !== self {
      setDeadline(.pipelineWait, nanoseconds: min(timeout, PipelinePolicy.queuePatienceNanoseconds))
    } else {
      setDeadline(.upstreamResponse, nanoseconds: timeout)
    }
  }

  /// Request bodies up to this size are kept for a retry after a token rejection (SPEC §3).
  static let maxReplayBody = 64 * 1024
  /// Body bytes held while a token is fetched, before the request is given up.
  static let maxPendingBody = 1 << 20

  private func writeRequestBody(_ body: [UInt8], to upstream: UpstreamConnection, exchange: Exchange) {
    guard let connection = upstream.connection else { return }
    if exchange.rechunkRequest {
      var frame: [UInt8] = []
      HTTPSerializer.writeChunkHeader(size: body.count, into: &frame)
      frame.append(contentsOf: body)
      HTTPSerializer.writeChunkTrailer(into: &frame)
      _ = connection.write(frame)
    } else {
      _ = connection.write(body)
    }
  }

  // MARK: Answers made here

  private func answerWithStub(_ plan: RoutePlan) {
    guard plan.stub.delay > .zero else {
      respondLocally(status: plan.stub.status, body: plan.stub.body)
      return
    }
    exchange?.waitingForStub = true
    setDeadline(.stubDelay, after: plan.stub.delay)
  }

  func respondLocally(failure: GatewayResponse.Failure, extraHeaders: [UInt8] = []) {
    // On `always_200` routes the gateway's own errors also travel as HTTP 200, the status
    // only in `code`.
    let status = exchange?.envelope?.httpStatus(failure.status) ?? failure.status
    // On a route with a cache this answer did not come from the store: say so, as every
    // answer of such a route does.
    respondLocally(
      status: status, body: GatewayResponse.errorBody(status: failure.status, message: failure.message),
      extraHeaders: Self.cacheLines(exchange?.cacheResult) + extraHeaders)
  }

  /// Writes a whole answer made by the gateway. The request's body, if not read yet, is
  /// read and dropped so the connection can carry the next request.
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
      // The body is read and dropped so the connection can carry the next request, but not
      // for ever: a client that declared one and sends nothing (or drips it) would hold the
      // connection without a deadline. It gets the idle timeout to finish.
      setWriteDeadline(.idle)
    }
  }

  // MARK: The upstream's answer

  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer) -> Int {
    guard exchange?.upstream === upstream else {
      upstream.pool.discard(upstream, by: self)
      return bytes.count
    }
    exchange?.responseBytesReceived = true
    // Until the client has the head, `response_timeout_ms` bounds the whole wait, however
    // slowly the upstream trickles bytes; once the answer streams to the client it bounds
    // the silence between reads (a large body may take long, but must keep moving).
    if exchange?.responseStarted == true, deadlineKind == .upstreamResponse,
      let timeout = exchange?.pool?.plan.responseTimeoutNanoseconds
    {
      setDeadline(.upstreamResponse, nanoseconds: timeout)
    }
    var offset = 0
    while offset <= bytes.count {
      let step: (step: HTTPParseStep, consumed: Int)
      do {
        step = try exchange!.responseParser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        upstreamSentInvalidAnswer(upstream, error)
        return bytes.count
      }
      let start = offset
      offset += step.consumed
      switch step.step {
      case .needMore:
        flushOutput()
        return bytes.count
      case .head:
        let head = exchange!.responseParser.takeHead()
        if head.isInformational { continue }
        upstream.lastAnswerWasHTTP11 = head.version == .http1_1
        guard beginResponse(head) else { return bytes.count }
      case .body(let range):
        appendResponseBody(
          UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)]))
        guard self.exchange?.upstream === upstream else { return bytes.count }
      case .end:
        // Bytes after a complete answer belong to the next pipelined request; without one
        // they were never asked for, and the connection is spoiled. An answer whose end
        // only its status marks (204, 304) cannot show that the bytes after it are not a
        // body the upstream should not have sent: requests written behind it go again,
        // alone, rather than take those bytes for their answers.
        let reusable: Bool
        if upstream.pipeline.isEmpty {
          reusable = offset == bytes.count
        } else {
          reusable = HTTPSerializer.statusAllowsBody(exchange?.upstreamStatus ?? 200)
        }
        completeResponse(upstreamReusable: reusable)
        return offset
      }
    }
    flushOutput()
    return bytes.count
  }

  func upstreamDidReadEOF(_ upstream: UpstreamConnection) {
    guard exchange?.upstream === upstream else { return }
    do {
      if case .end? = try exchange!.responseParser.finish() {
        completeResponse(upstreamReusable: false)
        return
      }
    } catch  where exchange?.responseBytesReceived == true {
      upstreamSentInvalidAnswer(upstream, error)
      return
    } catch {}
    upstreamFailed(exchange?.responseBytesReceived == true ? .invalidResponse : .closed)
  }

  /// The upstream's bytes are no HTTP answer: logged with what was wrong (fixed texts, never
  /// the upstream's bytes), kept as the upstream's last error, and failed like a reset.
  private func upstreamSentInvalidAnswer(_ upstream: UpstreamConnection, _ error: HTTPParseError) {
    context.shared.logger.warn(
      "upstream sent an invalid answer",
      ["upstream": .string(upstream.pool.plan.name), "error": .string(error.description)])
    upstreamFailed(.invalidResponse, detail: "invalid answer: \(error.description)")
  }

  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason) {
    guard exchange?.upstream === upstream else { return }
    switch reason {
    case .connectTimedOut:
      upstreamFailed(.timedOut)
    case .tlsFailed(let error):
      // A bad certificate or a failed handshake: the upstream is unusable, like a refusal.
      context.shared.logger.warn(
        "upstream TLS failed", ["upstream": .string(upstream.pool.plan.name), "error": .string(error.description)])
      upstreamFailed(.unavailable, detail: "TLS: \(error.description)")
    case .closedByOwner, .hangup, .failed, .loopStopped:
      upstreamFailed(exchange?.responseBytesReceived == true ? .invalidResponse : .closed)
    }
  }

  func upstreamDroppedQueuedRequest(_ upstream: UpstreamConnection) {
    guard let exchange, exchange.upstream === upstream, !exchange.responseComplete else { return }
    exchange.upstream = nil
    sendAgainAlone(exchange)
  }

  /// A request pipelined behind another that was not answered on its connection (dropped
  /// with it, or given up while waiting): not a failure of this request nor of the
  /// upstream, and not an attempt. It goes again, alone this time.
  private func sendAgainAlone(_ exchange: Exchange) {
    context.metrics.pipelineResent &+= 1
    exchange.pipelineDropped = true
    exchange.waitedBehindAnother = false
    exchange.attempts -= 1
    // The parser may have seen the end of the old connection (or bytes that were no
    // answer): the answer on the new one starts from scratch.
    exchange.responseParser = HTTPResponseParser(limits: Exchange.upstreamResponseLimits)
    exchange.responseBytesReceived = false
    sendUpstream(fresh: false)
  }

  /// Returns false when the exchange no longer reads this upstream answer.
  @discardableResult
  private func beginResponse(_ head: HTTPResponseHead) -> Bool {
    guard let exchange else { return false }
    self.exchange?.upstreamStatus = head.status
    self.exchange?.upstreamKeepAlive = head.keepAlive
    if let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token {
      if use.invalidStatuses.contains(head.status) {
        if tokenRejected(use, exchange: exchange) {
          if let upstream = exchange.upstream {
            exchange.upstream = nil
            exchange.pool?.discard(upstream, by: self)
          }
          return false
        }
      } else if use.bodyField != nil && exchange.envelope == nil, let length = Self.declaredLength(head),
        length <= Self.maxReplayBody, JSONMediaType.isJSON(Self.field(head.headers, "content-type") ?? [])
      {
        // A pass-through route whose backend signals rejection in the body: keep the (small)
        // body to look at it before answering.
        exchange.bodyPlan = .buffer
        exchange.bufferedHead = head
        return true
      }
    }
    if head.status >= 500, let stale = staleAnswer(for: exchange) {
      // A failing backend's error page is worse than yesterday's answer.
      if let pool = exchange.pool {
        context.metrics.recordUpstream(pool.plan.name, outcome: "error_status")
        pool.circuit.recordFailure(now: loop.iterationTime)
        pool.lastError = "status \(head.status)"
      }
      if let upstream = exchange.upstream {
        exchange.upstream = nil
        exchange.pool?.discard(upstream, by: self)
      }
      if exchange.collapseRole == .leading { exchange.collapseOutcome = .failed(.unavailable) }
      serveStored(stale, result: .stale)
      return false
    }
    if exchange.hasCacheKey && !exchange.responseParser.requestWasHEAD
      && CacheStorability.isStorable(status: head.status, headers: head.headers, keyed: Self.keyedNames(exchange))
    {
      exchange.teeBody = []
      exchange.storableHead = head
    }
    if let policy = exchange.envelope {
      let plan = EnvelopeRenderer.plan(
        status: head.status, contentType: Self.field(head.headers, "content-type"),
        contentEncoding: Self.field(head.headers, "content-encoding"), contentLength: Self.declaredLength(head),
        policy: policy)
      self.exchange?.bodyPlan = plan
      switch plan {
      case .buffer:
        self.exchange?.bufferedHead = head
        return true
      case .streamWrapped:
        exchange.teeBody = nil
        beginWrappedStream(head, policy: policy)
        return true
      case .passThrough:
        break
      }
    }
    // The request's fields are read one by one: a copy of the whole head would retain each
    // of its buffers.
    let requestIsHEAD = exchange.head.method == .head
    var framing: HTTPBodyFraming
    var headLength: Int64?
    var rechunk = false
    if requestIsHEAD || !HTTPSerializer.statusAllowsBody(head.status) {
      framing = .none
      headLength = requestIsHEAD ? Self.declaredLength(head) ?? head.contentLength : nil
    } else {
      switch head.bodyFraming {
      case .contentLength(let length):
        framing = .contentLength(length)
      case .chunked, .untilClose:
        framing = HTTPSerializer.framing(bodyLength: nil, allowsBody: true, peerVersion: exchange.head.version)
        rechunk = framing == .chunked
      case .none:
        framing = .contentLength(0)
      }
    }
    let close = answerEndsConnection(exchange) || framing == .untilClose
    self.exchange?.closeClient = close
    self.exchange?.rechunkResponse = rechunk
    self.exchange?.status = head.status
    self.exchange?.upstreamStatus = head.status
    self.exchange?.responseStarted = true
    self.exchange?.upstreamKeepAlive = head.keepAlive
    let before = context.output.count
    ClientResponseWriter.write(
      head: head, requestID: exchange.requestID, framing: framing, headContentLength: headLength,
      closeConnection: close, extraLines: Self.cacheLines(exchange.cacheResult),
      hiding: Self.tokenToHide(exchange, upstreamStatus: head.status), into: &context.output)
    self.exchange?.bytesSent += Int64(context.output.count - before)
    return true
  }

  /// Small pieces are gathered so head and body usually leave in one write; big ones go
  /// straight from the read buffer.
  private func appendResponseBody(_ bytes: UnsafeRawBufferPointer) {
    guard let exchange else { return }
    switch exchange.bodyPlan {
    case .buffer:
      bufferResponseBody(bytes, exchange: exchange)
      return
    case .streamWrapped:
      do {
        try exchange.streamValidator?.feed(bytes)
      } catch {
        // Invalid JSON mid-stream: cut the connection so the client never sees a last chunk.
        abort()
        return
      }
    case .passThrough:
      if exchange.teeBody != nil {
        if exchange.teeBody!.count + bytes.count <= Self.maxStoredBody {
          exchange.teeBody!.append(contentsOf: bytes)
        } else {
          exchange.teeBody = nil
        }
      }
      if exchange.suppressBody { return }
    }
    self.exchange?.bytesSent += Int64(bytes.count)
    if exchange.rechunkResponse {
      HTTPSerializer.writeChunkHeader(size: bytes.count, into: &context.output)
    }
    if bytes.count <= 16 * 1024 {
      context.output.append(contentsOf: bytes)
    } else {
      flushOutput()
      exchange.responseFlushed = true
      _ = connection?.write(bytes)
    }
    if exchange.rechunkResponse { HTTPSerializer.writeChunkTrailer(into: &context.output) }
  }

  private func completeResponse(upstreamReusable: Bool) {
    guard let exchange else { return }
    if let pool = exchange.pool {
      context.metrics.recordUpstream(pool.plan.name, outcome: "response")
      pool.recordResponseTime(loop.iterationTime &- exchange.sentAt)
      if (exchange.upstreamStatus ?? 0) >= 500 {
        pool.circuit.recordFailure(now: loop.iterationTime)
        pool.lastError = "status \(exchange.upstreamStatus ?? 0)"
      } else {
        pool.circuit.recordSuccess()
      }
    }
    // A body that says the token was rejected is sent again with a new value when it can
    // be; when it cannot, it is no good answer: never stored, never wrapped as a success.
    var tokenRefused = false
    if exchange.bodyPlan == .buffer, let routeIndex = exchange.routeIndex,
      let use = exchange.snapshot.routePlans[routeIndex].token, use.bodyField != nil, let head = exchange.bufferedHead,
      use.answerRejects(head, body: exchange.bufferedBody)
    {
      if tokenRejectedAfterBody(use, exchange: exchange, upstreamReusable: upstreamReusable) { return }
      tokenRefused = true
    }
    var rendered = exchange.bodyPlan == .buffer ? renderBufferedAnswer(exchange) : nil
    if tokenRefused, let policy = exchange.envelope {
      rendered = .unusable(
        status: policy.httpStatus(401),
        body: GatewayResponse.errorBody(status: 401, message: GatewayResponse.Failure.tokenRejected.message))
    }
    var usable = !tokenRefused
    if case .unusable = rendered { usable = false }
    if usable {
      noteTokenAccepted(exchange)
    } else if exchange.collapseRole == .leading {
      // Waiters answer as an upstream failure would, except after a token rejection: that
      // is about the token, not the upstream, and each waiter asks with the current value.
      exchange.collapseOutcome = tokenRefused ? .retry : .failed(.invalidResponse)
    }
    if !usable {
      // The last good answer is worth more than one the backend got wrong.
      if let stale = staleAnswer(for: exchange) {
        releaseUpstream(exchange, upstreamReusable: upstreamReusable)
        exchange.bufferedBody = []
        serveStored(stale, result: .stale)
        return
      }
    }
    let kept = usable ? storableAnswer(exchange) : nil
    if let kept {
      rememberAnswer(kept, exchange: exchange)
    } else if usable, let key = exchange.cacheKey, let status = exchange.upstreamStatus, (200..<300).contains(status),
      !exchange.responseParser.requestWasHEAD
    {
      context.store?.forget(key: key)
    }
    switch exchange.bodyPlan {
    case .buffer:
      writeBufferedAnswer(exchange, outcome: rendered ?? .passThrough)
    case .streamWrapped:
      do {
        try exchange.streamValidator?.finish()
      } catch {
        abort()
        return
      }
      appendWrapped(Array(#","message":""}"#.utf8), exchange: exchange)
    case .passThrough:
      break
    }
    if exchange.collapseRole == .leading, let kept {
      exchange.collapseOutcome = .answer(CollapsedAnswer(head: kept.head, body: kept.body, rendered: rendered))
    }
    if exchange.rechunkResponse { HTTPSerializer.writeLastChunk(into: &context.output) }
    flushOutput()
    self.exchange?.responseComplete = true
    releaseUpstream(exchange, upstreamReusable: upstreamReusable)
    if !exchange.requestComplete {
      // The upstream answered before the request body was all read: the rest cannot be
      // forwarded any more, so the connection ends after this answer (which said so), and
      // lingers while the client finishes sending.
      self.exchange?.closeClient = true
      self.exchange?.bodyLeftUnread = true
      self.exchange?.requestComplete = true
    }
    finishExchange()
  }

  /// Whether the request asked for 100 Continue, did not get it, and has sent none of its body
  /// (nothing followed its head in the read that brought it, nor since).
  func bodyWithheld(_ exchange: Exchange) -> Bool {
    exchange.head.expectsContinue && !exchange.continueSent && !exchange.requestComplete
      && !exchange.requestBodyStarted && !inputFollowsHead && Self.hasBody(exchange.head)
  }

  /// Sends `100 Continue` when the request asked for it, once, as its head goes upstream: the
  /// body is wanted now, and only now. A request refused or answered by the gateway itself (no
  /// route, client key, rate limit, stub, the store, an open circuit) is answered without it,
  /// so a client that waits for it never uploads a body that would be dropped (nginx, too,
  /// sends it only when it starts reading the body).
  private func sendContinueIfAsked(_ exchange: Exchange) {
    guard exchange.head.expectsContinue, !exchange.continueSent, !exchange.requestComplete,
      Self.hasBody(exchange.head)
    else { return }
    exchange.continueSent = true
    _ = connection?.write(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
  }

  /// Whether the answer now being written ends the connection: the client asked for it,
  /// the gateway is draining, or the request's body is still coming (an upstream answering
  /// early cannot be sent the rest, so the connection cannot carry another request).
  func answerEndsConnection(_ exchange: Exchange) -> Bool {
    closeAfterResponse || !exchange.head.keepAlive || context.draining || !exchange.requestComplete
  }

  /// Gives the upstream connection of a completely read answer back to its pool.
  private func releaseUpstream(_ exchange: Exchange, upstreamReusable: Bool) {
    guard let upstream = exchange.upstream, let pool = exchange.pool else { return }
    exchange.upstream = nil
    let reusable =
      upstreamReusable && exchange.upstreamKeepAlive && exchange.requestComplete
      && !exchange.responseParser.isClosed
    pool.release(upstream, reusable: reusable)
  }

  /// A body said the token was rejected: the answer was read whole, so the connection goes
  /// back to the pool before the retry.
  private func tokenRejectedAfterBody(_ use: TokenUse, exchange: Exchange, upstreamReusable: Bool) -> Bool {
    guard tokenRejected(use, exchange: exchange) else { return false }
    if let upstream = exchange.upstream, let pool = exchange.pool {
      exchange.upstream = nil
      pool.release(upstream, reusable: upstreamReusable && exchange.upstreamKeepAlive)
    }
    exchange.bufferedBody = []
    exchange.bufferedHead = nil
    exchange.bodyPlan = .passThrough
    exchange.responseBytesReceived = false
    return true
  }

  /// What went wrong with the upstream, for choosing the answer.
  enum UpstreamFailure {
    case unavailable
    case closed
    case timedOut
    case invalidResponse
    /// Refused without a connect attempt: the circuit is open.
    case circuitOpen

    /// The `outcome` label of `gatehouse_upstream_requests_total`.
    var outcome: String {
      switch self {
      case .unavailable: return "unavailable"
      case .closed: return "reset"
      case .timedOut: return "timeout"
      case .invalidResponse: return "invalid_response"
      case .circuitOpen: return "circuit_open"
      }
    }
  }

  /// `detail` is what `/admin/upstreams` shows as the upstream's last error when there is more
  /// to say than the outcome the metrics count.
  func upstreamFailed(_ failure: UpstreamFailure, detail: String? = nil) {
    guard let exchange else { return }
    // The connection ended, or sent what is not an answer, before this request's answer
    // began while it was pipelined behind another: the upstream may never have read it
    // (it closed after the answer in front, or reset because requests were left unread),
    // or the bytes were left over from the answer in front. A safe request goes again alone.
    if failure == .closed || failure == .invalidResponse, exchange.waitedBehindAnother,
      exchange.upstreamStatus == nil
    {
      if let upstream = exchange.upstream {
        exchange.upstream = nil
        exchange.pool?.discard(upstream, by: self)
      }
      sendAgainAlone(exchange)
      return
    }
    // A waiter that gave up is no longer answered by the exchange it waited for.
    if exchange.collapseRole == .waiting { exchange.collapseRole = .none }
    if let pool = exchange.pool {
      context.metrics.recordUpstream(pool.plan.name, outcome: failure.outcome)
      if failure != .circuitOpen {
        pool.circuit.recordFailure(now: loop.iterationTime)
        pool.lastError = detail ?? failure.outcome
      }
    }
    if let upstream = exchange.upstream {
      self.exchange?.upstream = nil
      exchange.pool?.discard(upstream, by: self)
    }
    if exchange.responseStarted {
      if exchange.responseFlushed {
        // Part of the answer is out; cutting the connection is the only honest signal left.
        abort()
        return
      }
      // The answer's head is only staged (the upstream broke within the read that brought
      // it): dropped, so the client gets the error answer below instead of a cut connection.
      context.output.removeAll(keepingCapacity: true)
      exchange.responseStarted = false
      exchange.rechunkResponse = false
      exchange.bytesSent = 0
    }
    if failure == .closed
      && UpstreamRetryPolicy.shouldRetry(
        idempotent: exchange.head.method.isIdempotent, connectionWasReused: exchange.upstreamWasReused,
        responseBytesReceived: exchange.responseBytesReceived, bodyReplayable: !Self.hasBody(exchange.head),
        attempts: exchange.attempts)
    {
      sendUpstream(fresh: true)
      return
    }
    // Waiters answer as this request does, without trying the failed upstream again.
    if exchange.collapseRole == .leading { exchange.collapseOutcome = .failed(failure) }
    if let stale = staleAnswer(for: exchange) {
      serveStored(stale, result: .stale)
      return
    }
    if let routeIndex = exchange.routeIndex {
      let plan = exchange.snapshot.routePlans[routeIndex]
      if plan.stubMode == .fallback {
        respondLocally(status: plan.stub.status, body: plan.stub.body)
        return
      }
    }
    respondLocally(failure: failure == .timedOut ? .upstreamTimedOut : .upstreamUnavailable)
  }

  func finishExchange() {
    guard let exchange else { return }
    // Waiters are answered once this session is done with the exchange (their answers
    // use the loop's output buffer too).
    let waiters = detachWaiters(of: exchange)
    defer { waiters?.release() }
    record(exchange, status: exchange.status)
    self.exchange = nil
    // Pausing for the upstream's sake ends with the exchange, whoever was told to resume.
    setClientReadingPaused(false, reason: .upstreamBackpressure)
    if exchange.closeClient || closeAfterResponse {
      closeAfterResponse = true
      if exchange.bodyLeftUnread {
        connection?.closeDrainingInput()
      } else {
        connection?.close()
      }
      // A graceful close waits for the queue to flush: bounded, or a client that never
      // reads would keep the connection and its queued answer for good.
      if connection?.isClosed == false { setWriteDeadline(.idle) }
      return
    }
    setWriteDeadline(.idle)
    guard !consuming else { return }
    // A client that does not read its answers gets no new ones until it has caught up:
    // pipelined requests wait, so answers never pile up in memory.
    if connection?.isAboveHighWatermark == true {
      resumeOnDrain = true
      return
    }
    resumeHeldInput()
  }

  /// Parses requests that arrived while the last one was being answered.
  private func resumeHeldInput() {
    if !held.isEmpty {
      let input = held
      held = []
      input.withUnsafeBytes { consume($0) }
    }
    if held.isEmpty && exchange?.requestComplete != true {
      setClientReadingPaused(false, reason: .pipelining)
    }
  }

  // MARK: Output, flow control, deadlines

  func flushOutput() {
    guard !context.output.isEmpty else { return }
    if let exchange, exchange.responseStarted { exchange.responseFlushed = true }
    context.output.withUnsafeBytes { _ = connection?.write($0) }
    context.output.removeAll(keepingCapacity: true)
  }

  func upstreamWantsClientPaused(_ paused: Bool) {
    setClientReadingPaused(paused, reason: .upstreamBackpressure)
  }

  func setClientReadingPaused(_ paused: Bool, reason: PauseReason) {
    if paused {
      if pausedReasons.isEmpty { connection?.pauseReading() }
      pausedReasons.insert(reason)
    } else if !pausedReasons.isEmpty, pausedReasons.remove(reason) != nil, pausedReasons.isEmpty {
      connection?.resumeReading()
    }
  }

  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    // Only the exchange whose answer is being read may pause a pipelined connection.
    guard let leased = exchange?.upstream, leased.owner === self, let upstream = leased.connection else { return }
    upstream.pauseReading()
    setWriteDeadline(.clientWrite)
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    if resumeOnDrain && exchange == nil {
      resumeOnDrain = false
      resumeHeldInput()
      return
    }
    guard let exchange, let leased = exchange.upstream, leased.owner === self, let upstream = leased.connection
    else { return }
    upstream.resumeReading()
    if deadlineKind == .clientWrite, let timeout = exchange.pool?.plan.responseTimeoutNanoseconds {
      setDeadline(.upstreamResponse, nanoseconds: timeout)
    }
  }

  /// The idle timeout for a connection that may have output queued (`.idle`, `.clientWrite`):
  /// when it passes, a client that took none of its queued bytes meanwhile is cut, one that
  /// took some gets another period (nginx's `send_timeout`: a bound on silence, not on a
  /// slow download).
  private func setWriteDeadline(_ kind: DeadlineKind) {
    setDeadline(kind, nanoseconds: context.snapshot.idleTimeoutNanoseconds)
    // Asked only with output queued: it costs a syscall, and most answers leave nothing
    // queued. Without a mark, a deadline that finds output queued gives one more period.
    if let connection, connection.queuedByteCount > 0 {
      writeMark = connection.peerAcknowledgedBytes ?? Self.acknowledgedUnknown
    } else {
      writeMark = Self.noWriteMark
    }
  }

  /// `writeMark` when nothing was queued as the deadline was armed.
  private static let noWriteMark: Int64 = -1
  /// `writeMark` when the kernel could not say what the client acknowledged: the deadline
  /// then cuts a client with output still queued, as a plain timeout would.
  private static let acknowledgedUnknown: Int64 = -2

  /// At an `.idle` or `.clientWrite` deadline with output queued: whether the client read
  /// some of its answer since the deadline was armed (the kernel saw it acknowledge bytes).
  private var clientTookQueuedOutput: Bool {
    guard let connection, connection.queuedByteCount > 0 else { return false }
    guard writeMark != Self.noWriteMark else { return true }
    guard writeMark != Self.acknowledgedUnknown, let acknowledged = connection.peerAcknowledgedBytes else {
      return false
    }
    return acknowledged > writeMark
  }

  func setDeadline(_ kind: DeadlineKind, after duration: Duration) {
    setDeadline(kind, nanoseconds: EventLoop.nanoseconds(of: duration))
  }

  /// The per-request deadlines take nanoseconds worked out at config load: `Duration`
  /// arithmetic goes through 128-bit multiplication, measurable at this call rate.
  func setDeadline(_ kind: DeadlineKind, nanoseconds: UInt64) {
    deadlineKind = kind
    deadline = loop.iterationTime &+ nanoseconds
  }

  /// No client deadline runs while the request waits on something the gateway bounds
  /// itself (a token refresh, the exchange a collapsed request shares).
  func clearDeadline() {
    deadline = 0
  }

  func deadlinePassed() {
    deadline = 0
    switch deadlineKind {
    case .header:
      guard sawAnyByte, exchange == nil else {
        abort()
        return
      }
      closeAfterResponse = true
      let requestID = context.requestIDs.next()
      var out: [UInt8] = []
      GatewayResponse.writeFailure(.headerTimeout, requestID: requestID, closeConnection: true, into: &out)
      _ = connection?.write(out)
      logLocal(status: 408, requestID: requestID, head: nil, bytes: out.count)
      connection?.close()
    case .idle:
      if clientTookQueuedOutput {
        setWriteDeadline(.idle)
      } else if connection.map({ $0.queuedByteCount > 0 }) == true {
        abort()
      } else if exchange != nil {
        // A local answer is out and the request's body still has not all come (see
        // `respondLocally`): the connection ends here, letting the client finish sending.
        closeAfterResponse = true
        connection?.closeDrainingInput()
      } else {
        connection?.close()
      }
    case .pipelineWait:
      guard let exchange, let upstream = exchange.upstream, let pool = exchange.pool else { return }
      if upstream.owner === self {
        // Its turn came in time: from here the response timeout applies, counted from when
        // the request went out (or, once the answer streams, from now, as for any answer).
        let timeout = pool.plan.responseTimeoutNanoseconds
        let due = exchange.responseStarted ? loop.iterationTime &+ timeout : exchange.sentAt &+ timeout
        guard due > loop.iterationTime else {
          upstreamFailed(.timedOut)
          return
        }
        deadlineKind = .upstreamResponse
        deadline = due
        return
      }
      exchange.upstream = nil
      pool.discard(upstream, by: self)
      sendAgainAlone(exchange)
    case .upstreamResponse:
      // Still waiting behind another answer on a pipelined connection: the wait was the
      // answer in front's (slow, or its client reads slowly), so this request leaves the
      // queue and goes again alone, with its own response timeout.
      if let exchange, let upstream = exchange.upstream, upstream.owner !== self {
        exchange.upstream = nil
        exchange.pool?.discard(upstream, by: self)
        sendAgainAlone(exchange)
        return
      }
      upstreamFailed(.timedOut)
    case .requestUpload:
      // The client stopped sending its body: nothing sensible can follow on this connection.
      closeAfterResponse = true
      if exchange?.responseStarted == true {
        abort()
      } else {
        if let upstream = exchange?.upstream { exchange?.pool?.discard(upstream, by: self) }
        exchange?.upstream = nil
        exchange?.requestComplete = true
        respondLocally(failure: .headerTimeout)
      }
    case .clientWrite:
      if clientTookQueuedOutput {
        setWriteDeadline(.clientWrite)
      } else {
        abort()
      }
    case .stubDelay:
      guard let exchange, exchange.waitingForStub, let routeIndex = exchange.routeIndex else { return }
      self.exchange?.waitingForStub = false
      let plan = exchange.snapshot.routePlans[routeIndex]
      respondLocally(status: plan.stub.status, body: plan.stub.body)
    }
  }

  /// Shutdown: idle connections close now; busy ones after the current answer.
  func drain() {
    closeAfterResponse = true
    if exchange == nil { connection?.close() }
  }

  func abort() {
    closeAfterResponse = true
    // Whatever this answer had gathered in the loop's output buffer must not go out with
    // the next session's answer.
    context.output.removeAll(keepingCapacity: true)
    if let exchange, let upstream = exchange.upstream {
      self.exchange?.upstream = nil
      exchange.pool?.discard(upstream, by: self)
    }
    connection?.abort()
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    closed = true
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
    self.connection = nil
    context.sessionClosed(self)
  }

  /// Counts a finished (or abandoned) exchange and writes its access line.
  private func record(_ exchange: Exchange, status: Int) {
    let elapsed = EventLoop.monotonicNanoseconds() &- exchange.startedAt
    if let result = exchange.cacheResult { context.metrics.cacheResults[result.metricLabel, default: 0] &+= 1 }
    context.recordRequest(
      snapshot: exchange.snapshot, routeIndex: exchange.routeIndex, status: status, nanoseconds: elapsed)
    if context.snapshot.accessLogEnabled {
      context.logAccess(
        AccessRecord(
          requestID: exchange.requestID, method: exchange.head.method, path: exchange.head.path,
          route: exchange.routeIndex.map { exchange.snapshot.routePlans[$0].name }, status: status,
          upstreamStatus: exchange.upstreamStatus, cache: exchange.cacheResult?.rawValue,
          durationNanoseconds: elapsed, bytes: exchange.bytesSent))
    }
  }

  private func logLocal(status: Int, requestID: [UInt8], head: HTTPRequestHead?, bytes: Int) {
    context.metrics.unrouted.record(status: status, nanoseconds: 0)
    guard context.snapshot.accessLogEnabled else { return }
    context.logAccess(
      AccessRecord(
        requestID: requestID, method: head?.method ?? .other("-"), path: head?.path ?? ArraySlice("-".utf8),
        route: nil, status: status, upstreamStatus: nil, cache: nil, durationNanoseconds: 0, bytes: Int64(bytes)))
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

  /// A client's own X-Request-Id is kept when it is plain and short.
  static func requestID(from head: HTTPRequestHead) -> [UInt8]? {
    guard let index = head.headers.firstIndex(lowercaseName: "x-request-id") else { return nil }
    let value = head.headers.valueBytes(at: index)
    return RequestIDGenerator.isAcceptable(value) ? Array(value) : nil
  }
}
