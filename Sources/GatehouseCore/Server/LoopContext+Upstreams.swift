/// What every exchange with an upstream reports, whoever drives it (a client's session, a
/// background refresh): counted the same way in the metrics and by the breakers.
extension LoopContext {
  /// An exchange with `pool` failed: counted in the upstream metrics and by the breaker the
  /// failure concerns, and kept as the upstream's last error (`detail` when there is more
  /// to say than the outcome).
  func recordUpstreamFailure(_ failure: UpstreamFailure, pool: UpstreamPool, route: String, detail: String?) {
    metrics.recordUpstream(pool.plan.name, outcome: failure.outcome)
    guard failure.breakerScope != .none else { return }
    pool.recordFailure(failure.breakerScope, route: route, now: loop.iterationTime)
    pool.lastError = detail ?? failure.outcome
  }

  /// `pool` answered (`outcome`: `response`, or `error_status` for a 5xx the gateway did not
  /// pass on).
  func recordUpstreamAnswer(pool: UpstreamPool, status: Int, route: String, outcome: String = "response") {
    metrics.recordUpstream(pool.plan.name, outcome: outcome)
    pool.recordAnswer(status: status, route: route, now: loop.iterationTime)
  }

  /// The pool of the exchange's upstream. After a reload a request sent again (a retry, a
  /// dropped pipelined one) stays with the pool it started on, as requests in flight finish
  /// on the config they started with; one never sent (it waited for a token, or behind a
  /// collapsed request) takes the running config's pool for its upstream.
  func upstreamPool(for exchange: Exchange) -> UpstreamPool? {
    guard let routeIndex = exchange.routeIndex,
      let upstreamIndex = exchange.snapshot.routePlans[routeIndex].upstreamIndex
    else { return nil }
    let startedOn = exchange.snapshot === snapshot ? nil : exchange.pool
    return startedOn ?? pool(upstreamIndex, of: exchange.snapshot)
  }

  /// The active health checks' verdicts: the upstreams' (refused when all their endpoints are
  /// down) and each endpoint's, which the pools' balancers then avoid.
  func applyHealth(_ verdicts: HealthChecker.HealthVerdicts) {
    upstreamHealthy = verdicts.upstreams
    healthVerdicts = verdicts
    for pool in pools { pool.applyHealth(unhealthy: verdicts.unhealthyEndpoints[pool.plan.name] ?? []) }
  }

  /// Names of `upstream`'s endpoints were looked up again and give `endpoints` now.
  func updateEndpoints(upstream: String, to endpoints: [UpstreamEndpointPlan]) {
    pools.first { $0.plan.name == upstream }?.updateEndpoints(endpoints)
  }
}
