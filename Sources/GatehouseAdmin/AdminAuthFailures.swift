import GatehouseLogging

/// Failed admin authentications (every 401 of the admin API: no token, a wrong one, or two
/// `Authorization` fields), for the `admin authentication failed` warning. Someone guessing
/// the token makes many; one line per 10 s at most says so without flooding the log: each
/// line has `failures`, how many happened since the previous line (this one included), and
/// `peer`, the address of the latest. Failures held back are reported by the admin sweep
/// once the 10 s are over, not only when the next one comes. Pure bookkeeping, fed the
/// monotonic time. The presented token never comes here.
struct AdminAuthFailures {
  private var throttle = LogThrottle(intervalNanoseconds: 10_000_000_000)
  /// The peer of the latest failure held back.
  private var lastPeer: String?

  static let message = "admin authentication failed"

  /// A failure from `peer` at `now`: the line's fields if a line goes out now, else nil.
  mutating func record(peer: String?, now: UInt64) -> [LogField]? {
    guard let earlier = throttle.admit(now: now) else {
      lastPeer = peer
      return nil
    }
    lastPeer = nil
    return Self.fields(peer: peer, failures: earlier + 1)
  }

  /// The sweep at `now`: a line for the failures held back, once one may go out again.
  mutating func flush(now: UInt64) -> [LogField]? {
    guard let held = throttle.flush(now: now) else { return nil }
    defer { lastPeer = nil }
    return Self.fields(peer: lastPeer, failures: held)
  }

  private static func fields(peer: String?, failures: Int) -> [LogField] {
    [("peer", peer.map { .string($0) } ?? .null), ("failures", .int(failures))]
  }
}
