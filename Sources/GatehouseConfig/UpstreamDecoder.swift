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
    object.finishReading()
    if let url, let tlsField, url.scheme == .http {
      tlsField.report("tls settings need an https url (url is http)")
    }
    guard let url else { return nil }
    return UpstreamConfig(
      name: name, url: url, connectTimeout: connectTimeout, answerTimeout: answerTimeout,
      maxIdleConnections: maxIdle, pipelineDepth: pipelineDepth, tls: tls, health: health, circuit: circuit,
      maxConnections: maxConnections, queueTimeout: queueTimeout)
  }

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
