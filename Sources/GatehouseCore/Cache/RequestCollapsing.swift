import GatehouseHTTP

/// Collapsed forwarding: while one GET for a cache key is with the upstream, further GETs
/// for the same key (same route, same config) wait for its answer instead of sending their
/// own. The cache key already says which requests may share an answer (the store serves one
/// stored answer to all of them), so waiters get exactly what the store would keep.
///
/// These are the pure rules; the loop's table of exchanges in flight lives in `LoopContext`.
public enum RequestCollapsing {
  /// Whether a request may lead or join a shared exchange: GET only (a HEAD is sent as GET
  /// on enveloped routes and its answer differs), never with a body, and only on routes
  /// whose `cache` block leaves `collapse` on.
  public static func isCollapsible(method: HTTPMethod, hasBody: Bool, enabled: Bool) -> Bool {
    enabled && method == .get && !hasBody
  }

  /// Whether a request may wait for the exchange in flight for its key: only while the
  /// upstream looks sound (its last exchange succeeded, health checks do not call it down)
  /// and so does its route (`routeSound`: no failure counted against the route's breaker).
  /// Once failures start, requests go one by one again, so each failure counts towards the
  /// circuit breaker and it opens as fast as without collapsing; and a half-open trial never
  /// collects waiters that would all sit out its timeout instead of getting stale answers.
  public static func mayWait(circuit: CircuitBreaker, routeSound: Bool = true, healthy: Bool?) -> Bool {
    circuit.isSound && routeSound && healthy != false
  }

  /// How long a waiter waits before it gives up like the leader would have: a connect and
  /// an answer, twice (the leader may retry once on a fresh connection).
  public static func waiterPatience(connectTimeout: Duration, answerTimeout: Duration) -> Duration {
    (connectTimeout + answerTimeout) * 2
  }
}
