import GatehouseConfig
import GatehouseHTTP
import GatehouseJWT
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// The state one event loop owns: the current snapshot, its upstream pools, its client
/// sessions, answer writer and access-log buffer, and the timer that sweeps deadlines.
///
/// Confined to its loop: created and used only from closures the loop runs. It is marked
/// `@unchecked Sendable` only so such closures can carry it to the loop.
final class LoopContext: @unchecked Sendable {
  let loop: EventLoop
  let shared: GatewayShared
  private(set) var snapshot: GatewaySnapshot
  private(set) var pools: [UpstreamPool] = []
  var requestIDs = RequestIDGenerator()
  var accessLog = AccessLogBuffer()
  private var accessFlushScheduled = false
  /// Writes its sessions' answers, in the loop's output buffer; each session is handed it
  /// when it is made, and nothing else writes there.
  private let answerWriter = AnswerWriter()
  /// Bytes of an upstream request head, built per request.
  var scratch: [UInt8] = []
  /// The loop's client connections: HTTP/1.1 sessions, HTTP/2 connections, and connections
  /// whose protocol is not known yet (`ClientProtocolChooser`).
  private(set) var connections: [ObjectIdentifier: any ClientConnection] = [:]
  let metrics = LoopMetrics()
  /// Upstreams with active health checks, by name: false while the checks say unhealthy.
  var upstreamHealthy: [String: Bool] = [:]
  /// The last health verdicts, for pools made after them (a reload).
  var healthVerdicts = HealthChecker.HealthVerdicts()

  /// The token values, as last published by the token manager.
  var tokens = TokenValues.empty {
    didSet { tokensWithOwnAnswerEndpoints = tokens.entries.map { !$0.ownAnswerEndpoints.isEmpty } }
  }
  /// By token index: whether the token has endpoints that answer on their own. Answers
  /// check it per request, so it is a plain array.
  private(set) var tokensWithOwnAnswerEndpoints: [Bool] = []

  /// The identity providers' signing keys, as last published by the keyring. Tokens this
  /// loop verified under keys that changed since are verified again.
  var jwtKeys = JWTKeyValues.empty {
    didSet {
      // Entries are keyed by key generation and never match again once it changed; the
      // cache is emptied of them at once rather than as they age out.
      let changed = zip(jwtKeys.providers, oldValue.providers).contains { $0.generation != $1.generation }
      if changed || jwtKeys.providers.count != oldValue.providers.count { verifiedTokens.removeAll() }
    }
  }
  /// Bearer tokens verified on this loop, until they expire (bounded): a client sends the
  /// same token with every request, and a signature check costs more than a whole
  /// pass-through request.
  let verifiedTokens = JWTVerificationCache(capacity: 10_000)

  /// This loop's view of the store, when there is one.
  let store: LoopStore?
  /// This loop's connection to the shared tier (Docs/shared-tier.md), while `shared` is configured.
  var sharedTier: LoopSharedTier?
  /// Background refreshes in flight, by cache id: one per key.
  private var refreshes: [String: BackgroundRefresh] = [:]
  /// Cache lookups, stale answers and collapsed exchanges, for this loop's sessions.
  private(set) lazy var routeCache = RouteCache(context: self, store: store)
  private(set) var draining = false
  private var sweepTimer: TimerHandle?
  /// This loop's listener sockets, by the configured address they were bound for.
  var listeners: [String: TCPListener] = [:]

  /// The loops in the process: limits kept per loop (an upstream's `max_connections`)
  /// take a share of the whole. Set before the loops start.
  var loopCount = 1

  init(loop: EventLoop, shared: GatewayShared, snapshot: GatewaySnapshot) {
    self.loop = loop
    self.shared = shared
    self.snapshot = snapshot
    store = shared.store.map { LoopStore(store: $0, logger: shared.logger) }
    scratch.reserveCapacity(4096)
    pools = snapshot.upstreamPlans.map { UpstreamPool(context: self, plan: $0) }
    metrics.bind(routeNames: snapshot.routePlans.map(\.name))
    accessLog.queryMask = snapshot.queryMask
  }

  /// Starts the periodic deadline sweep. Loop thread only.
  func start() {
    scheduleSweep()
    useSharedTier(snapshot.sharedTier)
  }

  /// A reload: new requests use `next`. An upstream whose settings did not change keeps its
  /// pool (idle connections, circuit, last error): a reload that touched a route must not
  /// close every keep-alive connection or forget that a backend is down. The others get new
  /// pools; exchanges in flight finish on their old ones.
  func install(_ next: GatewaySnapshot) {
    var kept: [String: UpstreamPool] = [:]
    for pool in pools {
      if let nextPlan = next.upstreamPlans.first(where: { $0.name == pool.plan.name }),
        Self.mayKeepPool(pool.plan, old: snapshot.config, nextPlan, new: next.config)
      {
        kept[pool.plan.name] = pool
      } else {
        pool.retire()
      }
    }
    // Verified tokens are keyed by the snapshot's provider scopes (`RouteJWTPlan.cacheScope`):
    // those of the old snapshot never match again.
    if next.config.jwt != snapshot.config.jwt { verifiedTokens.removeAll() }
    // Open tunnels close `drain_timeout_ms` after a reload (`ClientSession+Tunnel`).
    for case let session as ClientSession in connections.values { session.reloaded(to: next) }
    snapshot = next
    useSharedTier(next.sharedTier)
    // A pool that cannot be kept still takes over what this loop knew of the endpoints it
    // shares with the old one (their ejections and counters).
    let previous = Dictionary(pools.map { ($0.plan.name, $0) }, uniquingKeysWith: { first, _ in first })
    pools = next.upstreamPlans.map {
      kept[$0.name] ?? UpstreamPool(context: self, plan: $0, adopting: previous[$0.name])
    }
    for pool in pools { pool.applyHealth(unhealthy: healthVerdicts.unhealthyEndpoints[pool.plan.name] ?? []) }
    metrics.bind(routeNames: next.routePlans.map(\.name))
    accessLog.queryMask = next.queryMask
  }

  /// Whether a pool built for `plan` serves `nextPlan` as well: the same upstream settings,
  /// the same resolved address, and plain HTTP (a TLS upstream's CA and certificate files
  /// are read again at every load and may have changed under the same settings).
  static func mayKeepPool(
    _ plan: UpstreamPlan, old: GatehouseConfig, _ nextPlan: UpstreamPlan, new: GatehouseConfig
  ) -> Bool {
    guard plan.tls == nil, nextPlan.tls == nil, plan.endpoints == nextPlan.endpoints,
      let before = old.upstreams.first(where: { $0.name == plan.name }),
      let after = new.upstreams.first(where: { $0.name == nextPlan.name })
    else { return false }
    return before == after
  }

  /// Starts a background refresh of `key` unless one is already running on this loop;
  /// `stored`: the answer it refreshes, whose validators it sends; `claimLines`: the
  /// forwarded claims of the user whose answer it is (the key holds that user).
  func revalidate(
    key: CacheKey, request: HTTPRequestHead, target: [UInt8], snapshot: GatewaySnapshot, routeIndex: Int,
    clientAddress: [UInt8], stored: StoredAnswer?, claimLines: [UInt8] = []
  ) {
    guard refreshes[key.id] == nil, !draining else { return }
    let refresh = BackgroundRefresh(context: self, key: key)
    refreshes[key.id] = refresh
    refresh.start(
      request: request, target: target, snapshot: snapshot, routeIndex: routeIndex, clientAddress: clientAddress,
      stored: stored, claimLines: claimLines)
  }

  func refreshFinished(_ refresh: BackgroundRefresh) {
    if refreshes[refresh.key.id] === refresh { refreshes[refresh.key.id] = nil }
  }

  /// Pool figures for the admin API, per upstream name.
  func poolFigures() -> [String: PoolFigures] {
    var figures: [String: PoolFigures] = [:]
    let now = EventLoop.monotonicNanoseconds()
    for pool in pools {
      figures[pool.plan.name] = PoolFigures(
        open: pool.openCount, idle: pool.idleCount, circuitOpen: pool.circuit.isOpen(now: now),
        openRoutes: pool.routeCircuits.openRoutes(now: now),
        lastError: pool.lastError, lastErrorAtMs: pool.lastErrorAtMs, endpoints: EndpointFigures.of(pool, now: now))
    }
    return figures
  }

  /// The pool for upstream `index` of `snapshot`. When a reload replaced that snapshot, the
  /// running config's pool for the same upstream name: a request that waited through the
  /// reload (for a token, or behind a collapsed request) goes where that upstream is now.
  /// Nil only when the upstream is gone from the config.
  func pool(_ index: Int, of requestSnapshot: GatewaySnapshot) -> UpstreamPool? {
    if requestSnapshot === snapshot { return index < pools.count ? pools[index] : nil }
    guard index < requestSnapshot.upstreamPlans.count else { return nil }
    let name = requestSnapshot.upstreamPlans[index].name
    return pools.first { $0.plan.name == name }
  }

  // MARK: Connections

  func accept(_ socket: TCPSocket, listenerKey key: String) {
    let open = shared.clientConnections.add(1, ordering: .relaxed).newValue
    if draining || open > shared.maxConnections.load(ordering: .relaxed) {
      shared.clientConnections.subtract(1, ordering: .relaxed)
      socket.close()
      if !draining {
        shared.refusedAtLimit.add(1, ordering: .relaxed)
        shared.warnAboutLimit(
          "max_connections reached; new connections are closed",
          ["max_connections": .int(shared.maxConnections.load(ordering: .relaxed))])
      }
      return
    }
    let tls = listenerTLS[key]
    let peer = socket.peerHostText
    do {
      if snapshot.listenerProtocols[key]?.allowsHTTP2(secure: tls != nil) == true {
        // HTTP/2 or HTTP/1.1: told by ALPN or the connection preface, once bytes come.
        let chooser = ClientProtocolChooser(context: self, listenerKey: key, peer: peer, secure: tls != nil)
        chooser.start(try BufferedConnection(socket: socket, loop: loop, delegate: chooser, tls: tls))
        connections[ObjectIdentifier(chooser)] = chooser
      } else {
        let session = ClientSession(
          context: self, answers: answerWriter, routeCache: routeCache, peer: peer, secure: tls != nil)
        session.start(try BufferedConnection(socket: socket, loop: loop, delegate: session.http1!, tls: tls))
        connections[ObjectIdentifier(session)] = session
      }
    } catch {
      shared.clientConnections.subtract(1, ordering: .relaxed)
      shared.logger.warn("cannot register client connection", ["error": .string("\(error)")])
    }
  }

  /// A chooser's connection goes on as HTTP/1.1 (`bytes`: what it read so far).
  func continueAsHTTP1(
    _ chooser: ClientProtocolChooser, _ connection: BufferedConnection, initial bytes: UnsafeRawBufferPointer
  ) {
    guard connections.removeValue(forKey: ObjectIdentifier(chooser)) != nil else { return }
    let session = ClientSession(
      context: self, answers: answerWriter, routeCache: routeCache, peer: chooser.peer, secure: chooser.secure)
    connections[ObjectIdentifier(session)] = session
    connection.delegate = session.http1
    session.start(connection, initial: bytes)
  }

  /// A chooser's connection goes on as HTTP/2 (`bytes`: what it read so far).
  func continueAsHTTP2(
    _ chooser: ClientProtocolChooser, _ connection: BufferedConnection, initial bytes: UnsafeRawBufferPointer
  ) {
    guard connections.removeValue(forKey: ObjectIdentifier(chooser)) != nil else { return }
    let client = HTTP2ClientConnection(
      context: self, answers: answerWriter, routeCache: routeCache, listenerKey: chooser.listenerKey,
      peer: chooser.peer, secure: chooser.secure)
    connections[ObjectIdentifier(client)] = client
    connection.delegate = client.server
    client.server.start(connection, initial: bytes)
  }

  /// A client connection of any kind closed.
  func connectionClosed(_ connection: AnyObject) {
    if connections.removeValue(forKey: ObjectIdentifier(connection)) != nil {
      shared.clientConnections.subtract(1, ordering: .relaxed)
    }
  }

  /// The TLS context of each TLS listener, by configured address; replaced on reload so new
  /// connections get reloaded certificates.
  private var listenerTLS: [String: TLSContext] = [:]

  func setListenerTLS(_ tls: TLSContext?, key: String) {
    listenerTLS[key] = tls
  }

  /// Starts accepting on `listener` (bound for configured address `key`).
  func addListener(_ listener: TCPListener, key: String, tls: TLSContext?) {
    listeners[key]?.close()
    listeners[key] = listener
    listenerTLS[key] = tls
    let shared = self.shared
    listener.onAcceptError = { error in
      shared.acceptFailures.add(1, ordering: .relaxed)
      shared.warnAboutLimit("cannot accept connections", ["address": .string(key), "error": .string("\(error)")])
    }
    do {
      try listener.startAccepting(on: loop) { [unowned(unsafe) self] socket in
        accept(socket, listenerKey: key)
      }
    } catch {
      shared.logger.error("cannot accept on listener", ["address": .string(key), "error": .string("\(error)")])
    }
  }

  /// Stops accepting on the listener for `key`. Its established HTTP/1.1 connections go
  /// on; its HTTP/2 connections are told so (GOAWAY), and finish the streams they have.
  func removeListener(key: String) {
    listenerTLS[key] = nil
    listeners.removeValue(forKey: key)?.close()
    for case let client as HTTP2ClientConnection in Array(connections.values) where client.listenerKey == key {
      client.drain()
    }
  }

  /// Stops accepting; idle sessions close now, busy ones after their current answer.
  func beginDrain() {
    draining = true
    for listener in listeners.values { listener.close() }
    listeners.removeAll()
    for connection in Array(connections.values) { connection.drain() }
    for pool in pools { pool.retire() }
  }

  /// Closes every connection at once (drain timeout reached).
  func abortAll() {
    for connection in Array(connections.values) { connection.abort() }
  }

  // MARK: Deadlines

  /// Deadlines are checked by one timer per loop rather than one per request, so a request
  /// costs no timer-heap work; the price is up to `sweepInterval` of lateness.
  static let sweepInterval: Duration = .milliseconds(100)

  private func scheduleSweep() {
    // Strong: the context lives as long as its loop; weak would put a side table on it.
    sweepTimer = loop.scheduleTimer(after: Self.sweepInterval) { [self] in
      sweep()
      scheduleSweep()
    }
  }

  private func sweep() {
    store?.flushTouches()
    shared.flushUpstreamOpenFailures()
    let now = EventLoop.monotonicNanoseconds()
    for connection in Array(connections.values) {
      let deadline = connection.deadline
      if deadline != 0 && deadline <= now { connection.checkDeadline(now: now) }
    }
    for pool in pools {
      if pool.queuedCount > 0 { pool.evictStalledReaderIfDue(now: now) }
      if pool.hasSurplusIdle { pool.closeSurplusIdle(now: now) }
      if pool.endpoints.count > 1 { pool.sweepEndpoints(now: now) }
    }
  }

  func stopSweeping() {
    if let sweepTimer { loop.cancelTimer(sweepTimer) }
    sweepTimer = nil
    useSharedTier(nil)
  }

  // MARK: Access log

  func logAccess(_ record: AccessRecord) {
    accessLog.append(record)
    if accessLog.needsFlush {
      accessLog.flush(to: shared.logger)
    } else if !accessFlushScheduled {
      // One write per loop turn, however many requests finished in it.
      accessFlushScheduled = true
      loop.executeLater { [self] in
        accessFlushScheduled = false
        accessLog.flush(to: shared.logger)
      }
    }
  }
}

extension EventLoop {
  /// The monotonic time at which `duration` from now has passed, on the timers' clock.
  static func deadline(after duration: Duration) -> UInt64 {
    monotonicNanoseconds() &+ nanoseconds(of: duration)
  }

  /// A duration in nanoseconds (at least 1, so a deadline is never "now").
  static func nanoseconds(of duration: Duration) -> UInt64 {
    let (seconds, attoseconds) = duration.components
    let nanos = UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds / 1_000_000_000))
    return max(1, nanos)
  }
}

/// One loop's figures for one upstream.
struct PoolFigures: Sendable {
  let open: Int
  let idle: Int
  let circuitOpen: Bool
  /// Routes whose own circuit is open on this loop (`RouteCircuits`).
  let openRoutes: [String]
  let lastError: String?
  /// When `lastError` happened (wall-clock ms since the epoch).
  let lastErrorAtMs: Int64?
  let endpoints: [EndpointFigures]
}
