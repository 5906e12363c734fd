import GatehouseJSON
import Testing

@testable import GatehouseConfig

/// What a config gets for every key it leaves out, and how present keys land in the model.
@Suite struct ConfigDefaultsTests {
  @Test func minimalConfigGetsDocumentedDefaults() throws {
    let config = try loadConfig(minimalConfigJSON)
    #expect(config.listen.map(\.address.description) == ["127.0.0.1:8080"])
    #expect(config.workers == 0)
    #expect(config.admin.listen.description == "127.0.0.1:9901")
    #expect(config.admin.token == nil)
    #expect(config.admin.metricsPublic == false)
    #expect(config.store.path == "var/gatehouse.sqlite")
    #expect(config.store.maxBytes == 268_435_456)
    #expect(config.store.secretKey == nil)
    #expect(config.limits.maxConnections == 10_000)
    #expect(config.limits.maxHeaderBytes == 16_384)
    #expect(config.limits.maxBodyBytes == 10_485_760)
    #expect(config.limits.headerTimeout == .seconds(10))
    #expect(config.limits.idleTimeout == .seconds(60))
    #expect(config.limits.drainTimeout == .seconds(10))
    #expect(config.headers == .empty)
    #expect(config.clients == ClientsConfig(required: false, keys: []))
    #expect(config.log == LogConfig(level: .info, access: .stdout, format: .json))
  }

  @Test func routeDefaults() throws {
    let route = try loadConfig(configJSON(route: #""token": "api""#)).routes[0]
    #expect(route.tokenHeader == "Authorization")
    #expect(route.tokenFormat.render("abc") == "Bearer abc")
    #expect(route.invalidToken == InvalidTokenRule(statuses: [401], bodyField: nil, bodyValues: []))
    #expect(route.envelope == EnvelopeConfig(enabled: true, keyPath: nil, status: .mirror, maxBytes: 8 << 20))
    #expect(route.cache == nil)
    #expect(route.stub == .off)
    #expect(route.match.methods == nil)
    #expect(route.upstreamPath == nil)
  }

  @Test func upstreamDefaultsAndURLParts() throws {
    let upstream = try #require(try loadConfig(configJSON()).upstream(named: "api"))
    #expect(upstream.url.scheme == .http)
    #expect(upstream.url.host == "127.0.0.1")
    #expect(upstream.url.port == 3000)
    #expect(upstream.url.basePath == "/api/v1")
    #expect(upstream.connectTimeout == .seconds(1))
    #expect(upstream.answerTimeout == .seconds(10))
    #expect(upstream.maxIdleConnections == 64)
    #expect(upstream.pipelineDepth == 1)
    #expect(upstream.tls == nil && upstream.health == nil && upstream.circuit == nil)
  }

  @Test func healthAndCircuitBlocksGetDefaultsInside() throws {
    let json = configJSON().replacingOccurrences(
      of: #""url": "http://127.0.0.1:3000/api/v1""#,
      with: #""url": "http://127.0.0.1:3000", "health": {}, "circuit": {"failures": 2}"#)
    let upstream = try #require(try loadConfig(json).upstream(named: "api"))
    #expect(
      upstream.health
        == HealthCheckConfig(path: "/health", interval: .seconds(2), unhealthyAfter: 3, healthyAfter: 2))
    #expect(
      upstream.circuit == CircuitBreakerConfig(failures: 2, openDuration: CircuitBreakerConfig.defaultOpenDuration))
  }

  @Test func cacheAndStubBlocks() throws {
    let route = try loadConfig(
      configJSON(
        route:
          #""cache": {"vary": ["Accept-Language"]}, "stub": {"mode": "fallback", "body": {"b": [1, "x"]}, "delay_ms": 5}"#
      )
    ).routes[0]
    #expect(
      route.cache
        == RouteCacheConfig(
          staleIfError: .seconds(86_400), fresh: .zero, staleWhileRevalidate: .zero, vary: ["Accept-Language"]
        ))
    #expect(route.stub.mode == .fallback)
    #expect(route.stub.status == 200)
    #expect(route.stub.body == Array(#"{"b":[1,"x"]}"#.utf8))
    #expect(route.stub.delay == .milliseconds(5))
  }

  @Test func readsEverySpecExampleValue() throws {
    let json = """
      {
        "listen": [{ "address": "0.0.0.0:8080" }, { "address": "[::1]:8081" }],
        "workers": 4,
        "admin": { "listen": "127.0.0.1:9902", "token": "adm", "metrics_public": true },
        "store": { "path": "var/x.sqlite", "max_bytes": 1000, "secret_key": "k" },
        "limits": { "max_connections": 5, "max_header_bytes": 6, "max_body_bytes": 7,
          "header_timeout_ms": 8, "idle_timeout_ms": 9, "drain_timeout_ms": 0 },
        "headers": { "set": { "Accept": "application/json", "Version": "1.4.2" }, "remove": ["Cookie"] },
        "upstreams": { "api": { "url": "http://api.internal/v1/", "connect_timeout_ms": 11,
          "response_timeout_ms": 12, "max_idle_connections": 0, "pipeline_depth": 0 } },
        "tokens": {
          "api": { "type": "static", "value": "${API_TOKEN}" },
          "partner": { "type": "oauth2_client_credentials", "token_url": "http://auth.internal/oauth/token",
            "client_id": "gw", "client_secret": "${PARTNER_SECRET}", "scope": "read write", "refresh_before_s": 30 },
          "legacy": { "type": "file", "path": "/run/secrets/legacy_token" }
        },
        "clients": { "required": true, "keys": [
          { "id": "ios-app", "sha256": "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08", "rate_per_s": 2.5 },
          { "id": "web", "sha256": "0000000000000000000000000000000000000000000000000000000000000000", "rate_per_s": 50, "burst": 100 },
          { "id": "batch", "sha256": "1111111111111111111111111111111111111111111111111111111111111111" } ] },
        "routes": [ {
          "name": "users",
          "match": { "path": "/users/:id", "methods": ["GET", "PUT", "DELETE"] },
          "upstream": "api", "path": "/people/:id", "token": "partner",
          "token_header": "X-Token", "token_format": "Token {token};",
          "invalid_token": { "status": [401, 403], "body_field": "status", "body_values": [-1, "expired"] },
          "headers": { "set": { "X-Client": "gatehouse" }, "remove": [] },
          "envelope": { "enabled": false, "key_path": "data.items", "status": "always_200", "max_bytes": 99 },
          "cache": { "stale_if_error_s": 1, "fresh_s": 2, "stale_while_revalidate_s": 3, "vary": [] },
          "stub": { "mode": "off", "status": 503, "body": null, "delay_ms": 0 }
        } ],
        "log": { "level": "warn", "access": "off", "format": "json" }
      }
      """
    let config = try loadConfig(json, environment: ["API_TOKEN": "t1", "PARTNER_SECRET": "t2"])
    #expect(config.listen.map(\.address.description) == ["0.0.0.0:8080", "[::1]:8081"])
    #expect(config.workers == 4)
    #expect(
      config.admin.listen.port == 9902 && config.admin.token?.value == "adm" && config.admin.metricsPublic)
    #expect(config.store == StoreConfig(path: "var/x.sqlite", maxBytes: 1000, secretKey: SecretValue("k")))
    var limits = LimitsConfig(
      maxConnections: 5, maxHeaderBytes: 6, maxBodyBytes: 7, headerTimeout: .milliseconds(8),
      idleTimeout: .milliseconds(9), drainTimeout: .zero)
    // The HTTP/2 header list limit follows `max_header_bytes` unless set.
    limits.http2 = HTTP2LimitsConfig(maxHeaderListBytes: 6)
    #expect(config.limits == limits)
    #expect(
      config.headers
        == HeaderRules(
          set: [
            HeaderField(name: "Accept", value: "application/json"),
            HeaderField(name: "Version", value: "1.4.2"),
          ],
          remove: ["Cookie"]))
    let upstream = try #require(config.upstream(named: "api"))
    #expect(
      upstream.url.basePath == "/v1" && upstream.url.port == 80 && upstream.url.hostHeader == "api.internal")
    #expect(upstream.connectTimeout == .milliseconds(11) && upstream.answerTimeout == .milliseconds(12))
    #expect(upstream.maxIdleConnections == 0)
    #expect(upstream.pipelineDepth == 0)
    #expect(config.tokens.map(\.name) == ["api", "partner", "legacy"])
    #expect(config.token(named: "api")?.source == .fixed(SecretValue("t1")))
    #expect(config.token(named: "legacy")?.source == .file(path: "/run/secrets/legacy_token"))
    guard case .oauth2ClientCredentials(let oauth2)? = config.token(named: "partner")?.source else {
      Issue.record("partner is not an oauth2 token")
      return
    }
    #expect(oauth2.tokenURL.description == "http://auth.internal/oauth/token")
    #expect(oauth2.clientID == "gw" && oauth2.clientSecret.value == "t2" && oauth2.scope == "read write")
    #expect(oauth2.refreshBefore == .seconds(30))
    #expect(config.clients.required)
    #expect(config.clients.keys.map(\.id) == ["ios-app", "web", "batch"])
    #expect(
      config.clients.keys[0].sha256Hex == "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    #expect(config.clients.keys[0].rateLimit == ClientRateLimit(perSecond: 2.5, burst: 3))
    #expect(config.clients.keys[1].rateLimit == ClientRateLimit(perSecond: 50, burst: 100))
    #expect(config.clients.keys[2].rateLimit == nil)
    let route = config.routes[0]
    #expect(route.match.methods == ["GET", "PUT", "DELETE"])
    #expect(route.upstreamPath?.source == "/people/:id")
    #expect(route.token == "partner" && route.tokenHeader == "X-Token")
    #expect(route.tokenFormat.render("abc") == "Token abc;")
    #expect(
      route.invalidToken
        == InvalidTokenRule(
          statuses: [401, 403], bodyField: "status",
          bodyValues: [.number(JSONNumber(integer: -1)), .string("expired")]))
    #expect(route.headers.set == [HeaderField(name: "X-Client", value: "gatehouse")])
    #expect(
      route.envelope
        == EnvelopeConfig(enabled: false, keyPath: ["data", "items"], status: .always200, maxBytes: 99))
    #expect(
      route.cache
        == RouteCacheConfig(
          staleIfError: .seconds(1), fresh: .seconds(2), staleWhileRevalidate: .seconds(3), vary: []))
    #expect(route.stub == StubConfig(mode: .off, status: 503, body: Array("null".utf8), delay: .zero))
    #expect(config.log == LogConfig(level: .warn, access: .off, format: .json))
  }

  @Test func emptyEnvironmentValuesMeanUnset() throws {
    let json =
      #"{"admin": {"token": "${T:-}"}, "store": {"secret_key": "${K:-}"}, "routes": [{"name": "r", "match": {"path": "/"}, "stub": {"mode": "always"}}]}"#
    let config = try loadConfig(json)
    #expect(config.admin.token == nil)
    #expect(config.store.secretKey == nil)
  }

  @Test func emptyStaticTokenIsAllowedAsMissing() throws {
    let json = configJSON().replacingOccurrences(of: "s3cret-token", with: "${API_TOKEN:-}")
    #expect(try loadConfig(json).token(named: "api")?.source == .fixed(SecretValue("")))
  }

  @Test func environmentIsExpandedInNestedStringsButNotKeys() throws {
    let json = configJSON(route: #""headers": {"set": {"X-${NAME}": "v-${NAME}"}}"#)
    let lines = issueLines(json, environment: ["NAME": "a"])
    #expect(
      lines == [
        #"routes[0].headers.set["X-${NAME}"]: invalid header name (letters, digits and !#$%&'*+-.^_`|~ only)"#
      ])
    let expanded = configJSON(route: #""headers": {"set": {"X-Name": "v-${NAME}"}}"#)
    #expect(try loadConfig(expanded, environment: ["NAME": "a"]).routes[0].headers.set[0].value == "v-a")
  }

  @Test func secretsAreRedactedWhenPrinted() throws {
    let config = try loadConfig(configJSON())
    let printed = "\(config) \(String(reflecting: config))"
    #expect(!printed.contains("s3cret-token"))
    #expect(printed.contains("<redacted>"))
  }

  @Test func tokenFormatNeedsExactlyOnePlaceholder() {
    #expect(TokenFormat(template: "Bearer {token}")?.prefix == "Bearer ")
    #expect(TokenFormat(template: "{token}")?.render("x") == "x")
    #expect(TokenFormat(template: "Bearer") == nil)
    #expect(TokenFormat(template: "{token}{token}") == nil)
  }
}
