import GatehouseAdmin
import GatehouseCompression
import GatehouseConfig
import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseJSON
import GatehouseNet

#if canImport(Glibc)
  import Glibc
#endif

/// Everything the loops need to serve requests under one config, compiled once and never
/// changed: routes with their header plans and stub answers, upstreams with resolved
/// addresses. Loops hold a reference and read it without locks; a reload builds a new one
/// and hands it to each loop ("build, then freeze").
public final class GatewaySnapshot: Sendable {
  public let config: GatehouseConfig
  public let routeTable: RouteTable
  let routePlans: [RoutePlan]
  let upstreamPlans: [UpstreamPlan]
  let limits: HTTPLimits
  let headerTimeout: Duration
  let idleTimeout: Duration
  /// The two timeouts above in nanoseconds, for the per-request deadlines.
  let headerTimeoutNanoseconds: UInt64
  let idleTimeoutNanoseconds: UInt64
  /// `limits.body_timeout_ms`, counted from the request head.
  let bodyTimeoutNanoseconds: UInt64
  /// `limits.websocket_idle_timeout_ms`: a tunnel silent both ways this long closes.
  let webSocketIdleNanoseconds: UInt64
  /// `limits.body_buffer_bytes`.
  let bodyBufferBytes: Int
  /// `limits.buffered_bytes`, for the whole process.
  let bufferedBytes: Int
  let drainTimeout: Duration
  /// What each listener (by configured address) speaks besides HTTP/1.1.
  let listenerProtocols: [String: ListenerProtocols]
  /// `limits.http2`, for the codec of each HTTP/2 connection.
  let http2Settings: HTTP2Settings
  let accessLogEnabled: Bool
  /// `log.trusted_proxies` and `log.mask_query`, for access lines.
  let trustedProxies: TrustedProxies
  let queryMask: QueryMask
  /// Client keys (Config/README.md `clients`) and their shared token buckets. A reload carries each
  /// key's bucket level over (see `RateLimiter.init`).
  let clients: ClientKeys
  let rateLimiter: RateLimiter
  /// The admin token (as a digest) and `metrics_public`: the admin API reads them from the
  /// current snapshot per request, so they follow reloads.
  let adminAccess: AdminAccess
  /// `shared` (Docs/shared-tier.md); nil without a shared tier.
  let sharedTier: SharedTierPlan?

  /// Builds the snapshot; fails when an upstream host name cannot be resolved. `previous`
  /// is the snapshot a reload replaces: state that must outlive a reload comes from it.
  /// `knownAddresses`: names looked up since (`UpstreamResolution`), not looked up again.
  init(
    config: GatehouseConfig, previous: GatewaySnapshot? = nil, knownAddresses: [String: [SocketAddress]] = [:]
  ) throws(SnapshotError) {
    self.config = config
    routeTable = RouteTable(config: config)
    // Names are looked up with the configured resolver (c-ares), all at once; the system
    // resolver only answers those it does not know (`UpstreamPlan.endpointAddresses`).
    var known = knownAddresses
    let names = Set(config.upstreams.flatMap(UpstreamPlan.writtenHosts).filter(EndpointSource.isName))
      .subtracting(known.keys)
    for (name, addresses) in UpstreamResolution.lookUpNow(names, with: config.resolver) { known[name] = addresses }
    var upstreams: [UpstreamPlan] = []
    for upstream in config.upstreams {
      upstreams.append(try UpstreamPlan(upstream, known: known))
    }
    upstreamPlans = upstreams
    sharedTier = try SharedTierPlan.make(config, previous: previous?.sharedTier)
    let globalRules = HeaderPlan.Rules(config.headers)
    // Client keys identify callers to the gateway only; they never reach a backend.
    let clientKeyHeaders = config.clients.keys.isEmpty && !config.clients.required ? [] : ["X-Api-Key"]
    let cacheScopes = RouteJWTPlan.makeCacheScopes(count: config.jwt.providers.count)
    routePlans = config.routes.map { route in
      RoutePlan(
        route, upstreamIndex: route.upstream.flatMap { name in upstreams.firstIndex { $0.name == name } },
        globalRules: globalRules,
        tokenIndex: route.token.flatMap { name in config.tokens.firstIndex { $0.name == name } },
        alsoDropped: clientKeyHeaders, providers: config.jwt.providers, cacheScopes: cacheScopes)
    }
    limits = HTTPLimits(
      maxHeaderBytes: config.limits.maxHeaderBytes, maxHeaderCount: 100,
      maxLineLength: min(8192, config.limits.maxHeaderBytes),
      maxBodyBytes: Int64(config.limits.maxBodyBytes))
    headerTimeout = config.limits.headerTimeout
    idleTimeout = config.limits.idleTimeout
    headerTimeoutNanoseconds = EventLoop.nanoseconds(of: config.limits.headerTimeout)
    idleTimeoutNanoseconds = EventLoop.nanoseconds(of: config.limits.idleTimeout)
    listenerProtocols = Dictionary(
      config.listen.map { ($0.address.description, ListenerProtocols(http2: $0.http2, h2c: $0.h2c)) },
      uniquingKeysWith: { first, _ in first })
    let http2 = config.limits.http2
    http2Settings = HTTP2Settings(
      maxConcurrentStreams: http2.maxConcurrentStreams, initialWindowBytes: http2.initialWindowBytes,
      maxHeaderListBytes: http2.maxHeaderListBytes)
    bodyTimeoutNanoseconds = EventLoop.nanoseconds(of: config.limits.bodyTimeout)
    webSocketIdleNanoseconds = EventLoop.nanoseconds(of: config.limits.websocketIdleTimeout)
    bodyBufferBytes = config.limits.bodyBufferBytes
    bufferedBytes = config.limits.bufferedBytes
    drainTimeout = config.limits.drainTimeout
    accessLogEnabled = config.log.access == .stdout
    trustedProxies = TrustedProxies(entries: config.log.trustedProxies)
    queryMask = QueryMask(names: config.log.maskQuery)
    clients = ClientKeys(config.clients)
    adminAccess = AdminAccess(config.admin)
    rateLimiter = RateLimiter(
      limits: config.clients.keys.compactMap { key in
        key.rateLimit.map { RateLimiter.Limit(perSecond: $0.perSecond, burst: $0.burst, keyID: key.id) }
      }, nowMs: RateLimiter.clockMs(), previous: previous?.rateLimiter)
  }
}

/// Why a config could not be turned into a running snapshot.
public struct SnapshotError: Error, Sendable, CustomStringConvertible {
  public let description: String
}

extension HeaderPlan.Rules {
  init(_ rules: HeaderRules) {
    self.init(
      set: rules.set.map { ($0.name, $0.value) }, remove: rules.remove, pass: rules.pass, forwarded: rules.forwarded)
  }
}

/// One route, ready for the request path.
///
/// A class, not a struct: the request path reads plans out of `routePlans` several times per
/// request, and copying a struct of this many strings and arrays costs a reference-count
/// operation per field each time; a reference costs one.
final class RoutePlan: Sendable {
  let name: String
  let upstreamIndex: Int?
  let headerPlan: HeaderPlan
  let stubMode: StubMode
  let stub: StubAnswer
  let envelopeEnabled: Bool
  /// Compiled envelope settings; nil when the route passes bodies through as they are.
  let envelope: EnvelopePolicy?
  /// Compiled cache settings; nil for routes without a `cache` block.
  let cache: CachePolicy?
  let upstreamName: String?
  /// How the route uses its token; nil for routes without one.
  let token: TokenUse?
  /// What sets this route's requests apart for the backend beyond path, query and `Host`:
  /// the token it injects and the fields it sets (as a digest: set values may be secrets).
  /// Part of the cache key, so two routes to one upstream path that send different
  /// credentials or tenants never serve each other's answers; nil when there is neither.
  let cacheScope: String?
  /// The route's `jwt` block; nil for routes that do not verify tokens.
  let jwt: RouteJWTPlan?
  /// `websocket`: the route takes WebSocket handshakes (Docs/websockets.md).
  let websocket: Bool

  init(
    _ route: RouteConfig, upstreamIndex: Int?, globalRules: HeaderPlan.Rules, tokenIndex: Int?,
    alsoDropped: [String], providers: [JWTProviderConfig] = [], cacheScopes: [Int] = []
  ) {
    name = route.name
    self.upstreamIndex = upstreamIndex
    websocket = route.websocket
    var layers = [globalRules, HeaderPlan.Rules(route.headers)]
    // A route with a token sends it as the only value of its header: what the client sent
    // there, and a top-level `set` of it, give way to the token (a route's own `set` of it
    // is refused by `check`). Removing it last does both; the token line is added after.
    if route.token != nil { layers.append(HeaderPlan.Rules(remove: [route.tokenHeader])) }
    // Docs/jwt.md: the client's JWT never reaches the backend, nor a client's own copy of a
    // field that carries a verified claim (any spelling: the look-alikes of removed names
    // are dropped too); the claims' lines are added per request.
    if let jwtRoute = route.jwt, let index = providers.firstIndex(where: { $0.name == jwtRoute.provider }) {
      let provider = providers[index]
      jwt = RouteJWTPlan(
        jwtRoute, provider: provider, providerIndex: index,
        cacheScope: cacheScopes[index],
        cache: route.cache)
      layers.append(HeaderPlan.Rules(remove: ["Authorization"] + RouteJWTPlan.claimHeaders(provider)))
    } else {
      jwt = nil
    }
    headerPlan = HeaderPlan(
      layers: layers, alsoDropped: alsoDropped, dropsAPIKeyAuthorization: !alsoDropped.isEmpty,
      lookAlikesOf: route.cache?.vary ?? [],
      // What the gateway keeps or wraps it must be able to decode, and give each client in
      // a coding it accepts: gzip or none (Varnish normalizes the same way).
      // A route with a token asks for no coding either where it passes bodies through: an
      // error answer may echo the token, and it is masked as it streams, which a gzip body
      // would defeat.
      normalizingAcceptEncoding: route.envelope.enabled || route.cache != nil || route.token != nil)
    stubMode = route.stub.mode
    stub = StubAnswer(route.stub, envelope: route.envelope)
    envelopeEnabled = route.envelope.enabled
    envelope = route.envelope.enabled ? EnvelopePolicy(route.envelope) : nil
    cache = route.cache.map(CachePolicy.init)
    upstreamName = route.upstream
    self.token = route.token.map { TokenUse(name: $0, index: tokenIndex, route: route) }
    var scope: [String] = []
    if let token = route.token { scope.append("token=\(token)") }
    if !headerPlan.setLines.isEmpty {
      scope.append("set=" + TokenFingerprint.sha256Hex(headerPlan.setLines).prefix(16))
    }
    cacheScope = scope.isEmpty ? nil : scope.joined(separator: " ")
  }
}

/// A route's token, compiled: the header line around the value, and how a rejection by
/// the backend is recognized (Config/README.md `invalid_token`). A class for the same reason as
/// `RoutePlan`: it is read on every request of a route with a token.
final class TokenUse: Sendable {
  let name: String
  /// The route's name: rejections are counted, and remembered per endpoint, by route.
  let routeName: String
  /// Where the token should be in the published values (config order), checked by name.
  let index: Int?
  /// `Authorization: Bearer ` — the header name and the format's text before `{token}`.
  let linePrefix: [UInt8]
  /// The format's text after `{token}`, then CRLF.
  let lineSuffix: [UInt8]
  /// A handful at most (usually just 401): a linear search beats hashing the status on
  /// every answer.
  let invalidStatuses: [Int]
  let bodyField: JSONKeyPath?
  /// `body_values`, serialized, compared with the raw bytes of `body_field`'s value.
  let bodyValues: [[UInt8]]

  init(name: String, index: Int?, route: RouteConfig) {
    self.name = name
    self.index = index
    routeName = route.name
    linePrefix = Array("\(route.tokenHeader): \(route.tokenFormat.prefix)".utf8)
    lineSuffix = Array("\(route.tokenFormat.suffix)\r\n".utf8)
    invalidStatuses = Array(Set(route.invalidToken.statuses)).sorted()
    bodyField = route.invalidToken.bodyField.flatMap { JSONKeyPath($0) }
    bodyValues = route.invalidToken.bodyValues.map { $0.serializedBytes() }
  }

  /// Whether a complete answer's body says the token was rejected, read as its
  /// `Content-Encoding` says: the one check a client's exchange and a background refresh share.
  func answerRejects(_ head: HTTPResponseHead, body: [UInt8]) -> Bool {
    bodyRejects(body, contentEncoding: head.headers.firstValue(lowercaseName: "content-encoding"))
  }

  /// Whether a JSON body says the token was rejected. A gzip body is looked at decoded
  /// (up to `maxDecoded` bytes), as the envelope would see it.
  func bodyRejects(_ raw: [UInt8], contentEncoding: ArraySlice<UInt8>? = nil, maxDecoded: Int = 1 << 20) -> Bool {
    guard let bodyField, !bodyValues.isEmpty else { return false }
    var body = raw
    if let contentEncoding, EnvelopeRenderer.isGzip(contentEncoding), !raw.isEmpty {
      guard let decoded = try? GzipDecoder.decode(raw, maxOutputBytes: maxDecoded) else { return false }
      body = decoded
    }
    // Read as the envelope reads it (a byte order mark skipped, lone surrogates allowed), so
    // a rejection the envelope would wrap as a success is recognized.
    if body.starts(with: EnvelopeRenderer.byteOrderMark) { body.removeFirst(EnvelopeRenderer.byteOrderMark.count) }
    guard body.withUnsafeBytes({ JSONValidator.isValid($0, options: EnvelopeRenderer.validation) }),
      let range = JSONDocument.range(of: bodyField, in: body)
    else { return false }
    let value = Array(body[range])
    return bodyValues.contains(value)
  }
}

/// A stub's answer, rendered once: status and body bytes (already enveloped when the
/// route's envelope is on).
struct StubAnswer: Sendable {
  let status: Int
  let body: [UInt8]
  let delay: Duration

  init(_ stub: StubConfig, envelope: EnvelopeConfig) {
    delay = stub.delay
    guard envelope.enabled else {
      status = stub.status
      body = stub.body ?? []
      return
    }
    status = envelope.status == .always200 ? 200 : stub.status
    if (200..<300).contains(stub.status) {
      var bytes = Array(#"{"code":0,"datas":"#.utf8)
      let whole = stub.body ?? Array("null".utf8)
      // A stub stands in for the backend, so its body goes through `key_path` as the
      // backend's would (`check` warns when the body does not have it).
      if let keyPath = envelope.keyPath.flatMap({ JSONKeyPath($0.joined(separator: ".")) }) {
        if let range = JSONDocument.range(of: keyPath, in: whole) {
          bytes.append(contentsOf: whole[range])
        } else {
          bytes.append(contentsOf: "null".utf8)
        }
      } else {
        bytes.append(contentsOf: whole)
      }
      bytes.append(contentsOf: #","message":""}"#.utf8)
      body = bytes
    } else {
      body = GatewayAnswer.errorBody(status: stub.status, message: HTTPStatusPhrase.reason(for: stub.status))
    }
  }
}

/// One endpoint of an upstream as loaded: its address and `weight`.
struct UpstreamEndpointPlan: Sendable, Equatable {
  let address: SocketAddress
  let weight: Int

  /// The endpoint's identity in its `EndpointSet`: its address as text.
  var endpointAddress: EndpointAddress { EndpointAddress(address.description, weight: weight) }
}

/// Where some of an upstream's endpoints come from: one `servers` entry, or the url's host
/// without `servers`; a name stands for all its addresses, each an endpoint of `weight`.
struct EndpointSource: Sendable, Equatable {
  /// The host as written (a name, or an IP literal without brackets).
  let host: String
  let port: UInt16
  let weight: Int
  /// Whether the host is a name to look up again (not an IP literal, not `localhost`).
  let isName: Bool
  /// Its addresses when the config was loaded.
  let addresses: [SocketAddress]

  /// Whether `host` (lowercased) is a name to look up: not an IP literal, not `localhost`
  /// (one endpoint, its first address, however it resolves).
  static func isName(_ host: String) -> Bool {
    (try? SocketAddress(parsing: host.contains(":") ? "[\(host)]:0" : "\(host):0")) == nil
      && host != "localhost" && !host.hasSuffix(".localhost")
  }
}

/// One upstream, with its endpoints' addresses resolved.
struct UpstreamPlan: Sendable {
  let name: String
  /// Where the endpoints come from, in config order; `endpoints` are their addresses.
  let sources: [EndpointSource]
  /// `resolve_s`: names are looked up again at least this often.
  let resolveSeconds: Int
  /// The endpoints: each of `servers` (a name stands for all its addresses), else every
  /// address of the url's host. Never empty.
  let endpoints: [UpstreamEndpointPlan]
  /// The first endpoint's address (the health checks' target).
  var address: SocketAddress { endpoints[0].address }
  /// `balance`, `hash_by`, `outlier` and `retry`.
  let balance: BalancePolicy
  let hashKey: HashKeySource
  let outlier: OutlierConfig
  let retryRule: RetryRule
  let retryBudgetPercent: Int
  let hostHeader: [UInt8]
  let connectTimeout: Duration
  let answerTimeout: Duration
  let answerTimeoutNanoseconds: UInt64
  let maxIdleConnections: Int
  let pipelineDepth: Int
  /// The TLS client settings of an `https` upstream, built once per config load (it
  /// reads CA and certificate files); nil for `http`.
  let tls: TLSClientOptions?
  /// `verify: false` (logged as a warning at load).
  let tlsVerifyDisabled: Bool
  /// 0 when the upstream has no `circuit` block.
  let circuitFailures: Int
  let circuitOpen: Duration
  /// `circuit.count_5xx`: a 5xx answer counts against its route's breaker.
  let circuitCounts5xx: Bool
  /// `max_connections`, for the whole process (each loop's pool takes its share).
  let maxConnections: Int
  /// How long a request waits for a connection when `max_connections` are all busy.
  let queueTimeoutNanoseconds: UInt64

  /// `known`: addresses of names looked up since the config was loaded (by name), used
  /// instead of a lookup at this load (a reload runs on the control loop, which must not
  /// wait for the system resolver).
  init(_ upstream: UpstreamConfig, known: [String: [SocketAddress]] = [:]) throws(SnapshotError) {
    name = upstream.name
    resolveSeconds = upstream.resolveSeconds
    let written: [(host: String, port: UInt16, weight: Int)] =
      upstream.servers?.map { ($0.address.hostText, $0.address.port, $0.weight) }
      ?? [(upstream.url.host, upstream.url.port, 1)]
    var sources: [EndpointSource] = []
    for (host, port, weight) in written {
      let lowercased = host.lowercased()
      let isName = EndpointSource.isName(lowercased)
      let addresses: [SocketAddress]
      if isName, let ips = known[lowercased], !ips.isEmpty {
        addresses = ips.map { $0.withPort(port) }
      } else {
        addresses = try Self.endpointAddresses(host: host, port: port)
      }
      sources.append(EndpointSource(host: lowercased, port: port, weight: weight, isName: isName, addresses: addresses))
    }
    self.sources = sources
    self.endpoints = Self.endpoints(of: sources)
    balance = BalancePolicy(configValue: upstream.balance.configValue) ?? .default
    hashKey = HashKeySource(configValue: upstream.hashKey.configValue) ?? .client
    outlier = upstream.outlier
    retryRule = RetryRule(
      on: RetryConditions(configValues: upstream.retry.on.map(\.configValue)) ?? .default,
      attempts: upstream.retry.attempts)
    retryBudgetPercent = upstream.retry.budgetPercent
    hostHeader = Array(upstream.url.hostHeader.utf8)
    connectTimeout = upstream.connectTimeout
    answerTimeout = upstream.answerTimeout
    answerTimeoutNanoseconds = EventLoop.nanoseconds(of: upstream.answerTimeout)
    maxIdleConnections = upstream.maxIdleConnections
    pipelineDepth = upstream.pipelineDepth
    // Without a `circuit` block an upstream still gets a mild breaker, as operators expect
    // from nginx's passive checks: after 3 failures in a row it is skipped for 1 s, so an
    // outage costs one connect attempt per second instead of one per request.
    tlsVerifyDisabled = upstream.url.scheme == .https && upstream.tls?.verify == false
    if upstream.url.scheme == .https {
      do {
        tls = try Self.clientTLS(
          upstream.tls, host: upstream.url.host, handshakeTimeout: upstream.connectTimeout + .seconds(5))
      } catch {
        throw SnapshotError(description: "upstreams.\(upstream.name).tls: \(error)")
      }
    } else {
      tls = nil
    }
    circuitFailures = upstream.circuit?.failures ?? Self.defaultCircuitFailures
    circuitOpen = upstream.circuit?.openDuration ?? Self.defaultCircuitOpen
    circuitCounts5xx = upstream.circuit?.count5xx ?? false
    maxConnections = upstream.maxConnections
    queueTimeoutNanoseconds = EventLoop.nanoseconds(of: upstream.queueTimeout ?? upstream.connectTimeout)
  }

  /// A client context per upstream: the system trust store or `tls.ca`, verification on
  /// unless `verify: false`, the name checked (and sent as SNI) is `tls.server_name` or the
  /// URL's host, and an optional client certificate for mutual TLS.
  static func clientTLS(_ config: UpstreamTLSConfig?, host: String, handshakeTimeout: Duration) throws(TLSError)
    -> TLSClientOptions
  {
    let context = try TLSContext(
      client: TLSClientConfiguration(
        caPath: config?.caPath, verify: config?.verify ?? true, certificateChainPath: config?.certificatePath,
        privateKeyPath: config?.keyPath))
    return TLSClientOptions(
      context: context, serverName: config?.serverName ?? host, handshakeTimeout: handshakeTimeout)
  }

  static let defaultCircuitFailures = CircuitBreakerConfig.standard.failures
  static let defaultCircuitOpen = CircuitBreakerConfig.standard.openDuration

  /// IP literals are used as they are; names go through the system resolver once per
  /// config load (never on the request path): every IPv4 and IPv6 address, in the order the
  /// resolver gives them, without repeats; never empty.
  /// The hosts `upstream`'s endpoints are written with, lowercased.
  static func writtenHosts(_ upstream: UpstreamConfig) -> [String] {
    (upstream.servers?.map(\.address.hostText) ?? [upstream.url.host]).map { $0.lowercased() }
  }

  /// The endpoints of `sources` in order, each address once (the first weight stands).
  static func endpoints(of sources: [EndpointSource], addresses: [[SocketAddress]]? = nil) -> [UpstreamEndpointPlan] {
    var endpoints: [UpstreamEndpointPlan] = []
    for (index, source) in sources.enumerated() {
      for address in addresses?[index] ?? source.addresses where !endpoints.contains(where: { $0.address == address }) {
        endpoints.append(UpstreamEndpointPlan(address: address, weight: source.weight))
      }
    }
    return endpoints
  }

  /// The endpoints a host stands for: every address it resolves to, except `localhost`,
  /// which is one endpoint (its first address, as before fleets): a backend on the machine
  /// usually listens on one of 127.0.0.1 and ::1, and the other would only cost failed tries.
  static func endpointAddresses(host: String, port: UInt16) throws(SnapshotError) -> [SocketAddress] {
    let all = try resolveAll(host: host, port: port)
    let lowercased = host.lowercased()
    return lowercased == "localhost" || lowercased.hasSuffix(".localhost") ? [all[0]] : all
  }

  /// The first of `resolveAll`.
  static func resolve(host: String, port: UInt16) throws(SnapshotError) -> SocketAddress {
    try resolveAll(host: host, port: port)[0]
  }

  static func resolveAll(host: String, port: UInt16) throws(SnapshotError) -> [SocketAddress] {
    let literal = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    if let address = try? SocketAddress(parsing: literal) { return [address] }
    var hints = addrinfo()
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_family = AF_UNSPEC
    var result: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(host, nil, &hints, &result)
    guard status == 0, let first = result else {
      throw SnapshotError(description: "cannot resolve upstream host \(host): \(String(cString: gai_strerror(status)))")
    }
    defer { freeaddrinfo(result) }
    var addresses: [SocketAddress] = []
    func add(_ address: SocketAddress?) {
      if let address, !addresses.contains(address) { addresses.append(address) }
    }
    var cursor: UnsafeMutablePointer<addrinfo>? = first
    while let entry = cursor {
      var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
      if entry.pointee.ai_family == AF_INET {
        entry.pointee.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
          var address = sin.pointee.sin_addr
          _ = inet_ntop(AF_INET, &address, &text, socklen_t(text.count))
        }
        add(try? SocketAddress(parsing: "\(Self.text(text)):\(port)"))
      } else if entry.pointee.ai_family == AF_INET6 {
        entry.pointee.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
          var address = sin6.pointee.sin6_addr
          _ = inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
        }
        add(try? SocketAddress(parsing: "[\(Self.text(text))]:\(port)"))
      }
      cursor = entry.pointee.ai_next
    }
    guard !addresses.isEmpty else {
      throw SnapshotError(description: "upstream host \(host) has no IPv4 or IPv6 address")
    }
    return addresses
  }

  private static func text(_ chars: [CChar]) -> String {
    String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}

/// The protocols a listener takes besides HTTP/1.1 (Docs/http2.md).
struct ListenerProtocols: Sendable, Equatable {
  /// TLS: ALPN offers `h2`.
  let http2: Bool
  /// Cleartext: HTTP/2 with prior knowledge.
  let h2c: Bool

  /// Whether a connection on this listener may speak HTTP/2.
  func allowsHTTP2(secure: Bool) -> Bool { secure ? http2 : h2c }
}
