import GatehouseAdmin
import GatehouseConfig
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import Synchronization

/// The admin API's view of the running gateway (`AdminBackend`): its status, routes,
/// upstreams, metrics and history. The cache and token endpoints are answered by
/// `CacheAdministration` and `TokenAdministration`.
///
/// `@unchecked Sendable`: its only state is the server reference and `history`, behind a mutex.
final class GatewayAdministration: AdminBackend, @unchecked Sendable {
  /// Unowned: the server owns this object and the admin service holds it only weakly, so it
  /// does not outlive the server, and its work runs on the server's loops, which `run` stops
  /// before it returns. A strong reference would be a cycle.
  unowned let server: GatewayServer
  /// The dashboard's last 15 minutes (`GET /admin/history`): written every 10 s by the
  /// sampler, read by the admin loop.
  let history = Mutex(MetricsHistory())

  init(server: GatewayServer) {
    self.server = server
  }

  package var isReady: Bool { server.stateIsReady }

  package var adminAccess: AdminAccess { server.currentSnapshot.adminAccess }

  package var adminConnectionLimits: AdminConnectionLimits {
    let snapshot = server.currentSnapshot
    return AdminConnectionLimits(
      headerTimeoutNanoseconds: snapshot.headerTimeoutNanoseconds,
      idleTimeoutNanoseconds: snapshot.idleTimeoutNanoseconds)
  }

  package func statusDocument(completion: @escaping @Sendable (JSONValue) -> Void) {
    let snapshot = server.currentSnapshot
    let loadedAt = server.configLoadedAt
    let now = RFC3339.now().seconds
    let workers = server.workerCount
    let started = server.startTime
    let path = server.configFilePath
    let shared = server.shared
    let document: [(String, JSONValue)] = [
      ("version", .string(GatehouseVersion.string)),
      ("uptime_s", .int(Int(now - started))),
      ("started_at", .string(RFC3339.string(seconds: started))),
      ("config_file", .optionalString(path)),
      ("config_loaded_at", .string(RFC3339.string(seconds: loadedAt))),
      ("workers", .int(workers)),
      ("routes", .int(snapshot.routePlans.count)),
      (
        "connections",
        .object([
          ("client", .int(shared.openClientConnections)),
          ("upstream", .int(shared.upstreamConnections.load(ordering: .relaxed))),
        ])
      ),
    ]
    completeStatus(document, sharedTier: snapshot.sharedTier, completion: completion)
  }

  package func routesDocument() -> JSONValue {
    .object([("routes", .array(server.currentSnapshot.config.routes.map(Self.routeDocument)))])
  }

  static func routeDocument(_ route: RouteConfig) -> JSONValue {
    var members: [(String, JSONValue)] = [
      ("name", .string(route.name)),
      (
        "match",
        .object([
          ("path", .string(route.match.path.source)),
          ("methods", route.match.methods.map { .array($0.map { .string($0) }) } ?? .null),
        ])
      ),
      ("upstream", .optionalString(route.upstream)),
      ("path", .optionalString(route.upstreamPath?.source)),
      ("token", .optionalString(route.token)),
      (
        "envelope",
        .object([
          ("enabled", .bool(route.envelope.enabled)),
          ("key_path", route.envelope.keyPath.map { .string($0.joined(separator: ".")) } ?? .null),
          ("status", .string(route.envelope.status.rawValue)),
        ])
      ),
      ("stub", .object([("mode", .string(route.stub.mode.rawValue))])),
    ]
    if let cache = route.cache {
      members.append(
        (
          "cache",
          .object([
            ("stale_if_error_s", .int(Int(cache.staleIfError.components.seconds))),
            ("fresh_s", .int(Int(cache.fresh.components.seconds))),
            ("stale_while_revalidate_s", .int(Int(cache.staleWhileRevalidate.components.seconds))),
            ("vary", .array(cache.vary.map { .string($0) })),
          ])
        ))
    }
    return .object(members)
  }

  package func upstreamsDocument(completion: @escaping @Sendable (JSONValue) -> Void) {
    let server = self.server
    let snapshot = server.currentSnapshot
    nonisolated(unsafe) let checker = server.healthChecker
    nonisolated(unsafe) let resolution = server.upstreamResolution
    server.onControl {
      let health = checker.states()
      let lookups = resolution.times()
      Self.upstreamsDocument(
        server: server, snapshot: snapshot, health: health, lookups: lookups, completion: completion)
    }
  }

  /// `last_check` of `/admin/upstreams`: the most recent health check, or null.
  static func checkDocument(_ check: HealthState.Check?) -> JSONValue {
    guard let check else { return .null }
    return .object([
      ("at", .string(RFC3339.string(seconds: check.atMs / 1000))),
      ("ok", .bool(check.ok)),
      ("status", check.status.map { .int($0) } ?? .null),
      ("error", .optionalString(check.error)),
    ])
  }

  /// The upstream's most recent error with its time (ms since the epoch): the health
  /// check's or one a request met on any loop, whichever came last.
  static func latestError(health: HealthState?, figures: [PoolFigures]) -> (text: String, atMs: Int64)? {
    var latest: (text: String, atMs: Int64)?
    if let health, let text = health.lastError, let at = health.lastErrorAtMs { latest = (text, at) }
    for figure in figures {
      guard let text = figure.lastError, let at = figure.lastErrorAtMs else { continue }
      if latest == nil || at > latest!.atMs { latest = (text, at) }
    }
    return latest
  }

  private static func upstreamsDocument(
    server: GatewayServer, snapshot: GatewaySnapshot, health: [String: HealthState],
    lookups: [String: UpstreamResolution.Times], completion: @escaping @Sendable (JSONValue) -> Void
  ) {
    server.gather({ context in context.poolFigures() }) { perLoop in
      var upstreams: [JSONValue] = []
      for plan in snapshot.upstreamPlans {
        let figures = perLoop.compactMap { $0[plan.name] }
        let openLoops = figures.filter(\.circuitOpen).count
        let checked = health[plan.name]
        let lastError = Self.latestError(health: checked, figures: figures)
        let healthText = checked.map { $0.healthy ? "healthy" : "unhealthy" } ?? "unknown"
        let since: JSONValue = checked?.sinceMs.map { .string(RFC3339.string(seconds: $0 / 1000)) } ?? .null
        let errorAt: JSONValue = lastError.map { .string(RFC3339.string(seconds: $0.atMs / 1000)) } ?? .null
        let openRoutes: [JSONValue] = Set(figures.flatMap(\.openRoutes)).sorted().map { .string($0) }
        let members: [(String, JSONValue)] = [
          ("name", .string(plan.name)),
          ("address", .string(plan.address.description)),
          ("health", .string(healthText)),
          ("since", since),
          ("last_check", Self.checkDocument(checked?.lastCheck)),
          ("circuit", .string(openLoops == 0 ? "closed" : "open")),
          ("circuit_open_loops", .int(openLoops)),
          ("open_routes", .array(openRoutes)),
          ("open_connections", .int(figures.reduce(0) { $0 + $1.open })),
          ("idle_connections", .int(figures.reduce(0) { $0 + $1.idle })),
          ("last_error", .optionalString(lastError?.text)),
          ("last_error_at", errorAt),
          ("resolved_at", Self.timeDocument(lookups[plan.name]?.resolvedAtMs)),
          ("next_resolve_at", Self.timeDocument(lookups[plan.name]?.nextAtMs)),
          (
            "endpoints",
            .array(EndpointFigures.merged(figures.map(\.endpoints)).map { Self.endpointDocument($0.figures) })
          ),
        ]
        upstreams.append(.object(members))
      }
      completion(.object([("upstreams", .array(upstreams))]))
    }
  }

  /// An RFC 3339 time from wall-clock ms, or null.
  private static func timeDocument(_ ms: Int64?) -> JSONValue {
    ms.map { .string(RFC3339.string(seconds: $0 / 1000)) } ?? .null
  }

  private static func endpointDocument(_ figures: EndpointFigures) -> JSONValue {
    .object([
      ("address", .string(figures.address)),
      ("weight", .int(figures.weight)),
      ("state", .string(figures.state)),
      ("in_flight", .int(figures.inFlight)),
      ("requests", .int(Int(clamping: figures.requests))),
      ("failures", .int(Int(clamping: figures.failures))),
      ("ejected_until", timeDocument(figures.ejectedUntilMs)),
      ("last_error", .optionalString(figures.lastError)),
    ])
  }

  package func metricsText(completion: @escaping @Sendable (String) -> Void) {
    let server = self.server
    let shared = server.shared
    let adminAuthFailures = server.admin?.authFailureCount.load(ordering: .relaxed) ?? 0
    let snapshot = server.currentSnapshot
    nonisolated(unsafe) let manager = server.tokenManager
    let turns = server.workerLoops.map {
      (stalls: $0.stalls.load(ordering: .relaxed), longest: $0.longestTurnNanoseconds.load(ordering: .relaxed))
    }
    server.gather({ context in (context.metrics.sample(), context.poolFigures(), context.sharedTier?.figures) }) {
      perLoop in
      var summed = MetricsSample()
      for (sample, _, _) in perLoop { summed.add(sample) }
      for plan in snapshot.upstreamPlans {
        for (figures, sample) in EndpointFigures.merged(perLoop.compactMap { $0.1[plan.name]?.endpoints }) {
          summed.endpoints[EndpointSampleKey(upstream: plan.name, endpoint: figures.address)] = sample
        }
      }
      let total = summed
      let circuits = snapshot.upstreamPlans.map { plan in
        (plan.name, perLoop.contains { $0.1[plan.name]?.circuitOpen == true })
      }
      let routeCircuits = snapshot.upstreamPlans.flatMap { plan in
        Set(perLoop.flatMap { $0.1[plan.name]?.openRoutes ?? [] }).sorted().map { (plan.name, $0) }
      }
      // Store totals, token states and health are read where they live: the control loop.
      nonisolated(unsafe) let checker = server.healthChecker
      nonisolated(unsafe) let resolution = server.upstreamResolution
      server.onControl {
        let lookups = resolution.counts.sorted { ($0.key.upstream, $0.key.result) < ($1.key.upstream, $1.key.result) }
        let health = checker.states()
        let stats = shared.store?.stats()
        let states = manager.tokenStates()
        let refreshes = manager.refreshCounts()
        var text = PrometheusText()
        text.append(total)
        text.family(
          "gatehouse_cache_writes_total", type: "counter", help: "Answers written to the store.",
          samples: [([], Double(stats?.writes ?? 0))])
        text.family(
          "gatehouse_cache_evictions_total", type: "counter", help: "Stored answers evicted to stay under max_bytes.",
          samples: [([], Double(stats?.evictions ?? 0))])
        text.family(
          "gatehouse_dns_resolutions_total", type: "counter",
          help: "Lookups of upstream names after the config was loaded, by result (failure: one name had no address).",
          samples: lookups.map { ([("upstream", $0.key.upstream), ("result", $0.key.result)], Double($0.value)) })
        text.family(
          "gatehouse_cache_bytes", type: "gauge", help: "Bytes of stored answers.",
          samples: [([], Double(stats?.bytes ?? 0))])
        // Besides the request families (Docs/logs.md): what shows that the store stopped taking writes.
        text.family(
          "gatehouse_cache_dropped_writes_total", type: "counter",
          help: "Answers not stored because the store's queue was full.",
          samples: [([], Double(stats?.droppedWrites ?? 0))])
        text.family(
          "gatehouse_cache_oversize_skipped_total", type: "counter",
          help: "Answers not stored because they alone exceed max_bytes.",
          samples: [([], Double(stats?.oversizeSkipped ?? 0))])
        text.family(
          "gatehouse_store_write_errors_total", type: "counter",
          help: "Cache writes lost because their commit to the store failed.",
          samples: [([], Double(stats?.writeErrors ?? 0))])
        text.family(
          "gatehouse_store_pending_token_writes", type: "gauge",
          help: "Token writes whose commit failed, waiting for a retry.",
          samples: [([], Double(stats?.pendingTokenWrites ?? 0))])
        text.family(
          "gatehouse_store_read_errors_total", type: "counter",
          help: "Store reads that failed or found a damaged entry (answered as misses).",
          samples: [([], Double(stats?.readErrors ?? 0))])
        text.family(
          "gatehouse_store_dropped_touches_total", type: "counter",
          help: "Batches of access times dropped because the store's queue was full.",
          samples: [([], Double(stats?.droppedTouches ?? 0))])
        text.family(
          "gatehouse_store_queue_depth", type: "gauge", help: "Items waiting for the store's writer.",
          samples: [([], Double(stats?.queueDepth ?? 0))])
        text.family(
          "gatehouse_token_refresh_total", type: "counter", help: "Token refreshes by result.",
          samples: refreshes.keys.sorted().flatMap { name -> [(labels: [(String, String)], value: Double)] in
            let counts = refreshes[name]!
            return [
              ([("token", name), ("result", "success")], Double(counts.success)),
              ([("token", name), ("result", "failure")], Double(counts.failure)),
            ]
          })
        text.family(
          "gatehouse_token_state", type: "gauge", help: "1 for each token's current state.",
          samples: states.flatMap { state in
            TokenState.allCases.map { candidate in
              ([("token", state.name), ("state", candidate.rawValue)], state.state == candidate ? 1.0 : 0.0)
            }
          })
        text.family(
          "gatehouse_jwt_total", type: "counter",
          help: "Bearer tokens checked on jwt routes, by provider and result (Docs/jwt.md).",
          samples: total.jwtResults.keys.sorted { ($0.provider, $0.result) < ($1.provider, $1.result) }.map { key in
            ([("provider", key.provider), ("result", key.result)], Double(total.jwtResults[key]!))
          })
        // Besides the request families (Docs/logs.md): a backend's rejections of a token, per route (a static
        // token stays `valid` in `gatehouse_token_state` when one endpoint refuses it).
        text.family(
          "gatehouse_token_rejections_total", type: "counter",
          help: "Upstream answers that rejected a route's token (invalid_token status or body field).",
          samples: total.tokenRejections.keys.sorted { ($0.token, $0.route) < ($1.token, $1.route) }.map { key in
            ([("token", key.token), ("route", key.route)], Double(total.tokenRejections[key]!))
          })
        text.family(
          "gatehouse_envelope_key_path_missing_total", type: "counter",
          help: "JSON success answers without their route's envelope key_path (datas sent as null).",
          samples: total.keyPathMissing.keys.sorted().map { ([("route", $0)], Double(total.keyPathMissing[$0]!)) })
        text.family(
          "gatehouse_circuit_open", type: "gauge", help: "1 while an upstream's circuit is open (on any loop).",
          samples: circuits.map { ([("upstream", $0.0)], $0.1 ? 1.0 : 0.0) })
        // Only upstreams with health checks have a verdict (the admin API says `unknown`
        // for the others), so only they are listed.
        text.family(
          "gatehouse_upstream_healthy", type: "gauge",
          help: "1 while an upstream's health checks call it healthy, 0 while unhealthy; only checked upstreams.",
          samples: snapshot.upstreamPlans.compactMap { plan in
            health[plan.name].map { ([("upstream", plan.name)], $0.healthy ? 1.0 : 0.0) }
          })
        text.family(
          "gatehouse_route_circuit_open", type: "gauge",
          help: "1 while a route's own circuit on an upstream is open (on any loop); only open ones are listed.",
          samples: routeCircuits.map { ([("upstream", $0.0), ("route", $0.1)], 1.0) })
        text.family(
          "gatehouse_connections", type: "gauge", help: "Open connections by side.",
          samples: [
            ([("side", "client")], Double(shared.openClientConnections)),
            ([("side", "upstream")], Double(shared.upstreamConnections.load(ordering: .relaxed))),
          ])
        text.family(
          "gatehouse_websockets", type: "gauge", help: "Open WebSocket tunnels by route.",
          samples: shared.tunnelsByRoute.map { ([("route", $0.0)], Double($0.1)) })
        text.family(
          "gatehouse_loop_stalls_total", type: "counter",
          help: "Event loop turns longer than 10 ms: every connection of that loop waited that long.",
          samples: turns.enumerated().map { ([("loop", String($0.offset))], Double($0.element.stalls)) })
        text.family(
          "gatehouse_loop_longest_turn_seconds", type: "gauge",
          help: "The longest event loop turn since start (counted from 2.5 ms).",
          samples: turns.enumerated().map { ([("loop", String($0.offset))], Double($0.element.longest) / 1e9) })
        text.family(
          "gatehouse_buffered_answer_bytes", type: "gauge",
          help: "Answer bytes held for clients (read whole, or kept and queued), against limits.buffered_bytes.",
          samples: [([], Double(shared.bufferedAnswerBytes.load(ordering: .relaxed)))])
        text.family(
          "gatehouse_config_reloads_total", type: "counter",
          help: "Config reloads (SIGHUP or POST /admin/reload): applied, or refused (the running config kept).",
          samples: [
            ([("result", "applied")], Double(shared.reloads.load(ordering: .relaxed))),
            ([("result", "refused")], Double(shared.refusedReloads.load(ordering: .relaxed))),
          ])
        text.family(
          "gatehouse_connections_refused_total", type: "counter",
          help: "Client connections closed at once: max_connections reached, or accept failed (out of descriptors).",
          samples: [
            ([("reason", "max_connections")], Double(shared.refusedAtLimit.load(ordering: .relaxed))),
            ([("reason", "accept_failed")], Double(shared.acceptFailures.load(ordering: .relaxed))),
          ])
        text.family(
          "gatehouse_admin_auth_failures_total", type: "counter",
          help: "Admin API requests refused with 401: no admin token, a wrong one, or two Authorization fields.",
          samples: [([], Double(adminAuthFailures))])
        Self.appendSharedTier(perLoop.compactMap(\.2), configured: snapshot.sharedTier != nil, to: &text)
        completion(text.text)
      }
    }
  }

  package func reload(completion: @escaping @Sendable (Result<Void, ReloadFailure>) -> Void) {
    server.reload(completion: completion)
  }

  package func tokens(_ endpoint: AdminEndpoint, body: [UInt8], completion: @escaping @Sendable (AdminAnswer) -> Void) {
    TokenAdministration(server: server).answer(endpoint, body: body, completion: completion)
  }

  package func jwt(_ endpoint: AdminEndpoint, completion: @escaping @Sendable (AdminAnswer) -> Void) {
    nonisolated(unsafe) let keyring = server.keyring
    server.onControl {
      switch endpoint {
      case .jwtProviders:
        completion(.json(.object([("providers", .array(keyring.statuses().map(Self.listing)))])))
      case .refreshJWTKeys(let name):
        keyring.refresh(provider: name) { status in
          guard let status else {
            completion(.error(404, "no jwt provider named \(JSONValue.string(name).serializedString())"))
            return
          }
          let listing = Self.listing(status)
          completion(status.lastError == nil ? .json(listing) : .json(listing, status: 502))
        }
      default:
        completion(.error(404, "not a jwt endpoint"))
      }
    }
  }

  /// A provider in `GET /admin/jwt` (Docs/jwt.md): public facts only (key ids, never keys).
  static func listing(_ status: JWTKeyring.Status) -> JSONValue {
    .object([
      ("name", .string(status.name)),
      ("issuer", status.issuer.map(JSONValue.string) ?? .null),
      ("source", .string(status.source)),
      ("key_ids", .array(status.keyIDs.map(JSONValue.string))),
      ("keys", .int(status.keyCount)),
      ("fetched_at", status.fetchedAtMs.map { .string(RFC3339.string(seconds: $0 / 1000)) } ?? .null),
      ("last_error", status.lastError.map(JSONValue.string) ?? .null),
    ])
  }

  package func cache(
    _ endpoint: AdminEndpoint, query: [String: String], completion: @escaping @Sendable (AdminAnswer) -> Void
  ) {
    CacheAdministration(server: server).answer(endpoint, query: query, completion: completion)
  }
}
