import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseNet

/// A session drives its exchange's `ExchangeMachine`: events go in through `run`, and the
/// actions that come out are performed here, with the session's connection, the loop's
/// pools, store and tokens. What to do next is the machine's decision; how is the session's.
extension ClientSession {
  /// Feeds the exchange's machine one event and performs what it says, then arms the
  /// deadline of the phase it reached when that changed.
  func run(_ event: ExchangeMachine.Event) {
    guard let exchange else { return }
    run(event, on: exchange)
  }

  /// `run` for a caller that holds the exchange already (each load of the optional
  /// property costs a retain and a release).
  func run(_ event: ExchangeMachine.Event, on exchange: Exchange) {
    let serial = exchangeSerial
    let before = exchange.machine.deadline
    let armsBefore = deadlineArms
    let actions = exchange.machine.handle(event)
    for action in actions {
      // An action may end the exchange (an abort, the finish): the rest are for nobody.
      guard exchangeSerial == serial, !closed else { return }
      perform(action, exchange)
    }
    guard exchangeSerial == serial, !closed else { return }
    let after = exchange.machine.deadline
    // An event fed while performing these actions may have armed this very deadline
    // already (a lease leads at once to `leased`): it is armed once, by the innermost run.
    guard after != before, deadlineArms == armsBefore || after != armedDeadline else { return }
    armDeadline(after, exchange)
  }

  private func perform(_ action: ExchangeMachine.Action, _ exchange: Exchange) {
    switch action {
    case .lookUpStore:
      run(.storeLookedUp(lookUpStore(exchange)), on: exchange)
    case .revalidateInBackground:
      guard let key = exchange.cacheKey, let routeIndex = exchange.routeIndex else { return }
      context.revalidate(
        key: key, request: exchange.head, target: exchange.upstreamTarget, snapshot: exchange.snapshot,
        routeIndex: routeIndex, clientAddress: clientAddress)
    case .takeToken:
      takeToken(exchange)
    case .askBreakers(let retry):
      askBreakers(exchange, retry: retry)
    case .lease(let fresh):
      lease(exchange, fresh: fresh)
    case .queueForConnection:
      guard let pool = exchange.pool else { return }
      pool.enqueue(self)
      pool.evictStalledReaderIfDue(now: loop.iterationTime)
    case .leaveQueue:
      exchange.pool?.leaveQueue(self)
    case .sendContinue:
      server.writeContinue()
    case .pauseClientReading:
      server.setReadingPaused(true, reason: .backpressure)
    case .writeUpstreamHead(let asGET):
      writeUpstreamHead(exchange, asGET: asGET)
    case .forwardBody:
      forwardBodyPiece(exchange)
    case .endUpstreamBody:
      guard exchange.rechunkRequest, let upstream = exchange.upstream?.connection else { return }
      var last: [UInt8] = []
      HTTPSerializer.writeLastChunk(into: &last)
      _ = upstream.write(last)
    case .keepBody:
      if let piece = bodyPiece { exchange.pendingBody.append(contentsOf: piece) }
      if exchange.machine.deadline == .requestUpload { setUploadDeadline() }
    case .dropBody:
      break
    case .serveStored(let kind):
      if kind == .stale { noteFailover(exchange) }
      guard let stored = exchange.storedAnswer else { return }
      exchange.storedAnswer = nil
      serveStored(stored, result: kind == .hit ? .hit : .stale)
    case .serveCollapsed:
      guard let answer = exchange.collapsedAnswer else { return }
      exchange.collapsedAnswer = nil
      writeKeptAnswer(
        head: answer.head, body: answer.body, outcome: answer.rendered ?? .passThrough,
        extra: StoreEntryRules.cacheLines(exchange.cacheResult))
    case .serveStub:
      // A fallback stub answers for the failure; an `always` one for itself.
      noteFailover(exchange)
      if exchange.reason == nil { exchange.reason = .stub }
      guard let routeIndex = exchange.routeIndex else { return }
      let plan = exchange.snapshot.routePlans[routeIndex]
      respondLocally(status: plan.stub.status, body: plan.stub.body)
    case .answerLocally(let answer):
      answerLocally(answer, exchange)
    case .releaseUpstream(let reusable):
      releaseUpstream(exchange, upstreamReusable: reusable)
    case .discardUpstream:
      guard let upstream = exchange.upstream else { return }
      exchange.upstream = nil
      exchange.pool?.discard(upstream, by: self)
    case .abortClient:
      abort()
    case .closeAfterAnswer:
      // The connection lingers to read what the client still sends, whether the machine
      // asks for that or not: unread input would reset the answer away.
      server.closeAfterCurrentAnswer()
    case .drainBody, .finish:
      // The answer is complete: the connection finishes the exchange once the request is
      // too, reading and dropping what is left of the body within the idle timeout.
      server.endAnswer()
    }
  }

  /// A failure gives way to a stored answer or the fallback stub: the answer is given for
  /// the failure's reason, and collapsed waiters answer as this request does.
  private func noteFailover(_ exchange: Exchange) {
    guard let failure = exchange.failure else { return }
    exchange.reason = exchange.failureReason ?? failure.reason
    if exchange.collapseRole == .leading, exchange.collapseOutcome == nil {
      exchange.collapseOutcome = .failed(failure)
    }
  }

  private func answerLocally(_ answer: ExchangeMachine.LocalAnswer, _ exchange: Exchange) {
    switch answer {
    case .refused(.clientKeyMissing):
      respondLocally(
        failure: .clientKeyMissing, reason: .clientKeyMissing, extraHeaders: ForwardingRules.apiKeyChallenge)
    case .refused(.clientKeyInvalid):
      respondLocally(
        failure: .clientKeyInvalid, reason: .clientKeyInvalid, extraHeaders: ForwardingRules.apiKeyChallenge)
    case .refused(.rateLimited(let seconds)):
      respondLocally(
        failure: .rateLimited, reason: .rateLimited, extraHeaders: Array("Retry-After: \(seconds)\r\n".utf8))
    case .noRoute:
      respondLocally(
        failure: .noRoute(method: exchange.head.method.name, path: String(decoding: exchange.head.path, as: UTF8.self)),
        reason: .noRoute)
    case .noUpstream:
      respondLocally(failure: .upstreamUnavailable, reason: .noUpstream)
    case .badTarget:
      respondLocally(failure: .badRequest(.invalidTarget), reason: .badRequest)
    case .upstream(let failure):
      noteFailover(exchange)
      respondLocally(failure: failure.answer, reason: exchange.failureReason ?? failure.reason)
    case .tokenUnavailable:
      respondLocally(failure: .tokenUnavailable, reason: .tokenUnavailable)
    case .tokenRejected:
      respondLocally(failure: .tokenRejected, reason: .tokenRejected)
    case .requestTimedOut:
      respondLocally(failure: .headerTimeout, reason: .requestTimeout)
    case .overloaded:
      respondLocally(failure: .overloaded, reason: .overloaded)
    }
  }

  // MARK: Deadlines of the phases

  /// Arms the deadline the machine's phase calls for, with the timeouts of the config and
  /// the upstream the exchange uses.
  func armDeadline(_ deadline: ExchangeMachine.Deadline, _ exchange: Exchange) {
    deadlineArms &+= 1
    armedDeadline = deadline
    switch deadline {
    case .none:
      clearDeadline()
    case .stubDelay:
      guard let routeIndex = exchange.routeIndex else { return }
      setDeadline(.exchange, after: exchange.snapshot.routePlans[routeIndex].stub.delay)
    case .collapsedWait:
      setDeadline(.exchange, nanoseconds: exchange.collapsePatience)
    case .connectionQueue:
      guard let pool = exchange.pool else { return }
      setDeadline(.exchange, nanoseconds: pool.plan.queueTimeoutNanoseconds)
    case .requestUpload:
      setUploadDeadline()
    case .upstreamAnswer:
      guard let pool = exchange.pool else { return }
      armAnswerDeadline(exchange, pool: pool)
    case .drainBody:
      // The connection's idle timeout bounds the rest of the body.
      clearDeadline()
    }
  }

  /// The deadline of the exchange's phase passed. Where it means the upstream failed (no
  /// answer, no place in its queue, no answer for a collapsed request) it is reported as
  /// that failure, with its bookkeeping.
  func exchangeDeadlinePassed() {
    guard let exchange else { return }
    switch exchange.machine.deadline {
    case .upstreamAnswer:
      // Still waiting behind another answer on a pipelined connection: the wait was the
      // answer in front's (slow, or its client reads slowly), so this request leaves the
      // queue and goes again alone, with its own answer timeout.
      if let upstream = exchange.upstream, upstream.owner !== self {
        exchange.upstream = nil
        exchange.pool?.discard(upstream, by: self)
        sendAgainAlone(exchange)
        return
      }
      upstreamFailed(.timedOut)
    case .collapsedWait:
      upstreamFailed(.timedOut)
    case .connectionQueue:
      upstreamFailed(.busy)
    case .stubDelay, .requestUpload, .drainBody:
      run(.deadlinePassed)
    case .none:
      break
    }
  }

  // MARK: On the way to the upstream

  /// The pool of the exchange's upstream. After a reload a request sent again (a retry, a
  /// dropped pipelined one) stays with the pool it started on, as requests in flight finish
  /// on the config they started with; one never sent (it waited for a token, or behind a
  /// collapsed request) takes the running config's pool for its upstream.
  private func upstreamPool(_ exchange: Exchange) -> UpstreamPool? {
    guard let routeIndex = exchange.routeIndex,
      let upstreamIndex = exchange.snapshot.routePlans[routeIndex].upstreamIndex
    else { return nil }
    let startedOn = exchange.snapshot === context.snapshot ? nil : exchange.pool
    return startedOn ?? context.pool(upstreamIndex, of: exchange.snapshot)
  }

  /// Takes a value of the route's token, or waits for one (after a rejection, for the value
  /// `TokenManager.retryAfterRejection` gives).
  private func takeToken(_ exchange: Exchange) {
    guard let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token else {
      run(.tokenGranted, on: exchange)
      return
    }
    if exchange.awaitsNewToken {
      exchange.awaitsNewToken = false
      let rejected = exchange.rejectedToken
      exchange.rejectedToken = nil
      waitForToken(use, afterRejecting: rejected)
      return
    }
    if exchange.tokenGrant == nil { exchange.tokenGrant = context.usableToken(use.name, index: use.index) }
    guard exchange.tokenGrant != nil else {
      waitForToken(use)
      return
    }
    run(.tokenGranted, on: exchange)
  }

  /// An upstream the health checks call down is skipped without a connect attempt, as one
  /// with an open circuit is, but counted as what it is (`unhealthy`): the circuit did not
  /// open (without health checks the map is empty, and no name is hashed per request). A
  /// retry on a fresh connection asks the circuit whether a retry makes sense now; it never
  /// takes a trial.
  private func askBreakers(_ exchange: Exchange, retry: Bool) {
    guard let pool = upstreamPool(exchange), let routeIndex = exchange.routeIndex else {
      upstreamFailed(.unavailable, reason: .noUpstream)
      return
    }
    var skip: UpstreamFailure?
    if !context.upstreamHealthy.isEmpty && context.upstreamHealthy[pool.plan.name] == false {
      skip = .unhealthy
    } else {
      switch pool.breakersDecide(
        route: exchange.snapshot.routePlans[routeIndex].name, retry: retry, now: loop.iterationTime)
      {
      case .attempt, .attemptAsTrial: break
      case .reject: skip = .circuitOpen
      // On probation, with the check out: a request with a stored answer takes it.
      case .attemptUnlessAnswerable: skip = staleAnswer(for: exchange) != nil ? .circuitOpen : nil
      }
    }
    // Kept for the lease that follows (and for the failure's count when skipped).
    exchange.pool = pool
    if let skip {
      upstreamFailed(skip)
      return
    }
    run(.breakersAdmitted, on: exchange)
  }

  /// Leases a connection of the exchange's upstream, or queues for one.
  private func lease(_ exchange: Exchange, fresh: Bool) {
    // The breakers were asked of this pool; one never asked (a resend after a pipelined
    // connection dropped the request) is looked up again.
    guard let pool = exchange.pool ?? upstreamPool(exchange) else {
      upstreamFailed(.unavailable, reason: .noUpstream)
      return
    }
    // The health checks may have called the upstream down while the request waited.
    if !context.upstreamHealthy.isEmpty && context.upstreamHealthy[pool.plan.name] == false {
      exchange.pool = pool
      upstreamFailed(.unhealthy)
      return
    }
    if !pool.hasRoom(fresh: fresh) {
      exchange.pool = pool
      run(.noConnectionFree, on: exchange)
      return
    }
    let upstream: UpstreamConnection
    // A bodiless GET may be written behind another request on a busy connection (see
    // `PipelinePolicy`); a retry goes alone on a fresh connection.
    let pipelined =
      !fresh && pool.plan.pipelineDepth > 1
      && PipelinePolicy.mayJoin(
        method: exchange.head.method, hasBody: ForwardingRules.hasBody(exchange.head),
        isResend: exchange.pipelineDropped || exchange.machine.tokenRetried)
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
      // A socket the gateway cannot make (out of descriptors) is no failure of the
      // upstream's: a first attempt's is not counted by its breakers.
      if exchange.machine.attempts == 0 { exchange.pool = nil }
      upstreamFailed(.unavailable)
      return
    }
    exchange.pool = pool
    exchange.upstream = upstream
    exchange.pipelinedWrite = pipelined
    run(.leased(reused: upstream.useCount > 0), on: exchange)
  }

  /// Writes the request head on the leased connection, then the body kept so far.
  private func writeUpstreamHead(_ exchange: Exchange, asGET: Bool) {
    guard let upstream = exchange.upstream, let pool = exchange.pool, let routeIndex = exchange.routeIndex else {
      return
    }
    let plan = exchange.snapshot.routePlans[routeIndex]
    if exchange.machine.attempts > 1 {
      // A retry: the parser may hold part of the earlier answer, and what was learnt from
      // it belongs to that attempt. (A new exchange's are new.)
      exchange.answerParser = HTTPResponseParser(limits: Exchange.upstreamAnswerLimits)
      exchange.upstreamStatus = nil
      exchange.answerBytesReceived = false
    }
    var token: UpstreamRequestWriter.TokenLine?
    if let use = plan.token, let grant = exchange.tokenGrant {
      exchange.tokenGrant = nil
      exchange.tokenSerial = grant.serial
      exchange.sentToken = grant.bytes
      token = UpstreamRequestWriter.TokenLine(prefix: use.linePrefix, value: grant.bytes, suffix: use.lineSuffix)
    }
    exchange.sentAt = loop.iterationTime
    exchange.headAt = 0
    let method = exchange.head.method
    let upstreamMethod = asGET ? HTTPMethod.get : method
    exchange.suppressBody = upstreamMethod != method
    exchange.answerParser.requestWasHEAD = upstreamMethod == .head
    let framing = ForwardingRules.upstreamFraming(exchange.head.bodyFraming)
    exchange.rechunkRequest = framing == .chunked
    context.scratch.removeAll(keepingCapacity: true)
    UpstreamRequestWriter.write(
      head: exchange.head, method: upstreamMethod, target: exchange.upstreamTarget, hostHeader: pool.plan.hostHeader,
      plan: plan.headerPlan, token: token,
      acceptsGzip: ForwardingRules.asksUpstreamForGzip(plan, clientTakesGzip: exchange.acceptsGzip),
      sharedAnswer: exchange.hasCacheKey, clientAddress: clientAddress,
      forwardedProto: secure ? "https" : "http", requestID: exchange.requestID, framing: framing,
      into: &context.scratch)
    if exchange.pipelinedWrite {
      context.scratch.withUnsafeBytes { pool.writePipelined($0, on: upstream) }
    } else {
      context.scratch.withUnsafeBytes { _ = upstream.connection?.write($0) }
    }
    // A retry sends the kept body again; body bytes that arrived while the token was
    // being fetched follow the head now.
    if exchange.machine.attempts > 1 || exchange.machine.tokenRetried, let copy = exchange.requestBodyCopy,
      !copy.isEmpty
    {
      writeRequestBody(copy, to: upstream, exchange: exchange)
    } else if !exchange.pendingBody.isEmpty {
      writeRequestBody(exchange.pendingBody, to: upstream, exchange: exchange)
    }
    exchange.pendingBody = []
    // Reading stopped once the read-ahead was full; the rest now streams to the upstream.
    server.setReadingPaused(false, reason: .backpressure)
  }
}
