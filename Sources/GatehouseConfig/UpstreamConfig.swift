/// One named backend (`upstreams.NAME`).
public struct UpstreamConfig: Sendable, Equatable {
  public let name: String
  public let url: HTTPURL
  /// Default 1 s.
  public let connectTimeout: Duration
  /// Time to wait for the answer's head (`response_timeout_ms`). Default 10 s.
  public let answerTimeout: Duration
  /// Idle keep-alive connections kept per loop. Default 64.
  public let maxIdleConnections: Int
  /// Most requests written on one connection before their answers (1 = no pipelining).
  /// Default 8; 0 and 1 both turn it off. See `PipelinePolicy`.
  public let pipelineDepth: Int
  /// Only with an `https` url.
  public let tls: UpstreamTLSConfig?
  /// Nil: no active health checks (passive failure counting still feeds the circuit).
  public let health: HealthCheckConfig?
  /// Nil: no circuit breaker.
  public let circuit: CircuitBreakerConfig?
  /// `max_connections`: open connections to this upstream at most (shared out between
  /// the loops); a request that finds them all busy waits up to `queueTimeout`, then gets
  /// a 503. Default 1024.
  public var maxConnections: Int = ConfigDecoder.Defaults.maxUpstreamConnections
  /// `queue_timeout_ms`: default the connect timeout.
  public var queueTimeout: Duration? = nil
  /// `servers`: the endpoints, in config order. Nil: every A/AAAA record of the url's host
  /// is an endpoint on the url's port. Either way the url gives the scheme, base path,
  /// `Host` and TLS server name.
  public var servers: [UpstreamServerConfig]? = nil
  /// `balance`. Default `least_request`.
  public var balance: UpstreamBalance = .leastRequest
  /// `hash_by`, as written; nil when absent. Only `balance: hash` uses it; see `hashKey`.
  /// Kept optional so lint can tell a `hash_by` that does nothing from the default.
  public var hashBy: UpstreamHashKey? = nil
  /// `resolve_s`: how often, in seconds, the names (the url's host without `servers`, else
  /// the names in `servers`) are looked up again. Default 30. The fleet settings are whole
  /// numbers in their keys' units, as the runtime's fleet types take them.
  public var resolveSeconds: Int = 30
  /// `outlier`: passive ejection; always on, with its defaults when the block is absent.
  public var outlier: OutlierConfig = .default
  /// `retry`: retries on another endpoint; always on, with its defaults when absent.
  public var retry: RetryConfig = .default

  /// The key `balance: hash` hashes: `hash_by`, default `client`.
  public var hashKey: UpstreamHashKey { hashBy ?? .client }
}

/// How to verify and authenticate to an https upstream.
public struct UpstreamTLSConfig: Sendable, Equatable {
  /// CA bundle file; nil means the system trust store.
  public let caPath: String?
  /// Default true. False turns off certificate verification (testing only).
  public let verify: Bool
  /// SNI and certificate name; nil means the url's host.
  public let serverName: String?
  /// Client certificate and key for mutual TLS; both or neither.
  public let certificatePath: String?
  public let keyPath: String?
}

/// Active health checks (`health`); defaults: Config/REFERENCE.md.
public struct HealthCheckConfig: Sendable, Equatable {
  /// Path on the upstream, appended to its base path (`target(basePath:)`); `~/…` is
  /// from the host's root instead. Default `/health`.
  public let path: String
  /// Default 2 s.
  public let interval: Duration
  /// Consecutive failed checks before the upstream is unhealthy. Default 3.
  public let unhealthyAfter: Int
  /// Consecutive good checks before it is healthy again. Default 2.
  public let healthyAfter: Int

  /// The request target of a check. `path` is joined to the upstream url's base path, as a
  /// route's path is (`url: …/api/v1` with `/health` asks `/api/v1/health`), so one path
  /// means the same thing in both places. A path written `~/health` opts out and is asked
  /// from the host's root (`/health`): some backends keep their health endpoint outside
  /// the API's base path.
  public func target(basePath: String) -> String {
    if path.hasPrefix("~/") { return String(path.dropFirst()) }
    return basePath + path
  }
}

/// The circuit breaker (`circuit`, Config/README.md "Circuit breaker"); defaults: Config/REFERENCE.md.
public struct CircuitBreakerConfig: Sendable, Equatable {
  /// `failures` when it is left out, and for an upstream without a `circuit` block: like
  /// nginx's passive checks, an outage costs one connect attempt per second, not one per
  /// request. `ConfigKeys` states these numbers, so the reference cannot disagree.
  public static let defaultFailures = 3
  /// `open_ms` when it is left out, and for an upstream without a `circuit` block.
  public static let defaultOpenMilliseconds = 1000
  public static var defaultOpenDuration: Duration { .milliseconds(defaultOpenMilliseconds) }
  /// The breaker of an upstream without a `circuit` block: the same as `"circuit": {}`.
  public static let standard = CircuitBreakerConfig(failures: defaultFailures, openDuration: defaultOpenDuration)

  /// Consecutive failures that open the circuit (0: off). Default `defaultFailures`.
  public let failures: Int
  /// How long it stays open before one trial request. Default `defaultOpenDuration`.
  public let openDuration: Duration
  /// Whether a well-formed 5xx answer counts as a failure (`count_5xx`). Default false: any
  /// client can make an endpoint answer 500, and that must not take the upstream away
  /// from everyone else (nginx counts only connect errors and timeouts).
  public let count5xx: Bool

  public init(failures: Int, openDuration: Duration, count5xx: Bool = false) {
    self.failures = failures
    self.openDuration = openDuration
    self.count5xx = count5xx
  }
}
