// The invariants every input of the `config` fuzz target must satisfy. This one file is
// compiled into Fuzz/build/fuzz-config (Fuzz/run.sh), which traps on a violation so libFuzzer
// saves the input, and into the GatehouseConfig tests through a symlink
// (Tests/GatehouseConfigTests/ConfigFuzzInvariants.swift), where ConfigFuzzReplayTests records a
// violation as a test failure. It uses only the public API of GatehouseConfig and GatehouseJSON.

import GatehouseConfig
import GatehouseJSON

/// A broken invariant, described well enough to act on from a crash log alone.
struct FuzzViolation: Error, CustomStringConvertible {
  var description: String

  init(_ description: String) {
    self.description = description
  }
}

/// Checks the config loader on one input, the bytes of a config file. See `check(_:)`.
enum ConfigFuzzInvariants {
  /// Part of every secret in `environment`, so a secret that reaches a message is easy to spot.
  static let canary = "Zq7canary"

  /// The environment `${...}` references expand from: the variables Deploy/gatehouse.json references
  /// (secrets among them), plain values, an empty one, and values that would break the
  /// document or a header if they were parsed as JSON or expanded again.
  static let environment: [String: String] = [
    "GATEHOUSE_ADMIN_TOKEN": "admin-\(canary)", "GATEHOUSE_STORE_KEY": "store-\(canary)",
    "API_TOKEN": "api-\(canary)", "PARTNER_SECRET": "partner-\(canary)",
    "HOST": "127.0.0.1", "PORT": "3000", "API_URL": "http://127.0.0.1:3000/api/v1", "EMPTY": "",
    "NESTED": "${HOST}", "QUOTE": #"","x":{"#, "CRLF": "a\r\nb",
  ]

  /// At most this many strings of a document are expanded by the reference as well.
  static let expansionLimit = 256

  /// libFuzzer entry: traps on a violation so libFuzzer reports it and saves the input.
  static func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) {
    let input = UnsafeRawBufferPointer(start: size > 0 ? data : nil, count: size)
    if let violation = check(input) {
      fatalError("fuzz invariant violated (config): \(violation)")
    }
  }

  /// Runs every check on one input and returns the first violation, or nil.
  ///
  /// The JSON parser:
  /// - agrees with `JSONValidator` (given the same depth limit, and the input without a
  ///   leading byte order mark, which the parser skips): what it accepts is valid JSON, and
  ///   what it refuses that is valid JSON has a duplicate key or a number out of range;
  /// - reports errors at a line and column inside the input;
  /// - reads what `serializedBytes()` writes back as the same value, and writing that again
  ///   gives the same bytes.
  ///
  /// The loader (with a fixed fake environment):
  /// - gives the same result for the same bytes twice, and when no string holds `${`, the same
  ///   result with an empty environment;
  /// - refuses with `invalidJSON` exactly what the parser refuses, with its error;
  /// - otherwise refuses with at least one issue, each with a path and a problem; each path
  ///   renders unambiguously and names a place in the document (or a missing key of one);
  ///   the issues start with one per string whose `${...}` cannot be expanded, in document
  ///   order, and no later issue is at the path of one of those;
  /// - never puts a secret of the environment in an issue about `${...}` or about a secret
  ///   field (admin token, store key, token values and client secrets);
  /// - when it accepts, gives a config that holds the rules it checks (see `checkAccepted`).
  ///
  /// `EnvironmentInterpolation.expand` agrees with a reference expansion on every string of
  /// the document.
  static func check(_ input: UnsafeRawBufferPointer) -> FuzzViolation? {
    do throws(FuzzViolation) {
      let bytes = Array(input)
      let parsed = parse(bytes)
      try checkParser(bytes, parsed)
      let result = load(bytes, environment)
      try require(load(bytes, environment) == result, "loading the same bytes again gives another result")
      switch result {
      case .success(let config):
        try checkAccepted(config)
      case .failure(let error):
        try checkRefusal(error, parsed: parsed)
      }
      if case .success(let document) = parsed {
        let strings = stringValues(document, at: []).map(\.text)
        for text in strings.prefix(expansionLimit) { try checkExpansion(text) }
        if !strings.contains(where: { $0.contains("${") }) {
          try require(load(bytes, [:]) == result, "a document without ${ loads differently in another environment")
        }
      }
      return nil
    } catch {
      return error
    }
  }

  static func parse(_ bytes: [UInt8]) -> Result<JSONValue, JSONError> {
    do throws(JSONError) {
      return .success(try JSONParser.parse(bytes))
    } catch {
      return .failure(error)
    }
  }

  static func load(_ bytes: [UInt8], _ environment: [String: String]) -> Result<GatehouseConfig, ConfigLoadError> {
    do throws(ConfigLoadError) {
      return .success(try ConfigLoader.load(json: bytes, environment: environment))
    } catch {
      return .failure(error)
    }
  }

  static func require(_ condition: Bool, _ message: @autoclosure () -> String) throws(FuzzViolation) {
    if !condition { throw FuzzViolation(message()) }
  }
}

// MARK: - The JSON parser

extension ConfigFuzzInvariants {
  static func checkParser(_ bytes: [UInt8], _ parsed: Result<JSONValue, JSONError>) throws(FuzzViolation) {
    let withoutBOM = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(bytes.dropFirst(3)) : bytes
    let options = JSONValidationOptions(maxDepth: JSONParser.Limits.config.maxDepth)
    let verdict = withoutBOM.withUnsafeBytes { JSONValidator.firstError(in: $0, options: options) }
    switch parsed {
    case .success(let value):
      try require(verdict == nil, "the parser accepts what JSONValidator refuses: \(String(describing: verdict))")
      let written = value.serializedBytes()
      let reread = parse(written)
      try require(
        reread == .success(value),
        "\(String(decoding: written, as: UTF8.self)) does not read back as the value it was written from")
      if case .success(let again) = reread {
        try require(again.serializedBytes() == written, "writing a value read back gives other bytes")
      }
    case .failure(let error):
      let lines = 1 + bytes.count(where: { $0 == 0x0A })
      try require(
        error.line >= 1 && error.line <= lines && error.column >= 1,
        "error at line \(error.line), column \(error.column) of a \(lines)-line input")
      try require(
        !error.reason.description.isEmpty && !error.reason.description.utf8.contains { $0 < 0x20 },
        "the error reason \(error.reason.description.debugDescription) is empty or has control characters")
      if verdict == nil {
        // The two places where the parser is stricter than the grammar, on purpose.
        try require(
          error.reason == .duplicateKey || error.reason == .numberOutOfRange,
          "the parser refuses valid JSON: \(error)")
      }
    }
  }
}

// MARK: - Refusals

extension ConfigFuzzInvariants {
  static func checkRefusal(_ error: ConfigLoadError, parsed: Result<JSONValue, JSONError>) throws(FuzzViolation) {
    try require(!error.lines.isEmpty && error.lines.allSatisfy { !$0.isEmpty }, "refused without a line to print")
    switch error {
    case .unreadable:
      throw FuzzViolation("loading bytes failed as unreadable")
    case .invalidJSON(let jsonError):
      try require(parsed == .failure(jsonError), "invalidJSON(\(jsonError)), but the parser gives \(parsed)")
    case .invalid(let issues):
      guard case .success(let document) = parsed else {
        throw FuzzViolation("the loader checked a document the parser refuses")
      }
      try checkIssues(issues, lines: error.lines, document: document)
    }
  }

  static func checkIssues(_ issues: [ConfigIssue], lines: [String], document: JSONValue) throws(FuzzViolation) {
    try require(!issues.isEmpty, "refused with no issue")
    try require(lines == issues.map(\.description), "lines are not the issues' descriptions")
    for issue in issues {
      try require(!issue.path.isEmpty && !issue.problem.isEmpty, "an issue without path or problem: \(issue)")
      try require(issue.description == "\(issue.path): \(issue.problem)", "\(issue) is printed otherwise")
      guard let components = parsePath(issue.path), render(components) == issue.path else {
        throw FuzzViolation("the issue path \(issue.path) is ambiguous or malformed (\(issue))")
      }
      // A missing key is reported at its own path, so only the place above it must exist.
      // Without an `admin` object the default admin address is blamed on `admin.listen`.
      try require(
        resolve(components.dropLast(), in: document) != nil || issue.path == "admin.listen",
        "\(issue) is about a place that is not in the document")
      if isSecretField(components) {
        try require(!issue.description.contains(canary), "\(issue) shows a secret")
      }
    }

    // Every string whose `${...}` fails is reported first, in document order.
    let failures = stringValues(document, at: []).compactMap { path, text -> ConfigIssue? in
      guard case .failure(let failure) = referenceExpansion(text) else { return nil }
      return ConfigIssue(path: render(path), problem: failure.description)
    }
    try require(
      Array(issues.prefix(failures.count)) == failures,
      "the issues do not start with the \(failures.count) failed expansions \(failures): \(issues)")
    for issue in failures {
      try require(!issue.description.contains(canary), "\(issue) shows a secret")
    }
    let silenced = Set(failures.map(\.path))
    let expansionProblems = ["environment variable ", "'${' without", "invalid environment variable name"]
    for issue in issues.dropFirst(failures.count) {
      try require(!silenced.contains(issue.path), "\(issue) follows a failed expansion at the same path")
      let isExpansionProblem = expansionProblems.contains { issue.problem.hasPrefix($0) }
      try require(!isExpansionProblem, "\(issue) is a failed expansion after other issues")
    }
  }

  /// Fields whose value never appears in a message (Docs/behaviour.md).
  static func isSecretField(_ path: [PathComponent]) -> Bool {
    if path == [.key("admin"), .key("token")] || path == [.key("store"), .key("secret_key")] { return true }
    return path.count == 3 && path[0] == .key("tokens")
      && (path[2] == .key("value") || path[2] == .key("client_secret"))
  }
}

// MARK: - Paths in the document

extension ConfigFuzzInvariants {
  enum PathComponent: Equatable {
    case key(String)
    case index(Int)
  }

  /// `routes[2].match.path`; a key that is not letters, digits, `_` and `-` as a quoted JSON
  /// string in brackets (`upstreams["a.b"]`); `(top level)` for the document itself.
  static func render(_ path: [PathComponent]) -> String {
    guard !path.isEmpty else { return "(top level)" }
    var text = ""
    for component in path {
      switch component {
      case .index(let index):
        text += "[\(index)]"
      case .key(let key) where !key.isEmpty && key.unicodeScalars.allSatisfy(isPlainKeyCharacter):
        text += text.isEmpty ? key : "." + key
      case .key(let key):
        text += "[" + JSONValue.string(key).serializedString() + "]"
      }
    }
    return text
  }

  static func isPlainKeyCharacter(_ scalar: Unicode.Scalar) -> Bool {
    ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
      || scalar == "_" || scalar == "-"
  }

  /// Reads a path as `render` writes it, or nil.
  static func parsePath(_ text: String) -> [PathComponent]? {
    if text == "(top level)" { return [] }
    let bytes = Array(text.utf8)
    var path: [PathComponent] = []
    var i = 0
    while i < bytes.count {
      if bytes[i] == UInt8(ascii: "[") {
        i += 1
        if i < bytes.count && bytes[i] == UInt8(ascii: "\"") {
          var end = i + 1
          while end < bytes.count && bytes[end] != UInt8(ascii: "\"") {
            end += bytes[end] == UInt8(ascii: "\\") ? 2 : 1
          }
          guard end + 1 < bytes.count, bytes[end + 1] == UInt8(ascii: "]"),
            case .string(let key)? = try? JSONParser.parse(Array(bytes[i...end]))
          else { return nil }
          path.append(.key(key))
          i = end + 2
        } else {
          let digits = bytes[i...].prefix { $0 >= 0x30 && $0 <= 0x39 }
          guard !digits.isEmpty, i + digits.count < bytes.count, bytes[i + digits.count] == UInt8(ascii: "]"),
            let index = Int(String(decoding: digits, as: UTF8.self))
          else { return nil }
          path.append(.index(index))
          i += digits.count + 1
        }
      } else {
        if !path.isEmpty {
          guard bytes[i] == UInt8(ascii: ".") else { return nil }
          i += 1
        }
        let key = String(
          decoding: bytes[i...].prefix { $0 < 0x80 && isPlainKeyCharacter(Unicode.Scalar($0)) }, as: UTF8.self)
        guard !key.isEmpty else { return nil }
        path.append(.key(key))
        i += key.utf8.count
      }
    }
    return path
  }

  /// The value at `path` (the first member of a name, as the loader reads them), or nil.
  static func resolve(_ path: ArraySlice<PathComponent>, in document: JSONValue) -> JSONValue? {
    var value = document
    for component in path {
      switch (component, value) {
      case (.key(let key), .object(let members)):
        guard let member = members.first(where: { $0.key == key }) else { return nil }
        value = member.value
      case (.index(let index), .array(let elements)):
        guard index < elements.count else { return nil }
        value = elements[index]
      default:
        return nil
      }
    }
    return value
  }

  /// Every string value (not key) with its path, in document order.
  static func stringValues(_ value: JSONValue, at path: [PathComponent]) -> [(path: [PathComponent], text: String)] {
    switch value {
    case .null, .bool, .number:
      return []
    case .string(let text):
      return [(path, text)]
    case .array(let elements):
      return elements.enumerated().flatMap { stringValues($1, at: path + [.index($0)]) }
    case .object(let members):
      return members.flatMap { stringValues($0.value, at: path + [.key($0.key)]) }
    }
  }
}

// MARK: - Environment expansion

extension ConfigFuzzInvariants {
  static func checkExpansion(_ text: String) throws(FuzzViolation) {
    let expected = referenceExpansion(text)
    let got: Result<String, EnvironmentInterpolation.Failure>
    do throws(EnvironmentInterpolation.Failure) {
      got = .success(try EnvironmentInterpolation(environment: environment).expand(text))
    } catch {
      got = .failure(error)
    }
    try require(
      got.map { Array($0.utf8) } == expected.map { Array($0.utf8) },
      "expanding \(text.debugDescription) gives \(got), expected \(expected)")
  }

  /// Config/README.md (`${ENV}` references) and `EnvironmentInterpolation`: `$${` is a literal `${`; `${NAME}` is the
  /// variable, an error when unset; `${NAME:-default}` is the variable unless it is unset or
  /// empty, else the default up to the first `}`, taken literally; a name is a letter or `_`
  /// and then letters, digits and `_`; any other `$` stays.
  static func referenceExpansion(_ text: String) -> Result<String, EnvironmentInterpolation.Failure> {
    let scalars = Array(text.unicodeScalars)
    var output = String.UnicodeScalarView()
    var i = 0
    while i < scalars.count {
      let rest = scalars[i...]
      if rest.starts(with: ["$", "$", "{"]) {
        output.append(contentsOf: "${".unicodeScalars)
        i += 3
      } else if rest.starts(with: ["$", "{"]) {
        guard let close = rest.dropFirst(2).firstIndex(of: "}") else { return .failure(.unterminatedReference) }
        let inside = Array(scalars[(i + 2)..<close])
        var name = inside[...]
        var fallback: String?
        if let colon = inside.firstIndex(of: ":") {
          guard inside.dropFirst(colon + 1).first == "-" else { return .failure(.invalidVariableName) }
          name = inside[..<colon]
          fallback = String(String.UnicodeScalarView(inside[(colon + 2)...]))
        }
        let startsWithDigit = name.first.map { ("0"..."9").contains($0) } ?? true
        guard !startsWithDigit, name.allSatisfy({ isPlainKeyCharacter($0) && $0 != "-" }) else {
          return .failure(.invalidVariableName)
        }
        let variable = String(String.UnicodeScalarView(name))
        switch (environment[variable], fallback) {
        case (let value?, nil): output.append(contentsOf: value.unicodeScalars)
        case (let value?, let fallback?): output.append(contentsOf: (value.isEmpty ? fallback : value).unicodeScalars)
        case (nil, let fallback?): output.append(contentsOf: fallback.unicodeScalars)
        case (nil, nil): return .failure(.unsetVariable(name: variable))
        }
        i = close + 1
      } else {
        output.append(scalars[i])
        i += 1
      }
    }
    return .success(String(output))
  }
}

// MARK: - Accepted configs

extension ConfigFuzzInvariants {
  /// Header names the gateway sets itself, which a config may neither set nor use for a token.
  static let managedHeaders: Set<String> = [
    "connection", "content-length", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    "proxy-connection",
  ]

  /// The rules Config/README.md, Config/REFERENCE.md and the loader's messages state, checked again on what it accepted.
  static func checkAccepted(_ config: GatehouseConfig) throws(FuzzViolation) {
    try require(!config.listen.isEmpty, "no listener")
    var addresses: Set<ListenAddress> = []
    for listener in config.listen {
      try requireRoundTrip(listener.address)
      try require(
        listener.address.port == 0 || addresses.insert(listener.address).inserted,
        "\(listener.address) is listed twice")
      if let tls = listener.tls {
        try require(!tls.certificatePath.isEmpty && !tls.keyPath.isEmpty, "a TLS listener without cert or key")
        for entry in tls.sni {
          try require(
            !entry.names.isEmpty && !entry.certificatePath.isEmpty && !entry.keyPath.isEmpty,
            "an sni entry without names, cert or key")
        }
      }
    }
    try require((0...1024).contains(config.workers), "workers is \(config.workers)")

    let admin = config.admin
    try requireRoundTrip(admin.listen)
    try require(
      admin.listen.port == 0 || !config.listen.contains { $0.address == admin.listen },
      "the admin address \(admin.listen) is also a client listener")
    if let token = admin.token {
      try require(!token.value.isEmpty && isHeaderValue(token.value), "the admin token is not a header value")
    } else {
      try require(admin.listen.isLoopback, "no admin token on \(admin.listen)")
    }

    try require(!config.store.path.isEmpty && config.store.maxBytes >= 1, "store path or max_bytes out of range")
    try require(config.store.secretKey.map { !$0.value.isEmpty } ?? true, "an empty store key")
    let limits = config.limits
    try require(
      limits.maxConnections >= 1 && limits.maxHeaderBytes >= 1 && limits.maxBodyBytes >= 0
        && limits.headerTimeout > .zero && limits.idleTimeout > .zero && limits.drainTimeout >= .zero,
      "limits out of range: \(limits)")
    try checkHeaderRules(config.headers, "headers")

    try requireUniqueNames(config.upstreams.map(\.name), "upstream")
    for upstream in config.upstreams { try checkUpstream(upstream) }
    try requireUniqueNames(config.tokens.map(\.name), "token")
    for token in config.tokens { try checkToken(token) }
    try checkClients(config.clients)

    try require(!config.routes.isEmpty, "no routes")
    try requireUniqueNames(config.routes.map(\.name), "route")
    for route in config.routes { try checkRoute(route, in: config) }
  }

  static func checkUpstream(_ upstream: UpstreamConfig) throws(FuzzViolation) {
    let context = "upstream \(upstream.name): "
    try requireRoundTrip(upstream.url)
    try require(upstream.tls == nil || upstream.url.scheme == .https, context + "tls with an http url")
    try require(
      upstream.connectTimeout > .zero && upstream.answerTimeout > .zero
        && (0...100_000).contains(upstream.maxIdleConnections),
      context + "timeouts or max_idle_connections out of range")
    if let tls = upstream.tls {
      try require(
        (tls.certificatePath == nil) == (tls.keyPath == nil), context + "cert without key or key without cert")
      try require(
        [tls.caPath, tls.serverName, tls.certificatePath, tls.keyPath].allSatisfy { $0.map { !$0.isEmpty } ?? true },
        context + "an empty tls setting")
    }
    if let health = upstream.health {
      try require(
        health.path.hasPrefix("/") && !health.path.contains("?") && !health.path.contains("#")
          && health.interval > .zero && (1...1000).contains(health.unhealthyAfter)
          && (1...1000).contains(health.healthyAfter),
        context + "health settings out of range: \(health)")
    }
    if let circuit = upstream.circuit {
      try require(
        (0...100_000).contains(circuit.failures) && circuit.openDuration > .zero,
        context + "circuit settings out of range")
    }
  }

  static func checkToken(_ token: TokenConfig) throws(FuzzViolation) {
    let context = "token \(token.name): "
    switch token.source {
    case .fixed(let value):
      // An empty value is allowed: the token starts missing and can be set later.
      try require(isHeaderValue(value.value) || value.value.isEmpty, context + "the value is not a header value")
    case .file(let path):
      try require(!path.isEmpty, context + "an empty path")
    case .oauth2ClientCredentials(let grant):
      try requireRoundTrip(grant.tokenURL)
      try require(
        !grant.clientID.isEmpty && isHeaderValue(grant.clientID) && !grant.clientSecret.value.isEmpty
          && isHeaderValue(grant.clientSecret.value),
        context + "client_id or client_secret is empty or not a header value")
      try require(grant.scope.map { !$0.isEmpty } ?? true, context + "an empty scope")
      try require(grant.refreshBefore >= .zero, context + "refresh_before_s is negative")
    }
  }

  static func checkClients(_ clients: ClientsConfig) throws(FuzzViolation) {
    try require(!clients.required || !clients.keys.isEmpty, "clients are required but there are no keys")
    try require(Set(clients.keys.map(\.id)).count == clients.keys.count, "duplicate client ids")
    try require(Set(clients.keys.map(\.sha256Hex)).count == clients.keys.count, "duplicate client key hashes")
    for key in clients.keys {
      try require(!key.id.isEmpty, "an empty client id")
      try require(
        key.sha256Hex.utf8.count == 64
          && key.sha256Hex.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) },
        "client \(key.id): the hash is not 64 lowercase hex digits")
      if let rate = key.rateLimit {
        try require(
          rate.perSecond > 0 && rate.perSecond.isFinite && rate.burst >= 1, "client \(key.id): rate out of range")
      }
    }
  }

  static func checkRoute(_ route: RouteConfig, in config: GatehouseConfig) throws(FuzzViolation) {
    let context = "route \(route.name): "
    let match = route.match.path
    try requireRoundTrip(match)
    try require(match.parameterNames.count <= RouteTemplate.maxParameters, context + "too many parameters")
    try require(Set(match.parameterNames).count == match.parameterNames.count, context + "a parameter twice")
    if let methods = route.match.methods {
      try require(
        !methods.isEmpty && Set(methods).count == methods.count
          && methods.allSatisfy { isToken($0) && $0 == $0.uppercased() },
        context + "methods \(methods)")
    }
    if let upstream = route.upstream {
      try require(config.upstream(named: upstream) != nil, context + "unknown upstream \(upstream)")
    } else {
      try require(route.stub.mode == .always, context + "no upstream without an always stub")
    }
    if let rewrite = route.upstreamPath {
      try requireRoundTrip(rewrite)
      try require(
        Set(rewrite.parameterNames).isSubset(of: match.parameterNames) && (!rewrite.hasWildcard || match.hasWildcard),
        context + "the rewrite \(rewrite) uses what \(match) does not capture")
    }
    if let token = route.token {
      try require(config.token(named: token) != nil, context + "unknown token \(token)")
    } else {
      try require(
        route.tokenHeader == "Authorization" && route.tokenFormat == .bearer && route.invalidToken.statuses == [401]
          && route.invalidToken.bodyField == nil && route.invalidToken.bodyValues.isEmpty,
        context + "token settings without a token")
    }
    try require(
      isToken(route.tokenHeader) && !managedHeaders.contains(route.tokenHeader.lowercased()),
      context + "token_header \(route.tokenHeader)")
    try require(
      TokenFormat(template: route.tokenFormat.template) == route.tokenFormat
        && isHeaderValue(route.tokenFormat.render("x")),
      context + "token_format \(route.tokenFormat)")
    let invalid = route.invalidToken
    try require(invalid.statuses.allSatisfy { (400...599).contains($0) }, context + "invalid_token.status out of range")
    try require(invalid.bodyValues.isEmpty || invalid.bodyField != nil, context + "body_values without body_field")
    try require(invalid.bodyField.map { !$0.isEmpty } ?? true, context + "an empty body_field")
    for value in invalid.bodyValues {
      switch value {
      case .null, .bool, .number, .string: break
      case .array, .object: throw FuzzViolation(context + "a body value is not a scalar")
      }
    }
    try checkHeaderRules(route.headers, context + "headers")
    let envelope = route.envelope
    try require(
      envelope.keyPath.map { !$0.isEmpty && $0.allSatisfy { !$0.isEmpty } } ?? true, context + "an empty key_path part")
    try require(envelope.maxBytes >= 1, context + "envelope.max_bytes below 1")
    if let cache = route.cache {
      try require(
        cache.staleIfError >= .zero && cache.fresh >= .zero && cache.staleWhileRevalidate >= .zero
          && cache.vary.allSatisfy(isToken),
        context + "cache settings out of range")
    }
    try require((200...599).contains(route.stub.status) && route.stub.delay >= .zero, context + "stub out of range")
    if let body = route.stub.body {
      let error = body.withUnsafeBytes { JSONValidator.firstError(in: $0) }
      try require(error == nil, context + "the stub body is not valid JSON: \(String(describing: error))")
    }
  }

  static func checkHeaderRules(_ rules: HeaderRules, _ context: String) throws(FuzzViolation) {
    var seen: Set<String> = []
    for field in rules.set {
      try require(
        isToken(field.name) && !managedHeaders.contains(field.name.lowercased())
          && seen.insert(field.name.lowercased()).inserted && isHeaderValue(field.value),
        context + ": cannot set \(field.name)")
    }
    try require(rules.remove.allSatisfy(isToken), context + ": cannot remove \(rules.remove)")
  }

  static func requireUniqueNames(_ names: [String], _ kind: String) throws(FuzzViolation) {
    try require(Set(names).count == names.count, "a \(kind) name twice in \(names)")
    for name in names {
      try require(
        !name.isEmpty && name.unicodeScalars.allSatisfy { isPlainKeyCharacter($0) || $0 == "." },
        "the \(kind) name \(name.debugDescription) has characters names may not have")
    }
  }

  /// RFC 9110 `token`.
  static func isToken(_ text: String) -> Bool {
    !text.isEmpty
      && text.unicodeScalars.allSatisfy { isPlainKeyCharacter($0) || "!#$%&'*+.^`|~".unicodeScalars.contains($0) }
  }

  /// Visible characters, spaces and tabs (and any UTF-8), not starting or ending with a blank.
  static func isHeaderValue(_ text: String) -> Bool {
    let bytes = Array(text.utf8)
    let isBlank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
    return bytes.allSatisfy { ($0 >= 0x20 && $0 != 0x7F) || $0 == 0x09 }
      && !(bytes.first.map(isBlank) ?? false) && !(bytes.last.map(isBlank) ?? false)
  }

  static func requireRoundTrip(_ address: ListenAddress) throws(FuzzViolation) {
    guard case .success(let again) = ListenAddress.parse(address.description), again == address else {
      throw FuzzViolation("the listen address \(address) does not read back from its description")
    }
  }

  static func requireRoundTrip(_ url: HTTPURL) throws(FuzzViolation) {
    guard case .success(let again) = HTTPURL.parse(url.description), again == url else {
      throw FuzzViolation("the URL \(url) does not read back from its description")
    }
  }

  static func requireRoundTrip(_ template: RouteTemplate) throws(FuzzViolation) {
    guard case .success(let again) = RouteTemplate.parse(template.source), again == template else {
      throw FuzzViolation("the path template \(template) does not read back from its source")
    }
  }
}
