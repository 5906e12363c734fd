import GatehouseCompression
import GatehouseHTTP
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// One `stale_while_revalidate` refresh: the client already has the stored answer; this
/// asks the upstream again and stores what comes back. At most one runs per key per loop.
///
/// It drives an `ExchangeMachine` like a client's exchange, with no client: its token,
/// breaker, lease, retry and release steps are the machine's. What differs is what it
/// performs: it never waits (for a token, or in an upstream's queue), goes only to an
/// upstream in good standing, and its "answers" are simply its end.
final class BackgroundRefresh: UpstreamExchangeOwner {
  /// unowned(unsafe): a loop context lives as long as its loop, longer than anything on it,
  /// and plain `unowned` would cost an atomic reference-count operation per access.
  unowned(unsafe) let context: LoopContext
  let key: CacheKey
  private var machine = ExchangeMachine()
  private var request: HTTPRequestHead?
  private var target: [UInt8] = []
  private var snapshot: GatewaySnapshot?
  private var clientAddress: [UInt8] = []
  private var upstream: UpstreamConnection?
  /// The endpoints its tries went to (a retry goes to another).
  private var tried = TriedEndpoints()
  private var pool: UpstreamPool?
  private var parser = HTTPResponseParser(limits: Exchange.upstreamAnswerLimits)
  private var head: HTTPResponseHead?
  private var body: [UInt8] = []
  private var received = false
  private var tooBig = false
  /// The body did not fit `limits.buffered_bytes`: this refresh stores nothing (and leaves
  /// the stored answer alone: it says nothing about it).
  private var overBudget = false
  /// Bytes of `body` taken from `limits.buffered_bytes`.
  private var charged = 0
  private var timer: TimerHandle?
  private var finished = false
  /// The route the refresh is for: its envelope and token rules decide whether the answer
  /// is good enough to store.
  private var plan: RoutePlan?
  private var grant: TokenGrant?
  /// The serial of the token value sent, reported back if the answer rejects it.
  private var tokenSerial: UInt64?
  /// The client asked for gzip: on a pass-through route its entry is the gzip one.
  private var clientTakesGzip = false
  /// Where a rejection came from (`RejectingEndpoints.key`), as for a client's request.
  private var tokenEndpoint: String?
  /// The stored answer refreshed: its validators go with the request, and a `304`
  /// renews it.
  private var stored: StoredAnswer?
  /// The forwarded claims of the user the refreshed answer belongs to.
  private var claimLines: [UInt8] = []

  init(context: LoopContext, key: CacheKey) {
    self.context = context
    self.key = key
  }

  func start(
    request: HTTPRequestHead, target: [UInt8], snapshot: GatewaySnapshot, routeIndex: Int, clientAddress: [UInt8],
    stored: StoredAnswer?, claimLines: [UInt8] = []
  ) {
    self.claimLines = claimLines
    let plan = snapshot.routePlans[routeIndex]
    self.plan = plan
    self.stored = stored
    self.request = request
    self.target = target
    self.snapshot = snapshot
    self.clientAddress = clientAddress
    clientTakesGzip =
      request.headers.firstValue(lowercaseName: "accept-encoding").map(AcceptEncoding.acceptsGzip) ?? false
    if let use = plan.token { tokenEndpoint = RejectingEndpoints.key(route: use.routeName, path: request.path) }
    var route = ExchangeMachine.RouteFacts()
    route.hasUpstream = plan.upstreamIndex != nil
    route.usesToken = plan.token != nil
    // Always a GET: the answer is for the store.
    run(.started(ExchangeMachine.RequestFacts(idempotent: true, route: route)))
  }

  // MARK: The machine's actions

  private func run(_ event: ExchangeMachine.Event) {
    guard !finished else { return }
    let actions = machine.handle(event)
    for action in actions {
      guard !finished else { return }
      perform(action)
    }
    if !finished, machine.deadline == .upstreamAnswer, timer == nil, let pool {
      // Strong: `finish` cancels the timer, which then lets go of this refresh.
      timer = context.loop.scheduleTimer(after: pool.plan.answerTimeout) { [self] in fail(.timedOut) }
    }
  }

  private func perform(_ action: ExchangeMachine.Action) {
    switch action {
    case .takeToken:
      // A refresh never waits for a token: without a usable value it simply does not run.
      if let use = plan?.token, let grant = context.usableToken(use.name) {
        self.grant = grant
        run(.tokenGranted)
      } else {
        run(.tokenUnavailable(staleAvailable: false))
      }
    case .askBreakers:
      // A refresh goes only to an upstream in good standing: the client already has its
      // answer, so a refresh never takes an open circuit's trial or adds to a failing
      // upstream's load.
      guard let plan, let pool = upstreamPool(), pool.circuit.isClosed, pool.routeCircuits.isClosed(route: plan.name),
        context.upstreamHealthy[pool.plan.name] != false
      else {
        finish()
        return
      }
      run(.breakersAdmitted)
    case .lease(let fresh):
      lease(fresh: fresh)
    case .writeUpstreamHead:
      writeHead()
    case .releaseUpstream(let reusable):
      if let upstream, let pool {
        self.upstream = nil
        pool.release(upstream, reusable: reusable && head?.keepAlive == true && !parser.isClosed)
      }
    case .discardUpstream:
      if let upstream, let pool {
        self.upstream = nil
        pool.discard(upstream, by: self)
      }
      cancelTimer()
    // Its answers, whatever they would be for a client, are its end (its facts never ask
    // the shared tier: the client was answered already).
    case .serveStored, .serveCollapsed, .serveStub, .answerLocally, .abortClient, .finish, .lookUpSharedTier:
      finish()
    // Nothing of these concerns a refresh: no store lookup (it is the store's), no body, no
    // client connection, no client's token to check or limit to count (its facts never ask
    // for keys or a count).
    case .awaitSigningKeys, .countRateLimit, .lookUpStore, .revalidateInBackground, .queueForConnection, .leaveQueue,
      .sendContinue,
      .pauseClientReading, .forwardBody, .endUpstreamBody, .keepBody, .dropBody, .closeAfterAnswer, .drainBody:
      break
    // A refresh is a GET of the route's answer, never a handshake (its facts never say `upgrade`).
    case .openTunnel, .closeTunnel, .finishTunnel:
      finish()
    }
  }

  private func upstreamPool() -> UpstreamPool? {
    guard let snapshot, let upstreamIndex = plan?.upstreamIndex else { return nil }
    return context.pool(upstreamIndex, of: snapshot)
  }

  private func lease(fresh: Bool) {
    // Nobody waits for a refresh: it never queues for a connection.
    guard let pool = upstreamPool(), pool.hasRoom else {
      finish()
      return
    }
    self.pool = pool
    guard let pick = pool.pickEndpoint(excluding: tried, hashKey: nil) else {
      finish()
      return
    }
    tried.insert(pick.endpoint)
    do {
      upstream = try pool.lease(for: self, fresh: fresh, endpoint: pick.endpoint)
    } catch {
      fail(.unavailable)
      return
    }
    run(.leased(reused: upstream?.useCount ?? 0 > 0))
  }

  private func writeHead() {
    guard let request, let plan, let pool, let connection = upstream?.connection else { return }
    // A retry starts its answer afresh.
    parser = HTTPResponseParser(limits: Exchange.upstreamAnswerLimits)
    head = nil
    received = false
    var token: UpstreamRequestWriter.TokenLine?
    if let use = plan.token, let grant {
      self.grant = nil
      tokenSerial = grant.serial
      token = UpstreamRequestWriter.TokenLine(prefix: use.linePrefix, value: grant.bytes, suffix: use.lineSuffix)
    }
    var out: [UInt8] = []
    UpstreamRequestWriter.write(
      head: request, method: .get, target: target[...], hostHeader: pool.plan.hostHeader, plan: plan.headerPlan,
      token: token,
      acceptsGzip: ForwardingRules.asksUpstreamForGzip(plan, clientTakesGzip: clientTakesGzip),
      sharedAnswer: true, meetsConditions: true, validatorLines: stored.map(StoreEntryRules.validatorLines) ?? [],
      claimLines: claimLines, clientAddress: clientAddress, forwardedProto: "http",
      requestID: context.requestIDs.next(),
      framing: .none,
      into: &out)
    _ = connection.write(out)
  }

  // MARK: The upstream's answer

  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer) -> Int {
    received = true
    var offset = 0
    while !finished {
      let step: (event: HTTPResponseEvent?, consumed: Int)
      do {
        step = try parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        fail(.invalidAnswer)
        return bytes.count
      }
      let start = offset
      offset += step.consumed
      guard let event = step.event else { return bytes.count }
      switch event {
      case .head(let answerHead):
        if !answerHead.isInformational { head = answerHead }
      case .body(let range):
        keep(UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)]))
      case .end:
        complete(reusable: offset == bytes.count)
        return offset
      }
    }
    return bytes.count
  }

  private func keep(_ piece: UnsafeRawBufferPointer) {
    if body.count + piece.count > StoreEntryRules.maxStoredBody {
      tooBig = true
    } else if !tooBig && !overBudget {
      // Refreshes hold bodies whole too: many at once (one per key) count like answers
      // being wrapped.
      guard context.shared.chargeBufferedAnswer(piece.count, limit: context.snapshot.bufferedBytes) else {
        overBudget = true
        body = []
        context.shared.releaseBufferedAnswer(charged)
        charged = 0
        return
      }
      charged += piece.count
      body.append(contentsOf: piece)
    }
  }

  func upstreamDidReadEOF(_ upstream: UpstreamConnection) {
    do {
      if case .end? = try parser.finish() {
        complete(reusable: false)
        return
      }
    } catch {}
    fail(head == nil ? .closed : .invalidAnswer)
  }

  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason) {
    guard upstream === self.upstream else { return }
    switch reason {
    // Ended here, or the loop is stopping: nothing the upstream did.
    case .closedByOwner, .loopStopped:
      self.upstream = nil
      finish()
    case .connectTimedOut, .tlsFailed, .failed, .hangup:
      let (failure, detail) = UpstreamFailure.of(reason, received: received)
      fail(failure, detail: detail)
    }
  }

  func upstreamWantsClientPaused(_ paused: Bool) {}

  /// Its tries so far (a refresh retries at most once).
  var upstreamTryNumber: Int { max(1, tried.count) }

  /// Refreshes are never pipelined; should one be dropped all the same, it simply ends.
  func upstreamDroppedQueuedRequest(_ upstream: UpstreamConnection) {
    self.upstream = nil
    finish()
  }

  private func complete(reusable: Bool) {
    // Counted like a client's exchange: in the upstream metrics and by the circuit.
    if let pool { context.recordUpstreamAnswer(pool: pool, status: head?.status ?? 0, route: plan?.name ?? "") }
    if let head, head.status == 304, let stored, upstream?.followsDoubtfulAnswer != true {
      // The stored answer is current: its age starts again, its body is not sent again.
      if StoreEntryRules.confirms(head.headers, stored) {
        _ = context.store?.renew(key: key, stored, notModified: head.headers, nowMs: RFC3339.nowMilliseconds())
        context.metrics.cacheResults.count(.revalidated)
      } else {
        context.store?.forget(key: key)
      }
    }
    if let head, (200..<300).contains(head.status), !overBudget {
      if tooBig
        || !CacheStorability.isStorable(
          status: head.status, headers: head.headers, keyed: plan?.cache?.vary ?? [], enveloped: plan?.envelope != nil)
      {
        // Superseded by an answer the store may not keep (see `LoopStore.forget`).
        context.store?.forget(key: key)
      } else if isGoodAnswer(head), upstream?.followsDoubtfulAnswer != true, let plan,
        let kept = StoreEntryRules.keptForm(head, body: body, gzipEntry: plan.envelope == nil && clientTakesGzip)
      {
        let queued = context.store?.remember(
          key: key, status: kept.head.status, headers: kept.head.headers, body: kept.body, decoded: kept.decoded,
          nowMs: RFC3339.nowMilliseconds())
        if let queued, let policy = plan.cache { context.writeBehind(queued, key: key, policy: policy) }
      }
    }
    run(.answerEnded(reusable: reusable))
  }

  /// What a client's request would not store is not stored from a refresh either: a body
  /// that says the token was rejected (reported, so the token is refreshed), or one the
  /// route's envelope finds unusable (invalid JSON, a corrupt gzip body).
  private func isGoodAnswer(_ head: HTTPResponseHead) -> Bool {
    guard let plan else { return false }
    if let use = plan.token, use.answerRejects(head, body: body) {
      context.metrics.countTokenRejection(token: use.name, route: use.routeName)
      if let tokenSerial {
        context.shared.tokens?.reportRejected(token: use.name, serial: tokenSerial, endpoint: tokenEndpoint)
      }
      return false
    }
    if let policy = plan.envelope,
      case .unusable = EnvelopeRenderer.render(answer: head, body: body, truncated: false, policy: policy)
    {
      return false
    }
    return true
  }

  /// The upstream failed: counted like a client's exchange, then the machine decides (a
  /// retry on a fresh connection, or the end).
  private func fail(_ failure: UpstreamFailure, detail: String? = nil) {
    guard !finished else { return }
    if let pool { context.recordUpstreamFailure(failure, pool: pool, route: plan?.name ?? "", detail: detail) }
    cancelTimer()
    run(.upstreamFailed(failure, staleAvailable: false, received: received, answerOut: false))
  }

  private func cancelTimer() {
    if let timer { context.loop.cancelTimer(timer) }
    timer = nil
  }

  private func finish() {
    guard !finished else { return }
    finished = true
    if let upstream, let pool {
      self.upstream = nil
      pool.discard(upstream, by: self)
    }
    context.shared.releaseBufferedAnswer(charged)
    charged = 0
    body = []
    cancelTimer()
    context.refreshFinished(self)
  }
}
