import GatehouseLogging

#if canImport(Glibc)
  import Glibc
#endif

/// A wall-clock instant in milliseconds since the Unix epoch.
///
/// Wall clock rather than monotonic on purpose: token expiry times are persisted across restarts and shown
/// as RFC 3339 in the admin API, and a monotonic reading means nothing after a reboot. A clock step moves
/// expiry decisions by the same step, which the refresh margin (`refresh_before_s`) absorbs for small steps.
public struct TokenInstant: Sendable, Hashable, Comparable, CustomStringConvertible {
  public let millisecondsSinceEpoch: Int64

  public init(millisecondsSinceEpoch: Int64) {
    self.millisecondsSinceEpoch = millisecondsSinceEpoch
  }

  /// The epoch: earlier than any real deadline, used for "as soon as possible".
  public static let epoch = TokenInstant(millisecondsSinceEpoch: 0)

  public static func < (lhs: TokenInstant, rhs: TokenInstant) -> Bool {
    lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
  }

  public static func + (lhs: TokenInstant, rhs: Duration) -> TokenInstant {
    TokenInstant(millisecondsSinceEpoch: lhs.millisecondsSinceEpoch &+ rhs.tokenMilliseconds)
  }

  public static func - (lhs: TokenInstant, rhs: Duration) -> TokenInstant {
    TokenInstant(millisecondsSinceEpoch: lhs.millisecondsSinceEpoch &- rhs.tokenMilliseconds)
  }

  /// The time from `self` until `later` (negative when `later` is earlier).
  public func duration(to later: TokenInstant) -> Duration {
    .milliseconds(later.millisecondsSinceEpoch &- millisecondsSinceEpoch)
  }

  /// `2026-11-29T21:04:05Z`: whole seconds, as the admin API shows times.
  public var rfc3339: String {
    let millis = millisecondsSinceEpoch
    let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
    return RFC3339.string(seconds: seconds)
  }

  public var description: String { rfc3339 }
}

extension Duration {
  /// Whole milliseconds, saturating instead of trapping for absurd durations from config or a peer.
  var tokenMilliseconds: Int64 {
    let (seconds, attoseconds) = components
    let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    if overflow { return seconds < 0 ? Int64.min / 2 : Int64.max / 2 }
    return whole &+ attoseconds / 1_000_000_000_000_000
  }
}

/// Where the token subsystem reads the time. Injected so that expiry, refresh scheduling and backoff are
/// tested with a manual clock instead of sleeping.
public protocol TokenClock: Sendable {
  var now: TokenInstant { get }
}

/// The real wall clock (`CLOCK_REALTIME`).
public struct SystemTokenClock: TokenClock {
  public init() {}

  public var now: TokenInstant {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return TokenInstant(millisecondsSinceEpoch: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec / 1_000_000))
  }
}
