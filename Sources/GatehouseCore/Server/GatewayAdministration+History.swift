import GatehouseConfig
import GatehouseJSON
import GatehouseLogging
import GatehouseNet

/// The 15-minute history behind the dashboard's charts (`GET /admin/history`).
extension GatewayAdministration {
  /// Takes one sample now and schedules the next in `MetricsHistory.intervalSeconds`, on the
  /// control loop, until the control loop stops. The first sample is the baseline.
  func sampleHistory() {
    let routeUpstreams = Self.routeUpstreams(server.currentSnapshot.config)
    server.gather({ context in context.metrics.sample() }) { [self] perLoop in
      var summed = MetricsSample()
      for sample in perLoop { summed.add(sample) }
      let total = summed
      let now = RFC3339.nowMilliseconds()
      history.withLock { $0.record(atMs: now, sample: total, routeUpstreams: routeUpstreams) }
    }
    server.onControlAfter(.seconds(MetricsHistory.intervalSeconds)) { [self] in sampleHistory() }
  }

  /// The running config's routes with the upstream each sends to.
  static func routeUpstreams(_ config: GatehouseConfig) -> [(route: String, upstream: String?)] {
    config.routes.map { ($0.name, $0.upstream) }
  }

  package func historyDocument(completion: @escaping @Sendable (JSONValue) -> Void) {
    let routeUpstreams = Self.routeUpstreams(server.currentSnapshot.config)
    completion(history.withLock { $0.document(routeUpstreams: routeUpstreams) })
  }
}
