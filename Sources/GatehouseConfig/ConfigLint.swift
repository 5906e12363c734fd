import GatehouseJSON

/// Something in a valid config that works, but likely not as meant. `gatehouse check`
/// prints each as `path: warning: problem` and exits 0 (1 with `--strict`); `serve` logs the
/// ones about secrets at start.
public struct ConfigWarning: Sendable, Equatable, CustomStringConvertible {
  /// Where, as in errors: `routes[2]`, `upstreams.api.health.path`.
  public let path: String
  public let problem: String

  public init(path: String, problem: String) {
    self.path = path
    self.problem = problem
  }

  public var description: String { "\(path): warning: \(problem)" }

  /// The line `gatehouse check --strict` prints: the warning as an error, in the
  /// `path: error: problem` form.
  public var errorDescription: String { "\(path): error: \(problem)" }
}

/// Checks of a decoded config that need the whole of it: routes that earlier routes hide,
/// health checks whose path would not be what the operator wrote, `key_path`s a stub body
/// does not have. Pure functions of the config, so unit tests call them directly.
public enum ConfigLint {
  public static func warnings(for config: GatehouseConfig) -> [ConfigWarning] {
    shadowedRoutes(config.routes) + repeatedHealthBasePaths(config.upstreams) + stubKeyPaths(config.routes)
      + config.upstreams.flatMap(fleetWarnings)
  }

  // MARK: - Routes that never match

  /// A route is shadowed when an earlier route takes every path it takes (`/*` prefixes and
  /// templates cover literals) with the same methods: routes are tried in order, so it only
  /// gets what the earlier one leaves, which may be nothing.
  static func shadowedRoutes(_ routes: [RouteConfig]) -> [ConfigWarning] {
    var warnings: [ConfigWarning] = []
    for (index, route) in routes.enumerated() {
      for (earlierIndex, earlier) in routes[..<index].enumerated()
      where covers(earlier.match.path, route.match.path) {
        let by = "routes[\(earlierIndex)] (\"\(earlier.name)\", \(earlier.match.path.source))"
        switch methodOverlap(earlier: earlier.match.methods, later: route.match.methods) {
        case .none:
          continue
        case .all:
          warnings.append(
            ConfigWarning(
              path: "routes[\(index)]",
              problem: "route \"\(route.name)\" (\(route.match.path.source)) never matches: \(by) comes first "
                + "and takes every request it would"))
        case .some(let methods):
          warnings.append(
            ConfigWarning(
              path: "routes[\(index)]",
              problem: "route \"\(route.name)\" (\(route.match.path.source)) never gets "
                + methods.joined(separator: ", ") + " requests: \(by) comes first and takes them"))
        }
        break
      }
    }
    return warnings
  }

  /// Whether every path `later` matches is matched by `earlier` too.
  static func covers(_ earlier: RouteTemplate, _ later: RouteTemplate) -> Bool {
    if earlier.hasWildcard {
      // `/p/*` takes `/p` and everything below it: `later` needs at least those segments.
      guard later.segments.count >= earlier.segments.count else { return false }
    } else {
      guard !later.hasWildcard, later.segments.count == earlier.segments.count else { return false }
    }
    for (mine, theirs) in zip(earlier.segments, later.segments) {
      switch (mine, theirs) {
      case (.literal(let a), .literal(let b)):
        if a != b { return false }
      case (.parameter, .literal(let b)):
        // A parameter takes one non-empty segment only.
        if b.isEmpty { return false }
      case (.parameter, .parameter):
        continue
      case (.literal, .parameter):
        return false
      }
    }
    return true
  }

  enum MethodOverlap: Equatable {
    case none
    /// Every method `later` takes.
    case all
    /// Only these, of the ones `later` lists (it takes more).
    case some([String])
  }

  /// Which of the later route's methods the earlier one takes first (nil: any method;
  /// listing GET also takes HEAD).
  static func methodOverlap(earlier: [String]?, later: [String]?) -> MethodOverlap {
    guard let earlier else { return .all }
    var taken = Set(earlier)
    if taken.contains("GET") { taken.insert("HEAD") }
    guard let later else { return .some(earlier) }
    let shared = later.filter { taken.contains($0) }
    if shared.isEmpty { return .none }
    return shared.count == later.count ? .all : .some(shared)
  }

  // MARK: - Health paths

  /// The health check's path is appended to the url's base path, as request paths are: one
  /// that starts with the base path again is most likely written whole, and would be asked
  /// for at the base path twice.
  static func repeatedHealthBasePaths(_ upstreams: [UpstreamConfig]) -> [ConfigWarning] {
    upstreams.compactMap { upstream in
      let base = upstream.url.basePath
      guard let health = upstream.health, !base.isEmpty,
        health.path == base || health.path.hasPrefix(base + "/")
      else { return nil }
      let meant = String(health.path.dropFirst(base.count))
      return ConfigWarning(
        path: "upstreams.\(upstream.name).health.path",
        problem: "\(health.path) repeats the url's base path \(base): the check asks for \(base + health.path)"
          + " (write \"\(meant.isEmpty ? "/" : meant)\")")
    }
  }

  // MARK: - Stub bodies

  /// A stub stands in for the backend, so its body goes through the route's `key_path` as
  /// the backend's would: one the body does not have answers `"datas": null`.
  static func stubKeyPaths(_ routes: [RouteConfig]) -> [ConfigWarning] {
    routes.enumerated().compactMap { index, route in
      guard route.stub.mode != .off, route.envelope.enabled, let keyPath = route.envelope.keyPath,
        (200..<300).contains(route.stub.status)
      else { return nil }
      let text = keyPath.joined(separator: ".")
      guard let path = JSONKeyPath(text) else { return nil }
      let body = route.stub.body ?? Array("null".utf8)
      guard JSONDocument.range(of: path, in: body) == nil else { return nil }
      return ConfigWarning(
        path: "routes[\(index)].envelope.key_path",
        problem: "\"\(text)\" is not in stub.body, so the stub answers \"datas\": null"
          + " (write the body as the backend answers it)")
    }
  }

  // MARK: - Fleets

  /// Fleet settings that are valid but do not do what they say: a `hash_by` that no
  /// balancing reads, a server listed twice (the fleet counts it once, with the first
  /// weight), and a url whose IP address is not among `servers` (with `servers` the url's
  /// host is only the `Host` field and TLS name, so the address the url names gets no
  /// requests, which is rarely what a url naming an address meant).
  static func fleetWarnings(_ upstream: UpstreamConfig) -> [ConfigWarning] {
    let path = ConfigPath.root.appending(key: "upstreams").appending(name: upstream.name)
    var warnings: [ConfigWarning] = []
    if let hashBy = upstream.hashBy, upstream.balance != .hash {
      warnings.append(
        ConfigWarning(
          path: path.appending(key: "hash_by").description,
          problem: "\"\(hashBy.configValue)\" does nothing: balance is \"\(upstream.balance.configValue)\", and only"
            + " \"hash\" uses hash_by"))
    }
    guard let servers = upstream.servers else { return warnings }
    let serversPath = path.appending(key: "servers")
    var seen: [ServerAddress: Int] = [:]
    for (index, server) in servers.enumerated() {
      guard let first = seen[server.address] else {
        seen[server.address] = index
        continue
      }
      warnings.append(
        ConfigWarning(
          path: serversPath.appending(index: index).appending(key: "address").description,
          problem: "\(server.address) is already listed at servers[\(first)]; it is one endpoint, with the"
            + " first entry's weight"))
    }
    let urlHost = upstream.url.host
    let urlAddress =
      NetworkAddressSyntax.canonicalIPv6(Substring(urlHost))
      ?? (NetworkAddressSyntax.isIPv4(Substring(urlHost)) ? urlHost : nil)
    if let urlAddress, !servers.contains(where: { $0.address.hostText == urlAddress }) {
      warnings.append(
        ConfigWarning(
          path: path.appending(key: "url").description,
          problem: "\(urlHost) is not among servers: with servers the url's host is only sent as Host (and used as"
            + " the TLS name), so it gets no requests"))
    }
    return warnings
  }
}
