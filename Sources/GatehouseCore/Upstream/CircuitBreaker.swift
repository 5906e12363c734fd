/// The circuit breaker of SPEC §2 `circuit`, as a pure state machine with the clock passed
/// in: after `failures` consecutive failures the upstream is skipped for `open` time, then
/// one trial request decides whether it closes again.
public struct CircuitBreaker: Sendable, Equatable {
  public enum State: Sendable, Equatable {
    /// Requests go through; `failures` consecutive failures so far.
    case closed(failures: Int)
    /// Requests are refused without a connect attempt until `until` (monotonic ns).
    case open(until: UInt64)
    /// The open time is over and one trial request is out; the others are still refused.
    case halfOpen
  }

  public enum Decision: Sendable, Equatable {
    case attempt
    /// This request is the half-open trial.
    case attemptAsTrial
    case reject
  }

  public let threshold: Int
  public let openNanoseconds: UInt64
  public private(set) var state = State.closed(failures: 0)

  /// A `threshold` of 0 disables the breaker (every request is attempted).
  public init(threshold: Int, openNanoseconds: UInt64) {
    self.threshold = threshold
    self.openNanoseconds = openNanoseconds
  }

  public mutating func decide(now: UInt64) -> Decision {
    switch state {
    case .closed:
      return .attempt
    case .open(let until):
      guard now >= until else { return .reject }
      state = .halfOpen
      return .attemptAsTrial
    case .halfOpen:
      return .reject
    }
  }

  public mutating func recordSuccess() {
    state = .closed(failures: 0)
  }

  public mutating func recordFailure(now: UInt64) {
    guard threshold > 0 else { return }
    switch state {
    case .closed(let failures):
      state = failures + 1 >= threshold ? .open(until: now &+ openNanoseconds) : .closed(failures: failures + 1)
    case .halfOpen:
      state = .open(until: now &+ openNanoseconds)
    case .open:
      break
    }
  }

  /// Whether the last exchange succeeded: closed, with no failure since the last success.
  public var isSound: Bool { state == .closed(failures: 0) }

  /// Whether requests are being refused now (for the admin API and metrics).
  public func isOpen(now: UInt64) -> Bool {
    switch state {
    case .closed: return false
    case .open(let until): return now < until
    case .halfOpen: return true
    }
  }
}
