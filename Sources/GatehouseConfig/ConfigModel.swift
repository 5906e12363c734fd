import GatehouseLogging

/// A loaded, validated config (Config/README.md). Immutable and Sendable: the control side builds a new
/// one on reload and publishes it; loops only read it.
///
/// Every value here already passed validation: references resolve, addresses and templates
/// parse, numbers are in range. Make one with `ConfigLoader` or `DefaultConfig`.
public struct GatehouseConfig: Sendable, Equatable {
  public var listen: [ListenerConfig]
  /// Event loop threads; 0 means one per core.
  public let workers: Int
  public let admin: AdminConfig
  public let store: StoreConfig
  public let limits: LimitsConfig
  /// Header changes for every route, applied before the route's own.
  public let headers: HeaderRules
  /// In config file order.
  public let upstreams: [UpstreamConfig]
  /// In config file order.
  public let tokens: [TokenConfig]
  public let clients: ClientsConfig
  /// In config file order, which is the order they are tried in.
  public let routes: [RouteConfig]
  public let log: LogConfig
  /// `jwt`: identity providers whose tokens routes verify (Docs/jwt.md).
  public var jwt = JWTConfig.none
  /// `shared`: the Redis/Valkey tier replicas pool through (Docs/shared-tier.md); nil when absent.
  public var shared: SharedTierConfig?
  /// `resolver`: the DNS servers upstream names are looked up with. Default the system's.
  public var resolver: ResolverConfig = .system

  public func upstream(named name: String) -> UpstreamConfig? {
    upstreams.first { $0.name == name }
  }

  public func token(named name: String) -> TokenConfig? {
    tokens.first { $0.name == name }
  }
}

/// A string that must not leak: token values, client secrets, the admin token, the store key.
/// Its `description`, `debugDescription` and mirror are redacted, so string interpolation,
/// `print` and `dump` of a config never show it; read `value` deliberately where it is used.
public struct SecretValue: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
  CustomReflectable
{
  public let value: String

  public init(_ value: String) {
    self.value = value
  }

  public var description: String { "<redacted>" }
  public var debugDescription: String { "<redacted>" }
  public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// One client-facing listener (`listen[]`).
public struct ListenerConfig: Sendable, Equatable {
  public let address: ListenAddress
  /// Present when the listener serves TLS.
  public let tls: ListenerTLSConfig?
  /// `http2`: a TLS listener offers ALPN `h2` (default true).
  public var http2: Bool = true
  /// `h2c`: a cleartext listener takes HTTP/2 with prior knowledge (default false).
  public var h2c: Bool = false

  public init(address: ListenAddress, tls: ListenerTLSConfig?, http2: Bool = true, h2c: Bool = false) {
    self.address = address
    self.tls = tls
    self.http2 = http2
    self.h2c = h2c
  }
}

/// `limits.http2` (Docs/http2.md): what an HTTP/2 connection announces and enforces.
public struct HTTP2LimitsConfig: Sendable, Equatable {
  /// Default 128.
  public var maxConcurrentStreams: Int = 128
  /// Default 65,535 (RFC 9113's initial window).
  public var initialWindowBytes: Int = 65_535
  /// Default `limits.max_header_bytes`.
  public var maxHeaderListBytes: Int

  public init(maxConcurrentStreams: Int = 128, initialWindowBytes: Int = 65_535, maxHeaderListBytes: Int) {
    self.maxConcurrentStreams = maxConcurrentStreams
    self.initialWindowBytes = initialWindowBytes
    self.maxHeaderListBytes = maxHeaderListBytes
  }
}

/// Certificate and key files for a TLS listener.
public struct ListenerTLSConfig: Sendable, Equatable {
  public let certificatePath: String
  public let keyPath: String
  /// `sni`: certificates for other server names (exact or `*.domain`).
  public let sni: [NamedCertificate]

  public struct NamedCertificate: Sendable, Equatable {
    public let names: [String]
    public let certificatePath: String
    public let keyPath: String
  }

  public init(certificatePath: String, keyPath: String, sni: [NamedCertificate] = []) {
    self.certificatePath = certificatePath
    self.keyPath = keyPath
    self.sni = sni
  }
}

/// The admin API listener (`admin`, Docs/admin-openapi.json).
public struct AdminConfig: Sendable, Equatable {
  /// Default `127.0.0.1:9901`.
  public let listen: ListenAddress
  /// The bearer token the admin API requires; nil when unset or empty, which validation allows
  /// only on a loopback `listen`.
  public let token: SecretValue?
  /// Whether `/metrics` answers without the token. Default false.
  public let metricsPublic: Bool
  /// Present when the admin listener serves TLS only (the same keys as `listen[].tls`), so
  /// the admin token and token values set through it do not cross the network in clear.
  public let tls: ListenerTLSConfig?

  public init(listen: ListenAddress, token: SecretValue?, metricsPublic: Bool, tls: ListenerTLSConfig? = nil) {
    self.listen = listen
    self.token = token
    self.metricsPublic = metricsPublic
    self.tls = tls
  }
}

/// The SQLite store (`store`, Docs/clients-and-cache.md).
public struct StoreConfig: Sendable, Equatable {
  /// The database file, as written (relative paths are relative to the working directory).
  /// Default `var/gatehouse.sqlite`.
  public let path: String
  /// Default 256 MiB.
  public let maxBytes: Int
  /// Key material for encrypting stored tokens; nil when unset or empty (tokens stored in clear).
  public let secretKey: SecretValue?
}

/// Connection and request limits (`limits`). Defaults: Config/REFERENCE.md.
public struct LimitsConfig: Sendable, Equatable {
  /// Default 10000.
  public let maxConnections: Int
  /// Default 16 KiB.
  public let maxHeaderBytes: Int
  /// Default 10 MiB.
  public let maxBodyBytes: Int
  /// Default 10 s.
  public let headerTimeout: Duration
  /// Default 60 s.
  public let idleTimeout: Duration
  /// Default 10 s.
  public let drainTimeout: Duration
  /// `body_timeout_ms`: the whole request body must arrive within this time of its head
  /// (a total, not a bound per read: a client dripping a byte at a time cannot stretch it).
  /// Default 60 s.
  public var bodyTimeout: Duration = ConfigDecoder.Defaults.bodyTimeout
  /// `body_buffer_bytes`: this much of a request body is read before an upstream
  /// connection is leased (the whole body when it is no larger), so a slow client holds
  /// no backend connection while it sends. Default 64 KiB.
  public var bodyBufferBytes: Int = ConfigDecoder.Defaults.bodyBufferBytes
  /// `buffered_bytes`: the most upstream answer bytes all exchanges may hold at once to
  /// wrap them whole (enveloped answers); past it, answers stream wrapped. Default 128 MiB.
  public var bufferedBytes: Int = ConfigDecoder.Defaults.bufferedBytes
  /// `websocket_idle_timeout_ms`: a tunnel with no byte either way for this long is
  /// closed (Docs/websockets.md). Default 300 s.
  public var websocketIdleTimeout: Duration = ConfigDecoder.Defaults.websocketIdleTimeout
  /// `max_websockets`: open tunnels (and handshakes under way) across the process; past
  /// it a handshake gets a 503 envelope. Default 1000.
  public var maxWebSockets: Int = ConfigDecoder.Defaults.maxWebSockets
  /// `http2`: stream, window and header list limits of HTTP/2 connections.
  public var http2 = HTTP2LimitsConfig(maxHeaderListBytes: ConfigDecoder.Defaults.maxHeaderBytes)
}

/// One header to set: name as written, value already checked for CR, LF and NUL.
public struct HeaderField: Sendable, Equatable {
  public let name: String
  public let value: String
}

/// Header changes for requests to the backend (`headers`): `remove` first, then `set`.
public struct HeaderRules: Sendable, Equatable {
  /// In config order; names are unique ignoring case.
  public let set: [HeaderField]
  /// Names to drop, as written (compare ignoring case).
  public let remove: [String]
  /// Client fields the operator keeps on purpose (`pass`): forwarded although the gateway
  /// drops them by default (`HeaderPlan.overrideFields`), and forwarded on requests whose
  /// answer may be shared although the cache key does not hold them.
  public let pass: [String]
  /// `forwarded`: the gateway writes an RFC 7239 `Forwarded` field (nil: not said here).
  public let forwarded: Bool?

  public init(set: [HeaderField], remove: [String], pass: [String] = [], forwarded: Bool? = nil) {
    self.set = set
    self.remove = remove
    self.pass = pass
    self.forwarded = forwarded
  }

  public static let empty = HeaderRules(set: [], remove: [])
}

/// API clients and their keys (`clients`).
public struct ClientsConfig: Sendable, Equatable {
  /// When true, requests without a known key get 401. Default false.
  public let required: Bool
  public let keys: [ClientKeyConfig]
}

/// One client key: only its SHA-256 is configured, so the config never holds the key itself.
public struct ClientKeyConfig: Sendable, Equatable {
  public let id: String
  /// Lowercase hex of the SHA-256 of the key (64 characters).
  public let sha256Hex: String
  /// Nil: no rate limit for this client.
  public let rateLimit: ClientRateLimit?
}

/// A token bucket: `perSecond` tokens refill each second, up to `burst`.
public struct ClientRateLimit: Sendable, Equatable {
  public let perSecond: Double
  /// Default: `perSecond` rounded up (at least 1).
  public let burst: Int
}

/// Logging (`log`, Docs/logs.md).
public struct LogConfig: Sendable, Equatable {
  /// Default `info`.
  public let level: LogLevel
  /// Default `stdout`.
  public let access: AccessLogDestination
  /// Only `json` exists.
  public let format: LogFormat
  /// `trusted_proxies`: addresses and networks (`10.0.0.0/8`) whose `X-Forwarded-For` the
  /// access line's `client` believes. Default none.
  public var trustedProxies: [String] = []
  /// `mask_query`: query parameters whose values access lines mask. Replaces the default
  /// list when given (`[]` masks nothing).
  public var maskQuery: [String] = LogConfig.defaultMaskedQuery

  /// Parameter names that carry credentials in the wild: OAuth (`access_token`, `code`),
  /// API keys, passwords, signed URLs (`signature`, `sig`).
  public static let defaultMaskedQuery = [
    "access_token", "refresh_token", "id_token", "token", "key", "api_key", "apikey", "password", "passwd",
    "secret", "client_secret", "signature", "sig", "code", "auth",
  ]
}

/// Where access lines go.
public enum AccessLogDestination: String, Sendable, Equatable {
  case stdout
  case off
}

/// The log line format: one JSON object per line.
public enum LogFormat: String, Sendable, Equatable {
  case json
}
