import GatehouseHTTP
import GatehouseNet

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
  /// The last failure, for the admin API.
  var lastError: String?
  private var drops = ConnectionDropDetector()

  init(context: LoopContext, plan: UpstreamPlan) {
    self.context = context
    self.plan = plan
    state = UpstreamPoolState(maxIdle: plan.maxIdleConnections)
    // A trial's outcome is in by a connect and a response, twice (one retry on a fresh
    // connection); past that it is presumed lost and another request may try.
    circuit = CircuitBreaker(
      threshold: plan.circuitFailures, openNanoseconds: UInt64(CachePolicy.milliseconds(plan.circuitOpen)) * 1_000_000,
      trialTimeoutNanoseconds: EventLoop.nanoseconds(of: (plan.connectTimeout + plan.responseTimeout) * 2))
  }

  /// A connection for `owner`'s exchange: the warmest idle one, or a new one whose connect
  /// is under way (writes made before it completes are queued). `fresh` skips idle ones,
  /// for the retry after a reused connection failed.
  func lease(for owner: any UpstreamExchangeOwner, fresh: Bool) throws(SystemError) -> UpstreamConnection {
    switch fresh ? state.leaseNew() : state.lease() {
    case .reuse(let id):
      let connection = idleConnections.removeLast()
      assert(ObjectIdentifier(connection) == id, "idle list out of step with the pool state")
      connection.owner = owner
      return connection
    case .connect:
      break
    }
    do {
      let upstream = UpstreamConnection(pool: self)
      upstream.owner = owner
      upstream.connection = try BufferedConnection.connect(
        to: plan.address, on: context.loop, timeout: plan.connectTimeout, delegate: upstream, tls: plan.tls)
      state.connectSucceeded()
      context.shared.upstreamConnections.add(1, ordering: .relaxed)
      return upstream
    } catch {
      state.connectFailed()
      throw error
    }
  }

  /// The exchange on `connection` is over. Reusable connections go back to the idle list.
  func release(_ connection: UpstreamConnection, reusable: Bool) {
    connection.owner = nil
    connection.useCount += 1
    switch state.release(ObjectIdentifier(connection), reusable: reusable && !retired) {
    case .keepIdle:
      idleConnections.append(connection)
    case .close:
      connection.connection?.close()
    }
  }

  /// A leased connection failed; it is not coming back.
  func discard(_ connection: UpstreamConnection) {
    connection.owner = nil
    state.leasedConnectionClosed()
    connection.connection?.abort()
  }

  /// An idle connection was closed by the upstream (or sent bytes nobody asked for). When
  /// the upstream drops them all at once, its circuit goes on probation: the next request
  /// checks it while requests with stored answers get those (during an outage they would
  /// otherwise wait out whatever now listens on its address).
  func idleConnectionEnded(_ connection: UpstreamConnection) {
    state.idleConnectionClosed(ObjectIdentifier(connection))
    guard let index = idleConnections.firstIndex(where: { $0 === connection }) else { return }
    idleConnections.remove(at: index)
    if drops.idleConnectionDropped(now: context.loop.iterationTime, idleLeft: idleConnections.count) {
      circuit.recordConnectionsDropped()
    }
  }

  func connectionClosed() {
    context.shared.upstreamConnections.subtract(1, ordering: .relaxed)
  }

  /// A reload replaced this pool: idle connections close now, leased ones after their exchange.
  func retire() {
    retired = true
    _ = state.drainIdle()
    let idle = idleConnections
    idleConnections.removeAll()
    for connection in idle { connection.connection?.close() }
  }

  var idleCount: Int { idleConnections.count }
  var openCount: Int { state.openCount }
}

/// Whoever is using a leased upstream connection: a client session's exchange or a
/// background refresh. Every call comes from the connection's loop.
protocol UpstreamExchangeOwner: AnyObject {
  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer)
  func upstreamDidReadEOF(_ upstream: UpstreamConnection)
  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason)
  /// The request body is arriving faster than the upstream takes it (or has caught up).
  func upstreamWantsClientPaused(_ paused: Bool)
}

/// One connection to an upstream. While leased it belongs to a client session's exchange and
/// passes it everything it reads; while idle, anything it reads ends it.
final class UpstreamConnection: ConnectionDelegate {
  /// Strong: a pool retired by a reload must outlive its last connection's close callback.
  /// The cycle (idle list ↔ connection) ends when the connection closes.
  let pool: UpstreamPool
  var connection: BufferedConnection?
  /// The exchange using this connection; nil while idle.
  var owner: (any UpstreamExchangeOwner)?
  /// Exchanges completed on this connection; above zero means a reused connection.
  var useCount = 0

  init(pool: UpstreamPool) {
    self.pool = pool
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    guard let owner else {
      // An idle keep-alive connection must stay silent; bytes here mean it cannot be trusted.
      pool.idleConnectionEnded(self)
      connection.abort()
      return
    }
    owner.upstreamDidRead(self, bytes)
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    guard let owner else {
      pool.idleConnectionEnded(self)
      connection.close()
      return
    }
    owner.upstreamDidReadEOF(self)
  }

  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    owner?.upstreamWantsClientPaused(true)
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    owner?.upstreamWantsClientPaused(false)
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    pool.connectionClosed()
    if let owner {
      owner.upstreamDidClose(self, reason: reason)
    } else {
      pool.idleConnectionEnded(self)
    }
  }
}
