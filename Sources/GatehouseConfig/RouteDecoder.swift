import GatehouseHTTP
import GatehouseJSON

/// The names routes may refer to.
struct RouteReferences {
  let upstreamNames: [String]
  let tokenNames: [String]
  var jwtProviderNames: [String] = []
}

/// Decodes `routes`: each route's match, upstream and token references, rewrite, headers,
/// envelope, cache and stub.
struct RouteDecoder {
  let diagnostics: ConfigDiagnostics
  let references: RouteReferences

  func decode(_ field: ConfigField) -> [RouteConfig] {
    guard let elements = field.array() else { return [] }
    if elements.isEmpty { field.report("must list at least one route") }
    var routes: [RouteConfig] = []
    var seenNames: [String: ConfigPath] = [:]
    for element in elements {
      guard let object = element.object() else { continue }
      let nameField = object.requiredField("name")
      if let nameField, let name = nameField.string() {
        if let problem = ConfigName.problem(name) {
          nameField.report(problem)
        } else if let first = seenNames[name] {
          nameField.report("duplicate route name \"\(name)\" (also \(first))")
        } else {
          seenNames[name] = element.path
        }
      }
      if let route = decodeRoute(object) {
        routes.append(route)
      }
    }
    return routes
  }

  private func decodeRoute(_ object: ConfigObjectReader) -> RouteConfig? {
    let name = object.field("name")?.value
    let match = object.requiredField("match").flatMap(decodeMatchRule)
    let stub = object.field("stub").map(decodeStub) ?? .off

    let upstreamField = object.field("upstream")
    var upstream: String?
    if let upstreamField {
      upstream = upstreamField.string()
      if let reference = upstream, !references.upstreamNames.contains(reference) {
        upstreamField.report(Self.unknownReference("upstream", reference, among: references.upstreamNames))
      }
    } else if stub.mode != .always {
      diagnostics.report(
        object.path.appending(key: "upstream"),
        "missing required key (only a route with stub.mode \"always\" may leave it out)")
    }

    let upstreamPathField = object.field("path")
    let upstreamPath = upstreamPathField.flatMap { template($0) }
    if let upstreamPath, let upstreamPathField, let match {
      checkRewrite(upstreamPath, against: match.path, field: upstreamPathField)
    }

    let tokenField = object.field("token")
    let token = tokenField?.string()
    if let token, let tokenField, !references.tokenNames.contains(token) {
      tokenField.report(Self.unknownReference("token", token, among: references.tokenNames))
    }
    let tokenHeaderField = object.field("token_header")
    let tokenHeader = tokenHeaderField.flatMap { $0.headerName() } ?? "Authorization"
    if let tokenHeaderField,
      HeaderRuleSyntax.ManagedHeader(canonicalName: HTTPFieldSyntax.canonicalName(tokenHeader)) != nil
    {
      tokenHeaderField.report("\(tokenHeader) is managed by the gateway and cannot carry a token")
    }
    let tokenFormatField = object.field("token_format")
    let tokenFormat = tokenFormatField.flatMap(decodeTokenFormat) ?? .bearer
    let invalidTokenField = object.field("invalid_token")
    let invalidToken =
      invalidTokenField.flatMap(decodeInvalidTokenRule)
      ?? InvalidTokenRule(statuses: [401], bodyField: nil, bodyValues: [])
    // These keys only mean something with a token; alone they are most likely a forgotten "token".
    if tokenField == nil {
      for field in [tokenHeaderField, tokenFormatField, invalidTokenField].compactMap({ $0 }) {
        field.report("has no effect without \"token\" in this route")
      }
    }

    let headers = object.field("headers").map(HeaderRulesDecoder.decode) ?? .empty
    // The injected token must be the only value of its header; a top-level `set` of it is
    // replaced on this route, but the route's own would contradict its token.
    if token != nil {
      let canonicalTokenHeader = HTTPFieldSyntax.canonicalName(tokenHeader)
      for field in headers.set where HTTPFieldSyntax.canonicalName(field.name) == canonicalTokenHeader {
        diagnostics.report(
          object.path.appending(key: "headers").appending(key: "set").appending(key: field.name),
          "this route sends its token in \(tokenHeader), so it cannot also set \(field.name)")
      }
    }
    let envelope = decodeEnvelope(object.field("envelope"))
    let cacheField = object.field("cache")
    let cache = cacheField.flatMap(decodeCache)
    let jwt = object.field("jwt").flatMap { JWTDecoder.decodeRoute($0, providers: references.jwtProviderNames) }
    let websocketField = object.field("websocket")
    let websocket = websocketField?.bool() ?? false
    object.finishReading()
    // A tunnel has no answer to stub, store or wrap: a route that always stubs never reaches
    // the upstream a handshake needs.
    if websocket, stub.mode == .always, let websocketField {
      websocketField.report("has no effect on a route whose stub.mode is \"always\"")
    }
    if cache?.shared == true, jwt == nil, let cacheField {
      diagnostics.report(cacheField.path.appending(key: "shared"), "has no effect without \"jwt\" in this route")
    }

    guard case .string(let routeName)? = name, let match else { return nil }
    var route = RouteConfig(
      name: routeName, match: match, upstream: upstream, upstreamPath: upstreamPath, token: token,
      tokenHeader: tokenHeader, tokenFormat: tokenFormat, invalidToken: invalidToken, headers: headers,
      envelope: envelope, cache: cache, stub: stub, jwt: jwt)
    route.websocket = websocket
    return route
  }

  static func unknownReference(_ kind: String, _ name: String, among names: [String]) -> String {
    let quoted = JSONValue.string(name).serializedString()
    if names.isEmpty { return "unknown \(kind) \(quoted) (no \(kind)s are defined)" }
    return "unknown \(kind) \(quoted)" + NameSuggestion.hint(for: name, among: names)
  }

  private func template(_ field: ConfigField) -> RouteTemplate? {
    guard let text = field.string() else { return nil }
    switch RouteTemplate.parse(text) {
    case .success(let template): return template
    case .failure(let error):
      field.report(error.description)
      return nil
    }
  }

  /// A rewrite can only use what the match captured: its parameters and its `/*` rest.
  private func checkRewrite(_ rewrite: RouteTemplate, against match: RouteTemplate, field: ConfigField) {
    let available = match.parameterNames
    for name in rewrite.parameterNames where !available.contains(name) {
      field.report(
        "uses :\(name), which match.path does not define" + NameSuggestion.hint(for: name, among: available))
    }
    if rewrite.hasWildcard, !match.hasWildcard {
      field.report("ends with /*, but match.path has no /* rest to put there")
    }
  }

  private func decodeMatchRule(_ field: ConfigField) -> RouteMatchRule? {
    guard let object = field.object() else { return nil }
    let path = object.requiredField("path").flatMap { template($0) }
    var methods: [String]?
    if let methodsField = object.field("methods"), let elements = methodsField.array() {
      if elements.isEmpty {
        methodsField.report("must list at least one method (leave it out for any method)")
      }
      var list: [String] = []
      for element in elements {
        guard let method = element.string() else { continue }
        if !HTTPFieldSyntax.isToken(method) {
          element.report("invalid method name")
        } else if method != method.uppercased() {
          // Methods are case-sensitive (RFC 9110 §9.1); "get" would never match a real GET.
          element.report("methods are case-sensitive; write \"\(method.uppercased())\"")
        } else if method == "CONNECT" || method == "TRACE" {
          // The request parser refuses both before routing (see RequestTarget).
          element.report("\(method) requests are never routed (the gateway answers them with 501)")
        } else if list.contains(method) {
          element.report("\(method) is listed twice")
        } else {
          list.append(method)
        }
      }
      methods = list
    }
    object.finishReading()
    return path.map { RouteMatchRule(path: $0, methods: methods) }
  }

  private func decodeTokenFormat(_ field: ConfigField) -> TokenFormat? {
    guard let text = field.string() else { return nil }
    guard let format = TokenFormat(template: text) else {
      field.report("must contain {token} exactly once")
      return nil
    }
    if let problem = HTTPFieldSyntax.headerValueProblem(format.prefix + "x" + format.suffix) {
      field.report(problem)
      return nil
    }
    return format
  }

  private func decodeInvalidTokenRule(_ field: ConfigField) -> InvalidTokenRule? {
    guard let object = field.object() else { return nil }
    let statuses =
      object.field("status")?.array()?.compactMap { $0.integer(in: 400...599) } ?? [401]
    let bodyFieldField = object.field("body_field")
    let bodyField = bodyFieldField?.nonEmptyString()
    let bodyValuesField = object.field("body_values")
    var bodyValues: [JSONValue] = []
    for element in bodyValuesField?.array() ?? [] {
      switch element.value {
      case .null, .bool, .number, .string:
        bodyValues.append(element.value)
      case .array, .object:
        element.report("expected a string, number, boolean or null, got \(element.value.kindDescription)")
      }
    }
    object.finishReading()
    if bodyFieldField != nil, bodyValuesField == nil {
      diagnostics.report(object.path.appending(key: "body_values"), "missing: body_field needs body_values")
    } else if bodyValuesField != nil, bodyFieldField == nil {
      diagnostics.report(object.path.appending(key: "body_field"), "missing: body_values needs body_field")
    }
    return InvalidTokenRule(statuses: statuses, bodyField: bodyField, bodyValues: bodyValues)
  }

  private func decodeEnvelope(_ field: ConfigField?) -> EnvelopeConfig {
    let object = field?.object()
    var keyPath: [String]?
    if let keyPathField = object?.field("key_path"), let text = keyPathField.nonEmptyString() {
      let components = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
      if components.contains(where: \.isEmpty) {
        keyPathField.report("has an empty component (write names separated by single dots, as in data.items)")
      } else {
        keyPath = components
      }
    }
    let envelope = EnvelopeConfig(
      enabled: object?.field("enabled")?.bool() ?? true,
      keyPath: keyPath,
      status: object?.field("status")?.enumeration([
        "mirror": EnvelopeStatusMode.mirror, "always_200": .always200,
      ]) ?? .mirror,
      maxBytes: object?.field("max_bytes")?.integer(in: 1...Int.max) ?? 8 << 20)
    object?.finishReading()
    return envelope
  }

  private func decodeCache(_ field: ConfigField) -> RouteCacheConfig? {
    guard let object = field.object() else { return nil }
    let cache = RouteCacheConfig(
      staleIfError: object.field("stale_if_error_s")?.seconds() ?? .seconds(86_400),
      fresh: object.field("fresh_s")?.seconds() ?? .zero,
      staleWhileRevalidate: object.field("stale_while_revalidate_s")?.seconds() ?? .zero,
      vary: object.field("vary")?.array()?.compactMap { $0.headerName() } ?? [],
      collapse: object.field("collapse")?.bool() ?? true,
      shared: object.field("shared")?.bool() ?? false)
    object.finishReading()
    return cache
  }

  private func decodeStub(_ field: ConfigField) -> StubConfig {
    guard let object = field.object() else { return .off }
    let stub = StubConfig(
      mode: object.field("mode")?.enumeration([
        "off": StubMode.off, "always": .always, "fallback": .fallback,
      ]) ?? .off,
      status: object.field("status")?.integer(in: 200...599) ?? 200,
      body: object.field("body")?.value.serializedBytes(),
      delay: object.field("delay_ms")?.milliseconds(allowZero: true) ?? .zero)
    object.finishReading()
    return stub
  }
}
