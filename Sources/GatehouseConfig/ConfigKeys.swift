/// When a changed key takes effect after a reload (`SIGHUP`, `POST /admin/reload`).
public enum ConfigReload: Sendable, Equatable {
  /// At once, for the requests (and waits) that start after the reload.
  case applies
  /// For connections accepted after the reload; open ones keep what they started with.
  case newConnections
  /// Logged as waiting, and applied at the next start.
  case restart

  var text: String {
    switch self {
    case .applies: return "yes"
    case .newConnections: return "new connections"
    case .restart: return "restart"
    }
  }
}

/// One key of the config file as the reference documents it.
public struct ConfigKey: Sendable, Equatable {
  /// Where the key is: `limits.body_timeout_ms`, `upstreams.*.circuit.count_5xx` (`*` is a
  /// name the operator chooses), `routes[].cache.vary` (`[]` is any element of a list).
  public let path: String
  public let type: String
  /// What applies when the key is left out, as a reader would write it.
  public let defaultText: String
  public let reload: ConfigReload
  /// One line of meaning.
  public let meaning: String
}

/// Every key the decoder reads, with its type, default, reload behaviour and meaning: the
/// single source of `Config/REFERENCE.md`. `ConfigKeysTests` decodes a document that sets
/// every key and checks that the keys the decoder asked for are exactly these, and that the
/// reference file is what `renderReference()` makes of them, so neither can drift.
public enum ConfigKeys {
  private typealias Defaults = ConfigDecoder.Defaults
  private typealias Circuit = CircuitBreakerConfig

  private static func key(
    _ path: String, _ type: String, _ defaultText: String, _ reload: ConfigReload = .applies, _ meaning: String
  ) -> ConfigKey {
    ConfigKey(path: path, type: type, defaultText: defaultText, reload: reload, meaning: meaning)
  }

  /// `listen[].tls` and `admin.tls` share their keys and rules.
  private static func serverTLSKeys(_ prefix: String, reload: ConfigReload) -> [ConfigKey] {
    [
      key(
        prefix, "object", "none (plain HTTP)", reload,
        "serve TLS 1.2/1.3 with this certificate; files are read again on reload"),
      key(prefix + ".cert", "string (file)", "required", reload, "PEM certificate chain, leaf first"),
      key(prefix + ".key", "string (file)", "required", reload, "PEM private key of `cert`"),
      key(
        prefix + ".sni", "array of objects", "[]", reload,
        "more certificates, chosen by the server name the client asks for"),
      key(
        prefix + ".sni[].names", "array of strings", "required", reload,
        "server names this certificate answers (`*.example.org` allowed)"),
      key(prefix + ".sni[].cert", "string (file)", "required", reload, "PEM certificate chain for these names"),
      key(prefix + ".sni[].key", "string (file)", "required", reload, "PEM private key of this `cert`"),
    ]
  }

  /// Top-level `headers` and a route's `headers` share their keys.
  private static func headerKeys(_ prefix: String, scope: String) -> [ConfigKey] {
    [
      key(prefix, "object", "{}", .applies, "header changes for requests to the backend, \(scope)"),
      key(
        prefix + ".set", "object: header name → string", "{}", .applies,
        "fields sent to the backend, replacing the client's"),
      key(prefix + ".remove", "array of header names", "[]", .applies, "client fields not forwarded"),
      key(
        prefix + ".pass", "array of header names", "[]", .applies,
        "client fields forwarded although the gateway drops them by default"),
      key(prefix + ".forwarded", "boolean", "false", .applies, "write an RFC 7239 `Forwarded: for=…;proto=…` field"),
    ]
  }

  public static let all: [ConfigKey] =
    [
      key(
        "listen", "array of objects", "`[{\"address\": \"\(Defaults.listen)\"}]`", .applies,
        "client listeners; new addresses are bound on reload, removed ones stop accepting"),
      key(
        "listen[].address", "string `host:port`", "required", .applies,
        "IPv4, `[IPv6]` or `localhost` with a port (0: any free port)"),
      key(
        "listen[].http2", "boolean", "true", .newConnections,
        "a TLS listener offers ALPN `h2` then `http/1.1`; false: only `http/1.1`"),
      key(
        "listen[].h2c", "boolean", "false", .newConnections,
        "a cleartext listener also takes HTTP/2 with prior knowledge (never `Upgrade: h2c`)"),
    ] + serverTLSKeys("listen[].tls", reload: .newConnections)
    + [
      key("workers", "integer 0–\(Defaults.workersLimit)", "0", .restart, "event loops; 0 is one per core"),
      key("admin", "object", "{}", .applies, "the admin API listener"),
      key(
        "admin.listen", "string `host:port`", "`\(Defaults.adminListen)`", .restart,
        "admin API address; off loopback it needs `admin.token`"),
      key(
        "admin.token", "string", "none (empty is none)", .applies,
        "bearer token for the admin API; without it protected endpoints answer 401"),
      key("admin.metrics_public", "boolean", "false", .applies, "serve `/metrics` without the admin token"),
    ] + serverTLSKeys("admin.tls", reload: .newConnections)
    + [
      key("store", "object", "{}", .applies, "the SQLite store of last good answers and token states"),
      key("store.path", "string", "`\(Defaults.storePath)`", .restart, "the store file (created with mode 0600)"),
      key(
        "store.max_bytes", "integer ≥ 1", "\(Defaults.storeMaxBytes)", .applies,
        "bound on stored answers; least recently used are evicted"),
      key(
        "store.secret_key", "string", "none (empty is none)", .restart,
        "encrypts stored token values (AES-256-GCM); use 32 random characters or more"),
      key(
        "shared", "object", "none (no shared tier)", .applies,
        "Redis or Valkey that replicas share stale answers and rate limits through (Docs/shared-tier.md)"),
      key(
        "shared.url", "string (`redis://` or `rediss://` URL)", "required in `shared`", .applies,
        "`redis[s]://[user:password@]host[:port][/db]`; the host is resolved at start and on reload"),
      key("shared.password", "string", "none (empty is none)", .applies, "replaces the URL's password; never shown"),
      key("shared.prefix", "string", "`gatehouse:`", .applies, "put before every key the gateway writes"),
      key(
        "shared.timeout_ms", "integer 1–5000", "50", .applies,
        "each command's deadline: the most the shared tier can delay a request"),
      key(
        "shared.max_entry_bytes", "integer 1–7340032", "1048576", .applies,
        "stored answers larger than this are not written to the shared tier"),
      key(
        "shared.ca", "string (file)", "none (the system's CAs)", .applies,
        "PEM CA bundle that verifies a `rediss://` server"),
      key("limits", "object", "{}", .applies, "connection, size and time limits for clients"),
      key(
        "limits.max_connections", "integer ≥ 1", "\(Defaults.maxConnections)", .applies,
        "open client connections; more are closed at once"),
      key(
        "limits.max_header_bytes", "integer ≥ 1", "\(Defaults.maxHeaderBytes)", .applies,
        "request head size (431 past it)"),
      key(
        "limits.max_body_bytes", "integer ≥ 0", "\(Defaults.maxBodyBytes)", .applies, "request body size (413 past it)"),
      key("limits.header_timeout_ms", "integer ≥ 1", "10000", .applies, "time for a request head to arrive"),
      key("limits.idle_timeout_ms", "integer ≥ 1", "60000", .applies, "silence allowed on a connection, both ways"),
      key(
        "limits.drain_timeout_ms", "integer ≥ 0", "10000", .applies, "how long shutdown waits for requests in flight"),
      key(
        "limits.body_timeout_ms", "integer ≥ 1", "60000", .applies,
        "time for a whole request body to arrive after its head (408 past it)"),
      key(
        "limits.body_buffer_bytes", "integer 0–67108864", "\(Defaults.bodyBufferBytes)", .applies,
        "request body read ahead before an upstream connection is taken (0: stream)"),
      key(
        "limits.buffered_bytes", "integer ≥ 0", "\(Defaults.bufferedBytes)", .applies,
        "memory for answers held whole, shared by the process"),
      key(
        "limits.websocket_idle_timeout_ms", "integer ≥ 1", "300000", .applies,
        "a WebSocket tunnel silent both ways this long is closed"),
      key(
        "limits.max_websockets", "integer 0–16777216", "\(Defaults.maxWebSockets)", .applies,
        "open WebSocket tunnels, process-wide (503 past it)"),
      key("limits.http2", "object", "{}", .newConnections, "limits of HTTP/2 connections"),
      key(
        "limits.http2.max_concurrent_streams", "integer 1–1048576", "128", .newConnections,
        "streams open at once on a connection; resets faster than this per second end it"),
      key(
        "limits.http2.initial_window_bytes", "integer 1–2147483647", "65535", .newConnections,
        "each stream's receive window (request bodies); the connection's is up to 16 times it"),
      key(
        "limits.http2.max_header_list_bytes", "integer 1–16777216", "`limits.max_header_bytes`", .newConnections,
        "decoded header list size; past it the connection ends (GOAWAY)"),
    ] + headerKeys("headers", scope: "on every route")
    + [
      key("resolver", "object", "{}", .applies, "how upstream names are looked up (DNS A and AAAA)"),
      key(
        "resolver.servers", "array of `ip` or `ip:port` (`[IPv6]:port`)", "/etc/resolv.conf's `nameserver` lines",
        .applies, "name servers, tried in order; port 53 unless written"),
      key(
        "resolver.timeout_ms", "integer ≥ 1", "2000", .applies,
        "wait for a server's first answer; later rounds wait longer"),
      key("upstreams", "object: name → upstream", "{}", .applies, "backends routes send requests to"),
      key(
        "upstreams.*.url", "string (URL)", "required", .applies,
        "`http://` or `https://host[:port][/base/path]`; request paths are appended to the base path"),
      key("upstreams.*.connect_timeout_ms", "integer ≥ 1", "1000", .applies, "time to open a connection"),
      key(
        "upstreams.*.response_timeout_ms", "integer ≥ 1", "10000", .applies,
        "time for the answer's head after the request was sent (504 past it)"),
      key(
        "upstreams.*.max_idle_connections", "integer 0–100000", "64", .applies,
        "idle connections kept per event loop; more stay up to 1 s after a busy moment, 0 keeps none"),
      key(
        "upstreams.*.pipeline_depth", "integer 0–64", "1", .applies,
        "requests written together on one connection (1: no pipelining)"),
      key(
        "upstreams.*.max_connections", "integer ≥ 1", "\(Defaults.maxUpstreamConnections)", .applies,
        "open connections to this upstream, shared by the event loops"),
      key(
        "upstreams.*.queue_timeout_ms", "integer ≥ 0", "`connect_timeout_ms`", .applies,
        "wait for a free connection before answering 503 \"upstream busy\""),
      key("upstreams.*.tls", "object", "system trust store, verified", .applies, "TLS settings of an `https` url"),
      key(
        "upstreams.*.tls.ca", "string (file)", "system trust store", .applies,
        "PEM CA bundle the upstream's certificate is checked against"),
      key(
        "upstreams.*.tls.verify", "boolean", "true", .applies,
        "check the upstream's certificate (false is warned about)"),
      key(
        "upstreams.*.tls.server_name", "string (host name)", "the url's host", .applies,
        "name sent as SNI and checked in the certificate"),
      key(
        "upstreams.*.tls.cert", "string (file)", "none", .applies,
        "client certificate (PEM) presented to the upstream; needs `key`"),
      key(
        "upstreams.*.tls.key", "string (file)", "none", .applies, "private key of the client certificate; needs `cert`"),
      key("upstreams.*.health", "object", "none (no active checks)", .applies, "active health checks"),
      key(
        "upstreams.*.health.path", "string (path; `~/…` from the host's root)", "`/health`", .applies,
        "path checked with GET, appended to the url's base path"),
      key("upstreams.*.health.interval_ms", "integer ≥ 1", "2000", .applies, "time between checks"),
      key(
        "upstreams.*.health.unhealthy_after", "integer 1–1000", "3", .applies,
        "failed checks in a row that mark the upstream down"),
      key(
        "upstreams.*.health.healthy_after", "integer 1–1000", "2", .applies,
        "good checks in a row that mark it up again"),
      key(
        "upstreams.*.circuit", "object",
        "`{\"failures\": \(Circuit.defaultFailures), \"open_ms\": \(Circuit.defaultOpenMilliseconds)}`", .applies,
        "circuit breaker: skip a failing upstream (or route) for a while"),
      key(
        "upstreams.*.circuit.failures", "integer 0–100000", "\(Circuit.defaultFailures)", .applies,
        "failures in a row that open the circuit (0: off)"),
      key(
        "upstreams.*.circuit.open_ms", "integer ≥ 1", "\(Circuit.defaultOpenMilliseconds)", .applies,
        "how long it stays open before one trial request"),
      key(
        "upstreams.*.circuit.count_5xx", "boolean", "false", .applies, "count a 5xx answer as a failure of its route"),
      key(
        "upstreams.*.servers", "array of objects", "every A/AAAA record of the url's host, on the url's port",
        .applies, "the endpoints; the url still gives scheme, base path, `Host` and TLS name"),
      key(
        "upstreams.*.servers[].address", "string `host:port`", "required", .applies,
        "IPv4, `[IPv6]` or a name (every A/AAAA record of it) with a port"),
      key("upstreams.*.servers[].weight", "integer 1–100", "1", .applies, "share of requests relative to the others"),
      key(
        "upstreams.*.balance", "`least_request`, `round_robin` or `hash`", "`least_request`", .applies,
        "how requests are spread over the endpoints"),
      key(
        "upstreams.*.hash_by", "`client`, `ip`, `path` or `header:NAME`", "`client`", .applies,
        "what `balance: hash` keeps together on one endpoint"),
      key(
        "upstreams.*.resolve_s", "integer ≥ 1", "30", .applies,
        "how often names (the url's host, or names in `servers`) are looked up again"),
      key(
        "upstreams.*.outlier", "object", "on, with the defaults below", .applies,
        "passive ejection of endpoints whose tries keep failing"),
      key(
        "upstreams.*.outlier.failures", "integer 1–100000", "5", .applies,
        "failed tries in a row (connect, reset, timeout, 502–504) that eject an endpoint"),
      key(
        "upstreams.*.outlier.eject_ms", "integer ≥ 1", "10000", .applies,
        "first ejection's length; each repeat in a row doubles it, up to 10 times as long"),
      key(
        "upstreams.*.outlier.max_ejected_percent", "integer 0–100", "50", .applies,
        "most of the fleet ejected at once (0: never eject)"),
      key(
        "upstreams.*.retry", "object", "on, with the defaults below", .applies,
        "a failed try made again on another endpoint"),
      key(
        "upstreams.*.retry.attempts", "integer 1–10", "2", .applies, "tries in all, the first included (1: no retry)"
      ),
      key(
        "upstreams.*.retry.on", "array of `connect` `reset` `timeout` `502` `503` `504`",
        "`[\"connect\", \"reset\", \"503\"]`", .applies,
        "failures retried; a POST or PATCH without `Idempotency-Key` only after `connect`"),
      key(
        "upstreams.*.retry.budget_percent", "integer 0–100", "20", .applies,
        "retries at most this share of the upstream's requests over 10 s (a few per second always)"),
      key("tokens", "object: name → token", "{}", .applies, "credentials injected into requests to the backend"),
      key(
        "tokens.*.type", "`static`, `file` or `oauth2_client_credentials`", "required", .applies,
        "where the value comes from; decides the other keys"),
      key(
        "tokens.*.value", "string", "required (`static`)", .applies, "the token value; empty leaves the token `missing`"
      ),
      key(
        "tokens.*.path", "string (file)", "required (`file`)", .applies,
        "file holding the value; read again when it changes"),
      key(
        "tokens.*.token_url", "string (URL)", "required (`oauth2_client_credentials`)", .applies,
        "token endpoint (form POST with HTTP Basic client auth)"),
      key("tokens.*.client_id", "string", "required (`oauth2_client_credentials`)", .applies, "OAuth2 client id"),
      key(
        "tokens.*.client_secret", "string", "required (`oauth2_client_credentials`)", .applies, "OAuth2 client secret"),
      key("tokens.*.scope", "string", "none", .applies, "scope asked for (`oauth2_client_credentials`)"),
      key(
        "tokens.*.refresh_before_s", "integer ≥ 0", "60", .applies,
        "refresh this long before expiry (`oauth2_client_credentials`)"),
      key("clients", "object", "{}", .applies, "API keys clients send in `X-Api-Key` or `Authorization: ApiKey <key>`"),
      key("clients.required", "boolean", "false", .applies, "refuse requests without a known key (401)"),
      key(
        "clients.keys", "array of objects", "[]", .applies,
        "the known keys; rate limits keep their burst across reloads"),
      key("clients.keys[].id", "string", "required", .applies, "name of the client in logs and cache keys"),
      key(
        "clients.keys[].sha256", "string (64 hex digits)", "required", .applies,
        "SHA-256 of the key (`printf %s KEY \\| sha256sum`)"),
      key(
        "clients.keys[].rate_per_s", "number > 0", "none (no limit)", .applies,
        "requests per second this key may make (429 past it); with `shared`, counted across replicas"
          + " in fixed windows (`Docs/shared-tier.md`)"),
      key(
        "clients.keys[].burst", "integer ≥ 1", "`rate_per_s` rounded up", .applies,
        "requests allowed at once above the rate; needs `rate_per_s`; with `shared`, only when the"
          + " tier does not answer"),
      key("jwt", "object", "{}", .applies, "identity providers whose JWTs routes verify (Docs/jwt.md)"),
      key("jwt.providers", "object: name → provider", "required in `jwt`", .applies, "the providers, by name"),
      key("jwt.providers.*.issuer", "string", "none (not checked)", .applies, "`iss` a token must carry"),
      key(
        "jwt.providers.*.jwks_url", "string (URL)", "required unless `keys`", .applies,
        "where the signing keys are fetched (TLS verified; redirects not followed)"),
      key(
        "jwt.providers.*.keys", "object (JWKS)", "none", .applies,
        "signing keys written in the config instead of `jwks_url`"),
      key(
        "jwt.providers.*.audiences", "array of strings", "[] (not checked)", .applies,
        "a token's `aud` must hold one of them"),
      key(
        "jwt.providers.*.algorithms", "array of `RS256` `RS384` `RS512` `PS256` `ES256` `ES384` `EdDSA`",
        "all seven", .applies, "signature algorithms accepted; never `none` or HMAC"),
      key(
        "jwt.providers.*.leeway_s", "integer 0–3600", "30", .applies, "clock skew allowed for `exp`, `nbf` and `iat`"),
      key(
        "jwt.providers.*.jwks_refresh_s", "integer 10–86400", "600", .applies,
        "how often the keys are fetched again (and at most every 10 s on an unknown `kid`)"),
      key(
        "jwt.providers.*.forward_claims", "object: claim → header name", "{}", .applies,
        "claims sent to the backend as headers; clients' copies are dropped"),
      key(
        "routes", "array of objects", "required", .applies,
        "tried in order; the first that matches path and method answers"),
      key("routes[].name", "string", "required", .applies, "unique name in logs, metrics and the admin API"),
      key("routes[].match", "object", "required", .applies, "which requests the route takes"),
      key(
        "routes[].match.path", "string (path template)", "required", .applies,
        "literal `/users`, template `/users/:id` or prefix `/files/*`"),
      key(
        "routes[].match.methods", "array of strings", "any method", .applies,
        "uppercase methods; `GET` also admits `HEAD`"),
      key(
        "routes[].upstream", "string (upstream name)", "required unless `stub.mode` is `always`", .applies,
        "the upstream requests go to"),
      key(
        "routes[].path", "string (path template)", "the request path", .applies,
        "upstream path; uses the match's `:name` parameters and `/*` rest"),
      key(
        "routes[].token", "string (token name)", "none", .applies,
        "token injected into `token_header`; the client's value is dropped"),
      key(
        "routes[].token_header", "string (header name)", "`Authorization`", .applies, "header that carries the token"),
      key(
        "routes[].token_format", "string with `{token}`", "`Bearer {token}`", .applies,
        "how the token is written in its header"),
      key(
        "routes[].invalid_token", "object", "`{\"status\": [401]}`", .applies,
        "how the backend says the token was refused"),
      key(
        "routes[].invalid_token.status", "array of integers 400–599", "[401]", .applies,
        "statuses that mean the token was refused"),
      key(
        "routes[].invalid_token.body_field", "string", "none", .applies,
        "top-level JSON member whose value can mean the same; needs `body_values`"),
      key(
        "routes[].invalid_token.body_values", "array of JSON scalars", "none", .applies,
        "values of `body_field` that mean the token was refused"),
    ] + headerKeys("routes[].headers", scope: "applied after the top-level ones")
    + [
      key(
        "routes[].envelope", "object", "`{\"enabled\": true}`", .applies,
        "wrapping answers in `{\"code\",\"datas\",\"message\"}`"),
      key(
        "routes[].envelope.enabled", "boolean", "true", .applies, "false passes bodies through byte for byte, streaming"
      ),
      key(
        "routes[].envelope.key_path", "string (dotted path)", "none (the whole body)", .applies,
        "part of a JSON 2xx body put in `datas`: `data.items`, `users.0.name`"),
      key(
        "routes[].envelope.status", "`mirror` or `always_200`", "`mirror`", .applies,
        "HTTP status: the backend's, or always 200 with the status only in `code`"),
      key(
        "routes[].envelope.max_bytes", "integer ≥ 1", "8388608", .applies,
        "answers up to this size are checked whole; larger JSON streams wrapped"),
      key("routes[].cache", "object", "none (nothing stored)", .applies, "keep the last good answers in the store"),
      key(
        "routes[].cache.stale_if_error_s", "integer ≥ 0", "86400", .applies,
        "serve a stored answer this old when the backend fails (`STALE`)"),
      key(
        "routes[].cache.fresh_s", "integer ≥ 0", "0", .applies,
        "serve a stored answer this old without asking the backend (`HIT`)"),
      key(
        "routes[].cache.stale_while_revalidate_s", "integer ≥ 0", "0", .applies,
        "serve a stored answer this much past `fresh_s` while one request refreshes it"),
      key(
        "routes[].cache.vary", "array of header names", "[]", .applies, "request fields that are part of the cache key"),
      key(
        "routes[].cache.collapse", "boolean", "true", .applies, "concurrent GETs for one key share one backend exchange"
      ),
      key(
        "routes[].cache.shared", "boolean", "false", .applies,
        "on a `jwt` route, one stored answer for all users (else one per token `sub`)"),
      key("routes[].jwt", "object", "none (no verification)", .applies, "verify the client's bearer JWT first"),
      key("routes[].jwt.provider", "string (provider name)", "required", .applies, "the provider whose keys sign it"),
      key(
        "routes[].jwt.required", "boolean", "true", .applies,
        "refuse requests without a token (401); false lets them through anonymous"),
      key(
        "routes[].jwt.scopes", "array of strings", "[]", .applies,
        "scopes the token must grant (`scope` or `scp`), else 403"),
      key(
        "routes[].websocket", "boolean", "false", .applies,
        "take `Upgrade: websocket` handshakes and tunnel them to the upstream (Docs/websockets.md)"),
      key(
        "routes[].stub", "object", "`{\"mode\": \"off\"}`", .applies,
        "a fixed answer instead of, or behind, the backend"),
      key(
        "routes[].stub.mode", "`off`, `always` or `fallback`", "`off`", .applies,
        "`always`: never ask the backend; `fallback`: when it fails and nothing is stored"),
      key("routes[].stub.status", "integer 200–599", "200", .applies, "status of the stub answer"),
      key("routes[].stub.body", "any JSON", "null", .applies, "body of the stub answer, wrapped like a backend's"),
      key("routes[].stub.delay_ms", "integer ≥ 0", "0", .applies, "wait before answering (to try slow clients)"),
      key("log", "object", "{}", .applies, "logging to standard output"),
      key("log.level", "`debug`, `info`, `warn` or `error`", "`info`", .applies, "lowest level written"),
      key("log.access", "`stdout` or `off`", "`stdout`", .applies, "one access line per request"),
      key("log.format", "`json`", "`json`", .applies, "one JSON object per line"),
      key(
        "log.trusted_proxies", "array of IP addresses or CIDR ranges", "[]", .applies,
        "peers whose first `X-Forwarded-For` hop is logged as `client`"),
      key(
        "log.mask_query", "array of query parameter names", "`access_token`, `token`, `key`, … (Docs/logs.md)",
        .applies, "query parameters whose values access lines write as `***`"),
    ]

  /// The key at `path`, if the table has it.
  public static func key(at path: String) -> ConfigKey? {
    all.first { $0.path == path }
  }

  /// `Config/REFERENCE.md`: one table per top-level block, in the table's order.
  public static func renderReference() -> String {
    var out = """
      # Config reference

      Every key `gatehouse check` and `gatehouse serve` accept. Generated from the table in
      `Sources/GatehouseConfig/ConfigKeys.swift` (a test fails when it and this file
      differ; `Scripts/write-config-reference.sh` rewrites it).
      How the blocks work together is in [`README.md`](README.md) and [`../Docs/`](../Docs/).

      - `*` stands for a name you choose (`upstreams.*.url` is the `url` of every upstream), `[]`
        for any element of a list (`routes[].cache` is the `cache` of every route).
      - Durations are integers in the unit their name ends with (`_ms`, `_s`), sizes are bytes,
        and every string may use `${ENV}` or `${ENV:-default}`.
      - Reload: `yes` applies on `SIGHUP` or `POST /admin/reload` to what starts afterwards;
        `new connections` applies to connections accepted afterwards; `restart` is logged as
        waiting and applies at the next start.

      """
    var section: String?
    for key in all {
      let top = String(key.path.prefix { $0 != "." && $0 != "[" })
      if top != section {
        section = top
        out += "\n## `\(top)`\n\n"
        out += "| key | type | default | reload | meaning |\n"
        out += "| --- | --- | --- | --- | --- |\n"
      }
      let cells = ["`\(key.path)`", key.type, key.defaultText, key.reload.text, key.meaning]
      out += "| " + cells.map(tableCell).joined(separator: " | ") + " |\n"
    }
    return out
  }

  /// A Markdown table cell: a `|` would end the cell early.
  private static func tableCell(_ text: String) -> String {
    var out = ""
    var previous: Character?
    for character in text {
      if character == "|" && previous != "\\" { out.append("\\") }
      out.append(character)
      previous = character
    }
    return out
  }
}
