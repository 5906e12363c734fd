import Testing

@testable import GatehouseConfig
@testable import GatehouseJSON

/// Each test feeds one mistake and checks the exact `path: problem` line `check` prints.
@Suite struct ConfigValidationTests {
  @Test func minimalConfigIsValid() {
    #expect(issueLines(minimalConfigJSON) == ["loaded"])
    #expect(issueLines(configJSON()) == ["loaded"])
  }

  @Test func reportsEveryProblemNotJustTheFirst() {
    let json = """
      {
        "workers": -1,
        "limits": { "max_conections": 5 },
        "log": { "level": "verbose" },
        "routes": [ { "name": "r", "match": { "path": "users" }, "upstream": "api" } ]
      }
      """
    #expect(
      issueLines(json) == [
        "workers: must not be negative, got -1",
        #"limits.max_conections: unknown key (did you mean "max_connections"?)"#,
        #"routes[0].match.path: path must start with '/'"#,
        #"routes[0].upstream: unknown upstream "api" (no upstreams are defined)"#,
        #"log.level: unknown value "verbose", expected one of "debug", "info", "warn", "error""#,
      ])
  }

  @Test func unknownKeysEverywhereWithSuggestions() {
    #expect(
      issueLines(minimalConfigJSON.replacingOccurrences(of: #""routes""#, with: #""rutes""#)) == [
        #"routes: missing required key"#,
        #"rutes: unknown key (did you mean "routes"?)"#,
      ])
    #expect(
      issueLines(configJSON(route: #""envelope": {"enable": false}"#)) == [
        #"routes[0].envelope.enable: unknown key (did you mean "enabled"?)"#
      ])
    #expect(issueLines(configJSON(extra: #""frobnicate": 1"#)) == ["frobnicate: unknown key"])
  }

  @Test func hardeningKeysAreCheckedAndDecoded() {
    #expect(
      issueLines(configJSON(extra: #""headers": {"pass": ["X-Forwarded-Host", "Connection", "X-Request-Id"]}"#)) == [
        "headers.pass[1]: Connection is never passed: the gateway sets or drops it itself",
        "headers.pass[2]: X-Request-Id is never passed: the gateway sets or drops it itself",
      ])
    #expect(
      issueLines(configJSON(extra: #""limits": {"body_timeout_ms": 0, "body_buffer_bytes": -1}"#)).count == 2)
    #expect(
      issueLines(
        configJSON(extra: #""limits": {"body_timeout_ms": 5000, "body_buffer_bytes": 0, "buffered_bytes": 1024}"#))
        == ["loaded"])
  }

  @Test func unknownKeyForATokenTypeNamesTheType() {
    let json = configJSON().replacingOccurrences(
      of: #""value": "s3cret-token""#, with: #""value": "s3cret-token", "client_id": "x""#)
    #expect(issueLines(json) == [#"tokens.api.client_id: unknown key for a "static" token"#])
  }

  @Test func wrongTypes() {
    #expect(
      issueLines(configJSON(extra: #""workers": "4""#)) == ["workers: expected an integer, got a string"])
    #expect(issueLines(configJSON(extra: #""workers": 1.5"#)) == ["workers: expected an integer, got 1.5"])
    #expect(issueLines(configJSON(extra: #""listen": {}"#)) == ["listen: expected an array, got an object"])
    #expect(
      issueLines(configJSON(extra: #""admin": {"metrics_public": "yes"}"#))
        == ["admin.metrics_public: expected true or false, got a string"])
    #expect(issueLines("[]") == ["(top level): expected an object, got an array"])
    #expect(
      issueLines(configJSON(route: #""stub": {"body": {"a": 1}, "status": null}"#))
        == ["routes[0].stub.status: expected an integer, got null"])
  }

  @Test func numberRanges() {
    #expect(
      issueLines(configJSON(extra: #""limits": {"idle_timeout_ms": 0}"#))
        == ["limits.idle_timeout_ms: must be at least 1, got 0"])
    #expect(issueLines(configJSON(extra: #""workers": 5000"#)) == ["workers: must be at most 1024, got 5000"])
    #expect(
      issueLines(configJSON(route: #""stub": {"status": 99}"#))
        == ["routes[0].stub.status: must be at least 200, got 99"])
    #expect(
      issueLines(configJSON(route: #""cache": {"fresh_s": -5}"#))
        == ["routes[0].cache.fresh_s: must not be negative, got -5"])
    let deepPipeline = configJSON().replacingOccurrences(
      of: #""url": "http://127.0.0.1:3000/api/v1""#,
      with: #""url": "http://127.0.0.1:3000/api/v1", "pipeline_depth": 65"#)
    #expect(issueLines(deepPipeline) == ["upstreams.api.pipeline_depth: must be at most 64, got 65"])
  }

  @Test func missingRequiredKeys() {
    #expect(
      issueLines(#"{"routes": [{"match": {"path": "/"}, "stub": {"mode": "always"}}]}"#) == [
        "routes[0].name: missing required key"
      ])
    #expect(
      issueLines(#"{"routes": [{"name": "r", "match": {}, "upstream": "x"}]}"#).first
        == "routes[0].match.path: missing required key")
    #expect(
      issueLines(#"{"routes": [{"name": "r", "match": {"path": "/"}}]}"#) == [
        #"routes[0].upstream: missing required key (only a route with stub.mode "always" may leave it out)"#
      ])
    #expect(
      issueLines(
        configJSON().replacingOccurrences(
          of: #""url": "http://127.0.0.1:3000/api/v1""#, with: #""urll": "x""#)) == [
          "upstreams.api.url: missing required key",
          #"upstreams.api.urll: unknown key (did you mean "url"?)"#,
        ])
    #expect(issueLines(#"{"routes": []}"#) == ["routes: must list at least one route"])
  }

  @Test func routeReferences() {
    #expect(
      issueLines(configJSON().replacingOccurrences(of: #""upstream": "api""#, with: #""upstream": "apii""#))
        == [
          #"routes[0].upstream: unknown upstream "apii" (did you mean "api"?)"#
        ])
    #expect(
      issueLines(configJSON(route: #""token": "ap""#)) == [
        #"routes[0].token: unknown token "ap" (did you mean "api"?)"#
      ])
    #expect(issueLines(configJSON(route: #""token": "zzz""#)) == [#"routes[0].token: unknown token "zzz""#])
  }

  @Test func brokenUpstreamIsReportedOnceNotAlsoAsUnknownReference() {
    let json = configJSON().replacingOccurrences(of: "http://127.0.0.1:3000/api/v1", with: "ftp://x")
    #expect(issueLines(json) == [#"upstreams.api.url: URL scheme must be http or https, got "ftp""#])
  }

  @Test func duplicateRouteNames() {
    let json = """
      {"routes": [
        {"name": "a", "match": {"path": "/a"}, "stub": {"mode": "always"}},
        {"name": "a", "match": {"path": "/b"}, "stub": {"mode": "always"}}
      ]}
      """
    #expect(issueLines(json) == [#"routes[1].name: duplicate route name "a" (also routes[0])"#])
  }

  @Test func namesAreLimitedToSafeCharacters() {
    let json = configJSON().replacingOccurrences(
      of: #""upstreams": { "api""#, with: #""upstreams": { "my api""#
    )
    .replacingOccurrences(of: #""upstream": "api""#, with: #""upstream": "my api""#)
    #expect(
      issueLines(json) == [#"upstreams["my api"]: name may contain only letters, digits, '_', '-' and '.'"#])
  }

  @Test(arguments: [
    ("127.0.0.1", "expected host:port, such as 127.0.0.1:8080"),
    ("127.0.0.1:65536", "port must be from 0 to 65535, got 65536"),
    ("127.0.0.1:http", #"port must be a number from 0 to 65535, got "http""#),
    ("example.com:80", #"host must be an IPv4 address, an [IPv6] address or localhost, got "example.com""#),
    ("256.0.0.1:80", #"host must be an IPv4 address, an [IPv6] address or localhost, got "256.0.0.1""#),
    ("::1:80", "an IPv6 address needs brackets, such as [::1]:8080"),
    ("[::1]", "expected host:port, such as [::1]:8080"),
    ("[::g]:80", #""::g" is not an IPv6 address"#),
  ])
  func badListenAddresses(address: String, problem: String) {
    #expect(
      issueLines(configJSON(extra: #""listen": [{"address": "\#(address)"}]"#)) == [
        "listen[0].address: \(problem)"
      ])
  }

  @Test func portZeroListenersNeverClash() {
    #expect(
      issueLines(
        configJSON(
          extra:
            #""listen": [{"address": "127.0.0.1:0"}, {"address": "127.0.0.1:0"}], "admin": {"listen": "127.0.0.1:0"}"#
        )) == ["loaded"])
  }

  /// Prior knowledge is for cleartext; on TLS, ALPN chooses (`http2`). `limits.http2` is
  /// checked like the other limits.
  @Test func h2cIsForCleartextListenersAndHTTP2LimitsAreChecked() {
    #expect(
      issueLines(
        configJSON(
          extra: #""listen": [{"address": "127.0.0.1:80", "h2c": true, "tls": {"cert": "c.pem", "key": "k.pem"}}]"#))
        == ["listen[0].h2c: applies to cleartext listeners only; TLS listeners offer h2 through ALPN (http2)"])
    #expect(
      issueLines(
        configJSON(extra: #""listen": [{"address": "127.0.0.1:80", "h2c": true, "http2": false}]"#)) == ["loaded"])
    #expect(
      issueLines(configJSON(extra: #""limits": {"http2": {"max_concurrent_streams": 0, "initial_window_bytes": -1}}"#))
        .count == 2)
  }

  @Test func duplicateListenersAndAdminClash() {
    #expect(
      issueLines(configJSON(extra: #""listen": [{"address": "127.0.0.1:80"}, {"address": "127.0.0.1:80"}]"#))
        == ["listen[1].address: 127.0.0.1:80 is already used by listen[0]"])
    #expect(
      issueLines(
        configJSON(extra: #""listen": [{"address": "127.0.0.1:80"}], "admin": {"listen": "127.0.0.1:80"}"#))
        == ["admin.listen: 127.0.0.1:80 is also a client listener; the admin API needs its own address"])
  }

  @Test func adminOnAPublicAddressNeedsAToken() {
    #expect(
      issueLines(configJSON(extra: #""admin": {"listen": "0.0.0.0:9901"}"#)) == [
        "admin.token: must be set (not empty) when admin.listen (0.0.0.0:9901) is not a loopback address"
      ])
    #expect(
      issueLines(configJSON(extra: #""admin": {"listen": "0.0.0.0:9901", "token": "${T:-}"}"#)).count == 1)
    #expect(
      issueLines(configJSON(extra: #""admin": {"listen": "0.0.0.0:9901", "token": "t"}"#)) == ["loaded"])
    #expect(issueLines(configJSON(extra: #""admin": {"listen": "[::1]:9901"}"#)) == ["loaded"])
  }

  @Test(arguments: [
    ("/users/:id/*/x", "'*' is only allowed as the last segment, as in /prefix/*"),
    ("/users*", "'*' is only allowed as the last segment, as in /prefix/*"),
    ("/a//b", "path has an empty segment ('//')"),
    ("/a//*", "path has an empty segment ('//')"),
    ("/users/:", #"parameter name "" must be a letter or '_' followed by letters, digits or '_'"#),
    ("/users/:1d", #"parameter name "1d" must be a letter or '_' followed by letters, digits or '_'"#),
    ("/a/:id/:id", "parameter :id appears twice"),
    ("/a?x=1", "path must not contain a query or fragment"),
    ("/a b", "path must not contain ' ' (percent-encode it)"),
    ("/caf%E", "path has a '%' that is not followed by two hex digits"),
    ("/café", "path must be percent-encoded (non-ASCII character)"),
    ("", "path must start with '/'"),
  ])
  func badRouteTemplates(template: String, problem: String) {
    let json = #"{"routes": [{"name": "r", "match": {"path": "\#(template)"}, "stub": {"mode": "always"}}]}"#
    #expect(issueLines(json) == ["routes[0].match.path: \(problem)"])
  }

  @Test func rewriteCanOnlyUseWhatTheMatchCaptured() {
    #expect(
      issueLines(configJSON(route: #""path": "/u/:ib""#))
        == [#"routes[0].path: uses :ib, which match.path does not define (did you mean "id"?)"#])
    #expect(
      issueLines(configJSON(route: #""path": "/u/:id/*""#))
        == ["routes[0].path: ends with /*, but match.path has no /* rest to put there"])
  }

  @Test func methods() {
    #expect(
      issueLines(
        configJSON(route: #""match": {"path": "/", "methods": ["get"]}"#).replacingOccurrences(
          of: #""match": { "path": "/users/:id" }, "#, with: ""))
        == [#"routes[0].match.methods[0]: methods are case-sensitive; write "GET""#])
    let route = { (methods: String) in
      configJSON().replacingOccurrences(
        of: #""match": { "path": "/users/:id" }"#, with: #""match": { "path": "/", "methods": \#(methods) }"#)
    }
    #expect(issueLines(route(#"["GET", "GET"]"#)) == ["routes[0].match.methods[1]: GET is listed twice"])
    #expect(issueLines(route(#"["G T"]"#)) == ["routes[0].match.methods[0]: invalid method name"])
    #expect(
      issueLines(route("[]")) == [
        "routes[0].match.methods: must list at least one method (leave it out for any method)"
      ])
  }

  /// The parser answers CONNECT and TRACE with 501 before routing, so a route for them
  /// could never match.
  @Test func connectAndTraceCannotBeRouted() {
    let route = { (methods: String) in
      configJSON().replacingOccurrences(
        of: #""match": { "path": "/users/:id" }"#, with: #""match": { "path": "/", "methods": \#(methods) }"#)
    }
    #expect(
      issueLines(route(#"["GET", "CONNECT", "TRACE"]"#)) == [
        "routes[0].match.methods[1]: CONNECT requests are never routed (the gateway answers them with 501)",
        "routes[0].match.methods[2]: TRACE requests are never routed (the gateway answers them with 501)",
      ])
  }

  /// Headers whose value the gateway controls could only be sent twice (or in place of the
  /// gateway's): `set` refuses them, and a name that reads as one of them to CGI-style
  /// backends (`_` for `-`). `Host` may be set: it replaces the upstream URL's.
  @Test func managedHeadersCannotBeSet() {
    let withHeaders = { (headers: String) in issueLines(configJSON(extra: #""headers": \#(headers)"#)) }
    for name in [
      "Host-Not", "X-Forwarded-Host", "Proxyish",
    ] {
      #expect(withHeaders(#"{"set": {"\#(name)": "v"}}"#) == ["loaded"], "\(name)")
    }
    for name in [
      "X-Forwarded-For", "x-forwarded-proto", "X-Request-Id", "Expect", "Proxy-Authorization", "Proxy-Foo", "Proxy",
      "Connection", "TE", "Keep-Alive", "Upgrade", "Trailer", "Transfer-Encoding", "Content-Length",
      "Proxy-Connection",
    ] {
      #expect(
        withHeaders(#"{"set": {"\#(name)": "v"}}"#) == [
          "headers.set.\(name): \(name) is managed by the gateway and cannot be set"
        ])
    }
    #expect(
      withHeaders(#"{"set": {"X_Forwarded_For": "1.2.3.4"}}"#) == [
        "headers.set.X_Forwarded_For: X_Forwarded_For is managed by the gateway and cannot be set"
          + " ('_' reads as '-' to many backends)"
      ])
    #expect(
      issueLines(configJSON(route: #""headers": {"set": {"X-Request-Id": "fixed"}}"#)) == [
        "routes[0].headers.set.X-Request-Id: X-Request-Id is managed by the gateway and cannot be set"
      ])
  }

  @Test func hostMayBeSetToAHostAndPort() {
    let withHeaders = { (headers: String) in issueLines(configJSON(extra: #""headers": \#(headers)"#)) }
    for host in ["api.internal", "api.internal:8443", "10.0.0.7:80", "[::1]:8080"] {
      #expect(withHeaders(#"{"set": {"Host": "\#(host)"}}"#) == ["loaded"], "\(host)")
    }
    #expect(issueLines(configJSON(route: #""headers": {"set": {"host": "tenant-a.internal"}}"#)) == ["loaded"])
    for host in ["two words", "a/b", "user@host", "a,b"] {
      #expect(
        withHeaders(#"{"set": {"Host": "\#(host)"}}"#) == [
          "headers.set.Host: must be a host with an optional port, as in api.example.com:8443"
        ], "\(host)")
    }
    #expect(
      withHeaders(#"{"set": {"Host": ""}}"#) == [
        "headers.set.Host: must be a host with an optional port, as in api.example.com:8443"
      ])
  }

  /// `remove` drops the client's field. Managed fields are never forwarded or always
  /// written by the gateway, so removing them would not do what it says; X-Forwarded-For is
  /// the exception (the client's list is not relayed, only the address the gateway saw).
  @Test func managedHeadersCannotBeRemovedButForwardedForCan() {
    let withHeaders = { (headers: String) in issueLines(configJSON(extra: #""headers": \#(headers)"#)) }
    #expect(withHeaders(#"{"remove": ["X-Forwarded-For", "Cookie", "X_Forwarded_Proto"]}"#) == ["loaded"])
    #expect(
      withHeaders(#"{"remove": ["Connection", "Proxy-Authorization", "Expect", "Content-Length", "proxy-foo"]}"#) == [
        "headers.remove[0]: Connection is never forwarded (the gateway manages it); leave it out of remove",
        "headers.remove[1]: Proxy-Authorization is never forwarded (the gateway manages it); leave it out of remove",
        "headers.remove[2]: Expect is never forwarded (the gateway manages it); leave it out of remove",
        "headers.remove[3]: Content-Length is never forwarded (the gateway manages it); leave it out of remove",
        "headers.remove[4]: proxy-foo is never forwarded (the gateway manages it); leave it out of remove",
      ])
    #expect(
      withHeaders(#"{"remove": ["X-Request-Id", "X-Forwarded-Proto", "host"]}"#) == [
        "headers.remove[0]: X-Request-Id is always sent by the gateway and cannot be removed",
        "headers.remove[1]: X-Forwarded-Proto is always sent by the gateway and cannot be removed",
        "headers.remove[2]: Host is always sent by the gateway and cannot be removed (set it to choose its value)",
      ])
    #expect(
      issueLines(configJSON(route: #""headers": {"remove": ["Host"]}"#)) == [
        "routes[0].headers.remove[0]: Host is always sent by the gateway and cannot be removed"
          + " (set it to choose its value)"
      ])
  }

  @Test func headerNamesAndValues() {
    let withHeaders = { (headers: String) in issueLines(configJSON(extra: #""headers": \#(headers)"#)) }
    #expect(
      withHeaders(#"{"set": {"Bad Name": "x"}}"#)
        == [#"headers.set["Bad Name"]: invalid header name (letters, digits and !#$%&'*+-.^_`|~ only)"#])
    #expect(
      withHeaders(#"{"set": {"X-A": "a\r\nInjected: 1"}}"#) == [
        "headers.set.X-A: must not contain CR, LF or NUL"
      ])
    #expect(
      withHeaders(#"{"set": {"X-A": "a\u0000"}}"#) == ["headers.set.X-A: must not contain CR, LF or NUL"])
    #expect(
      withHeaders(#"{"set": {"X-A": "a\u0007"}}"#) == ["headers.set.X-A: must not contain control characters"]
    )
    #expect(
      withHeaders(#"{"set": {"X-A": "a", "x-a": "b"}}"#) == [
        "headers.set.x-a: header x-a is already set as X-A (header names ignore case, and '_' reads as '-')"
      ])
    #expect(
      withHeaders(#"{"set": {"X-A": "a", "X_a": "b"}}"#) == [
        "headers.set.X_a: header X_a is already set as X-A (header names ignore case, and '_' reads as '-')"
      ])
    #expect(
      withHeaders(#"{"set": {"Content-Length": "5"}}"#) == [
        "headers.set.Content-Length: Content-Length is managed by the gateway and cannot be set"
      ])
    #expect(
      withHeaders(#"{"remove": ["Cookie", "Bad:Name"]}"#) == [
        "headers.remove[1]: invalid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
      ])
    #expect(withHeaders(#"{"set": {"X-A": "tab\tinside ok"}}"#) == ["loaded"])
  }

  /// The injected token is the only value of its header: a route with a token may not set
  /// that header itself (in any spelling); a top-level `set` of it is fine, and replaced
  /// on that route.
  @Test func routeWithATokenCannotSetItsTokenHeader() {
    #expect(
      issueLines(configJSON(route: #""token": "api", "headers": {"set": {"authorization": "Basic eA=="}}"#)) == [
        "routes[0].headers.set.authorization: this route sends its token in Authorization,"
          + " so it cannot also set authorization"
      ])
    #expect(
      issueLines(
        configJSON(
          route: #""token": "api", "token_header": "X-Backend-Token", "headers": {"set": {"X_Backend_Token": "t"}}"#))
        == [
          "routes[0].headers.set.X_Backend_Token: this route sends its token in X-Backend-Token,"
            + " so it cannot also set X_Backend_Token"
        ])
    #expect(
      issueLines(
        configJSON(route: #""token": "api""#, extra: #""headers": {"set": {"Authorization": "Basic eA=="}}"#))
        == ["loaded"])
    #expect(issueLines(configJSON(route: #""headers": {"set": {"Authorization": "Basic eA=="}}"#)) == ["loaded"])
  }

  @Test func urls() {
    let withURL = { (url: String) in
      issueLines(configJSON().replacingOccurrences(of: "http://127.0.0.1:3000/api/v1", with: url))
    }
    #expect(
      withURL("127.0.0.1:3000") == [
        "upstreams.api.url: expected an absolute URL such as http://127.0.0.1:3000/api"
      ])
    #expect(
      withURL("http://user:pw@h/") == [
        "upstreams.api.url: URL must not contain user info; put credentials in a token"
      ])
    #expect(withURL("http://h/a?x=1") == ["upstreams.api.url: URL must not have a query or fragment"])
    #expect(withURL("http://h:0") == ["upstreams.api.url: port must be from 1 to 65535, got 0"])
    #expect(
      withURL("http://bad_host/") == [
        #"upstreams.api.url: "bad_host" is not a valid host name or IP address"#
      ])
    #expect(withURL("http://") == ["upstreams.api.url: URL has no host"])
    #expect(withURL("HTTP://Api.Internal:8080/x/") == ["loaded"])
  }

  @Test func tlsSettingsAreAccepted() {
    #expect(
      issueLines(
        configJSON(
          extra: #""listen": [{"address": "0.0.0.0:8443", "tls": {"cert": "c.pem", "key": "k.pem"}}]"#))
        == ["loaded"])
    #expect(
      issueLines(configJSON().replacingOccurrences(of: "http://127.0.0.1:3000", with: "https://api.internal"))
        == ["loaded"])
    let oauth2 = configJSON().replacingOccurrences(
      of: #""type": "static", "value": "s3cret-token""#,
      with:
        #""type": "oauth2_client_credentials", "token_url": "https://auth/t", "client_id": "gw", "client_secret": "shh""#
    )
    #expect(issueLines(oauth2) == ["loaded"])
  }

  @Test func tlsBlockDetails() {
    let withTLS = { (tls: String) in
      issueLines(
        configJSON().replacingOccurrences(
          of: #""url": "http://127.0.0.1:3000/api/v1""#,
          with: #""url": "http://127.0.0.1:3000", "tls": \#(tls)"#))
    }
    #expect(
      withTLS(#"{"verify": true}"#) == ["upstreams.api.tls: tls settings need an https url (url is http)"])
    #expect(
      withTLS(#"{"cert": "c.pem"}"#).contains(
        "upstreams.api.tls.key: missing: cert needs key (client certificate)"))
    #expect(
      issueLines(configJSON(extra: #""listen": [{"address": "0.0.0.0:8443", "tls": {"cert": "c.pem"}}]"#))
        .first
        == "listen[0].tls.key: missing required key")
  }

  @Test func enumValues() {
    #expect(
      issueLines(configJSON(route: #""envelope": {"status": "always200"}"#)) == [
        #"routes[0].envelope.status: unknown value "always200", expected one of "mirror", "always_200" (did you mean "always_200"?)"#
      ])
    #expect(
      issueLines(configJSON(route: #""stub": {"mode": "alway"}"#)) == [
        #"routes[0].stub.mode: unknown value "alway", expected one of "off", "always", "fallback" (did you mean "always"?)"#
      ])
    #expect(
      issueLines(configJSON().replacingOccurrences(of: #""type": "static""#, with: #""type": "statc""#)) == [
        #"tokens.api.type: unknown value "statc", expected one of "static", "file", "oauth2_client_credentials" (did you mean "static"?)"#
      ])
  }

  @Test func tokenSettingsWithoutATokenAreReported() {
    #expect(
      issueLines(configJSON(route: #""token_header": "X-Token""#))
        == [#"routes[0].token_header: has no effect without "token" in this route"#])
    #expect(
      issueLines(configJSON(route: #""token": "api", "token_format": "Bearer""#))
        == ["routes[0].token_format: must contain {token} exactly once"])
    #expect(
      issueLines(configJSON(route: #""token": "api", "token_header": "Content-Length""#))
        == ["routes[0].token_header: Content-Length is managed by the gateway and cannot carry a token"])
    for name in ["Host", "X-Forwarded-For", "X-Request-Id", "Proxy-Authorization", "X_Forwarded_Proto"] {
      #expect(
        issueLines(configJSON(route: #""token": "api", "token_header": "\#(name)""#))
          == ["routes[0].token_header: \(name) is managed by the gateway and cannot carry a token"])
    }
  }

  @Test func invalidTokenRule() {
    #expect(
      issueLines(configJSON(route: #""token": "api", "invalid_token": {"status": [200]}"#))
        == ["routes[0].invalid_token.status[0]: must be at least 400, got 200"])
    #expect(
      issueLines(configJSON(route: #""token": "api", "invalid_token": {"body_field": "status"}"#))
        == ["routes[0].invalid_token.body_values: missing: body_field needs body_values"])
    #expect(
      issueLines(
        configJSON(route: #""token": "api", "invalid_token": {"body_field": "s", "body_values": [[1]]}"#))
        == [
          "routes[0].invalid_token.body_values[0]: expected a string, number, boolean or null, got an array"
        ])
  }

  @Test func envelopeKeyPath() {
    #expect(
      issueLines(configJSON(route: #""envelope": {"key_path": "data..items"}"#))
        == [
          "routes[0].envelope.key_path: has an empty component (write names separated by single dots, as in data.items)"
        ])
  }

  @Test func clients() {
    let hash = String(repeating: "a", count: 64)
    #expect(
      issueLines(configJSON(extra: #""clients": {"required": true}"#))
        == ["clients.keys: clients.required is true, so at least one key is needed"])
    #expect(
      issueLines(configJSON(extra: #""clients": {"keys": [{"id": "a", "sha256": "abc"}]}"#))
        == ["clients.keys[0].sha256: must be 64 hex digits: the SHA-256 of the client key"])
    #expect(
      issueLines(
        configJSON(
          extra:
            #""clients": {"keys": [{"id": "a", "sha256": "\#(hash)"}, {"id": "a", "sha256": "\#(hash)"}]}"#))
        == [#"clients.keys[1].id: duplicate client id "a" (also clients.keys[0].id)"#])
    #expect(
      issueLines(configJSON(extra: #""clients": {"keys": [{"id": "a", "sha256": "\#(hash)", "burst": 5}]}"#))
        == ["clients.keys[0].burst: burst needs rate_per_s"])
    #expect(
      issueLines(
        configJSON(extra: #""clients": {"keys": [{"id": "a", "sha256": "\#(hash)", "rate_per_s": 0}]}"#))
        == ["clients.keys[0].rate_per_s: must be greater than 0, got 0.0"])
  }

  @Test func unsetEnvironmentVariableIsOneLinePerString() {
    let json = configJSON().replacingOccurrences(of: "http://127.0.0.1:3000/api/v1", with: "${API_URL}")
    #expect(
      issueLines(json) == [
        "upstreams.api.url: environment variable API_URL is not set (use ${API_URL:-default} for a default)"
      ])
    #expect(issueLines(json, environment: ["API_URL": "http://10.0.0.1"]) == ["loaded"])
  }

  @Test func secretsNeverAppearInMessages() {
    let secret = "hunter2-\r\n-secret"
    let escaped = secret.replacingOccurrences(of: "\r", with: "\\r").replacingOccurrences(
      of: "\n", with: "\\n")
    let json = """
      {
        "admin": { "token": "\(escaped)" },
        "tokens": {
          "a": { "type": "static", "value": "\(escaped)" },
          "b": { "type": "oauth2_client_credentials", "token_url": "http://a/t", "client_id": "x", "client_secret": "\(escaped)" }
        },
        "headers": { "set": { "X-Api-Key": "\(escaped)" } },
        "routes": [{ "name": "r", "match": { "path": "/" }, "stub": { "mode": "always" } }]
      }
      """
    let lines = issueLines(json)
    #expect(lines.count == 4)
    #expect(lines.allSatisfy { !$0.contains("hunter2") })
  }

  @Test func jsonSyntaxErrorsCarryLineAndColumn() {
    do {
      _ = try ConfigLoader.load(json: "{\n  \"routes\": [,]\n}", environment: [:])
      Issue.record("accepted invalid JSON")
    } catch {
      guard case .invalidJSON(let json) = error else {
        Issue.record("refused for another reason: \(error)")
        return
      }
      #expect(json.description == "line 2, column 14: unexpected ',', expected a value")
      #expect(json.reason == .unexpectedByte)
    }
  }

  @Test func unreadableFileIsAClearError() {
    do {
      _ = try ConfigLoader.load(contentsOf: "/nonexistent/gatehouse.json", environment: [:])
      Issue.record("loaded a missing file")
    } catch {
      #expect(error.lines == ["/nonexistent/gatehouse.json: cannot read the config file: no such file"])
    }
  }
}
