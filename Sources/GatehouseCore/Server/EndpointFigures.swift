import GatehouseLogging
import GatehouseNet

/// One endpoint as one loop sees it, for the admin API and the metrics.
struct EndpointFigures: Sendable {
  let address: String
  let weight: Int
  /// `healthy`, `unhealthy`, `ejected` or `draining`.
  let state: String
  let inFlight: Int
  let requests: UInt64
  let failures: UInt64
  let lastError: String?
  /// When this loop's ejection ends, wall-clock ms since the epoch; nil when not ejected.
  let ejectedUntilMs: Int64?

  /// The figures of `pool`'s endpoints now, in slot order.
  static func of(_ pool: UpstreamPool, now: UInt64) -> [EndpointFigures] {
    let wallNow = RFC3339.nowMilliseconds()
    return pool.endpoints.ids.map { id in
      let endpoint = pool.endpoints[id]
      let state: String
      var until: Int64?
      switch endpoint.state(now: now) {
      case .available: state = "healthy"
      case .unhealthy: state = "unhealthy"
      case .draining: state = "draining"
      case .ejected(let ends):
        state = "ejected"
        until = wallNow + Int64((ends &- now) / 1_000_000)
      }
      return EndpointFigures(
        address: endpoint.address, weight: endpoint.weight, state: state, inFlight: endpoint.counters.inFlight,
        requests: endpoint.counters.requests, failures: endpoint.counters.failures,
        lastError: endpoint.counters.lastError, ejectedUntilMs: until)
    }
  }

  /// The loops' figures of one upstream's endpoints merged by address, in the order the
  /// first loop lists them: counters summed, the state as `EndpointSample.state` says, the
  /// latest ejection end, a last error.
  static func merged(_ perLoop: [[EndpointFigures]]) -> [(figures: EndpointFigures, sample: EndpointSample)] {
    var order: [String] = []
    var merged: [String: (figures: EndpointFigures, sample: EndpointSample)] = [:]
    for loop in perLoop {
      for figures in loop {
        var sample = EndpointSample()
        sample.requests = figures.requests
        sample.failures = figures.failures
        sample.inFlight = figures.inFlight
        sample.loopsByState[figures.state] = 1
        guard let existing = merged[figures.address] else {
          order.append(figures.address)
          merged[figures.address] = (figures, sample)
          continue
        }
        var total = existing.sample
        total.add(sample)
        let until = [existing.figures.ejectedUntilMs, figures.ejectedUntilMs].compactMap { $0 }.max()
        merged[figures.address] = (
          EndpointFigures(
            address: figures.address, weight: figures.weight, state: total.state, inFlight: total.inFlight,
            requests: total.requests, failures: total.failures,
            lastError: existing.figures.lastError ?? figures.lastError, ejectedUntilMs: until),
          total
        )
      }
    }
    return order.compactMap { address in
      merged[address].map { entry in
        (
          EndpointFigures(
            address: entry.figures.address, weight: entry.figures.weight, state: entry.sample.state,
            inFlight: entry.figures.inFlight, requests: entry.figures.requests, failures: entry.figures.failures,
            lastError: entry.figures.lastError, ejectedUntilMs: entry.figures.ejectedUntilMs),
          entry.sample
        )
      }
    }
  }
}
