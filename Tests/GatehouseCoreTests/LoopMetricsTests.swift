import Testing

@testable import GatehouseCore

/// The counters keep the current run of equal statuses (and upstream outcomes) outside their
/// dictionaries; what they report must not show it.
@Suite struct LoopMetricsTests {
  @Test func statusCountsAreExactAcrossRunsAndReads() {
    let counters = RouteCounters()
    #expect(counters.byStatus.isEmpty)
    for status in [200, 200, 200, 404, 200, 500, 500, 200] {
      counters.record(status: status, nanoseconds: 1_000_000)
    }
    #expect(counters.byStatus == [200: 5, 404: 1, 500: 2])
    // Reading does not move or lose the run in progress.
    #expect(counters.byStatus == [200: 5, 404: 1, 500: 2])
    counters.record(status: 200, nanoseconds: 1)
    #expect(counters.byStatus == [200: 6, 404: 1, 500: 2])
    #expect(counters.count == 9)
  }

  @Test func upstreamOutcomesAreExactAcrossRunsAndReads() {
    let metrics = LoopMetrics()
    #expect(metrics.upstreamOutcomes.isEmpty)
    let calls = [
      ("api", "response"), ("api", "response"), ("other", "response"), ("api", "timeout"),
      ("api", "response"), ("api", "response"),
    ]
    for (upstream, outcome) in calls { metrics.recordUpstream(upstream, outcome: outcome) }
    let expected: [UpstreamOutcomeKey: UInt64] = [
      UpstreamOutcomeKey(upstream: "api", outcome: "response"): 4,
      UpstreamOutcomeKey(upstream: "other", outcome: "response"): 1,
      UpstreamOutcomeKey(upstream: "api", outcome: "timeout"): 1,
    ]
    #expect(metrics.upstreamOutcomes == expected)
    #expect(metrics.sample().upstreamOutcomes == expected)
  }

  /// A reload that renames or removes a route stops exporting the old name (each name kept
  /// added its series for the life of the process); kept names keep their counts, and a
  /// request of the old config that ends later counts under its name until the next reload.
  @Test func aReloadDropsTheSeriesOfRoutesItRemoved() {
    let metrics = LoopMetrics()
    metrics.bind(routeNames: ["orders-v1", "users"])
    metrics.routeSlots[0].record(status: 200, nanoseconds: 1)
    metrics.routeSlots[1].record(status: 200, nanoseconds: 1)
    for version in 2...30 {
      metrics.bind(routeNames: ["orders-v\(version)", "users"])
      metrics.routeSlots[0].record(status: 200, nanoseconds: 1)
      metrics.routeSlots[1].record(status: 200, nanoseconds: 1)
    }
    var sample = metrics.sample()
    #expect(Set(sample.routes.keys) == ["orders-v30", "users", ""])
    #expect(sample.routes["users"]?.count == 30)
    metrics.counters(forRoute: "orders-v29").record(status: 200, nanoseconds: 1)
    sample = metrics.sample()
    #expect(sample.routes["orders-v29"]?.count == 1)
    metrics.bind(routeNames: ["orders-v31", "users"])
    #expect(metrics.sample().routes["orders-v29"] == nil)
  }
}
