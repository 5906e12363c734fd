import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging

/// Turns a parsed config document into a `GatehouseConfig`, reporting every problem it finds
/// to `diagnostics` rather than stopping at the first one.
///
/// The result is meaningful only when no issue was reported: invalid parts are left out or
/// replaced by defaults so that decoding can go on and find the other problems.
///
/// It reads the small top-level sections itself and hands `upstreams`, `tokens`, `routes` and
/// `headers` to `UpstreamDecoder`, `TokenDecoder`, `RouteDecoder` and `HeaderRulesDecoder`; all
/// report to the same diagnostics, in the order the keys are read.
struct ConfigDecoder {
  let diagnostics: ConfigDiagnostics
  let interpolation: EnvironmentInterpolation

  /// The defaults Config/REFERENCE.md states, used when a key is absent.
  enum Defaults {
    static let listen = "127.0.0.1:8080"
    static let adminListen = "127.0.0.1:9901"
    static let storePath = "var/gatehouse.sqlite"
    static let storeMaxBytes = 256 << 20
    static let maxConnections = 10_000
    static let maxHeaderBytes = 16 << 10
    static let maxBodyBytes = 10 << 20
    static let headerTimeout = Duration.milliseconds(10_000)
    static let idleTimeout = Duration.milliseconds(60_000)
    static let drainTimeout = Duration.milliseconds(10_000)
    static let bodyTimeout = Duration.milliseconds(60_000)
    static let bodyBufferBytes = 64 << 10
    // A quarter of the Kubernetes manifest's 512 Mi memory limit.
    static let bufferedBytes = 128 << 20
    static let websocketIdleTimeout = Duration.milliseconds(300_000)
    static let maxWebSockets = 1000
    static let maxUpstreamConnections = 1024
    static let workersLimit = 1024
  }

  func decode(_ document: JSONValue) -> GatehouseConfig? {
    let expanded = expandEnvironment(in: document, at: .root)
    guard let root = ConfigField(path: .root, value: expanded, diagnostics: diagnostics).object() else {
      return nil
    }
    let listen = root.field("listen").map(decodeListeners) ?? [defaultListener()]
    let workers = root.field("workers")?.integer(in: 0...Defaults.workersLimit) ?? 0
    let admin = decodeAdmin(root.field("admin"), listeners: listen)
    let store = decodeStore(root.field("store"))
    let limits = decodeLimits(root.field("limits"))
    let headers = root.field("headers").map(HeaderRulesDecoder.decode) ?? .empty
    let resolver = decodeResolver(root.field("resolver"))
    let upstreamsField = root.field("upstreams")
    let upstreams = upstreamsField.map(UpstreamDecoder(diagnostics: diagnostics).decode) ?? []
    let tokensField = root.field("tokens")
    let tokens = tokensField.map(TokenDecoder.decode) ?? []
    let clients = decodeClients(root.field("clients"))
    let jwtField = root.field("jwt")
    let jwt = jwtField.map(JWTDecoder.decode) ?? .none
    let references = RouteReferences(
      upstreamNames: Self.memberNames(of: upstreamsField), tokenNames: Self.memberNames(of: tokensField),
      jwtProviderNames: Self.memberNames(of: jwtField.flatMap(Self.providersField)))
    let routes =
      root.requiredField("routes").map(RouteDecoder(diagnostics: diagnostics, references: references).decode) ?? []
    let log = decodeLog(root.field("log"))
    let shared = decodeShared(root.field("shared"))
    root.finishReading()

    var config = GatehouseConfig(
      listen: listen, workers: workers, admin: admin, store: store, limits: limits, headers: headers,
      upstreams: upstreams, tokens: tokens, clients: clients, routes: routes, log: log, jwt: jwt)
    config.shared = shared
    config.resolver = resolver
    return config
  }

  /// `jwt.providers`, read again quietly for its names (the decoder reports its problems).
  private static func providersField(_ jwt: ConfigField) -> ConfigField? {
    guard case .object(let members) = jwt.value, let providers = members.first(where: { $0.key == "providers" })
    else { return nil }
    return ConfigField(path: jwt.path.appending(key: "providers"), value: providers.value, diagnostics: jwt.diagnostics)
  }

  /// The names under `upstreams` or `tokens`, including ones whose settings are invalid, so a
  /// broken upstream is reported once and not again as "unknown" by every route using it.
  private static func memberNames(of field: ConfigField?) -> [String] {
    guard case .object(let members)? = field?.value else { return [] }
    return members.map(\.key)
  }

  // MARK: - Environment

  /// Expands `${...}` in every string value (never in keys).
  private func expandEnvironment(in value: JSONValue, at path: ConfigPath) -> JSONValue {
    switch value {
    case .null, .bool, .number:
      return value
    case .string(let text):
      do {
        return .string(try interpolation.expand(text))
      } catch {
        diagnostics.reportAndSilence(path, error.description)
        return value
      }
    case .array(let elements):
      return .array(
        elements.enumerated().map { index, element in
          expandEnvironment(in: element, at: path.appending(index: index))
        })
    case .object(let members):
      return .object(
        members.map { member in
          (key: member.key, value: expandEnvironment(in: member.value, at: path.appending(key: member.key)))
        })
    }
  }

  // MARK: - listen, admin, store, limits, log

  private func defaultListener() -> ListenerConfig {
    ListenerConfig(address: Self.parseKnownAddress(Defaults.listen), tls: nil)
  }

  static func parseKnownAddress(_ text: String) -> ListenAddress {
    guard case .success(let address) = ListenAddress.parse(text) else {
      preconditionFailure("built-in address \(text) does not parse")
    }
    return address
  }

  func listenAddress(_ field: ConfigField) -> ListenAddress? {
    guard let text = field.string() else { return nil }
    switch ListenAddress.parse(text) {
    case .success(let address): return address
    case .failure(let error):
      field.report(error.description)
      return nil
    }
  }

  private func decodeListeners(_ field: ConfigField) -> [ListenerConfig] {
    guard let elements = field.array() else { return [] }
    if elements.isEmpty { field.report("must list at least one listener") }
    var listeners: [ListenerConfig] = []
    var seen: [ListenAddress: ConfigPath] = [:]
    for element in elements {
      guard let object = element.object() else { continue }
      let addressField = object.requiredField("address")
      let address = addressField.flatMap(listenAddress)
      let tls = object.field("tls").flatMap(decodeListenerTLS)
      let http2 = object.field("http2")?.bool() ?? true
      let h2cField = object.field("h2c")
      let h2c = h2cField?.bool() ?? false
      object.finishReading()
      guard let address, let addressField else { continue }
      if h2c, tls != nil, let h2cField {
        // On TLS, HTTP/2 is chosen by ALPN (`http2`); prior knowledge is for cleartext.
        h2cField.report("applies to cleartext listeners only; TLS listeners offer h2 through ALPN (http2)")
      }
      // Port 0 asks the kernel for a fresh port each time, so two of them never clash.
      if address.port != 0, let first = seen[address] {
        addressField.report("\(address) is already used by \(first)")
        continue
      }
      seen[address] = element.path
      listeners.append(ListenerConfig(address: address, tls: tls, http2: http2, h2c: h2c))
    }
    return listeners
  }

  private func decodeListenerTLS(_ field: ConfigField) -> ListenerTLSConfig? {
    guard let object = field.object() else { return nil }
    let certificate = object.requiredField("cert")?.nonEmptyString()
    let key = object.requiredField("key")?.nonEmptyString()
    // More certificates chosen by the name the client asks for (SNI); the main one answers
    // every other name.
    var sni: [ListenerTLSConfig.NamedCertificate] = []
    for element in object.field("sni")?.array() ?? [] {
      guard let entry = element.object() else { continue }
      let names = entry.requiredField("names")?.stringArray()
      let entryCertificate = entry.requiredField("cert")?.nonEmptyString()
      let entryKey = entry.requiredField("key")?.nonEmptyString()
      entry.finishReading()
      guard let names, let entryCertificate, let entryKey else { continue }
      if names.isEmpty { element.report("names must list at least one server name") }
      sni.append(.init(names: names, certificatePath: entryCertificate, keyPath: entryKey))
    }
    object.finishReading()
    guard let certificate, let key else { return nil }
    return ListenerTLSConfig(certificatePath: certificate, keyPath: key, sni: sni)
  }

  private func decodeAdmin(_ field: ConfigField?, listeners: [ListenerConfig]) -> AdminConfig {
    let defaultListen = Self.parseKnownAddress(Defaults.adminListen)
    guard let object = field?.object() else {
      if field == nil, listeners.contains(where: { $0.address == defaultListen }) {
        diagnostics.report(
          ConfigPath.root.appending(key: "admin").appending(key: "listen"),
          "the default admin address \(defaultListen) is also a client listener; set admin.listen")
      }
      return AdminConfig(listen: defaultListen, token: nil, metricsPublic: false)
    }
    let listenField = object.field("listen")
    let listen = listenField.map(listenAddress) ?? defaultListen
    let tokenField = object.field("token")
    var token: SecretValue?
    if let tokenField, let text = tokenField.string(), !text.isEmpty {
      if let problem = HTTPFieldSyntax.headerValueProblem(text) {
        tokenField.report(problem)
      } else {
        token = SecretValue(text)
      }
    }
    let metricsPublic = object.field("metrics_public")?.bool() ?? false
    let tls = object.field("tls").flatMap(decodeListenerTLS)
    object.finishReading()

    if let listen, listen.port != 0, listeners.contains(where: { $0.address == listen }) {
      diagnostics.report(
        object.path.appending(key: "listen"),
        "\(listen) is also a client listener; the admin API needs its own address")
    }
    // Without a token the admin API may only be reachable from this machine (Deploy/README.md).
    if let listen, token == nil, !listen.isLoopback {
      diagnostics.report(
        object.path.appending(key: "token"),
        "must be set (not empty) when admin.listen (\(listen)) is not a loopback address")
    }
    return AdminConfig(listen: listen ?? defaultListen, token: token, metricsPublic: metricsPublic, tls: tls)
  }

  private func decodeStore(_ field: ConfigField?) -> StoreConfig {
    guard let object = field?.object() else {
      return StoreConfig(path: Defaults.storePath, maxBytes: Defaults.storeMaxBytes, secretKey: nil)
    }
    let path = object.field("path")?.nonEmptyString() ?? Defaults.storePath
    let maxBytes = object.field("max_bytes")?.integer(in: 1...Int.max) ?? Defaults.storeMaxBytes
    let secretKey = object.field("secret_key")?.string().flatMap { $0.isEmpty ? nil : SecretValue($0) }
    object.finishReading()
    return StoreConfig(path: path, maxBytes: maxBytes, secretKey: secretKey)
  }

  private func decodeLimits(_ field: ConfigField?) -> LimitsConfig {
    let object = field?.object()
    var limits = LimitsConfig(
      maxConnections: object?.field("max_connections")?.integer(in: 1...Int.max) ?? Defaults.maxConnections,
      maxHeaderBytes: object?.field("max_header_bytes")?.integer(in: 1...Int.max) ?? Defaults.maxHeaderBytes,
      maxBodyBytes: object?.field("max_body_bytes")?.integer(in: 0...Int.max) ?? Defaults.maxBodyBytes,
      headerTimeout: object?.field("header_timeout_ms")?.milliseconds() ?? Defaults.headerTimeout,
      idleTimeout: object?.field("idle_timeout_ms")?.milliseconds() ?? Defaults.idleTimeout,
      drainTimeout: object?.field("drain_timeout_ms")?.milliseconds(allowZero: true) ?? Defaults.drainTimeout,
      bodyTimeout: object?.field("body_timeout_ms")?.milliseconds() ?? Defaults.bodyTimeout,
      bodyBufferBytes: object?.field("body_buffer_bytes")?.integer(in: 0...(64 << 20)) ?? Defaults.bodyBufferBytes,
      bufferedBytes: object?.field("buffered_bytes")?.integer(in: 0...Int.max) ?? Defaults.bufferedBytes)
    limits.websocketIdleTimeout =
      object?.field("websocket_idle_timeout_ms")?.milliseconds() ?? Defaults.websocketIdleTimeout
    limits.maxWebSockets = object?.field("max_websockets")?.integer(in: 0...(1 << 24)) ?? Defaults.maxWebSockets
    let http2 = object?.field("http2")?.object()
    limits.http2 = HTTP2LimitsConfig(
      // RFC 9113 §6.5.2: windows stop at 2^31 - 1.
      maxConcurrentStreams: http2?.field("max_concurrent_streams")?.integer(in: 1...(1 << 20)) ?? 128,
      initialWindowBytes: http2?.field("initial_window_bytes")?.integer(in: 1...Int(Int32.max)) ?? 65_535,
      maxHeaderListBytes: http2?.field("max_header_list_bytes")?.integer(in: 1...(16 << 20)) ?? limits.maxHeaderBytes)
    http2?.finishReading()
    object?.finishReading()
    return limits
  }

  private func decodeLog(_ field: ConfigField?) -> LogConfig {
    let object = field?.object()
    let log = LogConfig(
      level: object?.field("level")?.enumeration(
        ["debug": LogLevel.debug, "info": .info, "warn": .warn, "error": .error]) ?? .info,
      access: object?.field("access")?.enumeration(["stdout": AccessLogDestination.stdout, "off": .off])
        ?? .stdout,
      format: object?.field("format")?.enumeration(["json": LogFormat.json]) ?? .json,
      trustedProxies: object?.field("trusted_proxies").map(decodeTrustedProxies) ?? [],
      maskQuery: object?.field("mask_query").map(decodeMaskedQuery) ?? LogConfig.defaultMaskedQuery)
    object?.finishReading()
    return log
  }

  /// `log.trusted_proxies`: IP addresses and networks; each entry that is neither is reported.
  private func decodeTrustedProxies(_ field: ConfigField) -> [String] {
    (field.array() ?? []).compactMap { element in
      guard let entry = element.nonEmptyString() else { return nil }
      if let problem = TrustedProxies.problem(entry) {
        element.report(problem)
        return nil
      }
      return entry
    }
  }

  /// `log.mask_query`: query parameter names (compared without case).
  private func decodeMaskedQuery(_ field: ConfigField) -> [String] {
    (field.array() ?? []).compactMap { $0.nonEmptyString() }
  }

  // MARK: - resolver

  /// `resolver`: name servers as IP literals (port 53 unless written) and the query timeout.
  private func decodeResolver(_ field: ConfigField?) -> ResolverConfig {
    guard let object = field?.object() else { return .system }
    var resolver = ResolverConfig.system
    if let serversField = object.field("servers"), let elements = serversField.array() {
      if elements.isEmpty {
        serversField.report("must list at least one server (leave servers out to use /etc/resolv.conf)")
      } else {
        resolver.servers = elements.compactMap {
          UpstreamDecoder.serverAddress($0, defaultPort: 53, allowsNames: false)
        }
      }
    }
    resolver.timeoutMilliseconds =
      object.field("timeout_ms")?.integer(in: 1...Int(Int32.max)) ?? resolver.timeoutMilliseconds
    object.finishReading()
    return resolver
  }

  // MARK: - clients

  private func decodeClients(_ field: ConfigField?) -> ClientsConfig {
    guard let object = field?.object() else { return ClientsConfig(required: false, keys: []) }
    let required = object.field("required")?.bool() ?? false
    let keysField = object.field("keys")
    var keys: [ClientKeyConfig] = []
    var seenIDs: [String: ConfigPath] = [:]
    var seenHashes: [String: ConfigPath] = [:]
    for element in keysField?.array() ?? [] {
      guard let key = element.object() else { continue }
      let idField = key.requiredField("id")
      let id = idField?.nonEmptyString()
      let hashField = key.requiredField("sha256")
      var hash = hashField?.string()?.lowercased()
      if let hashText = hash, !Self.isSHA256Hex(hashText) {
        hashField?.report("must be 64 hex digits: the SHA-256 of the client key")
        hash = nil
      }
      let rateField = key.field("rate_per_s")
      let rate = rateField?.positiveNumber()
      let burstField = key.field("burst")
      let burst = burstField?.integer(in: 1...Int.max)
      key.finishReading()
      if burstField != nil, rateField == nil {
        burstField?.report("burst needs rate_per_s")
      }
      guard let id, let hash, let idField, let hashField else { continue }
      if let first = seenIDs[id] {
        idField.report("duplicate client id \"\(id)\" (also \(first))")
        continue
      }
      if let first = seenHashes[hash] {
        hashField.report("the same key hash is already used by \(first)")
        continue
      }
      seenIDs[id] = idField.path
      seenHashes[hash] = hashField.path
      let rateLimit = rate.map {
        ClientRateLimit(perSecond: $0, burst: burst ?? max(1, Int($0.rounded(.up))))
      }
      keys.append(ClientKeyConfig(id: id, sha256Hex: hash, rateLimit: rateLimit))
    }
    object.finishReading()
    if required, keysField.map({ $0.value == .array([]) }) ?? true {
      diagnostics.report(
        object.path.appending(key: "keys"), "clients.required is true, so at least one key is needed")
    }
    return ClientsConfig(required: required, keys: keys)
  }

  private static func isSHA256Hex(_ text: String) -> Bool {
    text.utf8.count == 64
      && text.utf8.allSatisfy {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
          || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
      }
  }
}
