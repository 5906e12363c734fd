import GatehouseHTTP
import GatehouseLogging
import GatehouseNet
import GatehouseStore
import Glibc

/// One loop's keep-alive connections to one upstream: performs what `UpstreamPoolState`
/// decides. Confined to its loop.
final class UpstreamPool {
  /// unowned(unsafe): a loop context lives as long as its loop, longer than anything on it,
  /// and plain `unowned` would cost an atomic reference-count operation per access.
  unowned(unsafe) let context: LoopContext
  let plan: UpstreamPlan
  private var state: UpstreamPoolState<ObjectIdentifier>
  /// The idle connections, in the order of `state.idle` (the same ids, same positions): the
  /// state pops and pushes at the end, and so does this, so a lease or release costs no
  /// hashing, unlike a dictionary by id.
  private var idleConnections: [UpstreamConnection] = []
  /// Set when a reload replaced this pool: connections finish their exchange, then close.
  private(set) var retired = false
  /// This loop's breaker for the upstream: loops judge failures on their own (no shared
  /// state on the request path), so each opens after `failures` of its own requests.
  var circuit: CircuitBreaker
  /// This loop's breakers of the routes on this upstream (see `RouteCircuits`).
  var routeCircuits: RouteCircuits
  /// The last failure, for the admin API, with its time (set with it: failures are rare,
  /// so reading the clock here costs the request path nothing).
  var lastError: String? {
    didSet { lastErrorAtMs = RFC3339.nowMilliseconds() }
  }
  private(set) var lastErrorAtMs: Int64?
  private var drops = ConnectionDropDetector()
  /// The connection that pipelined requests of this loop turn join, with its bookkeeping.
  private var batch: PipelineBatch<ObjectIdentifier>
  private var batchConnection: UpstreamConnection?
  private var answerTime = AnswerTimeAverage()
  /// Sessions waiting for a connection while this loop's share of `max_connections` is
  /// open, oldest first (a slow client's exchange holds its connection; others queue
  /// behind a bound instead of opening ever more).
  private var queue: [ClientSession] = []
  private var admitScheduled = false
  /// Sessions holding one of this pool's connections while their client has stopped taking
  /// the answer (its queue above the high watermark), in the order they stalled.
  private var stalled: [ClientSession] = []
  /// Until then (loop time) connections are not kept for reuse: the upstream sent an answer
  /// nobody asked for, and on a kept connection the next request would take it for its own.
  private var reuseSuspendedUntil: UInt64 = 0
  static let reuseSuspensionNanoseconds: UInt64 = 60_000_000_000

  // MARK: The fleet
  //
  // Each loop keeps its own view of the upstream's endpoints (as it keeps its own breakers):
  // which it balances over, ejects and retries on, from the tries it makes itself. The
  // decisions are the pure types' of `Upstream/` (Docs/fleets.md); this pool performs them.

  /// The endpoints with their state and counters (slots as `plan.endpoints` at first).
  private(set) var endpoints: EndpointSet
  /// Each endpoint's socket address, by slot.
  private var endpointAddresses: [SocketAddress?]
  private var balancer: EndpointBalancer
  private var outliers: OutlierDetector
  /// Retries made as a share of the tries (`retry.budget_percent`).
  private var retryBudget: RetryBudget
  private var random = SystemRandomNumberGenerator()

  init(context: LoopContext, plan: UpstreamPlan, adopting previous: UpstreamPool? = nil) {
    self.context = context
    self.plan = plan
    endpoints = EndpointSet(plan.endpoints.map(\.endpointAddress))
    if let previous { endpoints.adoptState(from: previous.endpoints) }
    endpointAddresses = []
    for id in endpoints.ids {
      let address = endpoints[id].address
      while endpointAddresses.count <= id.slot { endpointAddresses.append(nil) }
      endpointAddresses[id.slot] = plan.endpoints.first { $0.address.description == address }?.address
    }
    balancer = EndpointBalancer(policy: plan.balance)
    soleEndpoint = endpoints.count == 1 ? endpoints.ids.first : nil
    outliers = OutlierDetector(
      failures: plan.outlier.failures, ejectMilliseconds: plan.outlier.ejectMilliseconds,
      maxEjectedPercent: plan.outlier.maxEjectedPercent)
    retryBudget = RetryBudget(percent: plan.retryBudgetPercent)
    state = UpstreamPoolState(maxIdle: plan.maxIdleConnections)
    batch = PipelineBatch(maxDepth: plan.pipelineDepth)
    // A trial's outcome is in by a connect and an answer, twice (one retry on a fresh
    // connection); past that it is presumed lost and another request may try.
    let openNanoseconds = UInt64(CachePolicy.milliseconds(plan.circuitOpen)) * 1_000_000
    let trialTimeout = EventLoop.nanoseconds(of: (plan.connectTimeout + plan.answerTimeout) * 2)
    circuit = CircuitBreaker(
      threshold: plan.circuitFailures, openNanoseconds: openNanoseconds, trialTimeoutNanoseconds: trialTimeout)
    routeCircuits = RouteCircuits(
      threshold: plan.circuitFailures, openNanoseconds: openNanoseconds, trialTimeoutNanoseconds: trialTimeout)
  }

  /// This loop's share of the upstream's `max_connections` (at least one).
  var maxOpen: Int { max(1, plan.maxConnections / context.loopCount) }

  /// Whether a lease can be had now: an idle connection, or room for a new one. A fresh
  /// lease (a retry, a WebSocket handshake) finding idle connections at the cap makes its
  /// room by closing the coldest, so it needs no other test.
  var hasRoom: Bool {
    !idleConnections.isEmpty || state.openCount < maxOpen
  }

  /// `session` waits for `hasRoom`; it is offered room with `connectionRoomAvailable`.
  func enqueue(_ session: ClientSession) {
    queue.append(session)
  }

  /// `session` stopped waiting (its deadline passed, or its client left).
  func leaveQueue(_ session: ClientSession) {
    queue.removeAll { $0 === session }
  }

  var queuedCount: Int { queue.count }

  /// A client that stopped reading keeps its upstream connection busy (reading the upstream
  /// pauses with it). When requests queue for a connection, one whose client has taken none
  /// of its answer for this long is cut so a waiting request gets its connection: a client
  /// that does not read must not be able to hold `max_connections` from everyone else. A
  /// slow reader drains its queue now and then, which ends its stall.
  static let stalledReaderGraceNanoseconds: UInt64 = 1_000_000_000

  func noteStalled(_ session: ClientSession) {
    if !stalled.contains(where: { $0 === session }) { stalled.append(session) }
  }

  func noteNoLongerStalled(_ session: ClientSession) {
    stalled.removeAll { $0 === session }
  }

  /// With requests queued, cuts the client that has been stalled longest, once it has been
  /// for the grace period. Called when a request queues and on the loop's sweep.
  func evictStalledReaderIfDue(now: UInt64) {
    guard !queue.isEmpty else { return }
    // Entries whose session moved on (answer done, client gone) are dropped as found.
    stalled.removeAll { !$0.holdsStalledConnection(of: self) }
    guard let oldest = stalled.first, now &- oldest.stalledSince >= Self.stalledReaderGraceNanoseconds else { return }
    stalled.removeFirst()
    context.shared.warnAboutLimit(
      "a client that stopped reading gave its upstream connection to a waiting request",
      ["upstream": .string(plan.name), "max_connections": .int(plan.maxConnections)])
    context.loop.executeLater { oldest.cutForStall(of: self) }
  }

  /// A connection went idle or closed: the oldest waiters take the room, after the current
  /// call stack (the session that freed it may still be writing its answer).
  private func offerRoom() {
    guard !queue.isEmpty, !admitScheduled else { return }
    admitScheduled = true
    context.loop.executeLater { [self] in
      admitScheduled = false
      // Each pass takes one waiter off; one that no longer wants the room leaves it for
      // the next.
      while !queue.isEmpty && (retired || hasRoom) {
        queue.removeFirst().connectionRoomAvailable(on: self)
      }
    }
  }

  /// The endpoint for a request's next try, avoiding those it has `tried` (Docs/fleets.md);
  /// nil only when every endpoint is draining. With one endpoint there is nothing to
  /// choose, and nothing is drawn.
  func pickEndpoint(excluding tried: TriedEndpoints, hashKey: UInt64?) -> EndpointPick? {
    if let soleEndpoint { return EndpointPick(endpoint: soleEndpoint, panic: false, repeated: !tried.isEmpty) }
    return balancer.pick(
      from: endpoints, excluding: tried, hashKey: hashKey, now: context.loop.iterationTime, using: &random)
  }

  /// The endpoint of an upstream of one (which no reload or lookup made draining): nothing
  /// to choose, eject or retry on, so requests skip the fleet's bookkeeping but the counts.
  private(set) var soleEndpoint: EndpointID?

  /// Whether the upstream has more than one endpoint (a retry can go elsewhere).
  var isFleet: Bool { soleEndpoint == nil }

  private func noteMembership() {
    soleEndpoint = endpoints.count == 1 ? endpoints.ids.first : nil
  }

  /// Whether a failed try may be made again on another endpoint, by `retry` and the retry
  /// budget (a retry it allows is counted in the budget).
  func allowsRetry(
    after failure: AttemptFailure, tryNumber: Int, method: HTTPMethod, hasIdempotencyKey: Bool, bodyHeld: Bool
  ) -> Bool {
    let decision = plan.retryRule.decide(
      after: failure, tryNumber: tryNumber, method: method, hasIdempotencyKey: hasIdempotencyKey,
      bodyHeld: bodyHeld, budget: &retryBudget, now: context.loop.iterationTime)
    return decision == .retry
  }

  /// A connection for `owner`'s exchange to `endpoint`: its warmest idle one, or a new one
  /// whose connect is under way (writes made before it completes are queued). `fresh` skips
  /// idle ones, for the retry after a reused connection failed.
  func lease(for owner: any UpstreamExchangeOwner, fresh: Bool, endpoint: EndpointID) throws(SystemError)
    -> UpstreamConnection
  {
    // Bounded: each pass takes one idle connection off the list or connects.
    while true {
      // The warmest idle connection to the endpoint: with one endpoint, the last one.
      let index =
        fresh || idleConnections.isEmpty
        ? nil : isFleet ? idleConnections.lastIndex { $0.endpoint == endpoint } : idleConnections.count - 1
      switch index.map({ state.lease(at: $0) }) ?? state.leaseNew() {
      case .reuse(let id):
        let connection =
          index == idleConnections.count - 1 ? idleConnections.removeLast() : idleConnections.remove(at: index!)
        assert(ObjectIdentifier(connection) == id, "idle list out of step with the pool state")
        // An idle connection must be silent. Bytes (or an end) it has received but not yet
        // delivered — epoll's report may be later in this loop turn, or reading was put
        // off — were sent while no request was outstanding: written to, they would be read
        // as this request's answer. It is closed instead, and the next one tried. Costs a
        // system call per reuse (see `hasUndeliveredInput`).
        guard connection.connection?.hasUndeliveredInput != true else {
          discardIdle(connection)
          continue
        }
        connection.owner = owner
        startAttempt(on: connection)
        return connection
      case .connect:
        break
      }
      break
    }
    // Only a fresh lease gets here with idle connections left (`leaseNew`); at the cap,
    // the coldest makes way (see `hasRoom`).
    if state.openCount > maxOpen, let id = state.takeColdest() {
      let coldest = idleConnections.removeFirst()
      assert(ObjectIdentifier(coldest) == id, "idle list out of step with the pool state")
      coldest.connection?.close()
    }
    // A pick is always of an endpoint in the set, which has its address.
    guard endpoint.slot < endpointAddresses.count, let address = endpointAddresses[endpoint.slot] else {
      state.connectFailed()
      offerRoom()
      throw SystemError(errno: EADDRNOTAVAIL, syscall: "connect")
    }
    do {
      let upstream = UpstreamConnection(pool: self, endpoint: endpoint)
      upstream.owner = owner
      upstream.connection = try BufferedConnection.connect(
        to: address, on: context.loop, timeout: plan.connectTimeout, delegate: upstream, tls: plan.tls)
      state.connectSucceeded()
      context.shared.upstreamConnections.add(1, ordering: .relaxed)
      startAttempt(on: upstream)
      return upstream
    } catch {
      state.connectFailed()
      offerRoom()
      throw error
    }
  }

  /// A connection for a request that may be pipelined (`PipelinePolicy.mayJoin`): the
  /// batch of this loop turn if it has room, else a lease that may start a batch. The
  /// request is then written with `writePipelined`. Returns whether it joined a batch.
  func leaseForPipelining(for owner: any UpstreamExchangeOwner, endpoint: EndpointID) throws(SystemError) -> (
    UpstreamConnection, joined: Bool
  ) {
    let turn = context.loop.iterationTime
    if let connection = batchConnection, connection.endpoint == endpoint, let id = batch.join(turn: turn) {
      if ObjectIdentifier(connection) == id, connection.acceptsPipelinedRequest {
        connection.pipeline.append(owner)
        return (connection, true)
      }
      batch.end(id)
    }
    let connection = try lease(for: owner, fresh: false, endpoint: endpoint)
    // Only a connection that has already carried a keep-alive HTTP/1.1 answer starts a
    // batch: a new one has not shown that the upstream keeps connections open.
    if connection.useCount > 0, connection.lastAnswerWasHTTP11, !retired, answerTime.isFast {
      batch.start(ObjectIdentifier(connection), turn: turn)
      batchConnection = connection
    }
    return (connection, false)
  }

  /// Writes a pipelined request: gathered with the batch's others and sent in one write at
  /// the end of the loop turn, or now when the batch is full.
  func writePipelined(_ bytes: UnsafeRawBufferPointer, on connection: UpstreamConnection) {
    guard let batchConnection, batchConnection === connection else {
      _ = connection.connection?.write(bytes)
      return
    }
    connection.gather(bytes)
    if batch.isFull {
      batch.end(ObjectIdentifier(connection))
      self.batchConnection = nil
      connection.sendGathered()
    }
  }

  /// The exchange on `connection` is over (its answer was read whole). The next request
  /// written on it, if any, owns it now; otherwise reusable connections go back to the
  /// idle list.
  /// `leavesDoubt`: the answer was one of `UpstreamAnswerDoubt`'s, so the next one read on
  /// the connection (pipelined or after a lease) must not be stored.
  func release(_ connection: UpstreamConnection, reusable: Bool, leavesDoubt: Bool = false) {
    finishAttempt(on: connection)
    connection.useCount += 1
    connection.followsDoubtfulAnswer = leavesDoubt
    // Flow control belonged to the finished exchange: its client may have paused reading
    // from the upstream, and the next owner (or the idle list) needs it reading again.
    connection.connection?.resumeReading()
    // A retired pool (reload) still lets requests already written get their answers; the
    // connection closes once nothing waits.
    switch connection.pipeline.headFinished(reusable: reusable) {
    case .promote(let next):
      connection.owner = next
      startAttempt(on: connection)
      return
    case .release:
      break
    case .close(let dropped):
      if !dropped.isEmpty {
        connection.owner = nil
        endBatch(connection)
        state.leasedConnectionClosed()
        connection.connection?.close()
        dropQueued(dropped, from: connection)
        offerRoom()
        return
      }
    }
    connection.owner = nil
    endBatch(connection)
    let reuseSuspended = reuseSuspendedUntil != 0 && context.loop.iterationTime < reuseSuspendedUntil
    switch state.release(
      ObjectIdentifier(connection), reusable: reusable && !retired && !connection.pipeline.spoiled && !reuseSuspended,
      now: context.loop.iterationTime)
    {
    case .keepIdle:
      idleConnections.append(connection)
    case .close:
      connection.connection?.close()
    }
    offerRoom()
  }

  /// `owner` gives up its exchange on `connection`. The request being answered takes the
  /// connection with it (requests written behind it are sent elsewhere); one still waiting
  /// only leaves the queue, and the connection ends after the answer before it.
  func discard(_ connection: UpstreamConnection, by owner: AnyObject) {
    if connection.owner !== owner {
      if connection.pipeline.abandon(where: { $0 === owner }) { endBatch(connection) }
      return
    }
    finishAttempt(on: connection)
    connection.owner = nil
    endBatch(connection)
    state.leasedConnectionClosed()
    let dropped = connection.pipeline.dropAll()
    connection.connection?.abort()
    dropQueued(dropped, from: connection)
    offerRoom()
  }

  /// `connection`'s exchange switched protocols (a WebSocket tunnel): it leaves the pool for
  /// good, its place free for others, and its socket goes to the caller, which counts it
  /// among the upstream connections until it closes. Nil when the socket is gone already.
  func handOverForTunnel(_ connection: UpstreamConnection) -> BufferedConnection? {
    guard let socket = connection.connection, !socket.isClosed else { return nil }
    finishAttempt(on: connection)
    connection.owner = nil
    connection.connection = nil
    endBatch(connection)
    state.leasedConnectionClosed()
    // A handshake is never pipelined, so nothing waits behind it; whatever did goes elsewhere.
    dropQueued(connection.pipeline.dropAll(), from: connection)
    offerRoom()
    return socket
  }

  /// Requests that were written behind an answer that never came (or was the last on its
  /// connection) are sent again, after the current call stack: they were not answered, so
  /// this is not a failure of theirs, and their owners must not run inside another's.
  private func dropQueued(_ dropped: [any UpstreamExchangeOwner], from connection: UpstreamConnection) {
    guard !dropped.isEmpty else { return }
    context.loop.executeLater {
      for owner in dropped { owner.upstreamDroppedQueuedRequest(connection) }
    }
  }

  private func endBatch(_ connection: UpstreamConnection) {
    guard batchConnection === connection else { return }
    batch.end(ObjectIdentifier(connection))
    batchConnection = nil
  }

  /// An answer was read whole, `nanoseconds` after its request was written.
  func recordAnswerTime(_ nanoseconds: UInt64) {
    answerTime.record(nanoseconds)
  }

  /// An idle connection was closed by the upstream (or sent bytes nobody asked for). When
  /// the upstream drops them all at once, its circuit goes on probation: the next request
  /// checks it while requests with stored answers get those (during an outage they would
  /// otherwise wait out whatever now listens on its address).
  func idleConnectionEnded(_ connection: UpstreamConnection) {
    state.idleConnectionClosed(ObjectIdentifier(connection))
    offerRoom()
    guard let index = idleConnections.firstIndex(where: { $0 === connection }) else { return }
    idleConnections.remove(at: index)
    if drops.idleConnectionDropped(now: context.loop.iterationTime, idleLeft: idleConnections.count) {
      circuit.recordConnectionsDropped()
    }
  }

  /// `connection` sent bytes while no request was outstanding: an answer nobody asked for.
  /// The answer stored last from it may itself have been an earlier stray one read as a
  /// request's own, so its entry is forgotten; and for a while no connection to this
  /// upstream is kept for reuse, so one stray answer cannot shift the answers after it onto
  /// the wrong clients, one after another.
  func strayBytesSeen(on connection: UpstreamConnection) {
    if let key = connection.lastStoredKey { context.store?.forget(key: key) }
    reuseSuspendedUntil = context.loop.iterationTime &+ Self.reuseSuspensionNanoseconds
    context.shared.warnAboutLimit(
      "upstream sent an answer nobody asked for; its connections are not reused for 60 s",
      ["upstream": .string(plan.name)])
  }

  /// Closes an idle connection just taken off the idle list because it spoke out of turn
  /// (`lease`), counted like one the upstream dropped while idle.
  private func discardIdle(_ connection: UpstreamConnection) {
    state.leasedConnectionClosed()
    if drops.idleConnectionDropped(now: context.loop.iterationTime, idleLeft: idleConnections.count) {
      circuit.recordConnectionsDropped()
    }
    connection.connection?.abort()
  }

  func connectionClosed() {
    context.shared.upstreamConnections.subtract(1, ordering: .relaxed)
  }

  /// A reload replaced this pool: idle connections close now, leased ones after their exchange.
  func retire() {
    retired = true
    if let batchConnection { endBatch(batchConnection) }
    _ = state.drainIdle()
    let idle = idleConnections
    idleConnections.removeAll()
    for connection in idle { connection.connection?.close() }
    // Waiters go to the running config's pool for their upstream.
    offerRoom()
  }

  /// Whether more connections are idle than `max_idle_connections` keeps for long.
  var hasSurplusIdle: Bool { state.hasSurplus }

  /// Closes the surplus idle connections that have been idle long enough (the loop's sweep).
  func closeSurplusIdle(now: UInt64) {
    let trimmed = state.trimSurplus(now: now)
    guard !trimmed.isEmpty else { return }
    let closing = idleConnections.prefix(trimmed.count)
    idleConnections.removeFirst(trimmed.count)
    for (connection, id) in zip(closing, trimmed) {
      assert(ObjectIdentifier(connection) == id, "idle list out of step with the pool state")
      connection.connection?.close()
    }
  }

  var idleCount: Int { idleConnections.count }
  var openCount: Int { state.openCount }

  // MARK: Tries on endpoints

  /// A lease of `connection` began: a try on its endpoint is in flight, the owner's
  /// `upstreamTryNumber`-th.
  private func startAttempt(on connection: UpstreamConnection) {
    guard connection.attempt == nil, endpoints.contains(connection.endpoint) else { return }
    connection.attempt = UpstreamAttempt(
      endpoint: connection.endpoint, tryNumber: connection.owner?.upstreamTryNumber ?? 1)
    endpoints.attemptStarted(connection.endpoint)
  }

  /// A new list of endpoints (a lookup of their names): new addresses join, missing ones
  /// drain (no new tries; their idle connections close now, and they leave once their last
  /// try ends), kept ones keep their state (Docs/fleets.md). An empty list changes nothing.
  func updateEndpoints(_ list: [UpstreamEndpointPlan]) {
    let change = endpoints.update(to: list.map(\.endpointAddress))
    for id in change.joined + change.rejoined + change.kept {
      while endpointAddresses.count <= id.slot { endpointAddresses.append(nil) }
      endpointAddresses[id.slot] = list.first { $0.address.description == endpoints[id].address }?.address
    }
    for id in change.left { closeIdle(of: id) }
    for id in endpoints.drainedEndpoints { removeDrained(id) }
    noteMembership()
  }

  /// Closes the idle connections to endpoint `id`.
  private func closeIdle(of id: EndpointID) {
    var index = idleConnections.count - 1
    while index >= 0 {
      if idleConnections[index].endpoint == id {
        let connection = idleConnections.remove(at: index)
        state.idleConnectionClosed(ObjectIdentifier(connection))
        connection.connection?.close()
      }
      index -= 1
    }
  }

  /// The active health checks call the endpoints at `unhealthy` (addresses) down, and the
  /// others up.
  func applyHealth(unhealthy: Set<String>) {
    for id in endpoints.ids {
      let healthy = !unhealthy.contains(endpoints[id].address)
      if endpoints[id].healthy != healthy { endpoints.setHealthy(id, healthy) }
    }
  }

  /// A request's first try is on its way: the retry budget is a share of these.
  func noteFirstTry() {
    retryBudget.noteRequest(now: context.loop.iterationTime)
  }

  /// The try on `connection` ended (its answer read, or given up): its endpoint hears how,
  /// from what the exchange reported (`reportOutcome`); a try that reported nothing (its
  /// client left) says nothing about the endpoint. A drained endpoint is removed once its
  /// last try ends.
  private func finishAttempt(on connection: UpstreamConnection) {
    guard let attempt = connection.attempt else { return }
    connection.attempt = nil
    let id = attempt.endpoint
    guard endpoints.contains(id) else { return }
    let outcome = attempt.outcome
    let drained = endpoints.attemptFinished(id, outcome: outcome, error: attempt.error)
    // A single endpoint is never ejected (its requests would only all go through panic).
    if let outcome, isFleet {
      noteOutlierEvents(outliers.record(outcome, for: id, in: &endpoints, now: context.loop.iterationTime))
    }
    if drained { removeDrained(id) }
  }

  /// How the try on `connection` went, for its endpoint (`finishAttempt`): the answer's
  /// status, or the failure. `error`: the text for the endpoint's `last_error`.
  func reportOutcome(_ outcome: AttemptOutcome, on connection: UpstreamConnection, error: String? = nil) {
    connection.attempt?.outcome = outcome
    connection.attempt?.error = error
  }

  /// Returns of ejected endpoints whose time is over, found by the loop's sweep so that a
  /// return is logged even when no try finishes.
  func sweepEndpoints(now: UInt64) {
    noteOutlierEvents(outliers.sweep(&endpoints, now: now))
  }

  private func noteOutlierEvents(_ events: [OutlierEvent]) {
    for event in events {
      switch event {
      case .ejected(let id, let until):
        let endpoint = endpoints[id]
        context.shared.logger.warn(
          "upstream endpoint ejected after failing tries in a row; it gets no requests for a while",
          [
            "upstream": .string(plan.name), "endpoint": .string(endpoint.address),
            "for_ms": .int(Int((until &- context.loop.iterationTime) / 1_000_000)),
            "last_error": .string(endpoint.counters.lastError ?? ""),
          ])
      case .returned(let id):
        context.shared.logger.info(
          "upstream endpoint back from ejection; it takes requests again",
          ["upstream": .string(plan.name), "endpoint": .string(endpoints[id].address)])
      }
    }
  }

  /// Closes a drained endpoint's idle connections and takes it out of the set.
  private func removeDrained(_ id: EndpointID) {
    closeIdle(of: id)
    let endpoint = endpoints.remove(id)
    if id.slot < endpointAddresses.count { endpointAddresses[id.slot] = nil }
    noteMembership()
    context.shared.logger.info(
      "upstream endpoint left and drained", ["upstream": .string(plan.name), "endpoint": .string(endpoint.address)])
  }
}
