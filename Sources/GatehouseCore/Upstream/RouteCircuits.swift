/// The breakers of one upstream's routes, beside the upstream's own (Config/README.md, "Circuit breaker").
///
/// A failure that shows up only after the request went out (no answer in time, a reset, a
/// malformed answer, and a 5xx answer when `count_5xx` is on) may be one endpoint's doing:
/// it opens that route's circuit, so a client that finds a failing endpoint cannot take
/// the upstream away from the other routes. A failure to connect says nothing about a
/// route and stays with the upstream's breaker (see `BreakerScope`).
///
/// Only routes that are counting failures have an entry: the usual request hashes nothing.
struct RouteCircuits {
  let threshold: Int
  let openNanoseconds: UInt64
  let trialTimeoutNanoseconds: UInt64
  private(set) var breakers: [String: CircuitBreaker] = [:]

  /// Route names are the config's, so the table is bounded by it; this only guards against
  /// names left behind by many reloads.
  static let maxRoutes = 4096

  init(threshold: Int, openNanoseconds: UInt64, trialTimeoutNanoseconds: UInt64) {
    self.threshold = threshold
    self.openNanoseconds = openNanoseconds
    self.trialTimeoutNanoseconds = trialTimeoutNanoseconds
  }

  mutating func decide(route: String, now: UInt64) -> CircuitBreaker.Decision {
    guard !breakers.isEmpty, var breaker = breakers[route] else { return .attempt }
    let decision = breaker.decide(now: now)
    breakers[route] = breaker
    return decision
  }

  /// A trial `decide` granted did not go out (the upstream's own breaker refused it): the
  /// next request may take it.
  mutating func trialNotSent(route: String, now: UInt64) {
    guard !breakers.isEmpty, var breaker = breakers[route] else { return }
    breaker.trialNotSent(now: now)
    breakers[route] = breaker
  }

  mutating func recordFailure(route: String, now: UInt64) {
    guard threshold > 0 else { return }
    if breakers[route] == nil {
      guard breakers.count < Self.maxRoutes else { return }
      breakers[route] = CircuitBreaker(
        threshold: threshold, openNanoseconds: openNanoseconds, trialTimeoutNanoseconds: trialTimeoutNanoseconds)
    }
    breakers[route]?.recordFailure(now: now)
  }

  /// Whether `route`'s breaker has opened and not closed again since.
  func isTripped(route: String) -> Bool {
    guard !breakers.isEmpty else { return false }
    return breakers[route]?.isTripped ?? false
  }

  /// The route answered: its breaker is closed again and its entry goes.
  mutating func recordSuccess(route: String) {
    guard !breakers.isEmpty else { return }
    breakers[route] = nil
  }

  /// See `CircuitBreaker.allowsRetry`; a route without failures allows it.
  func allowsRetry(route: String, now: UInt64) -> Bool {
    guard !breakers.isEmpty, let breaker = breakers[route] else { return true }
    return breaker.allowsRetry(now: now)
  }

  /// Whether `route`'s breaker lets requests through as usual (no trial out or due).
  func isClosed(route: String) -> Bool {
    guard !breakers.isEmpty, let breaker = breakers[route] else { return true }
    return breaker.isClosed
  }

  /// Whether no failure is being counted against `route` (its last exchange succeeded).
  func isSound(route: String) -> Bool {
    breakers.isEmpty || breakers[route] == nil
  }

  /// The routes whose circuit refuses requests now, sorted (for the admin API and metrics).
  func openRoutes(now: UInt64) -> [String] {
    breakers.filter { $0.value.isOpen(now: now) }.map(\.key).sorted()
  }
}

/// Which breaker an upstream failure counts against.
enum BreakerScope: Equatable {
  /// The upstream could not be reached: every route is affected alike.
  case upstream
  /// The request reached the upstream and its exchange failed: possibly this route's doing.
  case route
  /// Not a failure of the upstream (the breaker refused the request itself).
  case none
}
