import Foundation

extension GatewayProcess {
  /// The admin listener's port, from the `admin listening` log line (waits for it, bounded).
  func adminPort(timeout: Double = 10) -> UInt16? {
    var found: UInt16?
    waitUntil(timeout: timeout) {
      let line = logLines().first { $0["msg"] as? String == "admin listening" }
      guard let address = line?["address"] as? String, let colon = address.lastIndex(of: ":") else { return false }
      found = UInt16(address[address.index(after: colon)...])
      return found != nil
    }
    return found
  }

  /// An admin API client for this gateway with `token` (nil: no `Authorization`).
  func admin(token: String? = TestConfig.adminToken) throws -> AdminClient {
    guard let port = adminPort() else {
      throw GatewayStartError(description: "no 'admin listening' line; stdout: \(stdoutText)")
    }
    return AdminClient(port: port, token: token)
  }

  /// The config file a `GatewayProcess(config:)` runs on.
  var configURL: URL { directory.appendingPathComponent("gatehouse-test.json") }

  /// Replaces the config file (atomically, so a reload never reads half a file).
  func rewriteConfig(_ config: [String: Any]) throws {
    try TestConfig.write(config, to: configURL)
  }

  /// Replaces the config file with raw text (for configs that must be refused).
  func rewriteConfig(text: String) throws {
    try Data(text.utf8).write(to: configURL, options: .atomic)
  }

  /// Starts `gatehouse serve` on `config` inside `directory` (which the caller made, for
  /// example with `makeTestDirectory()`, and may have filled first). Like every
  /// `GatewayProcess`, the returned one removes `directory` when it goes away.
  static func start(config: [String: Any], in directory: URL, startTimeout: Double = 30) throws -> GatewayProcess {
    let url = directory.appendingPathComponent("gatehouse-test.json")
    try TestConfig.write(config, to: url)
    return try GatewayProcess(
      arguments: ["serve", "--config", url.path], directory: directory, startTimeout: startTimeout)
  }

  /// A fresh private directory for a gateway started with `start(config:in:)`.
  static func makeTestDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-itest-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
  }
}

extension TestConfig {
  /// The admin token the suites in this target configure (a canary: it must never be logged).
  static let adminToken = "admin-token-CANARY-7f3a9c"

  /// Writes `config` as JSON to `url`, atomically.
  static func write(_ config: [String: Any], to url: URL) throws {
    let data = try JSONSerialization.data(withJSONObject: config, options: [.prettyPrinted, .sortedKeys])
    try data.write(to: url, options: .atomic)
  }

  /// `config` with the admin API on a free loopback port protected by `token`.
  static func withAdmin(_ config: [String: Any], token: String = adminToken) -> [String: Any] {
    var config = config
    config["admin"] = ["listen": "127.0.0.1:0", "token": token]
    return config
  }

  /// An enveloped route (the envelope on, with `envelope` members merged in).
  static func envelopedRoute(
    _ name: String, match path: String, envelope: [String: Any] = [:], extra: [String: Any] = [:]
  ) -> [String: Any] {
    var settings: [String: Any] = ["enabled": true]
    for (key, value) in envelope { settings[key] = value }
    var merged = extra
    merged["envelope"] = settings
    return route(name, match: path, extra: merged)
  }
}

/// A client of the gateway's admin API (Docs/admin-openapi.json): one request per connection, with an
/// optional bearer token, answers parsed as JSON where asked.
struct AdminClient: Sendable {
  let port: UInt16
  let token: String?

  init(port: UInt16, token: String? = TestConfig.adminToken) {
    self.port = port
    self.token = token
  }

  /// What a request carries in `Authorization`.
  enum Credential: Sendable {
    /// `Bearer <token>` with the client's token (nothing when it has none).
    case configured
    /// No `Authorization` field.
    case none
    /// This exact field value.
    case header(String)
    /// One `Authorization` field per value, in this order.
    case headers([String])
  }

  /// Sends `method path` with `credential`.
  func request(
    _ method: String, _ path: String, credential: Credential = .configured, body: [UInt8]? = nil,
    timeout: Double = 10
  ) throws -> ReceivedAnswer {
    var headers: [(String, String)] = []
    switch credential {
    case .configured: if let token { headers.append(("Authorization", "Bearer \(token)")) }
    case .none: break
    case .header(let value): headers.append(("Authorization", value))
    case .headers(let values): headers += values.map { ("Authorization", $0) }
    }
    if body != nil { headers.append(("Content-Type", "application/json")) }
    return try send(method, path, to: port, headers: headers, body: body, timeout: timeout)
  }

  /// `GET path`, which must answer 200 with a JSON object; the object.
  func json(_ path: String, method: String = "GET") throws -> [String: Any] {
    let answer = try request(method, path)
    guard answer.status == 200 else {
      throw TestSocketError.malformed("\(method) \(path) answered \(answer.status): \(answer.text)")
    }
    return try answer.jsonObject()
  }

  /// The number of stored cache entries (`GET /admin/cache`).
  func cacheEntryCount() throws -> Int {
    try json("/admin/cache")["entries"] as? Int ?? -1
  }

  /// Waits until the store holds at least `count` entries; false if not within `timeout`.
  /// Store writes are asynchronous, so tests that need an answer on disk wait for it here.
  @discardableResult
  func waitForStoredEntries(_ count: Int, timeout: Double = 10) -> Bool {
    waitUntil(timeout: timeout, interval: .milliseconds(25)) { ((try? cacheEntryCount()) ?? -1) >= count }
  }

  /// Every entry listed by `GET /admin/cache/entries` (following cursors, bounded).
  func allEntries(prefix: String? = nil, limit: Int = 100) throws -> [[String: Any]] {
    var entries: [[String: Any]] = []
    var cursor: String?
    for _ in 0..<100 {
      var path = "/admin/cache/entries?limit=\(limit)"
      if let prefix { path += "&prefix=\(percentEncoded(prefix))" }
      if let cursor { path += "&cursor=\(percentEncoded(cursor))" }
      let page = try json(path)
      entries += page["entries"] as? [[String: Any]] ?? []
      guard let next = page["next_cursor"] as? String else { return entries }
      cursor = next
    }
    throw TestSocketError.malformed("more than 100 pages of cache entries")
  }

  /// The circuit state of upstream `name` from `GET /admin/upstreams`.
  func circuitState(of name: String) throws -> String? {
    let upstreams = try json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    return upstreams.first { $0["name"] as? String == name }?["circuit"] as? String
  }

  /// The routes whose own circuit is open on upstream `name`.
  func openRoutes(of name: String) throws -> [String]? {
    let upstreams = try json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    return upstreams.first { $0["name"] as? String == name }?["open_routes"] as? [String]
  }
}

/// `text` with every byte outside the URL-safe unreserved set percent-encoded.
func percentEncoded(_ text: String) -> String {
  var out = ""
  for byte in text.utf8 {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
      UInt8(ascii: "~"), UInt8(ascii: "/"):
      out.append(Character(Unicode.Scalar(byte)))
    default:
      let digits = Array("0123456789ABCDEF")
      out += "%\(digits[Int(byte >> 4)])\(digits[Int(byte & 0xF)])"
    }
  }
  return out
}

/// The token endpoints (Docs/admin-openapi.json).
extension AdminClient {
  /// `GET /admin/tokens`: the `tokens` array (empty when the answer is not that shape).
  func tokens() throws -> [[String: Any]] {
    let answer = try request("GET", "/admin/tokens")
    return (try? answer.jsonObject())?["tokens"] as? [[String: Any]] ?? []
  }

  /// The public state of the token `name` from `GET /admin/tokens`, or nil.
  func token(_ name: String) throws -> [String: Any]? {
    try tokens().first { $0["name"] as? String == name }
  }

  /// Waits until the token `name` is in `state` (as `GET /admin/tokens` shows it); false if
  /// not within `timeout`. Use it before changing a token endpoint's mode, so a login still
  /// in flight is not mistaken for a later one.
  @discardableResult
  func waitForState(_ name: String, _ state: String, timeout: Double = 10) -> Bool {
    waitUntil(timeout: timeout, interval: .milliseconds(50)) { (try? token(name))?["state"] as? String == state }
  }

  /// `PUT /admin/tokens/{name}` with `{"value": value, "expires_in": expiresIn}`.
  func setToken(_ name: String, value: String, expiresIn: Int? = nil) throws -> ReceivedAnswer {
    var object: [String: Any] = ["value": value]
    if let expiresIn { object["expires_in"] = expiresIn }
    let body = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    return try request("PUT", "/admin/tokens/\(name)", body: Array(body))
  }

  /// `POST /admin/tokens/{name}/refresh`.
  func refresh(_ name: String) throws -> ReceivedAnswer {
    try request("POST", "/admin/tokens/\(name)/refresh", body: [])
  }

  /// `POST /admin/tokens/{name}/invalidate`.
  func invalidate(_ name: String) throws -> ReceivedAnswer {
    try request("POST", "/admin/tokens/\(name)/invalidate", body: [])
  }
}

extension GatewayProcess {
  /// Waits until each of `tokens` is `valid` in the admin API. Tests call it before their
  /// first request where the token must already be in place (see `TokenEdgeTests`: a
  /// request in the first moments after start does not find static or restored tokens).
  func waitForValidTokens(_ tokens: [String], timeout: Double = 10) throws -> Bool {
    let admin = try admin()
    return tokens.allSatisfy { admin.waitForState($0, "valid", timeout: timeout) }
  }
}

extension TestConfig {
  /// A config for token tests: the upstream `api` at 127.0.0.1:`upstreamPort`, `tokens`,
  /// `routes`, an admin token, and optionally a `store` block and a log level.
  static func withTokens(
    upstreamPort: UInt16, tokens: [String: [String: Any]], routes: [[String: Any]], store: [String: Any]? = nil,
    logLevel: String = "info"
  ) -> [String: Any] {
    var config = make(routes: routes, upstreams: ["api": upstream(port: upstreamPort)])
    config["tokens"] = tokens
    config["admin"] = ["listen": "127.0.0.1:0", "token": adminToken]
    if let store { config["store"] = store }
    config["log"] = ["level": logLevel, "access": "stdout", "format": "json"]
    return config
  }

  /// A pass-through route (envelope off unless `extra` says otherwise) that injects `token`.
  static func tokenRoute(
    _ name: String, match path: String, token: String, methods: [String]? = nil, extra: [String: Any] = [:]
  ) -> [String: Any] {
    var members = extra
    members["token"] = token
    return route(name, match: path, methods: methods, extra: members)
  }
}

/// The bearer token a backend request carried (`Authorization: Bearer <token>`), if any.
func bearerToken(of request: ReceivedRequest) -> String? {
  guard let value = request.head.value("Authorization"), value.hasPrefix("Bearer ") else { return nil }
  return String(value.dropFirst("Bearer ".count))
}
