import GatehouseAdmin
import GatehouseConfig
import GatehouseHTTP
import GatehouseLogging
import GatehouseNet
import GatehouseStore
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Runs the gateway: one event loop per worker, each with its own listener socket on every
/// listen address (SO_REUSEPORT), the admin listener on the first loop, and a control loop
/// on the calling thread for signals, reloads and the drain at shutdown.
///
/// `@unchecked Sendable`: after `init` the only mutable state is `state`, behind a mutex;
/// loops and contexts are fixed, and each context is only touched on its own loop.
public final class GatewayServer: @unchecked Sendable {
  public let shared: GatewayShared
  private let configPath: String?
  private let group: EventLoopGroup
  private let contexts: [LoopContext]
  /// The worker loops, for their turn-length counters (`gatehouse_loop_stalls_total`).
  var workerLoops: [EventLoop] { group.loops }
  private let control: EventLoop
  private let signals: SignalReceiver
  /// The admin listener's service; the metrics read its failed-authentication count.
  let admin: AdminService?
  /// Confined to the control loop.
  nonisolated(unsafe) let tokenManager: TokenManager
  /// Confined to the control loop.
  nonisolated(unsafe) let keyring: JWTKeyring
  /// Confined to the control loop.
  nonisolated(unsafe) let healthChecker: HealthChecker
  /// Confined to the control loop.
  nonisolated(unsafe) let upstreamResolution: UpstreamResolution
  private let startedAt = RFC3339.now().seconds
  /// The admin API's backend. Set once at the end of `init` (it refers back to the server),
  /// never changed after.
  private var administration: GatewayAdministration?
  /// Listen addresses as bound (port 0 replaced by the kernel's choice).
  public private(set) var boundAddresses: [String] = []
  /// The admin address as bound, when the admin listener runs.
  public private(set) var adminAddress: String?

  /// The configured listen addresses now bound (control loop only, after init).
  private var listenKeys: [String] = []
  /// A second stop signal came: the drain ends at its next check (control loop only).
  private var drainCutShort = false
  /// Listeners bound in `init`, handed to the loops by `run`.
  private var pendingListeners: [(key: String, listeners: [TCPListener], tls: TLSContext?)] = []

  /// The server context of `listen[index]`'s TLS (certificate chain and key read now). A
  /// failure names the key as `check` does (`listen[0].tls: …`), at start and on reload.
  static func serverTLS(_ listen: ListenerConfig, index: Int) throws -> TLSContext? {
    guard let tls = listen.tls else { return nil }
    do {
      return try serverTLS(tls, offersHTTP2: listen.http2)
    } catch {
      throw SnapshotError(description: "listen[\(index)].tls: \(error)")
    }
  }

  /// The admin listener's TLS context (`admin.tls`), named as `check` names it.
  static func adminTLS(_ admin: AdminConfig) throws -> TLSContext? {
    guard let tls = admin.tls else { return nil }
    do {
      return try serverTLS(tls)
    } catch {
      throw SnapshotError(description: "admin.tls: \(error)")
    }
  }

  /// A listener's TLS context with its SNI certificates; reads and checks every file.
  /// `offersHTTP2`: ALPN offers `h2` (client listeners with `http2`; never the admin API).
  static func serverTLS(_ tls: ListenerTLSConfig, offersHTTP2: Bool = false) throws -> TLSContext {
    var named: [String: TLSContext] = [:]
    for entry in tls.sni {
      let context = try TLSContext(
        server: TLSServerConfiguration(
          certificateChainPath: entry.certificatePath, privateKeyPath: entry.keyPath, offersHTTP2: offersHTTP2))
      for name in entry.names { named[name] = context }
    }
    return try TLSContext(
      server: TLSServerConfiguration(
        certificateChainPath: tls.certificatePath, privateKeyPath: tls.keyPath, offersHTTP2: offersHTTP2),
      serverNames: named)
  }

  /// One SO_REUSEPORT listener per loop for a configured `host:port`.
  static func bind(_ key: String, count: Int) throws -> [TCPListener] {
    try TCPListener.bindReusePortGroup(address: try SocketAddress(parsing: key), count: count)
  }

  private struct State {
    var snapshot: GatewaySnapshot
    var loadedAt: Int64
    var draining = false
    var ready = false
  }
  private let state: Mutex<State>
  /// The config the process started with: what the admin listener and the store were opened
  /// with, which settings that wait for a restart are compared against.
  private let startedConfig: GatehouseConfig

  /// Binds every listener; throws with a readable message when one cannot be bound.
  public init(config: GatehouseConfig, configPath: String?, logger: Logger) throws {
    // Signals are blocked before any loop thread starts, so only the control loop sees them.
    signals = try SignalReceiver(signals: [.terminate, .interrupt, .hangup])
    self.configPath = configPath
    startedConfig = config
    let snapshot = try GatewaySnapshot(config: config)
    for plan in snapshot.upstreamPlans where plan.tlsVerifyDisabled {
      logger.warn("TLS certificate verification is off for an upstream", ["upstream": .string(plan.name)])
    }
    state = Mutex(State(snapshot: snapshot, loadedAt: RFC3339.now().seconds))
    let shared = GatewayShared(
      logger: logger, maxConnections: config.limits.maxConnections, store: Self.openStore(config.store, logger: logger))
    shared.maxWebSockets.store(config.limits.maxWebSockets, ordering: .relaxed)
    self.shared = shared
    for message in StartupWarnings.messages(for: config, storeOpen: shared.store != nil) { logger.warn(message) }
    // What `check` finds that works but not as written (a route an earlier one hides, a health
    // path that repeats the base path): said at start too, for configs that never saw `check`.
    for warning in ConfigLint.warnings(for: config) {
      logger.warn("config warning", ["path": .string(warning.path), "warning": .string(warning.problem)])
    }
    // Before any loop allocates: answers held for clients leave no pages behind them.
    Heap.keepLargeBuffersOffTheHeap()
    control = try EventLoop()
    group = try EventLoopGroup(loopCount: config.workers)
    contexts = group.loops.map { LoopContext(loop: $0, shared: shared, snapshot: snapshot) }
    for context in contexts { context.loopCount = contexts.count }
    var groups: [(key: String, listeners: [TCPListener], tls: TLSContext?)] = []
    var adminListener: TCPListener?
    var adminTLS: TLSContext?
    do {
      for (index, listen) in config.listen.enumerated() {
        let key = listen.address.description
        let tls = try Self.serverTLS(listen, index: index)
        let listeners: [TCPListener]
        do {
          listeners = try Self.bind(key, count: contexts.count)
        } catch {
          throw SnapshotError(description: "listen \(key): cannot bind: \(error)")
        }
        boundAddresses.append(listeners[0].localAddress.description)
        groups.append((key, listeners, tls))
      }
      adminTLS = try Self.adminTLS(config.admin)
      let adminAddress = try SocketAddress(parsing: config.admin.listen.description)
      // Config validation already refuses a public admin address without a token; checked
      // again here because an open admin API must never come up by accident.
      if config.admin.token == nil && !config.admin.listen.isLoopback {
        throw SnapshotError(description: "admin.listen is not a loopback address and no admin token is set")
      }
      let listener: TCPListener
      do {
        listener = try TCPListener(address: adminAddress, reusePort: false)
      } catch {
        throw SnapshotError(description: "admin.listen \(adminAddress): cannot bind: \(error)")
      }
      self.adminAddress = adminAddress.withPort(listener.localPort).description
      adminListener = listener
    } catch {
      group.shutdown()
      throw error
    }
    // Tokens live on the control loop; each new set of values is handed to every loop.
    let loopContexts = contexts
    let manager = TokenManager(
      tokens: config.tokens, loop: control,
      persistence: shared.store.map { StoreTokenPersistence(store: $0, logger: logger) }, logger: logger,
      publish: { values in
        for context in loopContexts { context.loop.execute { context.tokens = values } }
      })
    tokenManager = manager
    shared.tokens = TokenBroker(manager: manager, control: control)
    // Signing keys live on the control loop too, published the same way.
    let keyring = JWTKeyring(
      config: config.jwt, loop: control, store: shared.store, logger: logger,
      publish: { values in
        for context in loopContexts { context.loop.execute { context.jwtKeys = values } }
      })
    self.keyring = keyring
    shared.keyring = JWTKeyBroker(keyring: keyring, control: control)
    healthChecker = HealthChecker(loop: control, logger: logger) { verdicts in
      for context in loopContexts { context.loop.execute { context.applyHealth(verdicts) } }
    }
    upstreamResolution = UpstreamResolution(loop: control, logger: logger) { upstream, endpoints in
      for context in loopContexts {
        context.loop.execute { context.updateEndpoints(upstream: upstream, to: endpoints) }
      }
    }
    let adminContext = contexts[0]
    let service = AdminService(loop: adminContext.loop, logger: logger)
    admin = service
    let administration = GatewayAdministration(server: self)
    self.administration = administration
    service.backend = administration
    // The loops start accepting from `run`, once the token manager has published its first
    // values: a request must never find a configured static token missing.
    pendingListeners = groups
    listenKeys = groups.map(\.key)
    if let adminListener {
      nonisolated(unsafe) let listener = adminListener
      let tls = adminTLS
      adminContext.loop.execute {
        do {
          try service.start(listener, tls: tls)
        } catch {
          shared.logger.error("cannot accept on the admin listener", ["error": .string("\(error)")])
        }
      }
    }
  }

  /// Serves until SIGTERM or SIGINT has drained the connections; returns the exit status.
  public func run() -> Int32 {
    for address in boundAddresses {
      shared.logger.info("listening", ["address": .string(address), "workers": .int(contexts.count)])
    }
    if let adminAddress { shared.logger.info("admin listening", ["address": .string(adminAddress)]) }
    let startChange = ConfigChange(from: nil, to: currentSnapshot.config)
    if startChange.adminTokenMissing { warnAdminTokenMissing() }
    if startChange.adminTokenShort { warnAdminTokenShort() }
    nonisolated(unsafe) let groups = pendingListeners
    pendingListeners = []
    control.execute { [self] in
      tokenManager.start()
      keyring.start()
      healthChecker.apply(currentSnapshot)
      upstreamResolution.apply(currentSnapshot)
      administration?.sampleHistory()
      // Each loop runs its queue in order: the token values published just above are in
      // place before the first connection is accepted.
      for (index, context) in contexts.enumerated() {
        nonisolated(unsafe) let handedOver = groups.map { ($0.key, $0.listeners[index], $0.tls) }
        context.loop.execute {
          for (key, listener, tls) in handedOver { context.addListener(listener, key: key, tls: tls) }
          context.start()
        }
      }
      state.withLock { $0.ready = true }
      do {
        try signals.start(on: control) { [self] signal in
          switch signal {
          case .terminate, .interrupt: beginShutdown()
          case .hangup: reload { _ in }
          }
        }
      } catch {
        shared.logger.error("cannot receive signals", ["error": .string("\(error)")])
      }
    }
    control.run()
    signals.close()
    group.shutdown()
    shared.store?.close()
    shared.logger.info("stopped")
    return 0
  }

  /// Opens (or creates) the store. A damaged file has been moved aside by the store itself;
  /// a store that cannot be opened at all is logged and the gateway serves without one.
  static func openStore(_ config: StoreConfig, logger: Logger) -> Store? {
    // Like `mkdir -p` for the store's directory; failures surface when the store opens.
    var prefix = config.path.hasPrefix("/") ? "/" : ""
    for component in config.path.split(separator: "/").dropLast() {
      prefix += component + "/"
      _ = mkdir(prefix, 0o700)
    }
    var configuration = Store.Configuration(
      path: config.path, maxBytes: Int64(config.maxBytes), secretKey: config.secretKey?.value)
    configuration.onWarning = { warning in logger.warn("store", ["detail": .string(warning)]) }
    configuration.onEvent = { event in log(event, to: logger) }
    do {
      let store = try Store.open(configuration)
      for warning in store.warnings { logger.warn("store", ["detail": .string(warning)]) }
      return store
    } catch {
      logger.error(
        "cannot open the store; serving without it", ["path": .string(config.path), "error": .string("\(error)")])
      return nil
    }
  }

  /// The store's writer has no logger: it reports here, once when commits start failing
  /// and once when they work again, not once per batch.
  static func log(_ event: StoreEvent, to logger: Logger) {
    switch event {
    case .writesFailing(let error, let pendingTokenWrites):
      logger.warn(
        "store writes are failing; new answers are not stored and token writes are kept for a retry",
        ["error": .string(error), "pending_token_writes": .int(pendingTokenWrites)])
    case .writesRecovered(let failedCommits):
      logger.info("store writes work again", ["failed_commits": .int(failedCommits)])
    case .tokenWritesLost(let names):
      logger.error(
        "the store closed before these token writes could be stored; the file has older values",
        ["tokens": .string(names.joined(separator: ","))])
    }
  }

  var currentSnapshot: GatewaySnapshot { state.withLock { $0.snapshot } }
  var configLoadedAt: Int64 { state.withLock { $0.loadedAt } }
  var stateIsReady: Bool { state.withLock { $0.ready } }
  var workerCount: Int { contexts.count }
  var startTime: Int64 { startedAt }
  var configFilePath: String? { configPath }

  /// Reads the config file again on the control loop; a bad one is logged and refused, and
  /// the running config stays. In-flight requests finish on the config they started with.
  package func reload(completion: @escaping @Sendable (Result<Void, ReloadFailure>) -> Void) {
    control.execute { [self] in
      let result = performReload()
      switch result {
      case .success: shared.reloads.add(1, ordering: .relaxed)
      case .failure: shared.refusedReloads.add(1, ordering: .relaxed)
      }
      completion(result)
    }
  }

  private func performReload() -> Result<Void, ReloadFailure> {
    // Once draining, nothing new starts: no listeners, pools, checks or token fetches.
    if state.withLock({ $0.draining }) {
      shared.logger.warn("reload ignored: shutting down")
      return .failure(ReloadFailure(errors: ["shutting down; the config is not reloaded"]))
    }
    guard let configPath else {
      shared.logger.warn("reload refused: running on the embedded config")
      return .failure(ReloadFailure(errors: ["running on the embedded config; there is no file to reload"]))
    }
    let previous = currentSnapshot
    let next: GatewaySnapshot
    do {
      let config = try ConfigLoader.load(contentsOf: configPath)
      next = try GatewaySnapshot(config: config, previous: previous, knownAddresses: upstreamResolution.lastGood)
    } catch let error as ConfigLoadError {
      shared.logger.error(
        "reload refused; the running config stays", ["errors": .string(error.lines.joined(separator: "; "))])
      return .failure(ReloadFailure(errors: error.lines))
    } catch {
      shared.logger.error("reload refused; the running config stays", ["error": .string("\(error)")])
      return .failure(ReloadFailure(errors: ["\(error)"]))
    }
    // Listen addresses: new ones are bound first (a failure refuses the whole reload and
    // keeps the old config); removed ones stop accepting, their connections carry on.
    let wanted = next.config.listen.map(\.address.description)
    // Certificates are read again on every reload, for new listeners and existing ones.
    var tlsByKey: [String: TLSContext] = [:]
    for (index, listen) in next.config.listen.enumerated() {
      do {
        if let tls = try Self.serverTLS(listen, index: index) { tlsByKey[listen.address.description] = tls }
      } catch {
        shared.logger.error("reload refused; the running config stays", ["error": .string("\(error)")])
        return .failure(ReloadFailure(errors: ["\(error)"]))
      }
    }
    // So is the admin listener's: a changed `admin.tls` (turned on, off, or other files)
    // applies to the next admin connection, as a listener's does; open ones keep theirs.
    let adminTLS: TLSContext?
    do {
      adminTLS = try Self.adminTLS(next.config.admin)
    } catch {
      shared.logger.error("reload refused; the running config stays", ["error": .string("\(error)")])
      return .failure(ReloadFailure(errors: ["\(error)"]))
    }
    var added: [(key: String, listeners: [TCPListener])] = []
    for key in wanted where !listenKeys.contains(key) {
      do {
        added.append((key, try Self.bind(key, count: contexts.count)))
      } catch {
        for group in added { for listener in group.listeners { listener.close() } }
        shared.logger.error("reload refused; the running config stays", ["error": .string("\(key): \(error)")])
        return .failure(ReloadFailure(errors: ["listen: cannot bind \(key): \(error)"]))
      }
    }
    let removed = listenKeys.filter { !wanted.contains($0) }
    for (index, context) in contexts.enumerated() {
      nonisolated(unsafe) let handedOver = added.map { ($0.key, $0.listeners[index]) }
      let kept = wanted.filter { key in !added.contains { $0.key == key } }
      let tls = tlsByKey
      context.loop.execute {
        for key in removed { context.removeListener(key: key) }
        for (key, listener) in handedOver { context.addListener(listener, key: key, tls: tls[key]) }
        for key in kept { context.setListenerTLS(tls[key], key: key) }
      }
    }
    for group in added {
      shared.logger.info("listening", ["address": .string(group.listeners[0].localAddress.description)])
    }
    for key in removed { shared.logger.info("stopped listening", ["address": .string(key)]) }
    if let admin {
      admin.loop.execute { admin.tls = adminTLS }
    }
    listenKeys = wanted
    state.withLock {
      $0.snapshot = next
      $0.loadedAt = RFC3339.now().seconds
    }
    shared.maxConnections.store(next.config.limits.maxConnections, ordering: .relaxed)
    shared.maxWebSockets.store(next.config.limits.maxWebSockets, ordering: .relaxed)
    tokenManager.apply(tokens: next.config.tokens)
    keyring.apply(next.config.jwt)
    healthChecker.apply(next)
    upstreamResolution.apply(next)
    applyStoreChanges(from: previous.config.store, to: next.config.store)
    let change = ConfigChange(from: previous.config, to: next.config, running: startedConfig)
    if !change.awaitingRestart.isEmpty {
      shared.logger.warn(
        "changed settings take effect at the next start",
        ["keys": .string(change.awaitingRestart.joined(separator: ", "))])
    }
    if change.adminTokenMissing { warnAdminTokenMissing() }
    if change.adminTokenShort { warnAdminTokenShort() }
    for context in contexts { context.loop.execute { context.install(next) } }
    shared.logger.setLevel(next.config.log.level)
    shared.logger.info("config reloaded", ["path": .string(configPath)])
    return .success(())
  }

  /// Without a token the admin API stays closed (never open) but answers 401 to
  /// everything, which looks like a wrong token; this line says why.
  private func warnAdminTokenMissing() {
    shared.logger.warn(
      "the admin API's protected endpoints are unusable until admin.token is set",
      ["address": adminAddress.map { .string($0) } ?? .null])
  }

  /// A short token on an admin listener other machines reach can be guessed; a warning
  /// rather than a refusal, so a config that ran before still starts.
  private func warnAdminTokenShort() {
    shared.logger.warn(
      "admin token is short for a non-loopback listener; use 32 random characters or more",
      ["address": adminAddress.map { .string($0) } ?? .null])
  }

  /// `store.max_bytes` applies at once (eviction runs on the writer thread). The file and
  /// the token key stay as opened; `ConfigChange` names them when they change, rather than
  /// half-applying them.
  private func applyStoreChanges(from old: StoreConfig, to new: StoreConfig) {
    if new.maxBytes != old.maxBytes, let store = shared.store, store.setMaxBytes(Int64(new.maxBytes)) {
      shared.logger.info("store size changed", ["max_bytes": .int(new.maxBytes)])
    }
  }

  /// Stops accepting, lets in-flight requests finish (up to `drain_timeout_ms`), then stops.
  /// The first SIGTERM/SIGINT starts the drain; a second one ends it at once (the operator
  /// does not want to wait), closing what is left as the drain timeout would.
  private func beginShutdown() {
    let alreadyDraining = state.withLock { state in
      defer { state.draining = true; state.ready = false }
      return state.draining
    }
    guard !alreadyDraining else {
      shared.logger.warn(
        "second stop signal: ending the drain now", ["connections": .int(shared.openClientConnections)])
      drainCutShort = true
      return
    }
    shared.logger.info("draining", ["connections": .int(shared.openClientConnections)])
    for context in contexts { context.loop.execute { context.beginDrain() } }
    // The admin listener stays up while draining: `/readyz` answers 503 (so a load balancer
    // stops sending) and `/healthz` 200 until the process ends. It closes with the rest.
    waitForDrain(until: EventLoop.deadline(after: currentSnapshot.drainTimeout))
  }

  private func waitForDrain(until deadline: UInt64) {
    if shared.openClientConnections == 0 || EventLoop.monotonicNanoseconds() >= deadline || drainCutShort {
      if let admin { admin.loop.execute { admin.closeAll() } }
      if shared.openClientConnections > 0 {
        shared.logger.warn("drain timeout; closing the rest", ["connections": .int(shared.openClientConnections)])
        for context in contexts { context.loop.execute { context.abortAll() } }
      }
      for context in contexts { context.loop.execute { context.stopSweeping() } }
      tokenManager.stop()
      keyring.stop()
      healthChecker.stop()
      upstreamResolution.stop()
      control.stop()
      return
    }
    control.scheduleTimer(after: .milliseconds(20)) { [self] in waitForDrain(until: deadline) }
  }

  /// Runs `body` on the control loop (for blocking work such as store admin calls).
  func onControl(_ body: @escaping @Sendable () -> Void) {
    control.execute { body() }
  }

  /// Runs `body` on the control loop after `delay`. Control loop only.
  func onControlAfter(_ delay: Duration, _ body: @escaping () -> Void) {
    _ = control.scheduleTimer(after: delay, body)
  }

  /// Runs `body` on the first loop, with its context: for work one loop does for all (the
  /// shared tier's purges).
  func onFirstLoop(_ body: @escaping @Sendable (LoopContext) -> Void) {
    guard let context = contexts.first else { return }
    context.loop.execute { body(context) }
  }

  /// Runs `body` on every loop and hands the results, in loop order, to `completion` on the
  /// admin loop. Counters stay per loop and are only summed here, when read.
  func gather<T: Sendable>(
    _ body: @escaping @Sendable (LoopContext) -> T, completion: @escaping @Sendable ([T]) -> Void
  ) {
    guard let admin else { return }
    let collected = GatherResults<T>()
    let total = contexts.count
    for (index, context) in contexts.enumerated() {
      context.loop.execute {
        let value = body(context)
        let done = collected.results.withLock { results -> [T]? in
          results[index] = value
          guard results.count == total else { return nil }
          return (0..<total).map { results[$0]! }
        }
        if let done { admin.loop.execute { completion(done) } }
      }
    }
  }
}

/// Results arriving from several loops for one `gather`.
private final class GatherResults<T: Sendable>: Sendable {
  let results = Mutex<[Int: T]>([:])
}
