/// One entry of `upstreams.*.servers`: an endpoint address (an IP literal, or a name every
/// A/AAAA record of which is an endpoint) and its weight.
public struct UpstreamServerConfig: Sendable, Equatable {
  public let address: ServerAddress
  /// 1 to 100. Default 1.
  public var weight: Int = 1

  public init(address: ServerAddress, weight: Int = 1) {
    self.address = address
    self.weight = weight
  }
}

/// `host:port` to connect to, as `servers` entries give it.
public struct ServerAddress: Sendable, Hashable, CustomStringConvertible {
  public enum Host: Sendable, Hashable {
    /// Dotted quad, as written (glibc refuses leading zeros, so that is already canonical).
    case ipv4(String)
    /// Without brackets, in the canonical form `inet_ntop` gives (`2001:db8::5`), which is
    /// also how resolved addresses are written: one address has one spelling.
    case ipv6(String)
    /// A DNS name, lowercased (names are case-insensitive).
    case name(String)
  }

  public let host: Host
  public let port: UInt16

  public init(host: Host, port: UInt16) {
    self.host = host
    self.port = port
  }

  /// The host without brackets.
  public var hostText: String {
    switch host {
    case .ipv4(let text), .ipv6(let text), .name(let text): text
    }
  }

  /// True for an IP literal, which needs no lookup.
  public var isIPLiteral: Bool {
    if case .name = host { return false }
    return true
  }

  /// `10.0.1.5:8080`, `[2001:db8::5]:8080`, `api-b.internal:8080`: the spelling endpoints
  /// are identified by.
  public var description: String {
    switch host {
    case .ipv4(let text), .name(let text): "\(text):\(port)"
    case .ipv6(let text): "[\(text)]:\(port)"
    }
  }
}

/// `upstreams.*.balance`: how requests are spread over the endpoints. The raw values are
/// the config's spellings, the ones `BalancePolicy(configValue:)` reads.
public enum UpstreamBalance: String, Sendable, Equatable, CaseIterable {
  /// The default: the less loaded (per unit of weight) of two endpoints drawn by weight.
  case leastRequest = "least_request"
  /// Smooth weighted round robin.
  case roundRobin = "round_robin"
  /// Weighted rendezvous hashing of the `hash_by` key.
  case hash

  public var configValue: String { rawValue }
}

/// `upstreams.*.hash_by`: what the key of `balance: hash` is made of. `configValue` is the
/// spelling `HashKeySource(configValue:)` reads.
public enum UpstreamHashKey: Sendable, Equatable {
  /// The client's key id (`clients.keys`). The default.
  case client
  /// The client's IP address.
  case ip
  /// The request path.
  case path
  /// A request header's value; the name as written (compare ignoring case).
  case header(String)

  public var configValue: String {
    switch self {
    case .client: "client"
    case .ip: "ip"
    case .path: "path"
    case .header(let name): "header:\(name)"
    }
  }
}

/// `upstreams.*.outlier`: passive ejection of an endpoint whose tries keep failing.
public struct OutlierConfig: Sendable, Equatable {
  /// `failures`: failed tries in a row that eject an endpoint. Default 5.
  public var failures: Int = 5
  /// `eject_ms`: the first ejection's length in milliseconds; repeated ones last longer.
  /// Default 10000.
  public var ejectMilliseconds: Int = 10_000
  /// `max_ejected_percent`: the share of the fleet that may be ejected at once (0 turns
  /// ejection off). Default 50.
  public var maxEjectedPercent: Int = 50

  public init(failures: Int = 5, ejectMilliseconds: Int = 10_000, maxEjectedPercent: Int = 50) {
    self.failures = failures
    self.ejectMilliseconds = ejectMilliseconds
    self.maxEjectedPercent = maxEjectedPercent
  }

  public static let `default` = OutlierConfig()
}

/// One value of `retry.on`. The raw values are the config's spellings, the ones
/// `RetryConditions(configValues:)` reads.
public enum RetryCondition: String, Sendable, Equatable, CaseIterable {
  /// No connection was made: the request never left.
  case connect
  /// The connection closed before any byte of the answer.
  case reset
  /// No answer head within `response_timeout_ms`.
  case timeout
  case status502 = "502"
  case status503 = "503"
  case status504 = "504"

  public var configValue: String { rawValue }
}

/// `upstreams.*.retry`: when a failed try is made again on another endpoint.
public struct RetryConfig: Sendable, Equatable {
  /// `attempts`: tries in all, the first included (1 turns retries off). Default 2.
  public var attempts: Int = 2
  /// `on`: the failures that may be retried, in config order without repeats. Default
  /// `connect`, `reset`, `503`.
  public var on: [RetryCondition] = RetryConfig.defaultConditions
  /// `budget_percent`: retries as a share of the upstream's requests over the last 10 s
  /// (a few per second are always allowed). Default 20.
  public var budgetPercent: Int = 20

  /// Not `timeout`, 502 or 504: the request may still be running on a slow endpoint, and a
  /// 502 or 504 is often a proxy behind the endpoint reporting a failure that any other
  /// endpoint of the fleet would meet too.
  public static let defaultConditions: [RetryCondition] = [.connect, .reset, .status503]

  public init(attempts: Int = 2, on: [RetryCondition] = RetryConfig.defaultConditions, budgetPercent: Int = 20) {
    self.attempts = attempts
    self.on = on
    self.budgetPercent = budgetPercent
  }

  public static let `default` = RetryConfig()
}

/// `resolver`: where the gateway asks DNS for upstream names.
public struct ResolverConfig: Sendable, Equatable {
  /// `servers`: IP literals with their ports (53 when not written), tried in order. Nil:
  /// the `nameserver` lines of /etc/resolv.conf.
  public var servers: [ServerAddress]? = nil
  /// `timeout_ms`: how long the first query to a server waits, in milliseconds. Default 2000.
  public var timeoutMilliseconds: Int = 2000

  public init(servers: [ServerAddress]? = nil, timeoutMilliseconds: Int = 2000) {
    self.servers = servers
    self.timeoutMilliseconds = timeoutMilliseconds
  }

  /// The system's servers with the default timeout: what an absent `resolver` means.
  public static let system = ResolverConfig()
}
