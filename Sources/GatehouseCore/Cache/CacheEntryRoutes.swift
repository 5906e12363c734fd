import GatehouseConfig

/// Which route a stored cache entry belongs to, worked out from the config.
///
/// The store keys an entry by the upstream request (method, upstream, upstream path, query,
/// vary), not by route: two routes that send the same upstream request share one entry, and
/// an entry survives a reload that renames its route. So the route is found again from the
/// running config: the first route, in config order, on the entry's upstream whose upstream
/// path pattern fits the entry's path. That pattern is the upstream url's base path followed
/// by the route's `path` rewrite, or by its `match.path` when it has none. Routes with a
/// `cache` block are tried before the others, since only they store entries.
///
/// With rewrites, two routes can send requests to the same upstream paths; the first route
/// wins, as it does for requests. `route(upstream:method:path:)` is nil for an entry no
/// route of the running config would produce (one left over from before a reload).
public struct CacheEntryRoutes: Sendable {
  struct Pattern: Sendable {
    let route: String
    let upstream: String
    let basePath: String
    let template: RouteTemplate
    let methods: [String]?
    let cached: Bool
  }

  let patterns: [Pattern]

  public init(routes: [RouteConfig], upstreams: [UpstreamConfig]) {
    patterns = routes.compactMap { route in
      guard let upstream = route.upstream, let config = upstreams.first(where: { $0.name == upstream }) else {
        return nil
      }
      return Pattern(
        route: route.name, upstream: upstream, basePath: config.url.basePath,
        template: route.upstreamPath ?? route.match.path, methods: route.match.methods, cached: route.cache != nil)
    }
  }

  public init(config: GatehouseConfig) {
    self.init(routes: config.routes, upstreams: config.upstreams)
  }

  /// The name of the route whose requests produce an entry with this upstream, method and
  /// upstream path (no query), or nil when no route does.
  public func route(upstream: String, method: String, path: String) -> String? {
    for cachedOnly in [true, false] {
      for pattern in patterns where pattern.cached || !cachedOnly {
        if pattern.upstream == upstream && Self.admits(pattern.methods, method) && Self.fits(pattern, path: path) {
          return pattern.route
        }
      }
    }
    return nil
  }

  /// Whether the route exists and sends requests to an upstream (a stub-only route stores
  /// nothing).
  public func hasRoute(_ name: String) -> Bool {
    patterns.contains { $0.route == name }
  }

  /// The start every upstream path of `route`'s entries shares: the base path and the
  /// pattern's literal segments before its first parameter or `/*`. Listing by this prefix
  /// narrows the search for the route's entries; the prefix alone can also take in other
  /// routes' entries (`/pass` is the start of `/passage`), so each is checked with
  /// `route(upstream:method:path:)`.
  public func literalPrefix(route name: String) -> String? {
    guard let pattern = patterns.first(where: { $0.route == name }) else { return nil }
    var prefix = pattern.basePath
    for segment in pattern.template.segments {
      switch segment {
      case .literal(let text): prefix += "/" + text
      case .parameter: return prefix + "/"
      }
    }
    return prefix
  }

  /// Listing `GET` admits `HEAD` too (as for requests); no list admits every method.
  static func admits(_ methods: [String]?, _ method: String) -> Bool {
    guard let methods else { return true }
    return methods.contains(method) || (method == "HEAD" && methods.contains("GET"))
  }

  /// The path rules of `RouteTable`: a literal segment is compared byte for byte, a
  /// parameter takes one non-empty segment, and `/*` takes whatever follows (nothing too).
  static func fits(_ pattern: Pattern, path: String) -> Bool {
    guard path.hasPrefix(pattern.basePath) else { return false }
    let rest = path.utf8.dropFirst(pattern.basePath.utf8.count)
    let segments = pattern.template.segments
    if rest.isEmpty {
      // A rewrite of `/*` with nothing after it sends the bare base path.
      return segments.isEmpty && pattern.template.hasWildcard
    }
    guard rest.first == UInt8(ascii: "/") else { return false }
    let pieces = rest.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
    if pattern.template.hasWildcard {
      // `/pass/*` takes `/pass` itself, so the rest may have no more pieces than the literals.
      guard pieces.count >= segments.count else { return false }
    } else {
      guard pieces.count == segments.count else { return false }
    }
    for (segment, piece) in zip(segments, pieces) {
      switch segment {
      case .literal(let text):
        guard piece.elementsEqual(text.utf8) else { return false }
      case .parameter:
        guard !piece.isEmpty else { return false }
      }
    }
    return true
  }
}
