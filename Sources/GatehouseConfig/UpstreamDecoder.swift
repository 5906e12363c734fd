import GatehouseHTTP
import GatehouseJSON

/// Decodes `upstreams`: each upstream's url, timeouts, pool, TLS, health check and circuit
/// breaker.
struct UpstreamDecoder {
  let diagnostics: ConfigDiagnostics

  /// `upstreams`: an object from name to settings.
  func decode(_ field: ConfigField) -> [UpstreamConfig] {
    guard let object = field.object() else { return [] }
    return object.allFields().compactMap { name, upstreamField in
      if let problem = ConfigName.problem(name) { upstreamField.report(problem) }
      return decodeUpstream(name: name, upstreamField)
    }
  }

  private func decodeUpstream(name: String, _ field: ConfigField) -> UpstreamConfig? {
    guard let object = field.object() else { return nil }
    let urlField = object.requiredField("url")
    let url = urlField.flatMap { $0.httpURL() }
    let connectTimeout = object.field("connect_timeout_ms")?.milliseconds() ?? .milliseconds(1000)
    let answerTimeout = object.field("response_timeout_ms")?.milliseconds() ?? .milliseconds(10_000)
    let maxIdle = object.field("max_idle_connections")?.integer(in: 0...100_000) ?? 64
    // Off unless asked for: HTTP/1.1 cannot tie an answer to its request, so an upstream
    // that sends an answer nobody asked for would shift pipelined answers between clients.
    let pipelineDepth = object.field("pipeline_depth")?.integer(in: 0...64) ?? 1
    let tlsField = object.field("tls")
    let tls = tlsField.flatMap(decodeUpstreamTLS)
    let health = object.field("health").flatMap(decodeHealthCheck)
    let circuit = object.field("circuit").flatMap(decodeCircuitBreaker)
    let maxConnections =
      object.field("max_connections")?.integer(in: 1...1_000_000) ?? ConfigDecoder.Defaults.maxUpstreamConnections
    let queueTimeout = object.field("queue_timeout_ms")?.milliseconds(allowZero: true)
    let servers = object.field("servers").flatMap(decodeServers)
    let balance = object.field("balance")?.enumeration(Self.balanceValues) ?? .leastRequest
    let hashBy = object.field("hash_by").flatMap(decodeHashKey)
    let resolveSeconds = object.field("resolve_s")?.integer(in: 1...Int(Int32.max)) ?? 30
    let outlier = object.field("outlier").flatMap(decodeOutlier) ?? .default
    let retry = object.field("retry").flatMap(decodeRetry) ?? .default
    object.finishReading()
    if let url, let tlsField, url.scheme == .http {
      tlsField.report("tls settings need an https url (url is http)")
    }
    guard let url else { return nil }
    var upstream = UpstreamConfig(
      name: name, url: url, connectTimeout: connectTimeout, answerTimeout: answerTimeout,
      maxIdleConnections: maxIdle, pipelineDepth: pipelineDepth, tls: tls, health: health, circuit: circuit,
      maxConnections: maxConnections, queueTimeout: queueTimeout)
    upstream.servers = servers
    upstream.balance = balance
    upstream.hashBy = hashBy
    upstream.resolveSeconds = resolveSeconds
    upstream.outlier = outlier
    upstream.retry = retry
    return upstream
  }

  // MARK: - Fleets

  static let balanceValues: KeyValuePairs<String, UpstreamBalance> = [
    "least_request": .leastRequest, "round_robin": .roundRobin, "hash": .hash,
  ]

  /// `servers`: at least one entry, each `{"address": "host:port", "weight": 1…100}`.
  /// Repeated addresses are left to lint: the fleet counts them once, so they are harmless
  /// but likely a copy-paste slip.
  private func decodeServers(_ field: ConfigField) -> [UpstreamServerConfig]? {
    guard let elements = field.array() else { return nil }
    if elements.isEmpty {
      // An empty list would be a fleet with no endpoint; leaving the key out means DNS.
      field.report("must list at least one server (leave servers out to use the url's host)")
      return nil
    }
    var servers: [UpstreamServerConfig] = []
    for element in elements {
      guard let entry = element.object() else { continue }
      let address = entry.requiredField("address").flatMap { Self.serverAddress($0, allowsNames: true) }
      let weight = entry.field("weight")?.integer(in: 1...100) ?? 1
      entry.finishReading()
      if let address { servers.append(UpstreamServerConfig(address: address, weight: weight)) }
    }
    return servers
  }

  static func serverAddress(_ field: ConfigField, defaultPort: UInt16? = nil, allowsNames: Bool) -> ServerAddress? {
    guard let text = field.nonEmptyString() else { return nil }
    switch ServerAddress.parse(text, defaultPort: defaultPort, allowsNames: allowsNames) {
    case .success(let address): return address
    case .failure(let error):
      field.report(error.description)
      return nil
    }
  }

  /// `hash_by`: `client`, `ip`, `path` or `header:NAME`.
  private func decodeHashKey(_ field: ConfigField) -> UpstreamHashKey? {
    guard let text = field.string() else { return nil }
    switch text {
    case "client": return .client
    case "ip": return .ip
    case "path": return .path
    default: break
    }
    let prefix = "header:"
    guard text.hasPrefix(prefix) else {
      field.report(
        "unknown value \(JSONValue.string(text).serializedString()), expected one of "
          + #""client", "ip", "path", "header:NAME""# + Self.hashKeyHint(text))
      return nil
    }
    let name = String(text.dropFirst(prefix.count))
    guard !name.isEmpty else {
      field.report("header: needs a header name, such as \"header:X-Tenant\"")
      return nil
    }
    guard HTTPFieldSyntax.isToken(name) else {
      field.report(
        "invalid header name \(JSONValue.string(name).serializedString()) (letters, digits and !#$%&'*+-.^_`|~ only)")
      return nil
    }
    return .header(name)
  }

  /// A "did you mean" for a mistyped `hash_by`, reading the word before any `:` so that
  /// `headers:X-Tenant` suggests `header:X-Tenant`.
  private static func hashKeyHint(_ text: String) -> String {
    let word = String(text.prefix { $0 != ":" })
    let match =
      word.lowercased() == "header"
      ? "header" : NameSuggestion.closest(to: word, among: ["client", "ip", "path", "header"])
    guard let match else { return "" }
    guard match == "header" else { return " (did you mean \"\(match)\"?)" }
    let name = text.dropFirst(word.count).drop { $0 == ":" }
    return " (did you mean \"header:\(name.isEmpty ? "NAME" : name)\"?)"
  }

  private func decodeOutlier(_ field: ConfigField) -> OutlierConfig? {
    guard let object = field.object() else { return nil }
    let defaults = OutlierConfig.default
    let outlier = OutlierConfig(
      failures: object.field("failures")?.integer(in: 1...100_000) ?? defaults.failures,
      ejectMilliseconds: object.field("eject_ms")?.integer(in: 1...Int(Int32.max)) ?? defaults.ejectMilliseconds,
      maxEjectedPercent: object.field("max_ejected_percent")?.integer(in: 0...100) ?? defaults.maxEjectedPercent)
    object.finishReading()
    return outlier
  }

  private func decodeRetry(_ field: ConfigField) -> RetryConfig? {
    guard let object = field.object() else { return nil }
    let defaults = RetryConfig.default
    let attempts = object.field("attempts")?.integer(in: 1...10) ?? defaults.attempts
    let on = object.field("on").flatMap(decodeRetryConditions) ?? defaults.on
    let budget = object.field("budget_percent")?.integer(in: 0...100) ?? defaults.budgetPercent
    object.finishReading()
    return RetryConfig(attempts: attempts, on: on, budgetPercent: budget)
  }

  /// `retry.on`: a list of failure kinds, each once; `[]` retries nothing.
  private func decodeRetryConditions(_ field: ConfigField) -> [RetryCondition]? {
    guard let elements = field.array() else { return nil }
    var conditions: [RetryCondition] = []
    for element in elements {
      // `503` written as a number is the likeliest slip; say how to write it.
      if case .number(let number) = element.value, let status = number.integer {
        element.report("expected a string, got a number (write \"\(status)\")")
        continue
      }
      guard let condition = element.enumeration(Self.retryConditionValues) else { continue }
      if conditions.contains(condition) {
        element.report("\(condition.configValue) is listed twice")
        continue
      }
      conditions.append(condition)
    }
    return conditions
  }

  static let retryConditionValues: KeyValuePairs<String, RetryCondition> = [
    "connect": .connect, "reset": .reset, "timeout": .timeout, "502": .status502, "503": .status503,
    "504": .status504,
  ]

  private func decodeUpstreamTLS(_ field: ConfigField) -> UpstreamTLSConfig? {
    guard let object = field.object() else { return nil }
    let ca = object.field("ca")?.nonEmptyString()
    let verify = object.field("verify")?.bool() ?? true
    let serverNameField = object.field("server_name")
    var serverName = serverNameField?.nonEmptyString()
    if let name = serverName, !NetworkAddressSyntax.isHostName(Substring(name)) {
      serverNameField?.report("must be a DNS host name")
      serverName = nil
    }
    let certificateField = object.field("cert")
    let keyField = object.field("key")
    let certificate = certificateField?.nonEmptyString()
    let key = keyField?.nonEmptyString()
    object.finishReading()
    if certificateField != nil, keyField == nil {
      diagnostics.report(object.path.appending(key: "key"), "missing: cert needs key (client certificate)")
    } else if keyField != nil, certificateField == nil {
      diagnostics.report(object.path.appending(key: "cert"), "missing: key needs cert (client certificate)")
    }
    return UpstreamTLSConfig(
      caPath: ca, verify: verify, serverName: serverName, certificatePath: certificate, keyPath: key)
  }

  private func decodeHealthCheck(_ field: ConfigField) -> HealthCheckConfig? {
    guard let object = field.object() else { return nil }
    let pathField = object.field("path")
    var path = pathField?.nonEmptyString() ?? "/health"
    // `~/path`: from the host's root rather than the url's base path (see `target(basePath:)`).
    let rooted = path.hasPrefix("~/") ? String(path.dropFirst()) : path
    if let pathField, let problem = Self.requestPathProblem(rooted) {
      pathField.report(problem)
      path = "/health"
    }
    let health = HealthCheckConfig(
      path: path,
      interval: object.field("interval_ms")?.milliseconds() ?? .milliseconds(2000),
      unhealthyAfter: object.field("unhealthy_after")?.integer(in: 1...1000) ?? 3,
      healthyAfter: object.field("healthy_after")?.integer(in: 1...1000) ?? 2)
    object.finishReading()
    return health
  }

  /// A concrete request path (no templates): starts with `/`, valid characters, no query.
  static func requestPathProblem(_ path: String) -> String? {
    guard path.hasPrefix("/") else { return "must start with '/'" }
    if path.contains("?") || path.contains("#") { return "must not contain a query or fragment" }
    return RoutePathSyntax.pathCharactersProblem(Substring(path)).map { "path " + $0 }
  }

  private func decodeCircuitBreaker(_ field: ConfigField) -> CircuitBreakerConfig? {
    guard let object = field.object() else { return nil }
    let circuit = CircuitBreakerConfig(
      failures: object.field("failures")?.integer(in: 0...100_000) ?? CircuitBreakerConfig.defaultFailures,
      openDuration: object.field("open_ms")?.milliseconds() ?? CircuitBreakerConfig.defaultOpenDuration,
      count5xx: object.field("count_5xx")?.bool() ?? false)
    object.finishReading()
    return circuit
  }
}
