import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// What `check` warns about beyond decoding: routes hidden by earlier ones, health paths that
/// repeat the base path, stub bodies without the route's `key_path`, and `serve`'s warnings.
@Suite struct ConfigLintTests {
  private func routes(_ members: [String]) throws -> GatehouseConfig {
    try loadConfig(
      #"{"upstreams": {"api": {"url": "http://127.0.0.1:3000"}}, "routes": ["#
        + members.enumerated().map { index, member in
          #"{"name": "r\#(index)", "upstream": "api", "match": {\#(member)}}"#
        }.joined(separator: ", ") + "]}")
  }

  private func shadowWarnings(_ members: [String]) throws -> [String] {
    ConfigLint.shadowedRoutes(try routes(members).routes).map(\.description)
  }

  @Test func aPrefixOrTemplateBeforeALiteralHidesIt() throws {
    #expect(
      try shadowWarnings([#""path": "/*""#, #""path": "/users""#]) == [
        #"routes[1]: warning: route "r1" (/users) never matches: routes[0] ("r0", /*) comes first and takes every request it would"#
      ])
    #expect(try shadowWarnings([#""path": "/users/:id""#, #""path": "/users/me""#]).count == 1)
    #expect(try shadowWarnings([#""path": "/api/*""#, #""path": "/api/v1/*""#]).count == 1)
    #expect(try shadowWarnings([#""path": "/api/*""#, #""path": "/api""#]).count == 1)
    #expect(try shadowWarnings([#""path": "/a/:x/:y""#, #""path": "/a/:p/c""#]).count == 1)
  }

  @Test func routesInTheRightOrderOrThatDifferAreNotWarnedAbout() throws {
    #expect(try shadowWarnings([#""path": "/users""#, #""path": "/*""#]).isEmpty)
    #expect(try shadowWarnings([#""path": "/users/me""#, #""path": "/users/:id""#]).isEmpty)
    #expect(try shadowWarnings([#""path": "/users/:id""#, #""path": "/users""#]).isEmpty)
    #expect(try shadowWarnings([#""path": "/api/*""#, #""path": "/apiv2""#]).isEmpty)
    #expect(try shadowWarnings([#""path": "/users""#, #""path": "/users/*""#]).isEmpty)
    // A literal never covers a template (`/users/me` does not take `/users/7`).
    #expect(try shadowWarnings([#""path": "/users/me""#, #""path": "/users/:id""#]).isEmpty)
  }

  @Test func methodsDecideWhetherAndHowMuchIsHidden() throws {
    // Different methods: both routes get their requests.
    #expect(
      try shadowWarnings([#""path": "/*", "methods": ["POST"]"#, #""path": "/users", "methods": ["GET"]"#])
        .isEmpty)
    // GET also takes HEAD.
    #expect(
      try shadowWarnings([#""path": "/*", "methods": ["GET"]"#, #""path": "/users", "methods": ["HEAD"]"#]).count
        == 1)
    // Some methods hidden: said which.
    let partial = try shadowWarnings([
      #""path": "/*", "methods": ["GET"]"#, #""path": "/users", "methods": ["GET", "POST"]"#,
    ])
    #expect(
      partial == [
        #"routes[1]: warning: route "r1" (/users) never gets GET requests: routes[0] ("r0", /*) comes first and takes them"#
      ])
    // The later route takes any method, the earlier only GET: its GETs are hidden.
    #expect(try shadowWarnings([#""path": "/*", "methods": ["GET"]"#, #""path": "/users""#]).count == 1)
  }

  @Test func aHealthPathThatRepeatsTheBasePathIsWarnedAbout() throws {
    func warnings(url: String, health: String) throws -> [String] {
      let config = try loadConfig(
        #"{"upstreams": {"api": {"url": "\#(url)", "health": {"path": "\#(health)"}}}, "#
          + #""routes": [{"name": "r", "match": {"path": "/*"}, "upstream": "api"}]}"#)
      return ConfigLint.repeatedHealthBasePaths(config.upstreams).map(\.description)
    }
    #expect(
      try warnings(url: "http://h/api/v1", health: "/api/v1/health") == [
        #"upstreams.api.health.path: warning: /api/v1/health repeats the url's base path /api/v1: the check asks for /api/v1/api/v1/health (write "/health")"#
      ])
    #expect(try warnings(url: "http://h/api/v1", health: "/health").isEmpty)
    #expect(try warnings(url: "http://h/api/v1", health: "/api/v10").isEmpty)
    #expect(try warnings(url: "http://h", health: "/health").isEmpty)
  }

  @Test func aStubBodyWithoutTheKeyPathIsWarnedAbout() throws {
    func warnings(body: String, keyPath: String, mode: String = "always", status: Int = 200) throws -> [String] {
      let config = try loadConfig(
        #"{"routes": [{"name": "r", "match": {"path": "/"}, "stub": {"mode": "\#(mode)", "status": \#(status), "body": \#(body)}, "envelope": {"key_path": "\#(keyPath)"}}]}"#
      )
      return ConfigLint.stubKeyPaths(config.routes).map(\.description)
    }
    #expect(
      try warnings(body: #"[{"id": 1}]"#, keyPath: "users") == [
        #"routes[0].envelope.key_path: warning: "users" is not in stub.body, so the stub answers "datas": null (write the body as the backend answers it)"#
      ])
    #expect(try warnings(body: #"{"data": {"users": []}}"#, keyPath: "data.users").isEmpty)
    #expect(try warnings(body: #"{"users": [{"id": 1}]}"#, keyPath: "users.0.id").isEmpty)
    // An error stub has no `datas` to pick from.
    #expect(try warnings(body: "{}", keyPath: "users", status: 503).isEmpty)
  }

  /// `check` lists what `serve` logs at start: a `verify: false` upstream, a short or missing
  /// store key, a missing or short admin token.
  @Test func checkWarningsIncludeWhatServeLogs() throws {
    let config = try loadConfig(
      #"{"admin": {"listen": "0.0.0.0:9901", "token": "short-token", "tls": {"cert": "c", "key": "k"}}, "#
        + #""store": {"secret_key": "abc"}, "#
        + #""upstreams": {"api": {"url": "https://h", "tls": {"verify": false}}}, "#
        + #""routes": [{"name": "r", "match": {"path": "/"}, "upstream": "api"}]}"#)
    #expect(
      StartupWarnings.checkWarnings(for: config).map(\.description) == [
        "upstreams.api.tls.verify: warning: is false: the upstream's certificate is not checked, so anyone on the path can answer for it",
        "store.secret_key: warning: is short; use 32 random characters or more",
        "admin.token: warning: is short for a non-loopback listener; use 32 random characters or more",
      ])
    let noToken = try loadConfig(minimalConfigJSON)
    #expect(
      StartupWarnings.checkWarnings(for: noToken).map(\.path) == ["admin.token"])
  }

  @Test func theSummaryNamesListenersRoutesUpstreamsTokensAndCacheWindows() throws {
    let config = try loadConfig(
      configJSON(route: #""token": "api", "cache": {"fresh_s": 5, "stale_if_error_s": 60}"#))
    let lines = ConfigSummary.lines(for: config)
    #expect(lines.first == "listen:    127.0.0.1:8080  (one event loop per core)")
    #expect(
      lines.contains("  users  any /users/:id -> api /api/v1/users/:id  token api  cache fresh 5s, stale-if-error 60s"))
    #expect(lines.contains("tokens:    api (static)"))
    #expect(!lines.joined().contains("s3cret-token"))
  }
}
