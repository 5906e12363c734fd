/// Lets one log line through per `interval`, and counts the ones it held back, so a flood
/// of refused connections is reported without flooding the log.
package struct LogThrottle {
  package let intervalNanoseconds: UInt64
  private var nextAllowed: UInt64 = 0
  private var held = 0

  package init(intervalNanoseconds: UInt64) {
    self.intervalNanoseconds = intervalNanoseconds
  }

  /// Whether to log the event that happened `now`; if so, how many were held back before it.
  package mutating func admit(now: UInt64) -> Int? {
    guard now >= nextAllowed else {
      held += 1
      return nil
    }
    nextAllowed = now &+ intervalNanoseconds
    defer { held = 0 }
    return held
  }

  /// The events held back, once a line may go out again at `now` (the line then reports
  /// them, and the interval restarts), so the last of a burst is not left unreported until
  /// the next event; nil when there are none or it is too soon.
  package mutating func flush(now: UInt64) -> Int? {
    guard held > 0, now >= nextAllowed else { return nil }
    nextAllowed = now &+ intervalNanoseconds
    defer { held = 0 }
    return held
  }
}
