import GatehouseCompression
import GatehouseHTTP
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// One `stale_while_revalidate` refresh: the client already has the stored answer; this
/// asks the upstream again and stores what comes back. At most one runs per key per loop.
final class BackgroundRefresh: UpstreamExchangeOwner {
  /// unowned(unsafe): a loop context lives as long as its loop, longer than anything on it,
  /// and plain `unowned` would cost an atomic reference-count operation per access.
  unowned(unsafe) let context: LoopContext
  let key: CacheKey
  private var upstream: UpstreamConnection?
  private var pool: UpstreamPool?
  private var parser = HTTPResponseParser(limits: HTTPLimits(maxHeaderBytes: 65536))
  private var head: HTTPResponseHead?
  private var body: [UInt8] = []
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
  /// The serial of the token value sent, reported back if the answer rejects it.
  private var tokenSerial: UInt64?
  /// The client asked for gzip: on a pass-through route its entry is the gzip one.
  private var clientTakesGzip = false
  /// Where a rejection came from (`RejectingEndpoints.key`), as for a client's request.
  private var tokenEndpoint: String?

  init(context: LoopContext, key: CacheKey) {
    self.context = context
    self.key = key
  }

  func start(
    request: HTTPRequestHead, target: [UInt8], snapshot: GatewaySnapshot, routeIndex: Int, clientAddress: [UInt8]
  ) {
    let plan = snapshot.routePlans[routeIndex]
    self.plan = plan
    guard let upstreamIndex = plan.upstreamIndex, let pool = context.pool(upstreamIndex, of: snapshot) else {
      finish()
      return
    }
    var token: UpstreamRequestWriter.TokenLine?
    if let use = plan.token {
      // A refresh never waits for a token: without a usable value it simply does not run.
      guard let grant = context.usableToken(use.name) else {
        finish()
        return
      }
      token = UpstreamRequestWriter.TokenLine(prefix: use.linePrefix, value: grant.bytes, suffix: use.lineSuffix)
      tokenSerial = grant.serial
      tokenEndpoint = RejectingEndpoints.key(route: use.routeName, path: request.path)
    }
    // A refresh goes only to an upstream in good standing: the client already has its answer,
    // so a refresh never takes an open circuit's trial or adds to a failing upstream's load.
    guard pool.circuit.isClosed, pool.routeCircuits.isClosed(route: plan.name),
      context.upstreamHealthy[pool.plan.name] != false
    else {
      finish()
      return
    }
    // Nobody waits for a refresh: it never queues for a connection.
    guard pool.hasRoom(fresh: false) else {
      finish()
      return
    }
    self.pool = pool
    do {
      upstream = try pool.lease(for: self, fresh: false)
    } catch {
      fail(.unavailable)
      return
    }
    var out: [UInt8] = []
    clientTakesGzip =
      request.headers.firstValue(lowercaseName: "accept-encoding").map(AcceptEncoding.acceptsGzip) ?? false
    UpstreamRequestWriter.write(
      head: request, method: .get, target: target, hostHeader: pool.plan.hostHeader, plan: plan.headerPlan,
      token: token,
      acceptsGzip: ClientSession.asksUpstreamForGzip(plan, clientTakesGzip: clientTakesGzip),
      sharedAnswer: true, clientAddress: clientAddress, forwardedProto: "http", requestID: context.requestIDs.next(),
      framing: .none,
      into: &out)
    _ = upstream?.connection?.write(out)
    // Strong: `finish` cancels the timer, which then lets go of this refresh.
    timer = context.loop.scheduleTimer(after: pool.plan.responseTimeout) { [self] in fail(.timedOut) }
  }

  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer) -> Int {
    var offset = 0
    while !finished {
      let step: (event: HTTPResponseEvent?, consumed: Int)
      do {
        step = try parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        fail(.invalidResponse)
        return bytes.count
      }
      let start = offset
      offset += step.consumed
      guard let event = step.event else { return bytes.count }
      switch event {
      case .head(let responseHead):
        if !responseHead.isInformational { head = responseHead }
      case .body(let range):
        if body.count + range.count > ClientSession.maxStoredBody {
          tooBig = true
        } else if !tooBig && !overBudget {
          // Refreshes hold bodies whole too: many at once (one per key) count like answers
          // being wrapped.
          guard context.shared.chargeBufferedAnswer(range.count, limit: context.snapshot.bufferedBytes) else {
            overBudget = true
            body = []
            context.shared.releaseBufferedAnswer(charged)
            charged = 0
            continue
          }
          charged += range.count
          body.append(
            contentsOf: UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)])
          )
        }
      case .end:
        complete(reusable: offset == bytes.count && !parser.isClosed)
        return offset
      }
    }
    return bytes.count
  }

  func upstreamDidReadEOF(_ upstream: UpstreamConnection) {
    do {
      if case .end? = try parser.finish() {
        complete(reusable: false)
        return
      }
    } catch {}
    fail(head == nil ? .closed : .invalidResponse)
  }

  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason) {
    switch reason {
    case .connectTimedOut: fail(.connectTimedOut)
    case .tlsFailed(let error): fail(.unavailable, detail: "TLS: \(error.description)")
    case .failed(let error) where error.syscall == "connect":
      fail(.unavailable, detail: "cannot connect: \(error.description)")
    case .hangup, .failed: fail(.closed)
    // Ended here, or the loop is stopping: nothing the upstream did.
    case .closedByOwner, .loopStopped: fail(nil)
    }
  }

  func upstreamWantsClientPaused(_ paused: Bool) {}

  /// Refreshes are never pipelined; should one be dropped all the same, it simply ends.
  func upstreamDroppedQueuedRequest(_ upstream: UpstreamConnection) {
    self.upstream = nil
    finish()
  }

  private func complete(reusable: Bool) {
    // Counted like a client's exchange: in the upstream metrics and by the circuit.
    if let pool {
      context.metrics.recordUpstream(pool.plan.name, outcome: "response")
      pool.recordAnswer(status: head?.status ?? 0, route: plan?.name ?? "", now: context.loop.iterationTime)
    }
    if let head, (200..<300).contains(head.status), !overBudget {
      if tooBig
        || !CacheStorability.isStorable(status: head.status, headers: head.headers, keyed: plan?.cache?.vary ?? [])
      {
        // Superseded by an answer the store may not keep (see `LoopStore.forget`).
        context.store?.forget(key: key)
      } else if isGoodAnswer(head), upstream?.followsDoubtfulAnswer != true, let plan,
        let kept = ClientSession.keptForm(head, body: body, gzipEntry: plan.envelope == nil && clientTakesGzip)
      {
        context.store?.remember(
          key: key, status: kept.head.status, headers: kept.head.headers, body: kept.body,
          nowMs: RFC3339.nowMilliseconds())
      }
    }
    if let upstream, let pool {
      self.upstream = nil
      pool.release(upstream, reusable: reusable && head?.keepAlive == true)
    }
    finish()
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

  /// Ends the refresh; `failure` (nil: nothing the upstream did) is counted like a client's.
  private func fail(_ failure: ClientSession.UpstreamFailure?, detail: String? = nil) {
    if let failure, let pool, !finished {
      context.metrics.recordUpstream(pool.plan.name, outcome: failure.outcome)
      pool.recordFailure(failure.breakerScope, route: plan?.name ?? "", now: context.loop.iterationTime)
      pool.lastError = detail ?? failure.outcome
    }
    if let upstream, let pool {
      self.upstream = nil
      pool.discard(upstream, by: self)
    }
    finish()
  }

  private func finish() {
    guard !finished else { return }
    finished = true
    context.shared.releaseBufferedAnswer(charged)
    charged = 0
    body = []
    if let timer { context.loop.cancelTimer(timer) }
    timer = nil
    context.refreshFinished(self)
  }
}
