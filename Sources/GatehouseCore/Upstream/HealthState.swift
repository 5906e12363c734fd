/// Active health of one upstream (`upstreams.*.health`, Config/REFERENCE.md), as a pure state machine: it turns
/// unhealthy after `unhealthyAfter` failed checks in a row and healthy again after
/// `healthyAfter` good ones. It starts healthy, so a new gateway serves at once.
///
/// Times are wall-clock milliseconds since the epoch, passed in by the caller (the admin API
/// shows them as RFC 3339); the state machine never reads a clock.
public struct HealthState: Sendable, Equatable {
  /// One health check's result, as `/admin/upstreams` shows it in `last_check`.
  public struct Check: Sendable, Equatable {
    public let atMs: Int64
    public let ok: Bool
    /// The answer's status; nil when no answer came (refused, timed out, reset).
    public let status: Int?
    /// Why the check failed; nil for a good check.
    public let error: String?

    public init(atMs: Int64, ok: Bool, status: Int?, error: String?) {
      self.atMs = atMs
      self.ok = ok
      self.status = status
      self.error = error
    }
  }

  public let unhealthyAfter: Int
  public let healthyAfter: Int
  public private(set) var healthy = true
  /// Consecutive results that disagree with `healthy`.
  public private(set) var streak = 0
  /// The last failed check's error; kept after a recovery (with `lastErrorAtMs`), so an
  /// operator can still see what the last outage was.
  public private(set) var lastError: String?
  public private(set) var lastErrorAtMs: Int64?
  /// When `healthy` last changed; nil while it never has (healthy since the start).
  public private(set) var sinceMs: Int64?
  /// The most recent check; nil before the first one.
  public private(set) var lastCheck: Check?

  public init(unhealthyAfter: Int, healthyAfter: Int) {
    self.unhealthyAfter = max(1, unhealthyAfter)
    self.healthyAfter = max(1, healthyAfter)
  }

  /// Records one check made at `atMs`; returns true when `healthy` changed.
  public mutating func record(success: Bool, status: Int? = nil, error: String? = nil, atMs: Int64 = 0) -> Bool {
    lastCheck = Check(atMs: atMs, ok: success, status: status, error: success ? nil : error)
    if !success {
      lastError = error
      lastErrorAtMs = atMs
    }
    guard success != healthy else {
      streak = 0
      return false
    }
    streak += 1
    guard streak >= (healthy ? unhealthyAfter : healthyAfter) else { return false }
    healthy = success
    streak = 0
    sinceMs = atMs
    return true
  }
}
