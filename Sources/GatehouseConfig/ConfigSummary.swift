/// The one-screen overview `gatehouse check` prints for a valid config: what listens where,
/// which route goes to which upstream with which token and cache windows. It says what the
/// file means after defaults and `${ENV}` are applied, which reading the file cannot.
/// Never shows a secret (token values, the admin token, client key hashes).
public enum ConfigSummary {
  public static func lines(for config: GatehouseConfig) -> [String] {
    var lines: [String] = []
    let listeners = config.listen.map { $0.address.description + ($0.tls == nil ? "" : " (tls)") }
    lines.append("listen:    " + listeners.joined(separator: ", ") + workersText(config.workers))
    var admin: [String] = [config.admin.token == nil ? "no token" : "token set"]
    if config.admin.tls != nil { admin.append("tls") }
    if config.admin.metricsPublic { admin.append("public /metrics") }
    lines.append("admin:     \(config.admin.listen) (" + admin.joined(separator: ", ") + ")")
    lines.append("store:     \(config.store.path), max \(config.store.maxBytes) bytes")
    lines.append("routes:")
    let width = config.routes.map(\.name.count).max() ?? 0
    for route in config.routes {
      lines.append("  " + pad(route.name, width) + "  " + routeText(route, config: config))
    }
    if !config.upstreams.isEmpty {
      lines.append("upstreams:")
      let upstreamWidth = config.upstreams.map(\.name.count).max() ?? 0
      for upstream in config.upstreams {
        var text = "  " + pad(upstream.name, upstreamWidth) + "  " + upstream.url.description
        if let health = upstream.health {
          text += "  health \(upstream.url.basePath)\(health.path) every \(milliseconds(health.interval))ms"
        }
        text += fleetText(upstream)
        lines.append(text)
      }
    }
    if let servers = config.resolver.servers {
      lines.append(
        "resolver:  " + servers.map(\.description).joined(separator: ", ")
          + " (timeout \(config.resolver.timeoutMilliseconds)ms)")
    }
    if !config.tokens.isEmpty {
      lines.append("tokens:    " + config.tokens.map { "\($0.name) (\(tokenType($0.source)))" }.joined(separator: ", "))
    }
    if !config.clients.keys.isEmpty || config.clients.required {
      lines.append(
        "clients:   \(config.clients.keys.count) key(s)" + (config.clients.required ? ", required" : ", optional"))
    }
    return lines
  }

  private static func routeText(_ route: RouteConfig, config: GatehouseConfig) -> String {
    var parts: [String] = []
    let methods = route.match.methods?.joined(separator: ",") ?? "any"
    var target: String
    switch route.stub.mode {
    case .always:
      target = "stub \(route.stub.status)"
    case .off, .fallback:
      let base = route.upstream.flatMap(config.upstream(named:))?.url.basePath ?? ""
      target = (route.upstream ?? "?") + " " + base + (route.upstreamPath?.source ?? route.match.path.source)
    }
    parts.append("\(methods) \(route.match.path.source) -> \(target)")
    if let token = route.token { parts.append("token \(token)") }
    if !route.envelope.enabled {
      parts.append("no envelope")
    } else if let keyPath = route.envelope.keyPath {
      parts.append("key_path \(keyPath.joined(separator: "."))")
    }
    if let cache = route.cache {
      var windows = ["fresh \(seconds(cache.fresh))s"]
      if cache.staleWhileRevalidate > .zero { windows.append("swr \(seconds(cache.staleWhileRevalidate))s") }
      windows.append("stale-if-error \(seconds(cache.staleIfError))s")
      parts.append("cache " + windows.joined(separator: ", "))
    }
    if route.stub.mode == .fallback { parts.append("stub fallback \(route.stub.status)") }
    return parts.joined(separator: "  ")
  }

  /// The endpoints when `servers` lists them, and the balancing when it is not the default:
  /// the parts of a fleet that change where requests go.
  private static func fleetText(_ upstream: UpstreamConfig) -> String {
    var text = ""
    if let servers = upstream.servers {
      text +=
        "  servers "
        + servers.map { $0.address.description + ($0.weight == 1 ? "" : " weight \($0.weight)") }
        .joined(separator: ", ")
    }
    switch upstream.balance {
    case .leastRequest: break
    case .roundRobin: text += "  balance round_robin"
    case .hash: text += "  balance hash by \(upstream.hashKey.configValue)"
    }
    return text
  }

  private static func workersText(_ workers: Int) -> String {
    workers == 0 ? "  (one event loop per core)" : "  (\(workers) event loops)"
  }

  private static func tokenType(_ source: TokenSource) -> String {
    switch source {
    case .fixed: return "static"
    case .file(let path): return "file \(path)"
    case .oauth2ClientCredentials(let oauth2): return "oauth2 \(oauth2.tokenURL)"
    }
  }

  private static func pad(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
  }

  private static func seconds(_ duration: Duration) -> Int64 { duration.components.seconds }

  private static func milliseconds(_ duration: Duration) -> Int64 {
    duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
  }
}
