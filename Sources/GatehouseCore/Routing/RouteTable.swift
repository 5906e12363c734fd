import GatehouseConfig

/// The compiled routes of one config: built once when a config is loaded, then immutable and
/// shared by every loop ("build, then freeze"). A reload builds a new table.
///
/// Matching follows Config/README.md: routes are tried in config order and the first whose path and
/// methods fit wins. It works on the request's bytes, without making a `String`, and a match
/// keeps its captures inline, so matching allocates nothing. All literal bytes (segments,
/// methods, upstream base paths, rewrite pieces) live in one flat array, so a lookup touches
/// few cache lines.
///
/// Path rules, each with a test:
/// - `/users` matches only `/users`; a trailing slash is a different path (`/users/`), as is
///   an empty segment (`/users//1`). The gateway forwards paths as sent, so it does not
///   guess which of them the backend treats as equal.
/// - `:name` matches one non-empty segment: `/users/:id` matches `/users/7`, not `/users/`.
/// - `/pass/*` matches `/pass`, `/pass/` and `/pass/anything/below`, not `/passage`. The rest
///   it captures starts with the `/` after `pass` (or is empty for `/pass`), so a rewrite to
///   `/v2/*` sends `/pass` as `/v2`, `/pass/` as `/v2/` and `/pass/a/b` as `/v2/a/b`.
/// - Bytes are compared as they are: `%2F` is not a separator and `%41` is not `A`.
/// - Only paths starting with `/` match. Paths with `.` or `..` segments (`%2e` included)
///   never get here: the request parser refuses them, since a backend resolving them would
///   reach a path no route allowed.
public struct RouteTable: Sendable {
  /// The routes in config order; `RouteMatch.routeIndex` indexes this array.
  public let routes: [RouteConfig]
  private let compiledRoutes: [CompiledRoute]
  /// Every literal byte sequence the table compares with or writes, addressed by ranges.
  private let bytePool: [UInt8]

  private enum Segment: Sendable {
    case literal(Range<Int>)
    case parameter
  }

  private enum RewritePart: Sendable {
    case literal(Range<Int>)
    case parameter(index: Int)
    case remainder
  }

  /// A class: every request reads its route (to match, then to build the upstream path),
  /// and a copy of a struct holding arrays would retain and release each of them.
  private final class CompiledRoute: Sendable {
    let segments: [Segment]
    let hasWildcard: Bool
    /// Set for templates without parameters or wildcard: one byte comparison decides.
    let exactPath: Range<Int>?
    /// Nil: any method.
    let methods: [Range<Int>]?
    let allowsHead: Bool
    let upstreamBasePath: Range<Int>
    /// Nil: the request path as is.
    let rewrite: [RewritePart]?

    init(
      segments: [Segment], hasWildcard: Bool, exactPath: Range<Int>?, methods: [Range<Int>]?, allowsHead: Bool,
      upstreamBasePath: Range<Int>, rewrite: [RewritePart]?
    ) {
      self.segments = segments
      self.hasWildcard = hasWildcard
      self.exactPath = exactPath
      self.methods = methods
      self.allowsHead = allowsHead
      self.upstreamBasePath = upstreamBasePath
      self.rewrite = rewrite
    }
  }

  /// Compiles the routes of a validated config.
  public init(config: GatehouseConfig) {
    self.init(routes: config.routes, upstreams: config.upstreams)
  }

  /// Compiles `routes`; each route's upstream base path comes from `upstreams` (a route
  /// without an upstream, such as an always-stub route, gets an empty base path).
  public init(routes: [RouteConfig], upstreams: [UpstreamConfig]) {
    var pool: [UInt8] = []
    func intern(_ text: String) -> Range<Int> {
      let start = pool.count
      pool.append(contentsOf: text.utf8)
      return start..<pool.count
    }
    var compiled: [CompiledRoute] = []
    for route in routes {
      let template = route.match.path
      let segments: [Segment] = template.segments.map { segment in
        switch segment {
        case .literal(let text): .literal(intern(text))
        case .parameter: .parameter
        }
      }
      let isExact = !template.hasWildcard && template.parameterNames.isEmpty
      let methods = route.match.methods
      let basePath =
        route.upstream.flatMap { name in upstreams.first { $0.name == name } }?.url.basePath ?? ""
      compiled.append(
        CompiledRoute(
          segments: segments,
          hasWildcard: template.hasWildcard,
          exactPath: isExact ? intern(template.source) : nil,
          methods: methods?.map { intern($0) },
          allowsHead: methods?.contains("GET") ?? true,
          upstreamBasePath: intern(basePath),
          rewrite: route.upstreamPath.map { rewrite in
            Self.compileRewrite(rewrite, parameterNames: template.parameterNames, intern: intern)
          }))
    }
    self.routes = routes
    self.compiledRoutes = compiled
    self.bytePool = pool
  }

  private static func compileRewrite(
    _ rewrite: RouteTemplate, parameterNames: [String], intern: (String) -> Range<Int>
  ) -> [RewritePart] {
    var parts: [RewritePart] = []
    var pendingLiteral = ""
    for segment in rewrite.segments {
      pendingLiteral += "/"
      switch segment {
      case .literal(let text):
        pendingLiteral += text
      case .parameter(let name):
        parts.append(.literal(intern(pendingLiteral)))
        pendingLiteral = ""
        // Validation guarantees the rewrite only uses parameters the match defines.
        parts.append(.parameter(index: parameterNames.firstIndex(of: name)!))
      }
    }
    if !pendingLiteral.isEmpty { parts.append(.literal(intern(pendingLiteral))) }
    if rewrite.hasWildcard { parts.append(.remainder) }
    return parts
  }

  // MARK: - Matching

  /// The first route that takes `method` and `path` (the request target's path, without the
  /// query), or nil for "no route". Ranges in the match are offsets into `path`.
  public func match(method: UnsafeRawBufferPointer, path: UnsafeRawBufferPointer) -> RouteMatch? {
    // Only a path can match. The request parser already refuses `*` and authority-form
    // targets; this keeps `/*` from taking one from any other caller (it would be appended
    // to the upstream's base path as `/api/v1*`).
    guard path.first == UInt8(ascii: "/") else { return nil }
    return bytePool.withUnsafeBytes { pool in
      for index in compiledRoutes.indices {
        let route = compiledRoutes[index]
        guard Self.methodAllowed(method, route: route, pool: pool) else { continue }
        if var match = Self.matchPath(path, route: route, pool: pool) {
          match.routeIndex = index
          return match
        }
      }
      return nil
    }
  }

  /// `match(method:path:)` for bytes held in arrays; ranges count from `path.startIndex`.
  public func match(method: ArraySlice<UInt8>, path: ArraySlice<UInt8>) -> RouteMatch? {
    method.withUnsafeBytes { methodBytes in
      path.withUnsafeBytes { pathBytes in match(method: methodBytes, path: pathBytes) }
    }
  }

  /// `match(method:path:)` for strings, for the admin API and tests; not for the request path.
  public func match(method: String, path: String) -> RouteMatch? {
    match(method: ArraySlice(method.utf8), path: ArraySlice(path.utf8))
  }

  private static func methodAllowed(
    _ method: UnsafeRawBufferPointer, route: CompiledRoute, pool: UnsafeRawBufferPointer
  ) -> Bool {
    guard let methods = route.methods else { return true }
    for range in methods where bytesEqual(method, pool, range) { return true }
    return route.allowsHead && method.elementsEqual("HEAD".utf8)
  }

  private static func bytesEqual(
    _ bytes: UnsafeRawBufferPointer, _ pool: UnsafeRawBufferPointer, _ range: Range<Int>
  )
    -> Bool
  {
    bytes.count == range.count && bytes.elementsEqual(pool[range])
  }

  private static func matchPath(
    _ path: UnsafeRawBufferPointer, route: CompiledRoute, pool: UnsafeRawBufferPointer
  )
    -> RouteMatch?
  {
    if let exact = route.exactPath {
      return bytesEqual(path, pool, exact) ? RouteMatch() : nil
    }
    var match = RouteMatch()
    let slash = UInt8(ascii: "/")
    var position = 0
    for segment in route.segments {
      guard position < path.count, path[position] == slash else { return nil }
      position += 1
      let start = position
      while position < path.count, path[position] != slash { position += 1 }
      switch segment {
      case .literal(let range):
        guard position - start == range.count,
          UnsafeRawBufferPointer(rebasing: path[start..<position]).elementsEqual(pool[range])
        else { return nil }
      case .parameter:
        guard position > start else { return nil }
        match.appendParameter(start..<position)
      }
    }
    if route.hasWildcard {
      // The segment loop stops at a '/' or the end, so the rest is empty or starts with '/'.
      match.remainder = position..<path.count
      return match
    }
    return position == path.count ? match : nil
  }

  // MARK: - Upstream path

  /// The path and query to send upstream (Config/README.md): the upstream url's base path, then the
  /// route's rewritten path (or the request path as is), then `?` and `query` unchanged when
  /// the request had a query (`query` is nil when the target had no `?`).
  /// Whether the matched route sends the request's path and query as they came: no base
  /// path on its upstream, no rewrite (`upstreamPath` would copy them unchanged).
  public func sendsTargetUnchanged(_ match: RouteMatch) -> Bool {
    let route = compiledRoutes[match.routeIndex]
    return route.upstreamBasePath.isEmpty && route.rewrite == nil
  }

  public func upstreamPath(
    for match: RouteMatch, requestPath: UnsafeRawBufferPointer, query: UnsafeRawBufferPointer?
  ) -> [UInt8] {
    let route = compiledRoutes[match.routeIndex]
    return bytePool.withUnsafeBytes { pool in
      var output: [UInt8] = []
      output.reserveCapacity(route.upstreamBasePath.count + requestPath.count + (query?.count ?? 0) + 1)
      output.append(contentsOf: pool[route.upstreamBasePath])
      if let rewrite = route.rewrite {
        for part in rewrite {
          switch part {
          case .literal(let range):
            output.append(contentsOf: pool[range])
          case .parameter(let index):
            output.append(contentsOf: requestPath[match.parameterRange(at: index)])
          case .remainder:
            if let remainder = match.remainder { output.append(contentsOf: requestPath[remainder]) }
          }
        }
      } else {
        output.append(contentsOf: requestPath)
      }
      // A rewrite of "/*" with an empty rest, on an upstream without a base path, leaves
      // nothing; a request line needs at least "/".
      if output.isEmpty { output.append(UInt8(ascii: "/")) }
      if let query {
        output.append(UInt8(ascii: "?"))
        output.append(contentsOf: query)
      }
      return output
    }
  }

  /// Whether the route's rewrite would carry an encoded `?` or `#` (`%3F`, `%23`) from the
  /// request into the upstream path, in a parameter. A backend (or a proxy before it) that decodes the path before
  /// splitting it would read a query or a fragment there, cutting off the rest of the
  /// template: `/users/:id` rewritten to `/v2/users/:id/profile` would reach `/v2/users/1`
  /// for `id` = `1%23`. Such requests are refused (400). Without a rewrite the path goes as
  /// sent, and a `/*` rest ends the template: there the client only reaches what it could
  /// have asked for directly.
  public func rewriteCarriesEncodedDelimiter(for match: RouteMatch, requestPath: ArraySlice<UInt8>) -> Bool {
    guard let rewrite = compiledRoutes[match.routeIndex].rewrite else { return false }
    return requestPath.withUnsafeBytes { path in
      for part in rewrite {
        switch part {
        // The rest always ends the template: there is nothing after it to cut off.
        case .literal, .remainder:
          continue
        case .parameter(let index):
          if Self.holdsEncodedDelimiter(path[match.parameterRange(at: index)]) { return true }
        }
      }
      return false
    }
  }

  /// `%3F` or `%23`, in either case.
  static func holdsEncodedDelimiter(_ bytes: Slice<UnsafeRawBufferPointer>) -> Bool {
    var index = bytes.startIndex
    while index + 2 < bytes.endIndex {
      if bytes[index] == UInt8(ascii: "%") {
        let high = bytes[index + 1]
        let low = bytes[index + 2] | 0x20
        if (high == UInt8(ascii: "3") && low == UInt8(ascii: "f")) || (high == UInt8(ascii: "2") && low == 0x33) {
          return true
        }
      }
      index += 1
    }
    return false
  }

  /// `upstreamPath(for:requestPath:query:)` for bytes held in arrays.
  public func upstreamPath(for match: RouteMatch, requestPath: ArraySlice<UInt8>, query: ArraySlice<UInt8>?)
    -> [UInt8]
  {
    requestPath.withUnsafeBytes { pathBytes in
      if let query {
        return query.withUnsafeBytes { queryBytes in
          upstreamPath(for: match, requestPath: pathBytes, query: queryBytes)
        }
      }
      return upstreamPath(for: match, requestPath: pathBytes, query: nil)
    }
  }

  /// The matched route's parameters by name, decoded as UTF-8 (percent-escapes kept), for
  /// logs, the admin API and tests.
  public func parameters(of match: RouteMatch, in path: String) -> [(name: String, value: String)] {
    let bytes = Array(path.utf8)
    let names = routes[match.routeIndex].match.path.parameterNames
    return (0..<match.parameterCount).map { index in
      (names[index], String(decoding: bytes[match.parameterRange(at: index)], as: UTF8.self))
    }
  }
}

/// The result of a successful `RouteTable.match`: which route, and where in the request
/// path its parameters and `/*` rest are. Captures are stored inline: no allocation.
public struct RouteMatch: Sendable {
  /// Index into `RouteTable.routes`.
  public internal(set) var routeIndex = 0
  /// How many parameters the route's template has (all of them are captured).
  public private(set) var parameterCount = 0
  /// The bytes the trailing `/*` matched: empty, or starting with `/`. Nil when the route's
  /// template has no `/*`.
  public internal(set) var remainder: Range<Int>?
  private var parameterRanges = InlineArray<8, Range<Int>>(repeating: 0..<0)

  init() {}

  /// The byte range in the request path of the parameter at `index`, in template order.
  public func parameterRange(at index: Int) -> Range<Int> {
    precondition(index < parameterCount, "parameter index out of range")
    return parameterRanges[index]
  }

  mutating func appendParameter(_ range: Range<Int>) {
    parameterRanges[parameterCount] = range
    parameterCount += 1
  }
}
