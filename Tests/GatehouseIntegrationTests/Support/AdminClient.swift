import Foundation

/// A client for a gateway's admin API (SPEC §6): one request per connection, with the
/// admin bearer token unless told otherwise. Every call is bounded by `timeout`.
struct AdminClient {
  let port: UInt16
  /// The admin token sent as `Authorization: Bearer`; nil sends none.
  let token: String?

  init(port: UInt16, token: String? = TestConfig.adminToken) {
    self.port = port
    self.token = token
  }

  /// Sends `method path` (with a JSON `body` when given) and reads the answer.
  func request(_ method: String, _ path: String, body: [UInt8]? = nil, timeout: Double = 20) throws
    -> ReceivedResponse
  {
    var headers: [(String, String)] = []
    if let token { headers.append(("Authorization", "Bearer \(token)")) }
    if body != nil { headers.append(("Content-Type", "application/json")) }
    return try send(method, path, to: port, headers: headers, body: body, timeout: timeout)
  }

  /// `GET /admin/tokens`: the `tokens` array (empty when the answer is not that shape).
  func tokens() throws -> [[String: Any]] {
    let response = try request("GET", "/admin/tokens")
    return (try? response.jsonObject())?["tokens"] as? [[String: Any]] ?? []
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
  func setToken(_ name: String, value: String, expiresIn: Int? = nil) throws -> ReceivedResponse {
    var object: [String: Any] = ["value": value]
    if let expiresIn { object["expires_in"] = expiresIn }
    let body = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    return try request("PUT", "/admin/tokens/\(name)", body: Array(body))
  }

  /// `POST /admin/tokens/{name}/refresh`.
  func refresh(_ name: String) throws -> ReceivedResponse {
    try request("POST", "/admin/tokens/\(name)/refresh", body: [])
  }

  /// `POST /admin/tokens/{name}/invalidate`.
  func invalidate(_ name: String) throws -> ReceivedResponse {
    try request("POST", "/admin/tokens/\(name)/invalidate", body: [])
  }
}

extension GatewayProcess {
  /// The admin listener's port, from the `{"msg":"admin listening","address":...}` line;
  /// waits up to `timeout` for it, nil when it never came.
  func adminPort(timeout: Double = 10) -> UInt16? {
    var port: UInt16?
    waitUntil(timeout: timeout) {
      port =
        logLines().lazy.filter { $0["msg"] as? String == "admin listening" }.compactMap { line in
          guard let address = line["address"] as? String, let colon = address.lastIndex(of: ":") else { return nil }
          return UInt16(address[address.index(after: colon)...])
        }.first
      return port != nil
    }
    return port
  }

  /// Waits until each of `tokens` is `valid` in the admin API. Tests call it before their
  /// first request where the token must already be in place (see `TokenEdgeTests`: a
  /// request in the first moments after start does not find static or restored tokens).
  func waitForValidTokens(_ tokens: [String], timeout: Double = 10) throws -> Bool {
    let admin = try admin()
    return tokens.allSatisfy { admin.waitForState($0, "valid", timeout: timeout) }
  }

  /// An admin client for this gateway (waits for the admin listener).
  func admin(token: String? = TestConfig.adminToken) throws -> AdminClient {
    guard let port = adminPort() else {
      throw GatewayStartError(description: "no 'admin listening' line; stdout: \(stdoutText)")
    }
    return AdminClient(port: port, token: token)
  }
}

extension TestConfig {
  /// The admin token of configs made by `withTokens`.
  static let adminToken = "itest-admin-token-5c1d"

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
