import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseNet

/// Drives a client session's exchange: feeds its `ExchangeMachine` every event (through
/// `run`) and performs the actions that come out, with the loop's pools, store and tokens
/// and the session's connection. What to do next is the machine's decision; how is the
/// driver's. Also here: the way to the upstream (token, breakers, lease, the request's head
/// and body) and the upstream failing. One per client session.
final class ExchangeDriver: ClientSessionPart {
  /// unowned(unsafe): the session owns its driver and outlives it; plain `unowned` would
  /// cost an atomic reference-count operation per access.
  unowned(unsafe) let session: ClientSession
  /// The exchange deadline armed last, and how many were armed (see `run`).
  var armedDeadline = ExchangeMachine.Deadline.none
  var deadlineArms = 0
  /// The request body piece being fed to the machine (valid only during that `run`).
  var bodyPiece: UnsafeRawBufferPointer?

  init(session: ClientSession) {
    self.session = session
  }

  /// Feeds the exchange's machine one event and performs what it says, then arms the
  /// deadline of the phase it reached when that changed.
  func run(_ event: ExchangeMachine.Event) {
    guard let exchange else { return }
    run(event, on: exchange)
  }

  /// `run` for a caller that holds the exchange already (each load of the optional
  /// property costs a retain and a release).
  ///
  /// An action whose outcome is known at once (the store looked up, a token at hand, the
  /// breakers' yes, a lease) returns its event, and the machine hears it in this same run:
  /// such an action is always the last of its list (see `ExchangeMachine`), so its event's
  /// actions simply follow. A request that goes straight through is one run, not four.
  func run(_ event: ExchangeMachine.Event, on exchange: Exchange) {
    let serial = session.exchangeSerial
    let before = exchange.machine.deadline
    let armsBefore = deadlineArms
    var actions = exchange.machine.handle(event)
    var index = 0
    while index < actions.count {
      let action = actions[index]
      index += 1
      // An action may end the exchange (an abort, the finish): the rest are for nobody.
      guard session.exchangeSerial == serial, !closed else { return }
      if let next = perform(action, exchange) {
        assert(index == actions.count, "an action that leads to an event is the last of its list")
        guard session.exchangeSerial == serial, !closed else { return }
        actions = exchange.machine.handle(next.event)
        index = 0
      }
    }
    guard session.exchangeSerial == serial, !closed else { return }
    let after = exchange.machine.deadline
    // An event fed while performing these actions may have armed this very deadline
    // already (a failure's retry leads to a new lease): it is armed once, by the innermost run.
    guard after != before, deadlineArms == armsBefore || after != armedDeadline else { return }
    armDeadline(after, exchange)
  }

  /// The client's answer began. The machine only notes it: the event yields no action, and
  /// while forwarding the deadline follows the request, not the answer (see
  /// `ExchangeMachineTests`), so it needs no step of `run`.
  func answerBegan(_ exchange: Exchange) {
    let actions = exchange.machine.handle(.answerBegan)
    assert(actions.count == 0, "answerBegan yields no action")
  }

  /// Performs `action`; returns the event it leads to at once, if any (see `run`).
  private func perform(_ action: ExchangeMachine.Action, _ exchange: Exchange) -> ExchangeMachine.ImmediateEvent? {
    switch action {
    case .awaitSigningKeys:
      waitForSigningKeys(exchange)
    case .countRateLimit:
      return countRateLimit(exchange)
    case .lookUpStore:
      return .storeLookedUp(routeCache.lookUp(exchange, for: session))
    case .revalidateInBackground:
      guard let key = exchange.cacheKey, let routeIndex = exchange.routeIndex else { return nil }
      context.revalidate(
        key: key, request: exchange.head, target: Array(exchange.upstreamTarget), snapshot: exchange.snapshot,
        routeIndex: routeIndex, clientAddress: session.clientAddress, stored: exchange.revalidation,
        claimLines: exchange.upstreamClaimLines)
    case .takeToken:
      return takeToken(exchange)
    case .askBreakers(let retry):
      return askBreakers(exchange, retry: retry)
    case .lease(let fresh):
      return lease(exchange, fresh: fresh)
    case .queueForConnection:
      guard let pool = exchange.pool else { return nil }
      pool.enqueue(session)
      pool.evictStalledReaderIfDue(now: loop.iterationTime)
    case .leaveQueue:
      exchange.pool?.leaveQueue(session)
    case .sendContinue:
      server.writeContinue()
    case .pauseClientReading:
      server.setReadingPaused(true, reason: .backpressure)
    case .writeUpstreamHead(let asGET):
      writeUpstreamHead(exchange, asGET: asGET)
    case .forwardBody:
      forwardBodyPiece(exchange)
    case .endUpstreamBody:
      guard exchange.rechunkRequest, let upstream = exchange.upstream?.connection else { return nil }
      var last: [UInt8] = []
      HTTPSerializer.writeLastChunk(into: &last)
      _ = upstream.write(last)
    case .keepBody:
      if let piece = bodyPiece { exchange.pendingBody.append(contentsOf: piece) }
      if exchange.machine.deadline == .requestUpload { setUploadDeadline() }
    case .dropBody:
      break
    case .lookUpSharedTier:
      return lookUpSharedTier(exchange)
    case .serveStored(let kind):
      if kind == .stale { noteFailover(exchange) }
      let result: CacheResult =
        switch kind {
        case .hit: .hit
        case .stale: .stale
        case .revalidated: .revalidated
        }
      if let shaped = exchange.storedShape {
        exchange.storedShape = nil
        session.serveShaped(shaped, result: result)
        return nil
      }
      guard let stored = exchange.storedAnswer else { return nil }
      exchange.storedAnswer = nil
      session.serveStored(stored, result: result)
    case .serveCollapsed:
      guard let answer = exchange.collapsedAnswer else { return nil }
      exchange.collapsedAnswer = nil
      session.writeKeptAnswer(
        head: answer.head, body: answer.body, outcome: answer.rendered ?? .passThrough,
        extra: StoreEntryRules.cacheLines(exchange.cacheResult))
    case .serveStub:
      // A fallback stub answers for the failure; an `always` one for itself.
      noteFailover(exchange)
      if exchange.reason == nil { exchange.reason = .stub }
      guard let routeIndex = exchange.routeIndex else { return nil }
      let plan = exchange.snapshot.routePlans[routeIndex]
      session.respondLocally(status: plan.stub.status, body: plan.stub.body)
    case .answerLocally(let answer):
      answerLocally(answer, exchange)
    case .releaseUpstream(let reusable):
      releaseUpstream(exchange, upstreamReusable: reusable)
    case .discardUpstream:
      guard let upstream = exchange.upstream else { return nil }
      exchange.upstream = nil
      exchange.pool?.discard(upstream, by: session)
    case .abortClient:
      session.abort()
    case .closeAfterAnswer:
      // The connection lingers to read what the client still sends, whether the machine
      // asks for that or not: unread input would reset the answer away.
      server.closeAfterCurrentAnswer()
    case .openTunnel:
      session.openTunnel(exchange)
    case .closeTunnel:
      exchange.tunnel?.close(now: loop.iterationTime)
    case .finishTunnel:
      session.finishTunnel(exchange)
    case .drainBody, .finish:
      // The answer is complete: the connection finishes the exchange once the request is
      // too, reading and dropping what is left of the body within the idle timeout.
      server.endAnswer()
    }
    return nil
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
    if case .upstream = answer { noteFailover(exchange) }
    let local = GatewayAnswer.local(
      answer, method: exchange.head.method, path: exchange.head.path, failureReason: exchange.failureReason,
      retryAfterSeconds: exchange.retryAfterSeconds, challenge: exchange.bearer?.challenge ?? [])
    session.respondLocally(failure: local.failure, reason: local.reason, extraHeaders: local.extraHeaders)
  }

  // MARK: Deadlines of the phases

  /// Arms the deadline the machine's phase calls for, with the timeouts of the config and
  /// the upstream the exchange uses.
  func armDeadline(_ deadline: ExchangeMachine.Deadline, _ exchange: Exchange) {
    deadlineArms &+= 1
    armedDeadline = deadline
    switch deadline {
    case .none:
      session.clearDeadline()
    case .stubDelay:
      guard let routeIndex = exchange.routeIndex else { return }
      session.setDeadline(.exchange, after: exchange.snapshot.routePlans[routeIndex].stub.delay)
    case .collapsedWait:
      session.setDeadline(.exchange, nanoseconds: exchange.collapsePatience)
    case .connectionQueue:
      guard let pool = exchange.pool else { return }
      session.setDeadline(.exchange, nanoseconds: pool.plan.queueTimeoutNanoseconds)
    case .requestUpload:
      setUploadDeadline()
    case .upstreamAnswer:
      guard let pool = exchange.pool else { return }
      armAnswerDeadline(exchange, pool: pool)
    case .drainBody:
      // The connection's idle timeout bounds the rest of the body.
      session.clearDeadline()
    case .tunnelIdle:
      // The tunnel keeps its own (`WebSocketTunnel.deadline`): it moves with every read.
      session.clearDeadline()
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
      if let upstream = exchange.upstream, upstream.owner !== session {
        exchange.upstream = nil
        exchange.pool?.discard(upstream, by: session)
        sendAgainAlone(exchange)
        return
      }
      upstreamFailed(.timedOut)
    case .collapsedWait:
      upstreamFailed(.timedOut)
    case .connectionQueue:
      upstreamFailed(.busy)
    case .stubDelay, .requestUpload, .drainBody, .tunnelIdle:
      run(.deadlinePassed)
    case .none:
      break
    }
  }

  // MARK: On the way to the upstream

  /// Takes a value of the route's token, or waits for one (after a rejection, for the value
  /// `TokenManager.retryAfterRejection` gives).
  private func takeToken(_ exchange: Exchange) -> ExchangeMachine.ImmediateEvent? {
    guard let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token else {
      return .tokenGranted
    }
    if exchange.awaitsNewToken {
      exchange.awaitsNewToken = false
      let rejected = exchange.rejectedToken
      exchange.rejectedToken = nil
      waitForToken(use, afterRejecting: rejected)
      return nil
    }
    if exchange.tokenGrant == nil { exchange.tokenGrant = context.usableToken(use.name, index: use.index) }
    guard exchange.tokenGrant != nil else {
      waitForToken(use)
      return nil
    }
    return .tokenGranted
  }

  /// An upstream the health checks call down is skipped without a connect attempt, as one
  /// with an open circuit is, but counted as what it is (`unhealthy`): the circuit did not
  /// open (without health checks the map is empty, and no name is hashed per request). A
  /// retry on a fresh connection asks the circuit whether a retry makes sense now; it never
  /// takes a trial.
  private func askBreakers(_ exchange: Exchange, retry: Bool) -> ExchangeMachine.ImmediateEvent? {
    guard let pool = context.upstreamPool(for: exchange), let routeIndex = exchange.routeIndex else {
      upstreamFailed(.unavailable, reason: .noUpstream)
      return nil
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
      case .attemptUnlessAnswerable: skip = routeCache.staleAnswer(for: exchange) != nil ? .circuitOpen : nil
      }
    }
    // Kept for the lease that follows (and for the failure's count when skipped).
    exchange.pool = pool
    if let skip {
      upstreamFailed(skip)
      return nil
    }
    return .breakersAdmitted
  }

  /// Leases a connection of the exchange's upstream, or queues for one.
  private func lease(_ exchange: Exchange, fresh: Bool) -> ExchangeMachine.ImmediateEvent? {
    // The breakers were asked of this pool; one never asked (a resend after a pipelined
    // connection dropped the request) is looked up again.
    guard let pool = exchange.pool ?? context.upstreamPool(for: exchange) else {
      upstreamFailed(.unavailable, reason: .noUpstream)
      return nil
    }
    // The health checks may have called the upstream down while the request waited.
    if !context.upstreamHealthy.isEmpty && context.upstreamHealthy[pool.plan.name] == false {
      exchange.pool = pool
      upstreamFailed(.unhealthy)
      return nil
    }
    if !pool.hasRoom {
      exchange.pool = pool
      return .noConnectionFree
    }
    guard let pick = pool.pickEndpoint(excluding: exchange.triedEndpoints, hashKey: hashKey(exchange, pool: pool))
    else {
      exchange.pool = pool
      upstreamFailed(.unavailable, reason: .noUpstream)
      return nil
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
        (upstream, joined) = try pool.leaseForPipelining(for: session, endpoint: pick.endpoint)
        exchange.waitedBehindAnother = joined
        if joined { context.metrics.pipelined &+= 1 }
      } else {
        upstream = try pool.lease(for: session, fresh: fresh, endpoint: pick.endpoint)
      }
    } catch {
      context.shared.warnCannotOpenUpstream(pool.plan.name, error: error)
      // A socket the gateway cannot make (out of descriptors) is no failure of the
      // upstream's: a first attempt's is not counted by its breakers.
      if exchange.machine.attempts == 0 { exchange.pool = nil }
      upstreamFailed(.unavailable)
      return nil
    }
    exchange.pool = pool
    exchange.upstream = upstream
    exchange.pipelinedWrite = pipelined
    // Only a fleet retries elsewhere: one endpoint needs no record of tries nor budget.
    if pool.isFleet {
      if exchange.triedEndpoints.isEmpty { pool.noteFirstTry() }
      exchange.triedEndpoints.insert(pick.endpoint)
    }
    return .leased(reused: upstream.useCount > 0)
  }

  /// The request's key for `balance: hash` (`hash_by`); nil for other policies, and when
  /// the request has no such key (then it is balanced by least request).
  private func hashKey(_ exchange: Exchange, pool: UpstreamPool) -> UInt64? {
    guard pool.plan.balance == .hash else { return nil }
    switch pool.plan.hashKey {
    case .client:
      if let id = exchange.clientID { return FleetHash.hash("key:" + id) }
      if let user = exchange.bearer?.userKey { return FleetHash.hash("user:" + user) }
      return FleetHash.hash(session.clientAddress)
    case .ip:
      return FleetHash.hash(session.clientAddress)
    case .path:
      let target = exchange.head.target
      return FleetHash.hash(target.prefix { $0 != UInt8(ascii: "?") })
    case .header(let name):
      return exchange.head.headers[name].map { FleetHash.hash($0) }
    }
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
      exchange.startAnswerAfresh()
      exchange.upstreamStatus = nil
    }
    var token: UpstreamRequestWriter.TokenLine?
    if let use = plan.token, let grant = exchange.tokenGrant {
      exchange.tokenGrant = nil
      exchange.tokenSerial = grant.serial
      exchange.sentToken = grant.spellings
      token = UpstreamRequestWriter.TokenLine(prefix: use.linePrefix, value: grant.bytes, suffix: use.lineSuffix)
    }
    exchange.sentAt = loop.iterationTime
    exchange.headAt = 0
    exchange.endAt = 0
    let method = exchange.head.method
    let upstreamMethod = asGET ? HTTPMethod.get : method
    exchange.suppressBody = upstreamMethod != method
    // The gateway meets the client's conditions itself where the upstream's answer is not
    // the client's alone: wrapped in the envelope, or fetched for the store (for everyone).
    exchange.gatewayMeetsConditions =
      (method == .get || method == .head)
      && (plan.envelope != nil || exchange.revalidation != nil || exchange.hasCacheKey)
    exchange.answerParser.requestWasHEAD = upstreamMethod == .head
    exchange.answerParser.requestAskedUpgrade = exchange.machine.facts.upgrade
    let framing = ForwardingRules.upstreamFraming(exchange.head.bodyFraming)
    exchange.rechunkRequest = framing == .chunked
    context.scratch.removeAll(keepingCapacity: true)
    UpstreamRequestWriter.write(
      head: exchange.head, method: upstreamMethod, target: exchange.upstreamTarget, hostHeader: pool.plan.hostHeader,
      plan: plan.headerPlan, token: token,
      acceptsGzip: ForwardingRules.asksUpstreamForGzip(plan, clientTakesGzip: exchange.acceptsGzip),
      sharedAnswer: exchange.hasCacheKey, meetsConditions: exchange.gatewayMeetsConditions,
      validatorLines: exchange.revalidation.map(StoreEntryRules.validatorLines) ?? [],
      claimLines: exchange.upstreamClaimLines, clientAddress: session.clientAddress,
      forwardedProto: session.secure ? "https" : "http", requestID: exchange.requestID, framing: framing,
      upgrade: exchange.machine.facts.upgrade, into: &context.scratch)
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

  /// A request written behind others on a pipelined upstream connection waited its
  /// patience: if its turn came, the answer timeout applies from when it went out (or,
  /// once the answer streams, from now); if not, it goes again alone.
  func pipelineWaitPassed() {
    guard let exchange, let upstream = exchange.upstream, let pool = exchange.pool else { return }
    if upstream.owner === session {
      let timeout = pool.plan.answerTimeoutNanoseconds
      let due = exchange.machine.answerBegan ? loop.iterationTime &+ timeout : exchange.sentAt &+ timeout
      guard due > loop.iterationTime else {
        upstreamFailed(.timedOut)
        return
      }
      session.deadlineKind = .exchange
      server.setResponderDeadline(at: due)
      return
    }
    exchange.upstream = nil
    pool.discard(upstream, by: session)
    sendAgainAlone(exchange)
  }
}
