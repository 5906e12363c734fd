/// The circuit breaker of `upstreams.*.circuit` (Config/README.md), as a pure state machine with the clock passed
/// in: after `failures` consecutive failures the upstream is skipped for `open` time, then
/// one trial request decides whether it closes again.
public struct CircuitBreaker: Sendable, Equatable {
  public enum State: Sendable, Equatable {
    /// Requests go through; `failures` consecutive failures so far.
    case closed(failures: Int)
    /// Requests are refused without a connect attempt until `until` (monotonic ns).
    case open(until: UInt64)
    /// The open time is over and one trial request, sent at `since`, is out; the others are
    /// still refused.
    case halfOpen(since: UInt64)
    /// The upstream dropped all its kept connections at once (a shutdown or a restart): the
    /// next request checks it (sent at `since` once out); meanwhile requests that can be
    /// answered without it are, and the others go through.
    case probation(since: UInt64?)
  }

  public enum Decision: Sendable, Equatable {
    case attempt
    /// This request is the trial (half-open or probation).
    case attemptAsTrial
    case reject
    /// Probation with the check out: send only what cannot be answered otherwise.
    case attemptUnlessAnswerable
  }

  public let threshold: Int
  public let openNanoseconds: UInt64
  /// A trial with no outcome after this long (its client left, say) no longer blocks the
  /// next one: the breaker cannot stay half-open for ever.
  public let trialTimeoutNanoseconds: UInt64
  public private(set) var state = State.closed(failures: 0)

  /// A `threshold` of 0 disables the breaker (every request is attempted).
  public init(threshold: Int, openNanoseconds: UInt64, trialTimeoutNanoseconds: UInt64 = 10_000_000_000) {
    self.threshold = threshold
    self.openNanoseconds = openNanoseconds
    self.trialTimeoutNanoseconds = trialTimeoutNanoseconds
  }

  public mutating func decide(now: UInt64) -> Decision {
    switch state {
    case .closed:
      return .attempt
    case .open(let until):
      guard now >= until else { return .reject }
      state = .halfOpen(since: now)
      return .attemptAsTrial
    case .halfOpen(let since):
      guard now &- since >= trialTimeoutNanoseconds else { return .reject }
      state = .halfOpen(since: now)
      return .attemptAsTrial
    case .probation(let since):
      if let since, now &- since < trialTimeoutNanoseconds { return .attemptUnlessAnswerable }
      state = .probation(since: now)
      return .attemptAsTrial
    }
  }

  /// A trial granted by `decide` was not sent after all (another breaker refused the
  /// request): the next request takes it, rather than every one waiting out the trial
  /// timeout.
  public mutating func trialNotSent(now: UInt64) {
    switch state {
    case .halfOpen: state = .open(until: now)
    case .probation: state = .probation(since: nil)
    case .closed, .open: break
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
    case .halfOpen, .probation:
      state = .open(until: now &+ openNanoseconds)
    case .open:
      break
    }
  }

  /// The upstream closed every idle connection at once. A closed circuit (even one counting
  /// failures) goes on probation: the next request checks the upstream before it is trusted
  /// again. An open or half-open one keeps its course.
  public mutating func recordConnectionsDropped() {
    guard threshold > 0, case .closed = state else { return }
    state = .probation(since: nil)
  }

  /// Whether a request whose reused connection just failed may try once more on a fresh
  /// one: only when that failure is the first of a streak (a keep-alive race: the upstream
  /// closed the connection as the request went out). When several fail together the
  /// upstream itself is going away, and each retry would only wait on whatever now answers
  /// at its address.
  public func allowsRetry(now: UInt64) -> Bool {
    switch state {
    case .closed(let failures): return failures <= 1
    case .probation: return true
    case .open, .halfOpen: return false
    }
  }

  /// Whether requests go through as usual (closed, maybe counting failures): no trial, no
  /// probation. Work nobody waits for (a background refresh) runs only then.
  public var isClosed: Bool {
    if case .closed = state { return true }
    return false
  }

  /// Whether the breaker has opened and not closed again since (open, or its trial out).
  public var isTripped: Bool {
    switch state {
    case .open, .halfOpen: return true
    case .closed, .probation: return false
    }
  }

  /// Whether the last exchange succeeded: closed, with no failure since the last success.
  public var isSound: Bool { state == .closed(failures: 0) }

  /// Whether requests are being refused now (for the admin API and metrics).
  public func isOpen(now: UInt64) -> Bool {
    switch state {
    case .closed, .probation: return false
    case .open(let until): return now < until
    case .halfOpen: return true
    }
  }
}
