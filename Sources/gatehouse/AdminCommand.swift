import GatehouseConfig
import GatehouseCore
import GatehouseHTTP
import GatehouseJSON
import GatehouseNet

#if canImport(Glibc)
  import Glibc
#endif

/// `gatehouse admin [--url URL] [--token T] <verb> ...`: a client for the admin API (Docs/admin-tools.md,
/// Docs/admin-openapi.json). Prints readable tables, or the API's JSON with `--json`; exits 1 with the server's
/// message when a call fails (HTTP ≥ 400 or no connection), 2 for a usage error. With
/// `--all-replicas` the call goes to every replica (`--replicas host:port,...`, or every A
/// record of the `--url` host, Docs/admin-tools.md) and each answer is printed prefixed by its replica.
///
/// The admin token is sent and never printed, not even in error messages.
enum AdminCommand {
  static let usage = """
    usage: gatehouse admin [--url URL | --config FILE] [--token T] [--ca FILE | --insecure] [--json]
                           [--all-replicas [--replicas H:P,...]] <verb>

      status                                   version, uptime, config, connections
      cache stats                              cache counters and size
      cache list [--prefix P] [--route NAME]   cache entries (every page) and their route
      cache purge --prefix P | --route NAME | --key ID | --all
      tokens list                              token states (never values)
      tokens set NAME --value V [--expires-in S]   (--value - reads the value from stdin)
      tokens refresh NAME
      tokens invalidate NAME
      upstreams                                health, circuit, connections and endpoints per upstream
      jwt list                                 identity providers and their signing keys
      jwt refresh NAME                         fetch a provider's keys now
      reload                                   reload the gateway's config file

    The admin API's address: --url, else GATEHOUSE_ADMIN_URL, else the gateway's own config
    file (--config FILE: its admin.listen, https with admin.tls; a wildcard address is asked
    on loopback), else http://127.0.0.1:9901. The token: --token, else GATEHOUSE_ADMIN_TOKEN,
    else that config's admin.token (with its ${VAR} references filled in).
    A prefix P matches the start of the upstream path, the upstream URL's base path included,
    as `cache list` shows it; --route NAME takes the entries a route's requests stored.
    gatehouse admin <verb> --help describes one verb and runs nothing.
    --timeout S bounds each connection and read (default 30).
    An https:// URL (an admin listener with admin.tls) is verified against the system's CAs
    and the URL's host (for every replica too); --ca FILE trusts that CA (PEM) instead;
    --insecure skips the check.
    """

  /// Everything the command line said.
  struct Options {
    static let defaultURL = "http://127.0.0.1:9901"
    var url: String?
    var configPath: String?
    var caPath: String?
    var insecure = false
    var token: String?
    var json = false
    var allReplicas = false
    var replicas: [String]?
    var timeoutSeconds = 30
    var prefix: String?
    var route: String?
    var key: String?
    var all = false
    var value: String?
    var expiresIn: Int?
    var positional: [String] = []
  }

  /// A command-line mistake: printed with the usage, exit status 2.
  struct UsageError: Error {
    let message: String
  }

  static func run(_ arguments: [String]) -> Int32 {
    // Help wins over everything else on the line, so asking about a verb never runs it.
    if arguments.contains("--help") || arguments.contains("-h") {
      print(AdminHelp.text(for: AdminHelp.words(in: arguments)))
      return 0
    }
    do {
      var options = try parse(arguments)
      if options.positional.isEmpty {
        print(usage)
        return 2
      }
      if options.token == nil, let environment = getenv("GATEHOUSE_ADMIN_TOKEN") {
        let token = String(cString: environment)
        if !token.isEmpty { options.token = token }
      }
      if options.url == nil, let environment = getenv("GATEHOUSE_ADMIN_URL") {
        let url = String(cString: environment)
        if !url.isEmpty { options.url = url }
      }
      if let configPath = options.configPath { try useConfig(configPath, options: &options) }
      let action = try Action(options.positional, options: &options)
      let base = try BaseURL(options.url ?? Options.defaultURL)
      if !base.secure && (options.caPath != nil || options.insecure) {
        throw UsageError(message: "--ca and --insecure apply to an https:// --url only")
      }
      if options.insecure && options.caPath != nil { throw UsageError(message: "give --ca or --insecure, not both") }
      let targets = try replicaTargets(options: options, base: base)
      let tls = try base.secure ? tlsSettings(options) : nil
      var failed = false
      for target in targets {
        let prefix = targets.count > 1 || options.allReplicas ? "[\(target.label)] " : ""
        let client = AdminHTTPClient(
          host: target.host, port: target.port, hostHeader: target.hostHeader, timeoutSeconds: options.timeoutSeconds,
          tls: tls.map { AdminTLS(context: $0.context, serverName: target.serverName, systemTrust: $0.systemTrust) })
        switch action.execute(client: client, basePath: base.path, options: options) {
        case .success(let lines, let notes):
          for line in lines { print(prefix + line) }
          // Hints go to stderr so that stdout stays the answer (and `--json` stays JSON).
          for note in notes { FileHandleStandardError.write("gatehouse admin: \(prefix)\(note)\n") }
        case .failure(let lines):
          failed = true
          for line in lines { FileHandleStandardError.write("gatehouse admin: \(prefix)\(line)\n") }
        }
      }
      return failed ? 1 : 0
    } catch let error as UsageError {
      FileHandleStandardError.write("gatehouse admin: \(error.message)\n\(usage)\n")
      return 2
    } catch let error as AdminClientError {
      FileHandleStandardError.write("gatehouse admin: \(error.description)\n")
      return 1
    } catch {
      FileHandleStandardError.write("gatehouse admin: \(error)\n")
      return 1
    }
  }

  static func parse(_ arguments: [String]) throws(UsageError) -> Options {
    var options = Options()
    var index = 0
    while index < arguments.count {
      var argument = arguments[index]
      index += 1
      // `--name=value` is the same as `--name value`.
      var inlineValue: String?
      if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
        inlineValue = String(argument[argument.index(after: equals)...])
        argument = String(argument[..<equals])
      }
      func value() throws(UsageError) -> String {
        if let inlineValue { return inlineValue }
        guard index < arguments.count else { throw UsageError(message: "\(argument) needs a value") }
        index += 1
        return arguments[index - 1]
      }
      switch argument {
      case "--url": options.url = try value()
      case "--config", "-c": options.configPath = try value()
      case "--token": options.token = try value()
      case "--ca": options.caPath = try value()
      case "--insecure": options.insecure = true
      case "--json": options.json = true
      case "--all-replicas": options.allReplicas = true
      case "--replicas":
        options.replicas = try value().split(separator: ",").map { String($0).trimmed }.filter { !$0.isEmpty }
      case "--timeout":
        let text = try value()
        guard let seconds = Int(text), seconds > 0 else { throw UsageError(message: "--timeout needs whole seconds") }
        options.timeoutSeconds = seconds
      case "--prefix": options.prefix = try value()
      case "--route": options.route = try value()
      case "--key": options.key = try value()
      case "--all": options.all = true
      case "--value": options.value = try value()
      case "--expires-in":
        let text = try value()
        guard let seconds = Int(text), seconds > 0 else {
          throw UsageError(message: "--expires-in needs a positive number of seconds")
        }
        options.expiresIn = seconds
      default:
        if argument.hasPrefix("-") && argument != "-" { throw UsageError(message: "unknown option \(argument)") }
        options.positional.append(argument)
      }
    }
    return options
  }

  /// Fills what the command line and the environment left open from the gateway's config
  /// file: the admin address (loopback for a wildcard one) and scheme, and the token.
  static func useConfig(_ path: String, options: inout Options) throws(UsageError) {
    let config: GatehouseConfig
    do {
      config = try ConfigLoader.load(contentsOf: path)
    } catch {
      throw UsageError(message: "--config \(path): " + error.lines.joined(separator: "; "))
    }
    if options.url == nil {
      let listen = config.admin.listen
      let host: String
      switch (listen.family, listen.host) {
      case (.ipv4, "0.0.0.0"): host = "127.0.0.1"
      case (.ipv6, "::"): host = "[::1]"
      case (.ipv6, let text): host = "[\(text)]"
      default: host = listen.host
      }
      options.url = (config.admin.tls == nil ? "http://" : "https://") + "\(host):\(listen.port)"
    }
    if options.token == nil, let token = config.admin.token?.value, !token.isEmpty { options.token = token }
  }

  /// The scheme, host, port and path prefix of `--url`: https for an admin listener with
  /// `admin.tls`, http otherwise.
  struct BaseURL {
    var secure: Bool
    var host: String
    var port: UInt16
    var path: String

    init(_ text: String) throws(UsageError) {
      let scheme: String
      if text.hasPrefix("https://") {
        scheme = "https://"
      } else if text.hasPrefix("http://") {
        scheme = "http://"
      } else {
        throw UsageError(message: "--url must start with http:// or https://")
      }
      secure = scheme == "https://"
      let rest = text.dropFirst(scheme.count)
      let authority = rest.prefix { $0 != "/" }
      var basePath = String(rest.dropFirst(authority.count))
      while basePath.hasSuffix("/") { basePath.removeLast() }
      path = basePath
      (host, port) = try Self.hostAndPort(String(authority), defaultPort: secure ? 443 : 80)
    }

    /// Splits `host[:port]` or `[v6]:port`.
    static func hostAndPort(_ text: String, defaultPort: UInt16) throws(UsageError) -> (String, UInt16) {
      var host = text
      var portText: String?
      if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
        host = String(text[text.index(after: text.startIndex)..<close])
        let after = text[text.index(after: close)...]
        if after.hasPrefix(":") { portText = String(after.dropFirst()) }
      } else if let colon = text.lastIndex(of: ":") {
        host = String(text[..<colon])
        portText = String(text[text.index(after: colon)...])
      }
      guard !host.isEmpty else { throw UsageError(message: "no host in '\(text)'") }
      guard let portText else { return (host, defaultPort) }
      guard let port = UInt16(portText), port > 0 else { throw UsageError(message: "bad port in '\(text)'") }
      return (host, port)
    }
  }

  /// One place a call goes to.
  struct Target {
    var host: String
    var port: UInt16
    var hostHeader: String
    var label: String
    /// The name its certificate must carry over https: the `--url` host, for every replica.
    var serverName: String
  }

  /// The TLS context for an https `--url`, built once for every replica. `--insecure` is
  /// said on stderr on every run: the admin token then goes to whoever answers.
  static func tlsSettings(_ options: Options) throws -> (context: TLSContext, systemTrust: Bool) {
    if options.insecure {
      FileHandleStandardError.write(
        "gatehouse admin: warning: --insecure: the admin listener's certificate is not verified; "
          + "anyone between here and there can read the admin token\n")
    }
    do {
      let context = try TLSContext(client: TLSClientConfiguration(caPath: options.caPath, verify: !options.insecure))
      return (context, !options.insecure && options.caPath == nil)
    } catch {
      throw AdminClientError(description: "\(error)")
    }
  }

  /// The `--url` host alone; with `--all-replicas`, every `--replicas` entry or every A
  /// record of the `--url` host.
  static func replicaTargets(options: Options, base: BaseURL) throws -> [Target] {
    func authority(_ host: String, _ port: UInt16) -> String {
      host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
    if let replicas = options.replicas {
      guard !replicas.isEmpty else { throw UsageError(message: "--replicas lists no replica") }
      return try replicas.map { entry throws(UsageError) in
        let (host, port) = try BaseURL.hostAndPort(entry, defaultPort: base.port)
        let label = authority(host, port)
        // Replicas are usually reached by address; their certificate names the service.
        return Target(host: host, port: port, hostHeader: label, label: label, serverName: base.host)
      }
    }
    guard options.allReplicas else {
      let label = authority(base.host, base.port)
      return [Target(host: base.host, port: base.port, hostHeader: label, label: label, serverName: base.host)]
    }
    let addresses = try AdminHTTPClient.resolveIPv4(base.host)
    guard !addresses.isEmpty else { throw AdminClientError(description: "\(base.host) has no A record") }
    return addresses.map { address in
      let label = authority(address, base.port)
      return Target(host: address, port: base.port, hostHeader: label, label: label, serverName: base.host)
    }
  }
}

/// How one replica's call ended: the lines to print on stdout (and hints for stderr), or
/// the lines to print on stderr.
enum AdminOutcome {
  case success([String], notes: [String] = [])
  case failure([String])
}

/// What the verb asks for, checked before any connection is made.
enum Action {
  case status
  case cacheStats
  case cacheList(prefix: String?, route: String?)
  case purgeAll
  case purgePrefix(String)
  case purgeRoute(String)
  case purgeKey(String)
  case tokensList
  case setToken(name: String, value: String, expiresIn: Int?)
  case refreshToken(String)
  case invalidateToken(String)
  case jwtList
  case refreshJWTKeys(String)
  case upstreams
  case reload

  typealias UsageError = AdminCommand.UsageError

  init(_ words: [String], options: inout AdminCommand.Options) throws(UsageError) {
    func noMore(_ count: Int) throws(UsageError) {
      guard words.count == count else {
        throw UsageError(message: "unexpected '\(words[count...].joined(separator: " "))'")
      }
    }
    func name() throws(UsageError) -> String {
      guard words.count >= 3 else { throw UsageError(message: "tokens \(words[1]) needs a token NAME") }
      try noMore(3)
      return words[2]
    }
    let verbOptions: [String]
    switch (words.first, words.count > 1 ? words[1] : nil) {
    case ("status", _):
      try noMore(1)
      self = .status
      verbOptions = []
    case ("upstreams", _):
      try noMore(1)
      self = .upstreams
      verbOptions = []
    case ("reload", _):
      try noMore(1)
      self = .reload
      verbOptions = []
    case ("cache", "stats"):
      try noMore(2)
      self = .cacheStats
      verbOptions = []
    case ("cache", "list"):
      try noMore(2)
      self = .cacheList(prefix: options.prefix, route: options.route)
      verbOptions = ["prefix", "route"]
    case ("cache", "purge"):
      try noMore(2)
      let chosen = [options.prefix != nil, options.route != nil, options.key != nil, options.all].filter { $0 }.count
      guard chosen == 1 else {
        throw UsageError(message: "cache purge needs exactly one of --prefix P, --route NAME, --key ID, --all")
      }
      if let prefix = options.prefix {
        guard !prefix.isEmpty else { throw UsageError(message: "--prefix is empty (use --all to purge everything)") }
        self = .purgePrefix(prefix)
      } else if let route = options.route {
        guard !route.isEmpty else { throw UsageError(message: "--route is empty") }
        self = .purgeRoute(route)
      } else if let key = options.key {
        self = .purgeKey(key)
      } else {
        self = .purgeAll
      }
      verbOptions = ["prefix", "route", "key", "all"]
    case ("tokens", "list"):
      try noMore(2)
      self = .tokensList
      verbOptions = []
    case ("tokens", "set"):
      let tokenName = try name()
      guard var value = options.value else { throw UsageError(message: "tokens set needs --value V") }
      if value == "-" { value = Self.readStandardInput() }
      self = .setToken(name: tokenName, value: value, expiresIn: options.expiresIn)
      verbOptions = ["value", "expires-in"]
    case ("tokens", "refresh"):
      self = .refreshToken(try name())
      verbOptions = []
    case ("tokens", "invalidate"):
      self = .invalidateToken(try name())
      verbOptions = []
    case ("jwt", "list"):
      try noMore(2)
      self = .jwtList
      verbOptions = []
    case ("jwt", "refresh"):
      self = .refreshJWTKeys(try name())
      verbOptions = []
    default:
      throw UsageError(message: AdminHelp.unknownVerbMessage(words))
    }
    // An option given to a verb that does not take it is a mistake worth stopping for:
    // `cache stats --prefix x` would otherwise quietly show everything.
    let given: [(String, Bool)] = [
      ("prefix", options.prefix != nil), ("route", options.route != nil), ("key", options.key != nil),
      ("all", options.all),
      ("value", options.value != nil), ("expires-in", options.expiresIn != nil),
    ]
    for (option, isGiven) in given where isGiven && !verbOptions.contains(option) {
      throw UsageError(message: "--\(option) does not apply to '\(words.joined(separator: " "))'")
    }
  }

  /// The token value from standard input, without the final line break.
  static func readStandardInput() -> String {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
      let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      if count <= 0 { break }
      bytes.append(contentsOf: buffer[0..<count])
    }
    if bytes.last == 0x0A { bytes.removeLast() }
    if bytes.last == 0x0D { bytes.removeLast() }
    return String(decoding: bytes, as: UTF8.self)
  }

  func execute(client: AdminHTTPClient, basePath: String, options: AdminCommand.Options) -> AdminOutcome {
    let call = AdminCall(client: client, basePath: basePath, token: options.token)
    switch self {
    case .status:
      return call.run(.get, "/admin/status", json: options.json) { AdminFormat.keyValues($0) }
    case .cacheStats:
      return call.run(.get, "/admin/cache", json: options.json) { AdminFormat.keyValues($0) }
    case .cacheList(let prefix, let route):
      return call.listEntries(prefix: prefix, route: route, json: options.json)
    case .purgeAll:
      return call.run(.delete, "/admin/cache", json: options.json) { AdminFormat.purged($0) }
    case .purgePrefix(let prefix):
      switch call.send(.delete, "/admin/cache/entries?prefix=" + AdminCall.percentEncoded(prefix)) {
      case .failure(let lines):
        return .failure(lines)
      case .success(let answer, let document):
        let lines = options.json ? [answer.bodyText.trimmed] : AdminFormat.purged(document)
        // Nothing purged is most often a prefix without the upstream's base path
        // (`/users/` for `/api/v1/users/`): say which stored paths come near it.
        guard AdminFormat.text(document["purged"]) == "0" else { return .success(lines) }
        return .success(lines, notes: call.prefixHints(for: prefix))
      }
    case .purgeRoute(let route):
      return call.run(.delete, "/admin/routes/\(AdminCall.percentEncoded(route))/cache", json: options.json) {
        AdminFormat.purged($0)
      }
    case .purgeKey(let id):
      return call.run(.delete, "/admin/cache/entries/" + AdminCall.percentEncoded(id), json: options.json) {
        AdminFormat.purged($0)
      }
    case .tokensList:
      return call.run(.get, "/admin/tokens", json: options.json) { AdminFormat.tokens($0["tokens"]?.arrayValue ?? []) }
    case .setToken(let name, let value, let expiresIn):
      var members: [(key: String, value: JSONValue)] = [("value", .string(value))]
      if let expiresIn { members.append(("expires_in", .number(JSONNumber(integer: Int64(expiresIn))))) }
      return call.run(
        .put, "/admin/tokens/" + AdminCall.percentEncoded(name), body: JSONValue.object(members).serializedBytes(),
        json: options.json
      ) { AdminFormat.tokens([$0]) }
    case .refreshToken(let name):
      return call.run(.post, "/admin/tokens/\(AdminCall.percentEncoded(name))/refresh", json: options.json) {
        AdminFormat.tokens([$0])
      }
    case .invalidateToken(let name):
      return call.run(.post, "/admin/tokens/\(AdminCall.percentEncoded(name))/invalidate", json: options.json) {
        AdminFormat.tokens([$0])
      }
    case .jwtList:
      return call.run(.get, "/admin/jwt", json: options.json) {
        AdminFormat.jwtProviders($0["providers"]?.arrayValue ?? [])
      }
    case .refreshJWTKeys(let name):
      return call.run(.post, "/admin/jwt/\(AdminCall.percentEncoded(name))/refresh", json: options.json) {
        AdminFormat.jwtProviders([$0])
      }
    case .upstreams:
      return call.run(.get, "/admin/upstreams", json: options.json) {
        AdminFormat.upstreams($0["upstreams"]?.arrayValue ?? [])
      }
    case .reload:
      return call.run(.post, "/admin/reload", json: options.json) { _ in ["reloaded"] }
    }
  }
}

/// One admin call to one replica: authorization, the answer's JSON, and error messages.
struct AdminCall {
  let client: AdminHTTPClient
  let basePath: String
  let token: String?

  /// Sends the request; on 2xx renders the JSON answer (or prints it raw with `json`).
  func run(
    _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, json: Bool, render: (JSONValue) -> [String]
  ) -> AdminOutcome {
    switch send(method, path, body: body) {
    case .failure(let lines): return .failure(lines)
    case .success(let answer, let document):
      return .success(json ? [answer.bodyText.trimmed] : render(document))
    }
  }

  enum Answer {
    case success(AdminHTTPAnswer, JSONValue)
    case failure([String])
  }

  func send(_ method: HTTPMethod, _ path: String, body: [UInt8]? = nil) -> Answer {
    var headers: [(String, String)] = []
    if let token { headers.append(("Authorization", "Bearer \(token)")) }
    if body != nil { headers.append(("Content-Type", "application/json")) }
    let answer: AdminHTTPAnswer
    do {
      answer = try client.send(method: method, target: basePath + path, headers: headers, body: body)
    } catch {
      return .failure([error.description])
    }
    let document = try? JSONParser.parse(answer.body)
    guard (200..<300).contains(answer.status) else {
      var message = "\(method) \(path): HTTP \(answer.status)"
      if let error = document?["error"]?.stringValue {
        message += ": \(error)"
      } else if !answer.body.isEmpty {
        message += ": \(String(answer.bodyText.trimmed.prefix(300)))"
      }
      if answer.status == 401 && token == nil { message += " (give --token or set GATEHOUSE_ADMIN_TOKEN)" }
      var lines = [message]
      // A refused reload lists the config's problems; a failed refresh has the token's error.
      for item in document?["errors"]?.arrayValue ?? [] { lines.append("  " + AdminFormat.text(item)) }
      if let lastError = document?["last_error"]?.stringValue { lines.append("  last error: \(lastError)") }
      return .failure(lines)
    }
    guard let document else {
      return .failure(["\(method) \(path): HTTP \(answer.status) but the answer is not JSON"])
    }
    return .success(answer, document)
  }

  /// Every page of `/admin/cache/entries` (at most `maxPages` of 1000), or the failure's lines.
  func fetchEntries(prefix: String?, maxPages: Int = .max) -> Result<[JSONValue], AdminCallFailure> {
    var entries: [JSONValue] = []
    var cursor: String?
    var pages = 0
    repeat {
      var path = "/admin/cache/entries?limit=1000"
      if let prefix { path += "&prefix=" + Self.percentEncoded(prefix) }
      if let cursor { path += "&cursor=" + Self.percentEncoded(cursor) }
      switch send(.get, path) {
      case .failure(let lines): return .failure(AdminCallFailure(lines: lines))
      case .success(_, let document):
        entries += document["entries"]?.arrayValue ?? []
        cursor = document["next_cursor"]?.stringValue
      }
      pages += 1
    } while cursor != nil && pages < maxPages
    return .success(entries)
  }

  /// Every page of `/admin/cache/entries`, only the route's entries with `route`; `json`
  /// prints them as one document.
  func listEntries(prefix: String?, route: String?, json: Bool) -> AdminOutcome {
    var entries: [JSONValue]
    switch fetchEntries(prefix: prefix) {
    case .failure(let failure): return .failure(failure.lines)
    case .success(let all): entries = all
    }
    if let route { entries = entries.filter { $0["route"]?.stringValue == route } }
    if json {
      return .success([JSONValue.object([("entries", .array(entries)), ("next_cursor", .null)]).serializedString()])
    }
    return .success(AdminFormat.entries(entries))
  }

  /// What to say when `--prefix` purged nothing: the prefix as it would be after the
  /// upstream's base path (entries whose path holds it further in), else the stored paths
  /// sharing its longest start. Reads the first 10 pages of the listing at most.
  func prefixHints(for prefix: String) -> [String] {
    guard case .success(let entries) = fetchEntries(prefix: nil, maxPages: 10) else { return [] }
    return CachePrefixHints.lines(
      prefix: prefix,
      entries: entries.compactMap { entry in
        entry["path"]?.stringValue.map { (path: $0, route: entry["route"]?.stringValue) }
      })
  }

  /// Percent-encodes everything but RFC 3986 unreserved characters.
  static func percentEncoded(_ text: String) -> String {
    let digits = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    for byte in text.utf8 {
      switch byte {
      case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: out.append(byte)
      default: out += [0x25, digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
      }
    }
    return String(decoding: out, as: UTF8.self)
  }
}

/// A failed call's lines, as an `Error` so it can travel in a `Result`.
struct AdminCallFailure: Error {
  let lines: [String]
}

extension JSONValue {
  fileprivate var stringValue: String? {
    if case .string(let text) = self { return text }
    return nil
  }

  var arrayValue: [JSONValue]? {
    if case .array(let items) = self { return items }
    return nil
  }
}

extension String {
  /// Without leading and trailing spaces, tabs and line breaks.
  fileprivate var trimmed: String {
    let scalars = unicodeScalars
    let isSpace: (Unicode.Scalar) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
    guard let first = scalars.firstIndex(where: { !isSpace($0) }), let last = scalars.lastIndex(where: { !isSpace($0) })
    else { return "" }
    return String(scalars[first...last])
  }
}
