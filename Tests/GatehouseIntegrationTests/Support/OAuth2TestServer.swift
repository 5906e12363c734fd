import Foundation
import Synchronization

/// An in-process OAuth 2 token endpoint (the client credentials grant, RFC 6749 §4.4) for
/// token tests, built on `TestBackend`. It counts every request, checks each one (POST to
/// `path`, a form body with `grant_type=client_credentials` and the expected `scope`, HTTP
/// Basic client authentication with the expected id and secret), and answers as its `mode`
/// says. Issued tokens are `<tokenPrefix>-<n>` (n = 1, 2, … in issue order), with the
/// lifetime `lifetimes[n - 1]` (the last entry repeats; nil sends no `expires_in`).
///
/// A request that fails a check gets 401 `invalid_client` whatever the mode, and the
/// problem is kept in `problems`, so a test can assert that the gateway's logins were all
/// well-formed.
final class OAuth2TestServer: Sendable {
  /// How the endpoint answers well-formed requests.
  enum Mode: Sendable {
    /// Issues a token at once.
    case issue
    /// Issues a token after this delay.
    case slow(Duration)
    /// Issues a token once the gate opens (the test decides when the login completes).
    case held(Gate)
    /// Refuses with 400 `{"error":"invalid_client","error_description":<description>}`.
    case fail(description: String)
    /// Answers 200 with a JSON content type and a body that is not JSON.
    case garbage
    /// Reads the request, then closes the connection without a byte of answer.
    case close
    /// Answers with exactly this (for hostile or unusual token answers); issues nothing.
    case answer(BackendAnswer)
  }

  /// One request the endpoint received.
  struct Login: Sendable {
    /// When it arrived.
    let arrivedAt: ContinuousClock.Instant
    /// The token issued for it, if one was.
    let issuedToken: String?
    /// What was wrong with the request (empty when it was well-formed).
    let problems: [String]
  }

  private struct State {
    var mode: Mode = .issue
    var lifetimes: [Int?]
    var issued = 0
    var logins: [Login] = []
  }

  /// The state, shared by the server object and the request handler.
  private final class Shared: Sendable {
    let state: Mutex<State>
    init(_ state: State) { self.state = Mutex(state) }
  }

  /// The token endpoint's path.
  static let path = "/oauth/token"

  let clientID: String
  let clientSecret: String
  /// The `scope` the gateway must send (nil: none).
  let scope: String?
  let tokenPrefix: String
  private let shared: Shared
  private let backend: TestBackend

  /// Starts the endpoint on a kernel-chosen port.
  init(
    clientID: String = "gatehouse-itest", clientSecret: String = "itest-client-secret", scope: String? = "read write",
    tokenPrefix: String = "oauth-token", lifetimes: [Int?] = [3600]
  ) throws {
    precondition(!lifetimes.isEmpty, "lifetimes needs at least one entry")
    self.clientID = clientID
    self.clientSecret = clientSecret
    self.scope = scope
    self.tokenPrefix = tokenPrefix
    let shared = Shared(State(lifetimes: lifetimes))
    self.shared = shared
    let expected = Expectation(clientID: clientID, clientSecret: clientSecret, scope: scope)
    backend = try TestBackend { request in
      Self.answer(request, expected: expected, tokenPrefix: tokenPrefix, shared: shared)
    }
  }

  deinit { stop() }

  /// The port it listens on (127.0.0.1).
  var port: UInt16 { backend.port }

  /// The `token_url` for the gateway config.
  var tokenURL: String { "http://127.0.0.1:\(port)\(Self.path)" }

  /// A `tokens` entry of type `oauth2_client_credentials` pointing here.
  func tokenConfig(refreshBeforeS: Int? = nil, clientSecret secret: String? = nil) -> [String: Any] {
    var config: [String: Any] = [
      "type": "oauth2_client_credentials", "token_url": tokenURL, "client_id": clientID,
      "client_secret": secret ?? clientSecret,
    ]
    if let scope { config["scope"] = scope }
    if let refreshBeforeS { config["refresh_before_s"] = refreshBeforeS }
    return config
  }

  /// Changes how later requests are answered.
  func setMode(_ mode: Mode) { shared.state.withLock { $0.mode = mode } }

  /// Every request received so far, in arrival order.
  var logins: [Login] { shared.state.withLock { $0.logins } }

  /// Requests received so far (well-formed or not, answered or not).
  var requestCount: Int { shared.state.withLock { $0.logins.count } }

  /// Tokens issued so far.
  var issuedCount: Int { shared.state.withLock { $0.issued } }

  /// Every problem found in any request so far.
  var problems: [String] { shared.state.withLock { $0.logins.flatMap(\.problems) } }

  /// The token issued `n`-th (1-based).
  func token(_ n: Int) -> String { "\(tokenPrefix)-\(n)" }

  /// Waits until at least `count` requests have arrived; false if not within `timeout`.
  @discardableResult
  func waitForRequests(_ count: Int, timeout: Double = 10) -> Bool {
    waitUntil(timeout: timeout) { requestCount >= count }
  }

  /// Stops the endpoint; connections to its port are refused afterwards.
  func stop() { backend.stop() }

  // MARK: Answering

  private struct Expectation: Sendable {
    let clientID: String
    let clientSecret: String
    let scope: String?
  }

  private static func answer(
    _ request: ReceivedRequest, expected: Expectation, tokenPrefix: String, shared: Shared
  ) -> BackendAction {
    let problems = check(request, expected: expected)
    let (mode, issued) = shared.state.withLock { state -> (Mode, (token: String, lifetime: Int?)?) in
      var issued: (token: String, lifetime: Int?)?
      if problems.isEmpty {
        switch state.mode {
        case .issue, .slow, .held:
          state.issued += 1
          issued = ("\(tokenPrefix)-\(state.issued)", state.lifetimes[min(state.issued, state.lifetimes.count) - 1])
        case .fail, .garbage, .close, .answer:
          break
        }
      }
      state.logins.append(Login(arrivedAt: .now, issuedToken: issued?.token, problems: problems))
      return (state.mode, issued)
    }
    guard problems.isEmpty else {
      return .respond(
        json(["error": "invalid_client", "error_description": "request refused by the test server"], 401))
    }
    if let issued {
      var body: [String: Any] = ["access_token": issued.token, "token_type": "Bearer"]
      if let lifetime = issued.lifetime { body["expires_in"] = lifetime }
      var answer = json(body, 200)
      if case .slow(let delay) = mode { answer.delay = delay }
      if case .held(let gate) = mode { answer.holdUntil = gate }
      return .respond(answer)
    }
    switch mode {
    case .fail(let description):
      return .respond(json(["error": "invalid_client", "error_description": description], 400))
    case .garbage:
      return .respond(
        BackendAnswer(
          status: 200, headers: [("Content-Type", "application/json")],
          body: .bytes(Array("<html>this is not a token</html>".utf8))))
    case .close:
      return .close
    case .answer(let answer):
      return .respond(answer)
    case .issue, .slow, .held:
      return .close  // not reached: these issue a token above
    }
  }

  private static func json(_ object: [String: Any], _ status: Int) -> BackendAnswer {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
    return BackendAnswer(
      status: status, reason: status == 200 ? "OK" : "Error",
      headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")], body: .bytes(Array(data)))
  }

  /// What is wrong with a token request, per RFC 6749 §2.3.1 and §4.4.2.
  private static func check(_ request: ReceivedRequest, expected: Expectation) -> [String] {
    var problems: [String] = []
    if request.method != "POST" { problems.append("method \(request.method), expected POST") }
    if request.path != path { problems.append("path \(request.path), expected \(path)") }
    let contentType = request.head.value("Content-Type")?.lowercased() ?? ""
    if !contentType.hasPrefix("application/x-www-form-urlencoded") {
      problems.append("Content-Type '\(contentType)', expected a form")
    }
    let authorization = request.head.values("Authorization")
    if authorization.count != 1 {
      problems.append("\(authorization.count) Authorization fields, expected 1")
    } else if let credentials = basicCredentials(authorization[0]) {
      if credentials.id != expected.clientID { problems.append("client id '\(credentials.id)'") }
      if credentials.secret != expected.clientSecret { problems.append("wrong client secret") }
    } else {
      problems.append("Authorization is not HTTP Basic")
    }
    let form = formFields(request.bodyText)
    if form["grant_type"] != ["client_credentials"] {
      problems.append("grant_type \(form["grant_type"] ?? []), expected client_credentials")
    }
    if let scope = expected.scope, form["scope"] != [scope] {
      problems.append("scope \(form["scope"] ?? []), expected '\(scope)'")
    }
    if expected.scope == nil, form["scope"] != nil { problems.append("unexpected scope") }
    if form["client_secret"] != nil { problems.append("client_secret in the form body") }
    return problems
  }

  /// The id and secret of `Basic <base64(id:secret)>`, each form-decoded (RFC 6749 §2.3.1).
  static func basicCredentials(_ value: String) -> (id: String, secret: String)? {
    let parts = value.split(separator: " ", maxSplits: 1)
    guard parts.count == 2, parts[0].lowercased() == "basic",
      let data = Data(base64Encoded: String(parts[1])), let text = String(data: data, encoding: .utf8),
      let colon = text.firstIndex(of: ":")
    else { return nil }
    return (formDecode(String(text[..<colon])), formDecode(String(text[text.index(after: colon)...])))
  }

  /// The fields of an `application/x-www-form-urlencoded` body, each name with its values.
  static func formFields(_ body: String) -> [String: [String]] {
    var fields: [String: [String]] = [:]
    for pair in body.split(separator: "&") {
      let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      let name = formDecode(String(parts[0]))
      let value = parts.count > 1 ? formDecode(String(parts[1])) : ""
      fields[name, default: []].append(value)
    }
    return fields
  }

  private static func formDecode(_ text: String) -> String {
    let spaced = text.replacingOccurrences(of: "+", with: " ")
    return spaced.removingPercentEncoding ?? spaced
  }
}
