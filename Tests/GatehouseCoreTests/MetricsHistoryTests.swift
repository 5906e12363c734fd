import Testing

@testable import GatehouseCore

/// The dashboard's 15-minute history: the ring, the differences between samples and the
/// latency quantiles.
@Suite struct MetricsHistoryTests {
  /// Counters as the loops would report them: `latencies` in seconds, with their statuses.
  static func sample(_ routes: [String: [(status: Int, seconds: Double)]]) -> MetricsSample {
    var sample = MetricsSample()
    for (name, requests) in routes {
      let counters = RouteCounters()
      for request in requests { counters.record(status: request.status, nanoseconds: UInt64(request.seconds * 1e9)) }
      sample.routes[name] = RouteSample(counters)
    }
    return sample
  }

  @Test func ringKeepsTheNewestInOrder() {
    var ring = MetricsHistory.Ring<Int>(capacity: 3)
    #expect(ring.elements == [])
    for value in 1...2 { ring.append(value) }
    #expect(ring.elements == [1, 2])
    for value in 3...7 { ring.append(value) }
    #expect(ring.elements == [5, 6, 7])
    #expect(ring.count == 3)
  }

  @Test func percentilesInterpolateWithinTheirBucket() {
    let bounds = LatencyBuckets.bounds
    var buckets = [UInt64](repeating: 0, count: bounds.count + 1)
    #expect(MetricsHistory.percentileMilliseconds(0.5, buckets: buckets) == nil)
    // 100 requests between 10 and 25 ms (bucket index 5): the median is halfway, 17.5 ms.
    buckets[5] = 100
    #expect(MetricsHistory.percentileMilliseconds(0.5, buckets: buckets) == 17.5)
    #expect(MetricsHistory.percentileMilliseconds(0.99, buckets: buckets)! > 24.8)
    // One slow request beyond the last bound pulls p99 there, not the median.
    buckets[5] = 98
    buckets[bounds.count] = 2
    #expect(MetricsHistory.percentileMilliseconds(0.99, buckets: buckets) == 10_000)
    #expect(MetricsHistory.percentileMilliseconds(0.5, buckets: buckets)! < 25)
    // The first bucket starts at 0.
    var fast = [UInt64](repeating: 0, count: bounds.count + 1)
    fast[0] = 10
    #expect(MetricsHistory.percentileMilliseconds(0.5, buckets: fast) == 0.25)
  }

  @Test func samplesAreDifferencesPerRouteAndUpstream() throws {
    let routes: [(route: String, upstream: String?)] = [("users", "api"), ("orders", "api"), ("hello", nil)]
    var history = MetricsHistory()
    var requests: [String: [(status: Int, seconds: Double)]] = ["users": [(200, 0.02)], "": [(404, 0.001)]]
    history.record(atMs: 10_000, sample: Self.sample(requests), routeUpstreams: routes)
    requests["users"]! += [(200, 0.02), (502, 0.02)]
    requests["orders"] = [(500, 0.2)]
    history.record(atMs: 20_000, sample: Self.sample(requests), routeUpstreams: routes)

    #expect(history.times.elements == [10_000, 20_000])
    let users = try #require(history.routes["users"]).elements
    // The first sample is the baseline: what ran before it is not in any interval.
    #expect(users[0] == .empty)
    #expect(users[1].requests == 2 && users[1].serverErrors == 1)
    #expect(users[1].p50Milliseconds == 17.5)
    let orders = try #require(history.routes["orders"]).elements
    #expect(orders.count == 2 && orders[1].requests == 1 && orders[1].serverErrors == 1)
    let api = try #require(history.upstreams["api"]).elements
    #expect(api[1].requests == 3 && api[1].serverErrors == 2)
    #expect(history.routes[""]?.elements[1].requests == 0, "the unmatched series is kept")
    #expect(history.routes["hello"]?.elements[1] == .some(.empty))
    #expect(history.upstreams.count == 1)
  }

  /// Only the running config's series are kept, and each holds at most `capacity` samples.
  @Test func boundedAcrossReloadsAndTime() {
    var history = MetricsHistory()
    let old: [(route: String, upstream: String?)] = [("v1", "api")]
    let new: [(route: String, upstream: String?)] = [("v2", "api2")]
    history.record(atMs: 0, sample: Self.sample(["v1": [(200, 0.01)]]), routeUpstreams: old)
    for step in 1...(MetricsHistory.capacity + 20) {
      history.record(atMs: Int64(step) * 10_000, sample: Self.sample(["v2": [(200, 0.01)]]), routeUpstreams: new)
    }
    #expect(history.routes.keys.sorted() == ["", "v2"])
    #expect(history.upstreams.keys.sorted() == ["api2"])
    #expect(history.times.count == MetricsHistory.capacity)
    #expect(history.routes["v2"]?.count == MetricsHistory.capacity)
  }

  /// A counter that went down (a route removed, then added again) restarts from zero.
  @Test func aResetCounterCountsFromZero() {
    var history = MetricsHistory()
    let routes: [(route: String, upstream: String?)] = [("users", "api")]
    history.record(
      atMs: 0, sample: Self.sample(["users": Array(repeating: (200, 0.01), count: 5)]), routeUpstreams: routes)
    history.record(atMs: 10_000, sample: Self.sample(["users": [(503, 0.01)]]), routeUpstreams: routes)
    #expect(history.routes["users"]?.elements.last?.requests == 1)
    #expect(history.routes["users"]?.elements.last?.serverErrors == 1)
  }

  @Test func documentLinesSeriesUpWithTimes() {
    var history = MetricsHistory()
    let routes: [(route: String, upstream: String?)] = [("users", "api")]
    history.record(atMs: 0, sample: Self.sample([:]), routeUpstreams: routes)
    history.record(atMs: 10_000, sample: Self.sample(["users": [(200, 0.02)]]), routeUpstreams: routes)
    let text = history.document(routeUpstreams: routes).serializedString()
    #expect(text.contains(#""at":["1970-01-01T00:00:00Z","1970-01-01T00:00:10Z"]"#), "\(text)")
    #expect(
      text.contains(#"{"name":"users","upstream":"api","requests":[0,1],"5xx":[0,0],"p50_ms":[null,17.5]"#), "\(text)")
    #expect(text.contains(#"{"name":"","upstream":null,"requests":[0,0]"#), "\(text)")
  }
}
