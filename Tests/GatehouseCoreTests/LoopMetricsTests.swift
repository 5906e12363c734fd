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
}
