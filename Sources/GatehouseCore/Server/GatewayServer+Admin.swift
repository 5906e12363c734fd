import GatehouseHTTP
import GatehouseNet

/// The admin API's view of the running gateway.
extension GatewayServer: AdminBackend {
  var isReady: Bool { stateIsReady }

  var metricsPublic: Bool { currentSnapshot.config.admin.metricsPublic }

  func statusDocument(completion: @escaping @Sendable (JSONValue) -> Void) {
    let snapshot = currentSnapshot
    let loadedAt = configLoadedAt
    let now = RFC3339.now().seconds
    let workers = workerCount
    let started = startTime
    let path = configFilePath
    let shared = self.shared
    completion(
      .object([
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
      ]))
  }

  func routesDocument() -> JSONValue {
    .object([("routes", .array(currentSnapshot.config.routes.map(Self.routeDocument)))])
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

  func upstreamsDocument(completion: @escaping @Sendable (JSONValue) -> Void) {
    let snapshot = currentSnapshot
    gather({ context in context.poolFigures().mapValues { [$0.open, $0.idle] } }) { perLoop in
      var upstreams: [JSONValue] = []
      for plan in snapshot.upstreamPlans {
        var open = 0
        var idle = 0
        for figures in perLoop {
          open += figures[plan.name]?[0] ?? 0
          idle += figures[plan.name]?[1] ?? 0
        }
        upstreams.append(
          .object([
            ("name", .string(plan.name)),
            ("address", .string(plan.address.description)),
            ("health", .string("unknown")),
            ("circuit", .string("closed")),
            ("open_connections", .int(open)),
            ("idle_connections", .int(idle)),
            ("last_error", .null),
          ]))
      }
      completion(.object([("upstreams", .array(upstreams))]))
    }
  }

  func metricsText(completion: @escaping @Sendable (String) -> Void) {
    let shared = self.shared
    gather({ context in context.metrics.sample() }) { samples in
      var total = MetricsSample()
      for sample in samples { total.add(sample) }
      var text = PrometheusText()
      text.append(total)
      text.family(
        "gatehouse_connections", type: "gauge", help: "Open connections by side.",
        samples: [
          ([("side", "client")], Double(shared.openClientConnections)),
          ([("side", "upstream")], Double(shared.upstreamConnections.load(ordering: .relaxed))),
        ])
      completion(text.text)
    }
  }
}
