import GatehouseLogging

/// A pool's breakers: whether a request may go to the upstream now, what its answers and
/// failures tell the upstream's and the routes' circuits, and the lines when one opens or
/// closes.
extension UpstreamPool {
  /// Whether `route`'s request may go to this upstream now, by the upstream's breaker and
  /// then the route's. A retry on a fresh connection (`retry`) takes no trial: it only asks
  /// whether the failure it follows was the first of a streak.
  func breakersDecide(route: String, retry: Bool, now: UInt64) -> CircuitBreaker.Decision {
    if retry {
      return circuit.allowsRetry(now: now) && routeCircuits.allowsRetry(route: route, now: now) ? .attempt : .reject
    }
    let upstream = circuit.decide(now: now)
    if case .reject = upstream { return .reject }
    let ofRoute = routeCircuits.decide(route: route, now: now)
    switch (upstream, ofRoute) {
    case (_, .reject):
      circuit.trialNotSent(now: now)
      return .reject
    case (.attemptAsTrial, _), (_, .attemptAsTrial):
      return .attemptAsTrial
    case (.attemptUnlessAnswerable, _), (_, .attemptUnlessAnswerable):
      return .attemptUnlessAnswerable
    case (.attempt, .attempt), (.reject, _):
      return .attempt
    }
  }

  /// A failed exchange of `route`, counted against the breaker its kind belongs to.
  func recordFailure(_ scope: BreakerScope, route: String, now: UInt64) {
    switch scope {
    case .upstream:
      let wasTripped = circuit.isTripped
      circuit.recordFailure(now: now)
      if !wasTripped && circuit.isTripped { logCircuit(opened: true, route: nil) }
    case .route:
      // The request reached the upstream: for its own breaker (which judges only whether
      // it can be reached) that is a success, and ends a trial at once rather than after
      // the trial timeout.
      upstreamCircuitSucceeded()
      routeFailed(route, now: now)
    case .none: break
    }
  }

  /// The upstream answered `route`'s request with `status`. Returns whether the answer
  /// counted as a failure (a 5xx with `count_5xx`); otherwise both breakers hear that the
  /// upstream and the route work.
  @discardableResult
  func recordAnswer(status: Int, route: String, now: UInt64) -> Bool {
    // Reached and answering: the upstream's own breaker hears a success either way.
    upstreamCircuitSucceeded()
    if status >= 500 && plan.circuitCounts5xx {
      routeFailed(route, now: now)
      lastError = "status \(status)"
      return true
    }
    // Only routes counting failures have a breaker: the usual answer looks nothing up.
    if !routeCircuits.breakers.isEmpty {
      let wasTripped = routeCircuits.isTripped(route: route)
      routeCircuits.recordSuccess(route: route)
      if wasTripped { logCircuit(opened: false, route: route) }
    }
    return false
  }

  private func upstreamCircuitSucceeded() {
    let wasTripped = circuit.isTripped
    circuit.recordSuccess()
    if wasTripped { logCircuit(opened: false, route: nil) }
  }

  private func routeFailed(_ route: String, now: UInt64) {
    let wasTripped = routeCircuits.isTripped(route: route)
    routeCircuits.recordFailure(route: route, now: now)
    if !wasTripped && routeCircuits.isTripped(route: route) { logCircuit(opened: true, route: route) }
  }

  /// A circuit of this loop opened, or closed after its trial succeeded: the upstream's
  /// (`route` nil) or a route's. Each loop judges its own requests, so each says so (a
  /// circuit opens at most once per `open_ms` per loop, so the lines stay few).
  private func logCircuit(opened: Bool, route: String?) {
    var fields: [LogField] = [("upstream", .string(plan.name))]
    if let route { fields.append(("route", .string(route))) }
    if opened {
      fields.append(("open_ms", .int(Int(CachePolicy.milliseconds(plan.circuitOpen)))))
      fields.append(("last_error", .string(lastError ?? "")))
      context.shared.logger.log(
        .warn, route == nil ? "upstream circuit opened" : "route circuit opened", fields: fields)
    } else {
      context.shared.logger.log(
        .info, route == nil ? "upstream circuit closed" : "route circuit closed", fields: fields)
    }
  }

}
