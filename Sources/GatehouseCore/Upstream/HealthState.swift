/// Active health of one upstream (SPEC §2 `health`), as a pure state machine: it turns
/// unhealthy after `unhealthyAfter` failed checks in a row and healthy again after
/// `healthyAfter` good ones. It starts healthy, so a new gateway serves at once.
public struct HealthState: Sendable, Equatable {
  public let unhealthyAfter: Int
  public let healthyAfter: Int
  public private(set) var healthy = true
  /// Consecutive results that disagree with `healthy`.
  public private(set) var streak = 0
  public private(set) var lastError: String?

  public init(unhealthyAfter: Int, healthyAfter: Int) {
    self.unhealthyAfter = max(1, unhealthyAfter)
    self.healthyAfter = max(1, healthyAfter)
  }

  /// Records one check; returns true when `healthy` changed.
  public mutating func record(success: Bool, error: String? = nil) -> Bool {
    if !success { lastError = error }
    guard success != healthy else {
      streak = 0
      return false
    }
    streak += 1
    guard streak >= (healthy ? unhealthyAfter : healthyAfter) else { return false }
    healthy = success
    streak = 0
    return true
  }
}
