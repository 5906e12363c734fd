import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import Synchronization

/// What the admin endpoints read and change in the running gateway. Implemented by
/// `GatewayAdministration`; every completion runs on the admin loop.
package protocol AdminBackend: AnyObject, Sendable {
  var isReady: Bool { get }
  /// The admin token and `metrics_public` of the running config (they follow reloads).
  var adminAccess: AdminAccess { get }
  /// The admin connections' timeouts, from the running config's `limits`.
  var adminConnectionLimits: AdminConnectionLimits { get }
  func statusDocument(completion: @escaping @Sendable (JSONValue) -> Void)
  func routesDocument() -> JSONValue
  func upstreamsDocument(completion: @escaping @Sendable (JSONValue) -> Void)
  func historyDocument(completion: @escaping @Sendable (JSONValue) -> Void)
  func metricsText(completion: @escaping @Sendable (String) -> Void)
  func reload(completion: @escaping @Sendable (Result<Void, ReloadFailure>) -> Void)
  /// The token endpoints; the token manager lives on the control loop.
  func tokens(_ endpoint: AdminEndpoint, body: [UInt8], completion: @escaping @Sendable (AdminAnswer) -> Void)
  /// The identity provider endpoints; the keyring lives on the control loop.
  func jwt(_ endpoint: AdminEndpoint, completion: @escaping @Sendable (AdminAnswer) -> Void)
  /// The cache endpoints; store calls block, so they run off the event loops.
  func cache(
    _ endpoint: AdminEndpoint, query: [String: String], completion: @escaping @Sendable (AdminAnswer) -> Void)
}

/// Why a reload was refused: the `check` errors, one per line.
public struct ReloadFailure: Error, Sendable {
  public let errors: [String]

  package init(errors: [String]) {
    self.errors = errors
  }
}

/// Serves the admin listener: authorization, routing and the answers of Docs/admin-openapi.json.
/// Confined to the admin loop.
package final class AdminService: @unchecked Sendable {
  package let loop: EventLoop
  let logger: Logger
  /// The gateway's administration; weak because the gateway owns both it and this service.
  package weak var backend: (any AdminBackend)?
  private var sessions: [ObjectIdentifier: AdminSession] = [:]
  private var requestIDs = RequestIDGenerator()
  var listener: TCPListener?
  /// `admin.tls`: when set, every accepted admin connection speaks TLS only (a plain HTTP
  /// request is never answered). Replaced on reload; admin loop only.
  package var tls: TLSContext?
  /// The running config's timeouts, read again at every sweep so a reload applies within
  /// one sweep (reading them per request would take the gateway's state lock each time).
  private(set) var limits = AdminConnectionLimits.defaults
  private var sweepTimer: TimerHandle?
  /// One line per 10 s at most about refused connections: a flood must not flood the log.
  private var refusals = LogThrottle(intervalNanoseconds: 10_000_000_000)
  /// The same for connections refused by the per-peer cap (its own, so neither hides the other).
  private var peerRefusals = LogThrottle(intervalNanoseconds: 10_000_000_000)
  /// The open sessions, in all and per peer address, for the caps of `AdminConnectionLimits`.
  private var counts = AdminConnectionCounts()
  /// Failed authentications, for their throttled warning.
  private var authFailures = AdminAuthFailures()
  /// Failed authentications since start, for `gatehouse_admin_auth_failures_total`: read
  /// by the metrics on another thread, hence atomic.
  package let authFailureCount = Atomic<Int>(0)
  /// The dashboard's answer, made once at start (its policy hashes the page's script).
  private let dashboard = AdminAnswer(
    status: 200, contentType: "text/html; charset=utf-8", body: Array(AdminDashboard.html.utf8),
    extraHeaders: [("Content-Security-Policy", AdminDashboard.contentSecurityPolicy)])

  /// How often admin deadlines are checked; they may fire up to this late.
  static let sweepInterval: Duration = .milliseconds(100)

  package init(loop: EventLoop, logger: Logger) {
    self.loop = loop
    self.logger = logger
  }

  /// Starts accepting on `listener` and checking deadlines. Admin loop only.
  package func start(_ listener: TCPListener, tls: TLSContext?) throws(SystemError) {
    self.listener = listener
    self.tls = tls
    if let backend { limits = backend.adminConnectionLimits }
    try listener.startAccepting(on: loop) { [self] socket in accept(socket) }
    scheduleSweep()
  }

  func accept(_ socket: TCPSocket) {
    let peer = socket.peerAddress
    switch counts.admit(peer) {
    case .accept:
      break
    case .refuseTotal:
      socket.close()
      if let earlier = refusals.admit(now: loop.iterationTime) {
        logger.warn(
          "too many admin connections; closing new ones",
          ["limit": .int(AdminConnectionLimits.maxConnections), "refused_before": .int(earlier)])
      }
      return
    case .refusePeer:
      socket.close()
      if let earlier = peerRefusals.admit(now: loop.iterationTime) {
        logger.warn(
          "too many admin connections from one address; closing new ones",
          [
            "limit": .int(AdminConnectionLimits.maxConnectionsPerPeer), "peer": .string(peer?.hostText ?? "unknown"),
            "refused_before": .int(earlier),
          ])
      }
      return
    }
    let session = AdminSession(service: self)
    session.peer = peer
    // Listed first, so a close reported from inside the connection's set-up releases it once.
    sessions[ObjectIdentifier(session)] = session
    do {
      session.start(try BufferedConnection(socket: socket, loop: loop, delegate: session.server, tls: tls))
    } catch {
      sessionClosed(session)
      socket.close()
    }
  }

  private func scheduleSweep() {
    sweepTimer = loop.scheduleTimer(after: Self.sweepInterval) { [weak self] in
      guard let self, self.listener != nil else { return }
      if let backend = self.backend { self.limits = backend.adminConnectionLimits }
      if let fields = self.authFailures.flush(now: self.loop.iterationTime) {
        self.logger.log(.warn, AdminAuthFailures.message, fields: fields)
      }
      for session in Array(self.sessions.values) { session.checkDeadline() }
      self.scheduleSweep()
    }
  }

  func sessionClosed(_ session: AdminSession) {
    guard sessions.removeValue(forKey: ObjectIdentifier(session)) != nil else { return }
    counts.release(session.peer)
  }

  func nextRequestID() -> [UInt8] { requestIDs.next() }

  package func closeAll() {
    listener?.close()
    listener = nil
    if let sweepTimer { loop.cancelTimer(sweepTimer) }
    sweepTimer = nil
    for session in sessions.values { session.connection?.close() }
  }

  /// Answers one request; `completion` runs on the admin loop, possibly later. `requestID`
  /// is the answer's `X-Request-Id`, named in the log line of a state-changing call; `peer`
  /// is the client's address, named in the warning about failed authentications.
  func handle(
    head: HTTPRequestHead, body: [UInt8], requestID: [UInt8], peer: SocketAddress?,
    completion: @escaping (AdminAnswer) -> Void
  ) {
    let target = head.targetString
    let path = String(target.prefix { $0 != "?" })
    let query = target.firstIndex(of: "?").map { String(target[target.index(after: $0)...]) } ?? ""
    guard let backend else {
      completion(.error(503, "shutting down"))
      return
    }
    let endpoint: AdminEndpoint
    let routing = AdminRouter.route(method: head.method, path: path)
    // Without the token, anything but the open endpoints gets 401 and nothing else: not
    // even whether the path or method exists. The access rules are read per request from
    // the running config, so a reloaded `admin.token` replaces the old one at once.
    // Two Authorization headers are refused, not resolved: proxies in front disagree about
    // which one counts (first, last, joined), and a token check must not depend on that.
    let authorizations = head.headers.values(for: "authorization")
    let authorization = authorizations.count == 1 ? authorizations[0] : nil
    if !backend.adminAccess.allows(routing, authorizationHeader: authorization) {
      authenticationFailed(peer: peer)
      completion(Self.unauthorized)
      return
    }
    switch routing {
    case .notFound:
      completion(.error(404, "no admin endpoint \(head.method) \(path)"))
      return
    case .methodNotAllowed(let allow):
      var answer = AdminAnswer.error(405, "method \(head.method) not allowed here")
      answer.extraHeaders = [("Allow", allow.joined(separator: ", "))]
      completion(answer)
      return
    case .endpoint(let matched):
      endpoint = matched
    }
    let parsed: Result<[String: String], AdminQueryProblem> =
      endpoint.ignoresQuery ? .success([:]) : AdminRouter.queryParameters(query, accepted: endpoint.queryParameters)
    var finish = completion
    // Every authorized call to a state-changing endpoint gets one line once answered,
    // refused ones included (a bad query, an unknown token): that is what was attempted.
    if let audit = AdminAudit(endpoint, parameters: (try? parsed.get()) ?? [:]) {
      let logger = self.logger
      let id = String(decoding: requestID, as: UTF8.self)
      finish = { answer in
        logger.log(.info, "admin action", fields: audit.fields(requestID: id, answer: answer))
        completion(answer)
      }
    }
    switch parsed {
    case .success(let parameters):
      answer(endpoint, parameters: parameters, body: body, backend: backend, completion: finish)
    case .failure(let problem):
      finish(.badParameter(problem.parameter, problem.message))
    }
  }

  /// Answers an authorized request for `endpoint` whose query was accepted.
  private func answer(
    _ endpoint: AdminEndpoint, parameters: [String: String], body: [UInt8], backend: any AdminBackend,
    completion: @escaping (AdminAnswer) -> Void
  ) {
    let respond = onLoop(completion)
    switch endpoint {
    case .healthz:
      completion(.json(.object([("status", .string("ok"))])))
    case .readyz:
      completion(
        backend.isReady
          ? .json(.object([("status", .string("ready"))]))
          : .json(.object([("status", .string("not ready"))]), status: 503))
    case .metrics:
      backend.metricsText { text in
        respond(
          AdminAnswer(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: Array(text.utf8)))
      }
    case .status:
      backend.statusDocument { respond(.json($0)) }
    case .routes:
      completion(.json(backend.routesDocument()))
    case .upstreams:
      backend.upstreamsDocument { respond(.json($0)) }
    case .history:
      backend.historyDocument { respond(.json($0)) }
    case .reload:
      backend.reload { result in
        switch result {
        case .success: respond(.json(.object([("reloaded", .bool(true))])))
        case .failure(let failure):
          respond(
            .json(
              .object([("error", .string("config refused")), ("errors", .array(failure.errors.map { .string($0) }))]),
              status: 400))
        }
      }
    case .dashboard:
      completion(dashboard)
    case .openAPI:
      completion(AdminAnswer(status: 200, body: Array(AdminOpenAPI.document.utf8)))
    case .cacheStats, .cacheEntries, .cacheEntry, .purgeCacheEntry, .purgeCacheEntries, .purgeCache, .purgeRouteCache:
      backend.cache(endpoint, query: parameters) { respond($0) }
    case .tokens, .setToken, .refreshToken, .invalidateToken:
      backend.tokens(endpoint, body: body) { respond($0) }
    case .jwtProviders, .refreshJWTKeys:
      backend.jwt(endpoint) { respond($0) }
    }
  }

  /// Counts a 401 and logs it, throttled. Only the peer's address goes in the line: never
  /// the `Authorization` value, which may be a real token sent to the wrong gateway.
  private func authenticationFailed(peer: SocketAddress?) {
    authFailureCount.add(1, ordering: .relaxed)
    if let fields = authFailures.record(peer: peer?.description, now: loop.iterationTime) {
      logger.log(.warn, AdminAuthFailures.message, fields: fields)
    }
  }

  static let unauthorized = AdminAnswer(
    status: 401, body: Array(#"{"error":"unauthorized"}"#.utf8), extraHeaders: [("WWW-Authenticate", "Bearer")])

  /// Wraps a completion so it runs on the admin loop whatever thread calls it.
  private func onLoop(_ completion: @escaping (AdminAnswer) -> Void) -> @Sendable (AdminAnswer) -> Void {
    nonisolated(unsafe) let completion = completion
    let loop = self.loop
    return { answer in
      loop.execute { completion(answer) }
    }
  }
}
