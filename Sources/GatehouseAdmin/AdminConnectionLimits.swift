import GatehouseNet

/// The limits every admin connection runs under. The admin port shares the process's
/// descriptors and its first event loop with the gateway, so it must not be able to hold
/// more of either than a few probes, scrapers and dashboards need.
package struct AdminConnectionLimits: Sendable, Equatable {
  /// Admin connections open at once; more are closed as soon as they are accepted.
  /// Fixed rather than `limits.max_connections`: probes, a scraper and a few dashboards
  /// need a handful, and a separate small cap means a flood of gateway clients cannot lock
  /// the probes out, nor admin clients take the gateway's descriptors.
  static let maxConnections = 64
  /// Admin connections open at once from one peer address (any port), a quarter of the cap.
  /// Why per peer rather than serving the probes outside the cap: any shared budget, however
  /// big, is filled by whoever connects first, while the kubelet, a scraper and operators
  /// connect from addresses of their own; so one address flooding the port (even with
  /// valid `/healthz` requests) holds at most a quarter, and the probes still get in. 16 is
  /// room for a browser's six connections per host plus CLIs, all of which share 127.0.0.1
  /// behind `kubectl port-forward`. Several flooding addresses are kept out by the network
  /// (Deploy/kubernetes/70-networkpolicy-admin.yaml), not here.
  static let maxConnectionsPerPeer = 16

  /// The running config's `limits.header_timeout_ms`: a request (head and body) must
  /// arrive within it, counted from accept or from the request's first byte.
  package var headerTimeoutNanoseconds: UInt64
  /// The running config's `limits.idle_timeout_ms`: how long a connection may wait for its
  /// next request, and how long a client may go without taking any of its queued answers.
  package var idleTimeoutNanoseconds: UInt64

  package init(headerTimeoutNanoseconds: UInt64, idleTimeoutNanoseconds: UInt64) {
    self.headerTimeoutNanoseconds = headerTimeoutNanoseconds
    self.idleTimeoutNanoseconds = idleTimeoutNanoseconds
  }

  /// The documented defaults of `limits.header_timeout_ms` and `limits.idle_timeout_ms` (10 s, 60 s; Config/REFERENCE.md), for when no gateway is there to ask.
  static let defaults = AdminConnectionLimits(
    headerTimeoutNanoseconds: 10_000_000_000, idleTimeoutNanoseconds: 60_000_000_000)
}

/// The admin connections open, in all and per peer address: whether to take one more.
/// Pure bookkeeping, so the caps are tested without sockets.
struct AdminConnectionCounts {
  /// What to do with a connection just accepted.
  enum Decision: Equatable {
    case accept
    /// `AdminConnectionLimits.maxConnections` are open.
    case refuseTotal
    /// `AdminConnectionLimits.maxConnectionsPerPeer` are open from this connection's address.
    case refusePeer
  }

  private var perPeer: [SocketAddress?: Int] = [:]
  private(set) var total = 0

  /// The address counted for `peer`: its host, without the port (each connection has its own).
  private static func key(_ peer: SocketAddress?) -> SocketAddress? { peer?.withPort(0) }

  /// Counts the connection from `peer` if it may stay.
  mutating func admit(_ peer: SocketAddress?) -> Decision {
    guard total < AdminConnectionLimits.maxConnections else { return .refuseTotal }
    let key = Self.key(peer)
    let fromPeer = perPeer[key, default: 0]
    guard fromPeer < AdminConnectionLimits.maxConnectionsPerPeer else { return .refusePeer }
    perPeer[key] = fromPeer + 1
    total += 1
    return .accept
  }

  /// A connection counted by `admit(peer)` has closed.
  mutating func release(_ peer: SocketAddress?) {
    let key = Self.key(peer)
    guard let fromPeer = perPeer[key], fromPeer > 0 else { return }
    perPeer[key] = fromPeer > 1 ? fromPeer - 1 : nil
    total -= 1
  }

  /// Connections open from `peer`'s address.
  func count(from peer: SocketAddress?) -> Int { perPeer[Self.key(peer)] ?? 0 }
}
