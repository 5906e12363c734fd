import GatehouseHTTP

/// The admin endpoints of Docs/admin-openapi.json, as a value: routing is a pure function of method and
/// path, tested without a socket.
public enum AdminEndpoint: Equatable, Sendable {
  case healthz
  case readyz
  case metrics
  case status
  case cacheStats
  case cacheEntries
  case cacheEntry(id: String)
  case purgeCacheEntry(id: String)
  case purgeCacheEntries
  case purgeCache
  /// `DELETE /admin/routes/{name}/cache`: the entries a route's requests stored.
  case purgeRouteCache(name: String)
  case tokens
  case setToken(name: String)
  case refreshToken(name: String)
  case invalidateToken(name: String)
  /// `GET /admin/jwt`: identity providers and their signing keys (Docs/jwt.md).
  case jwtProviders
  /// `POST /admin/jwt/{name}/refresh`: fetch a provider's keys now.
  case refreshJWTKeys(name: String)
  case routes
  case upstreams
  /// `GET /admin/history`: the dashboard's last 15 minutes per route and upstream.
  case history
  case reload
  case dashboard
  case openAPI

  /// Open endpoints carry no data (health, the static page and the API description);
  /// `/metrics` is open only when `metrics_public` says so.
  public func requiresToken(metricsPublic: Bool) -> Bool {
    switch self {
    case .healthz, .readyz, .dashboard, .openAPI: return false
    case .metrics: return !metricsPublic
    case .status, .cacheStats, .cacheEntries, .cacheEntry, .purgeCacheEntry, .purgeCacheEntries, .purgeCache,
      .purgeRouteCache, .tokens, .setToken, .refreshToken, .invalidateToken, .jwtProviders, .refreshJWTKeys, .routes,
      .upstreams, .history, .reload:
      return true
    }
  }
}

extension AdminEndpoint {
  /// The query parameters the endpoint reads; any other is refused (400), so a mistyped or
  /// misplaced one (`DELETE /admin/cache?prefix=...`) can never widen what a call does.
  /// `Docs/admin-openapi.json` documents the same lists (a unit test compares them).
  public var queryParameters: [String] {
    switch self {
    case .cacheEntries: return ["prefix", "limit", "cursor"]
    case .purgeCacheEntries: return ["prefix"]
    case .healthz, .readyz, .metrics, .status, .cacheStats, .cacheEntry, .purgeCacheEntry, .purgeCache,
      .purgeRouteCache, .tokens,
      .setToken, .refreshToken, .invalidateToken, .jwtProviders, .refreshJWTKeys, .routes, .upstreams, .history,
      .reload, .dashboard, .openAPI:
      return []
    }
  }

  /// Endpoints that read nothing from the query and change nothing ignore it: health
  /// probes and browsers add cache-busting parameters, and Prometheus scrape configs add
  /// `params`; refusing those would break a probe for no gain.
  public var ignoresQuery: Bool {
    switch self {
    case .healthz, .readyz, .metrics, .dashboard, .openAPI: return true
    case .status, .cacheStats, .cacheEntries, .cacheEntry, .purgeCacheEntry, .purgeCacheEntries, .purgeCache,
      .purgeRouteCache, .tokens, .setToken, .refreshToken, .invalidateToken, .jwtProviders, .refreshJWTKeys, .routes,
      .upstreams, .history, .reload:
      return false
    }
  }
}

/// Why a query string was refused: the parameter it is about, and what is wrong with it.
public struct AdminQueryProblem: Error, Equatable, Sendable {
  public enum Kind: Equatable, Sendable {
    /// The endpoint does not read this parameter.
    case unknown(accepted: [String])
    /// Given more than once (which one would count is not obvious, so neither does).
    case repeated
    /// Its name or value is not valid percent-encoded UTF-8.
    case badEncoding
  }

  /// The parameter's name as decoded, or as sent when the name itself does not decode.
  public let parameter: String
  public let kind: Kind

  public var message: String {
    switch kind {
    case .unknown(let accepted):
      let takes =
        accepted.isEmpty
        ? "this endpoint takes no query parameters" : "this endpoint takes " + accepted.joined(separator: ", ")
      return "unknown query parameter \"\(parameter)\" (\(takes))"
    case .repeated:
      return "query parameter \"\(parameter)\" is given more than once"
    case .badEncoding:
      return "query parameter \"\(parameter)\" is not valid percent-encoded UTF-8"
    }
  }
}

/// The outcome of matching a request against the admin endpoints.
public enum AdminRouting: Equatable, Sendable {
  case endpoint(AdminEndpoint)
  case notFound
  case methodNotAllowed(allow: [String])
}

public enum AdminRouter {
  /// Matches `path` (without the query). Path segments are percent-decoded for names.
  public static func route(method: HTTPMethod, path: String) -> AdminRouting {
    let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map(String.init)
    let isGet = method == .get || method == .head
    func only(_ allowed: [String], _ endpoint: AdminEndpoint?) -> AdminRouting {
      guard let endpoint else { return .methodNotAllowed(allow: allowed) }
      return .endpoint(endpoint)
    }
    switch segments {
    case ["healthz"]: return only(["GET", "HEAD"], isGet ? .healthz : nil)
    case ["readyz"]: return only(["GET", "HEAD"], isGet ? .readyz : nil)
    case ["metrics"]: return only(["GET", "HEAD"], isGet ? .metrics : nil)
    case ["admin", ""], ["admin"]: return only(["GET", "HEAD"], isGet ? .dashboard : nil)
    case ["admin", "openapi.json"]: return only(["GET", "HEAD"], isGet ? .openAPI : nil)
    case ["admin", "status"]: return only(["GET", "HEAD"], isGet ? .status : nil)
    case ["admin", "routes"]: return only(["GET", "HEAD"], isGet ? .routes : nil)
    case ["admin", "upstreams"]: return only(["GET", "HEAD"], isGet ? .upstreams : nil)
    case ["admin", "history"]: return only(["GET", "HEAD"], isGet ? .history : nil)
    case ["admin", "tokens"]: return only(["GET", "HEAD"], isGet ? .tokens : nil)
    case ["admin", "reload"]: return only(["POST"], method == .post ? .reload : nil)
    case ["admin", "jwt"]: return only(["GET", "HEAD"], isGet ? .jwtProviders : nil)
    case let parts where parts.count == 4 && parts[0] == "admin" && parts[1] == "jwt" && parts[3] == "refresh":
      guard let name = percentDecoded(parts[2]), !name.isEmpty else { return .notFound }
      return only(["POST"], method == .post ? .refreshJWTKeys(name: name) : nil)
    case ["admin", "cache"]:
      if isGet { return .endpoint(.cacheStats) }
      return only(["GET", "HEAD", "DELETE"], method == .delete ? .purgeCache : nil)
    case ["admin", "cache", "entries"]:
      if isGet { return .endpoint(.cacheEntries) }
      return only(["GET", "HEAD", "DELETE"], method == .delete ? .purgeCacheEntries : nil)
    case let parts where parts.count == 4 && parts[0] == "admin" && parts[1] == "cache" && parts[2] == "entries":
      guard let id = percentDecoded(parts[3]), !id.isEmpty else { return .notFound }
      if isGet { return .endpoint(.cacheEntry(id: id)) }
      return only(["GET", "HEAD", "DELETE"], method == .delete ? .purgeCacheEntry(id: id) : nil)
    case let parts where parts.count == 4 && parts[0] == "admin" && parts[1] == "routes" && parts[3] == "cache":
      guard let name = percentDecoded(parts[2]), !name.isEmpty else { return .notFound }
      return only(["DELETE"], method == .delete ? .purgeRouteCache(name: name) : nil)
    case let parts where parts.count == 3 && parts[0] == "admin" && parts[1] == "tokens":
      guard let name = percentDecoded(parts[2]), !name.isEmpty else { return .notFound }
      return only(["PUT"], method == .put ? .setToken(name: name) : nil)
    case let parts where parts.count == 4 && parts[0] == "admin" && parts[1] == "tokens":
      guard let name = percentDecoded(parts[2]), !name.isEmpty else { return .notFound }
      switch parts[3] {
      case "refresh": return only(["POST"], method == .post ? .refreshToken(name: name) : nil)
      case "invalidate": return only(["POST"], method == .post ? .invalidateToken(name: name) : nil)
      default: return .notFound
      }
    default:
      return .notFound
    }
  }

  /// Decodes %XX escapes; nil for a malformed escape or bytes that are not UTF-8.
  public static func percentDecoded(_ text: String) -> String? {
    var bytes: [UInt8] = []
    var iterator = Array(text.utf8).makeIterator()
    while let byte = iterator.next() {
      if byte == 0x25 {
        guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
          return nil
        }
        bytes.append(high << 4 | low)
      } else {
        bytes.append(byte)
      }
    }
    return String(validating: bytes, as: UTF8.self)
  }

  /// Splits `a=1&b=x%20y` into decoded pairs (`+` is a space, as in forms), accepting only
  /// the names in `accepted`, each at most once, and only valid escapes: a value that does
  /// not decode is refused rather than read as empty (an empty `prefix` would match every
  /// entry). Empty pieces (`a=1&&b=2`, a trailing `&`) are skipped.
  public static func queryParameters(_ query: String, accepted: [String]) -> Result<
    [String: String], AdminQueryProblem
  > {
    var items: [String: String] = [:]
    for pair in query.split(separator: "&") {
      let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      guard let name = percentDecoded(String(parts[0]).replacingPlus()) else {
        return .failure(AdminQueryProblem(parameter: String(parts[0]), kind: .badEncoding))
      }
      guard accepted.contains(name) else {
        return .failure(AdminQueryProblem(parameter: name, kind: .unknown(accepted: accepted)))
      }
      guard items[name] == nil else { return .failure(AdminQueryProblem(parameter: name, kind: .repeated)) }
      guard let value = parts.count > 1 ? percentDecoded(String(parts[1]).replacingPlus()) : "" else {
        return .failure(AdminQueryProblem(parameter: name, kind: .badEncoding))
      }
      items[name] = value
    }
    return .success(items)
  }

  package static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: return byte - 0x30
    case 0x41...0x46: return byte - 0x37
    case 0x61...0x66: return byte - 0x57
    default: return nil
    }
  }
}

extension String {
  fileprivate func replacingPlus() -> String {
    String(decoding: utf8.map { $0 == 0x2B ? 0x20 : $0 }, as: UTF8.self)
  }
}
