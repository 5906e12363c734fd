import GatehouseLogging

/// The log line of a state-changing admin call: which action, on what, and how it ended, so
/// an operator can tell who purged or reloaded what (the `admin action` line, Docs/behaviour.md). Only
/// names, ids, prefixes, counts and statuses go in: never a token value, the admin token,
/// a request body or an error message (which could quote a body).
struct AdminAudit {
  /// `cache purge`, `reload`, `token set`, `token refresh`, `token invalidate` or `jwt refresh`.
  let action: String
  /// What the action was aimed at (target and prefix or id, or the token's name).
  let subject: [LogField]

  /// Nil for the endpoints that change nothing. `parameters` are the call's accepted query
  /// parameters (empty when the query was refused).
  init?(_ endpoint: AdminEndpoint, parameters: [String: String]) {
    switch endpoint {
    case .purgeCache:
      action = "cache purge"
      subject = [("target", .string("all"))]
    case .purgeCacheEntries:
      action = "cache purge"
      subject = [("target", .string("prefix")), ("prefix", parameters["prefix"].map { .string($0) } ?? .null)]
    case .purgeRouteCache(let name):
      action = "cache purge"
      subject = [("target", .string("route")), ("route", .string(name))]
    case .purgeCacheEntry(let id):
      action = "cache purge"
      subject = [("target", .string("id")), ("id", .string(id))]
    case .reload:
      action = "reload"
      subject = []
    case .setToken(let name):
      action = "token set"
      subject = [("token", .string(name))]
    case .refreshToken(let name):
      action = "token refresh"
      subject = [("token", .string(name))]
    case .invalidateToken(let name):
      action = "token invalidate"
      subject = [("token", .string(name))]
    case .refreshJWTKeys(let name):
      action = "jwt refresh"
      subject = [("provider", .string(name))]
    case .healthz, .readyz, .metrics, .status, .cacheStats, .cacheEntries, .cacheEntry, .tokens, .jwtProviders,
      .routes, .upstreams, .history, .dashboard, .openAPI:
      return nil
    }
  }

  /// The line's fields once `answer` is known: the action, its subject, the answer's
  /// status and the facts the handler recorded (such as `purged`), and the request id that
  /// the answer's `X-Request-Id` carries.
  func fields(requestID: String, answer: AdminAnswer) -> [LogField] {
    [("action", .string(action))] + subject + [("status", .int(answer.status))] + answer.auditFacts + [
      ("request_id", .string(requestID))
    ]
  }
}
