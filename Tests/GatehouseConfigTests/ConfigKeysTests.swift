import Foundation
import GatehouseJSON
import Testing

@testable import GatehouseConfig

/// The key table (`ConfigKeys`) is what the decoder reads, and `Config/REFERENCE.md` is what
/// the table renders.
@Suite struct ConfigKeysTests {
  /// A config with every object the decoder knows, each token type included, so decoding it
  /// asks for every key there is (asking is recorded whether or not the key is present).
  static let everyKeyJSON = #"""
    {
      "listen": [
        { "address": "127.0.0.1:8080", "h2c": true },
        { "address": "127.0.0.1:8443", "http2": false,
          "tls": { "cert": "c.pem", "key": "k.pem",
                   "sni": [{ "names": ["a.example"], "cert": "a.pem", "key": "a.key" }] } }
      ],
      "workers": 1,
      "admin": { "listen": "127.0.0.1:9901", "token": "t", "metrics_public": false,
                 "tls": { "cert": "c.pem", "key": "k.pem",
                          "sni": [{ "names": ["b.example"], "cert": "b.pem", "key": "b.key" }] } },
      "store": { "path": "var/x.sqlite", "max_bytes": 1000, "secret_key": "" },
      "limits": { "max_connections": 1, "max_header_bytes": 1, "max_body_bytes": 1, "header_timeout_ms": 1,
                  "idle_timeout_ms": 1, "drain_timeout_ms": 1, "body_timeout_ms": 1, "body_buffer_bytes": 1,
                  "buffered_bytes": 1, "websocket_idle_timeout_ms": 1, "max_websockets": 1,
                  "http2": { "max_concurrent_streams": 1, "initial_window_bytes": 1, "max_header_list_bytes": 1 } },
      "headers": { "set": { "Accept": "application/json" }, "remove": ["Cookie"], "pass": ["X-Forwarded-Host"],
                   "forwarded": true },
      "upstreams": {
        "api": {
          "url": "https://127.0.0.1:3000/api", "connect_timeout_ms": 1, "response_timeout_ms": 1,
          "max_idle_connections": 1, "pipeline_depth": 1, "max_connections": 1, "queue_timeout_ms": 1,
          "tls": { "ca": "ca.pem", "verify": true, "server_name": "api.internal", "cert": "c.pem", "key": "k.pem" },
          "health": { "path": "/health", "interval_ms": 1, "unhealthy_after": 1, "healthy_after": 1 },
          "circuit": { "failures": 1, "open_ms": 1, "count_5xx": true },
          "servers": [{ "address": "127.0.0.1:3000", "weight": 2 }], "balance": "hash", "hash_by": "ip",
          "resolve_s": 1,
          "outlier": { "failures": 1, "eject_ms": 1, "max_ejected_percent": 1 },
          "retry": { "attempts": 1, "on": ["connect"], "budget_percent": 1 }
        }
      },
      "resolver": { "servers": ["10.0.0.2"], "timeout_ms": 1 },
      "tokens": {
        "fixed": { "type": "static", "value": "v" },
        "from_file": { "type": "file", "path": "token.txt" },
        "fetched": { "type": "oauth2_client_credentials", "token_url": "https://auth.example/token",
                     "client_id": "gw", "client_secret": "s", "scope": "read", "refresh_before_s": 1 }
      },
      "clients": { "required": true,
                   "keys": [{ "id": "app", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                              "rate_per_s": 1, "burst": 1 }] },
      "shared": { "url": "rediss://cache.example:6380/1", "password": "p", "prefix": "gh:", "timeout_ms": 50,
                  "max_entry_bytes": 1048576, "ca": "certs/redis-ca.pem" },
      "jwt": { "providers": {
        "idp": { "issuer": "https://id.example/", "jwks_url": "https://id.example/jwks.json", "audiences": ["app"],
                 "algorithms": ["ES256"], "leeway_s": 30, "jwks_refresh_s": 600,
                 "forward_claims": { "sub": "X-User-Id" } },
        "inline": { "keys": { "keys": [{ "kty": "OKP", "crv": "Ed25519", "x": "Gbt6ePDvbnZmXckeHAfa-EwwRUUrA2Rz4CBVvaBiUEc", "kid": "e1" }] } }
      } },
      "routes": [
        {
          "name": "users",
          "match": { "path": "/users/:id", "methods": ["GET"] },
          "upstream": "api",
          "path": "/v2/users/:id",
          "token": "fixed", "token_header": "X-Token", "token_format": "Token {token}",
          "invalid_token": { "status": [401], "body_field": "status", "body_values": [-1] },
          "headers": { "set": { "X-Client": "gw" }, "remove": ["X-Debug"], "pass": ["X-Original-URL"],
                       "forwarded": false },
          "envelope": { "enabled": true, "key_path": "user", "status": "mirror", "max_bytes": 1 },
          "cache": { "stale_if_error_s": 1, "fresh_s": 1, "stale_while_revalidate_s": 1, "vary": ["Accept-Language"],
                     "collapse": true, "shared": false },
          "jwt": { "provider": "idp", "required": true, "scopes": ["users:read"] },
          "stub": { "mode": "fallback", "status": 200, "body": { "user": 1 }, "delay_ms": 0 },
          "websocket": true
        }
      ],
      "log": { "level": "info", "access": "stdout", "format": "json", "trusted_proxies": ["10.0.0.0/8"],
               "mask_query": ["token"] }
    }
    """#

  @Test func theDecoderReadsExactlyTheKeysInTheTable() throws {
    let diagnostics = ConfigDiagnostics()
    let decoder = ConfigDecoder(diagnostics: diagnostics, interpolation: EnvironmentInterpolation(environment: [:]))
    let config = decoder.decode(try JSONParser.parse(Array(Self.everyKeyJSON.utf8), limits: .config))
    #expect(config != nil)
    #expect(diagnostics.issues.isEmpty, "\(diagnostics.issues)")
    let table = Set(ConfigKeys.all.map(\.path))
    let read = diagnostics.keysRead
    #expect(read.subtracting(table).sorted() == [], "keys the decoder reads that ConfigKeys does not list")
    #expect(table.subtracting(read).sorted() == [], "keys ConfigKeys lists that the decoder does not read")
    #expect(ConfigKeys.all.count == table.count, "a key is listed twice")
  }

  /// The defaults the reference states for numbers and switches are the ones the decoder
  /// applies: each block present but empty, every value compared with the table's text.
  @Test func theStatedDefaultsAreTheDecodersDefaults() throws {
    let config = try loadConfig(
      #"{"limits": {}, "store": {}, "resolver": {}, "#
        + #""upstreams": {"api": {"url": "http://h", "health": {}, "circuit": {}, "outlier": {}, "retry": {}, "#
        + #""servers": [{"address": "h:80"}]}}, "#
        + #""tokens": {"t": {"type": "oauth2_client_credentials", "token_url": "https://a/t", "client_id": "c", "#
        + #""client_secret": "s"}}, "#
        + #""routes": [{"name": "r", "match": {"path": "/"}, "upstream": "api", "cache": {}, "stub": {}, "envelope": {}}]}"#
    )
    let upstream = try #require(config.upstreams.first)
    let health = try #require(upstream.health)
    let circuit = try #require(upstream.circuit)
    let route = try #require(config.routes.first)
    let cache = try #require(route.cache)
    guard case .oauth2ClientCredentials(let oauth2) = try #require(config.tokens.first).source else {
      Issue.record("not an oauth2 token")
      return
    }
    func ms(_ duration: Duration) -> Int { Int(duration.components.seconds) * 1000 }
    func s(_ duration: Duration) -> Int { Int(duration.components.seconds) }
    let decoded: [String: String] = [
      "workers": "\(config.workers)",
      "store.max_bytes": "\(config.store.maxBytes)",
      "limits.max_connections": "\(config.limits.maxConnections)",
      "limits.max_header_bytes": "\(config.limits.maxHeaderBytes)",
      "limits.max_body_bytes": "\(config.limits.maxBodyBytes)",
      "limits.header_timeout_ms": "\(ms(config.limits.headerTimeout))",
      "limits.idle_timeout_ms": "\(ms(config.limits.idleTimeout))",
      "limits.drain_timeout_ms": "\(ms(config.limits.drainTimeout))",
      "limits.body_timeout_ms": "\(ms(config.limits.bodyTimeout))",
      "limits.body_buffer_bytes": "\(config.limits.bodyBufferBytes)",
      "limits.buffered_bytes": "\(config.limits.bufferedBytes)",
      "limits.websocket_idle_timeout_ms": "\(ms(config.limits.websocketIdleTimeout))",
      "limits.max_websockets": "\(config.limits.maxWebSockets)",
      "routes[].websocket": "\(route.websocket)",
      "upstreams.*.connect_timeout_ms": "\(ms(upstream.connectTimeout))",
      "upstreams.*.response_timeout_ms": "\(ms(upstream.answerTimeout))",
      "upstreams.*.max_idle_connections": "\(upstream.maxIdleConnections)",
      "upstreams.*.pipeline_depth": "\(upstream.pipelineDepth)",
      "upstreams.*.max_connections": "\(upstream.maxConnections)",
      "upstreams.*.health.path": "`\(health.path)`",
      "upstreams.*.health.interval_ms": "\(ms(health.interval))",
      "upstreams.*.health.unhealthy_after": "\(health.unhealthyAfter)",
      "upstreams.*.health.healthy_after": "\(health.healthyAfter)",
      "upstreams.*.circuit.failures": "\(circuit.failures)",
      "upstreams.*.circuit.open_ms": "\(ms(circuit.openDuration))",
      "upstreams.*.circuit.count_5xx": "\(circuit.count5xx)",
      "upstreams.*.servers[].weight": "\(try #require(upstream.servers?.first).weight)",
      "upstreams.*.balance": "`\(upstream.balance.configValue)`",
      "upstreams.*.hash_by": "`\(upstream.hashKey.configValue)`",
      "upstreams.*.resolve_s": "\(upstream.resolveSeconds)",
      "upstreams.*.outlier.failures": "\(upstream.outlier.failures)",
      "upstreams.*.outlier.eject_ms": "\(upstream.outlier.ejectMilliseconds)",
      "upstreams.*.outlier.max_ejected_percent": "\(upstream.outlier.maxEjectedPercent)",
      "upstreams.*.retry.attempts": "\(upstream.retry.attempts)",
      "upstreams.*.retry.on": "`[" + upstream.retry.on.map { "\"\($0.configValue)\"" }.joined(separator: ", ") + "]`",
      "upstreams.*.retry.budget_percent": "\(upstream.retry.budgetPercent)",
      "resolver.timeout_ms": "\(config.resolver.timeoutMilliseconds)",
      "tokens.*.refresh_before_s": "\(s(oauth2.refreshBefore))",
      "clients.required": "\(config.clients.required)",
      "admin.metrics_public": "\(config.admin.metricsPublic)",
      "routes[].token_header": "`\(route.tokenHeader)`",
      "routes[].token_format": "`\(route.tokenFormat.template)`",
      "routes[].invalid_token.status": "\(route.invalidToken.statuses)",
      "routes[].envelope.enabled": "\(route.envelope.enabled)",
      "routes[].envelope.max_bytes": "\(route.envelope.maxBytes)",
      "routes[].cache.stale_if_error_s": "\(s(cache.staleIfError))",
      "routes[].cache.fresh_s": "\(s(cache.fresh))",
      "routes[].cache.stale_while_revalidate_s": "\(s(cache.staleWhileRevalidate))",
      "routes[].cache.collapse": "\(cache.collapse)",
      "routes[].stub.status": "\(route.stub.status)",
      "routes[].stub.delay_ms": "\(ms(route.stub.delay))",
      "store.path": "`\(config.store.path)`",
      "admin.listen": "`\(config.admin.listen)`",
    ]
    for (path, value) in decoded.sorted(by: { $0.key < $1.key }) {
      #expect(ConfigKeys.key(at: path)?.defaultText == value, "\(path)")
    }
  }

  /// Where a block's stated default is a JSON object (`{"failures": 3, "open_ms": 1000}`),
  /// each member must be a key of the block whose own stated default is that value: the
  /// block's default and its keys' defaults cannot say two things.
  static func blockDefaultDisagreements(in keys: [ConfigKey]) -> [String] {
    func json(_ text: String) -> JSONValue? {
      let bare =
        text.hasPrefix("`") && text.hasSuffix("`") && text.count >= 2 ? String(text.dropFirst().dropLast()) : text
      return try? JSONParser.parse(Array(bare.utf8), limits: .config)
    }
    let byPath = Dictionary(keys.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    var disagreements: [String] = []
    for block in keys where block.type == "object" {
      guard let stated = json(block.defaultText), case .object(let members) = stated else { continue }
      for (name, value) in members {
        guard let member = byPath[block.path + "." + name] else {
          disagreements.append("\(block.path): default names \(name), which is not a key of the block")
          continue
        }
        // A key's text is JSON (`5`, `[401]`, `true`) or a bare word in backticks (`off`).
        let own = json(member.defaultText) ?? .string(member.defaultText.trimmingCharacters(in: ["`"]))
        if own != value {
          disagreements.append(
            "\(block.path): default says \(name) is \(value.serializedString()), \(member.path) says \(member.defaultText)"
          )
        }
      }
    }
    return disagreements
  }

  @Test func blockDefaultsAgreeWithTheirKeys() throws {
    #expect(Self.blockDefaultDisagreements(in: ConfigKeys.all) == [])
    // The blocks that state an object default are all looked at (a rename would skip them).
    let checked = ConfigKeys.all.filter { $0.type == "object" && $0.defaultText.hasPrefix("`{") }.map(\.path)
    #expect(
      Set(checked).isSuperset(of: [
        "upstreams.*.circuit", "routes[].invalid_token", "routes[].envelope", "routes[].stub",
      ]))
    // An empty `circuit` block decodes to `CircuitBreakerConfig.standard`, the breaker an
    // upstream without the block gets, so the block's default is its keys' defaults at run time too.
    let config = try loadConfig(
      #"{"upstreams": {"api": {"url": "http://h", "circuit": {}}}, "#
        + #""routes": [{"name": "r", "match": {"path": "/"}, "upstream": "api"}]}"#)
    #expect(config.upstreams.first?.circuit == CircuitBreakerConfig.standard)
  }

  /// The check itself catches a block whose default disagrees with its keys.
  @Test func aBlockDefaultThatDisagreesIsCaught() {
    let table = [
      ConfigKey(
        path: "c", type: "object", defaultText: #"`{"failures": 3, "open_ms": 1000, "mode": "off"}`"#, reload: .applies,
        meaning: "m"),
      ConfigKey(path: "c.failures", type: "integer", defaultText: "5", reload: .applies, meaning: "m"),
      ConfigKey(path: "c.open_ms", type: "integer", defaultText: "1000", reload: .applies, meaning: "m"),
      ConfigKey(path: "c.mode", type: "string", defaultText: "`off`", reload: .applies, meaning: "m"),
    ]
    #expect(Self.blockDefaultDisagreements(in: table) == [#"c: default says failures is 3, c.failures says 5"#])
    let missing = [ConfigKey(path: "d", type: "object", defaultText: #"`{"x": 1}`"#, reload: .applies, meaning: "m")]
    #expect(Self.blockDefaultDisagreements(in: missing) == ["d: default names x, which is not a key of the block"])
  }

  @Test func everyKeyHasAMeaningAndADefault() {
    for key in ConfigKeys.all {
      #expect(!key.type.isEmpty && !key.defaultText.isEmpty && !key.meaning.isEmpty, "\(key.path)")
    }
  }

  /// `Config/REFERENCE.md` is generated; `GATEHOUSE_WRITE_REFERENCE=1` rewrites it.
  @Test func theReferenceFileIsWhatTheTableRenders() throws {
    let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent()
    let path = repository.appendingPathComponent("Config/REFERENCE.md").path
    let rendered = ConfigKeys.renderReference()
    if ProcessInfo.processInfo.environment["GATEHOUSE_WRITE_REFERENCE"] == "1" {
      try rendered.write(toFile: path, atomically: true, encoding: .utf8)
    }
    let onDisk = try String(contentsOfFile: path, encoding: .utf8)
    #expect(
      onDisk == rendered,
      "Config/REFERENCE.md is out of date: run Scripts/write-config-reference.sh")
  }

  @Test func pathsNameIndexesAndChosenNamesGenerically() throws {
    let path = ConfigPath.root.appending(key: "upstreams").appending(name: "a.b").appending(key: "circuit")
    #expect(path.description == #"upstreams["a.b"].circuit"#)
    #expect(path.schema == "upstreams.*.circuit")
    let route = ConfigPath.root.appending(key: "routes").appending(index: 3).appending(key: "cache")
    #expect(route.description == "routes[3].cache" && route.schema == "routes[].cache")
  }
}
