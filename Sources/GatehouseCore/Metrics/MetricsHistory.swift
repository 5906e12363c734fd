import GatehouseJSON
import GatehouseLogging

/// The last 15 minutes of traffic per route and per upstream, for the dashboard's charts
/// (`GET /admin/history`): every 10 s the control side sums the loops' counters and
/// `record` turns the difference from the previous sum into one sample per series.
///
/// Memory is bounded: each series keeps `capacity` samples, and only the series of the
/// running config (its routes, the requests that matched none, its upstreams) are kept, so
/// a reload that renames routes drops the old names' history instead of growing.
///
/// An upstream's series sums the routes that send to it: the loops count requests per route
/// (status and latency as the client saw them, cache hits included), and a route has one
/// upstream.
public struct MetricsHistory: Sendable {
  /// Samples per series: 90 × 10 s = 15 minutes.
  public static let capacity = 90
  /// Seconds between samples.
  public static let intervalSeconds = 10

  /// One 10 s interval of one series.
  public struct Point: Sendable, Equatable {
    public var requests: UInt64
    public var serverErrors: UInt64
    /// Nil when the interval had no requests.
    public var p50Milliseconds: Double?
    public var p99Milliseconds: Double?

    public static let empty = Point(requests: 0, serverErrors: 0, p50Milliseconds: nil, p99Milliseconds: nil)
  }

  /// A fixed-size ring of the newest samples, oldest first when read.
  public struct Ring<Element: Sendable>: Sendable {
    private var storage: [Element] = []
    private var next = 0
    public let capacity: Int

    public init(capacity: Int) {
      precondition(capacity > 0)
      self.capacity = capacity
    }

    public mutating func append(_ element: Element) {
      if storage.count < capacity {
        storage.append(element)
      } else {
        storage[next] = element
        next = (next + 1) % capacity
      }
    }

    public var count: Int { storage.count }

    /// Oldest first.
    public var elements: [Element] {
      Array(storage[next...] + storage[..<next])
    }
  }

  /// What one series counted up to the previous sample, to take differences from.
  struct Totals: Sendable {
    var byStatus: [Int: UInt64] = [:]
    var buckets: [UInt64] = []
    var count: UInt64 = 0
  }

  /// Sample times (ms since the Unix epoch), oldest first.
  public private(set) var times = Ring<Int64>(capacity: capacity)
  public private(set) var routes: [String: Ring<Point>] = [:]
  public private(set) var upstreams: [String: Ring<Point>] = [:]
  private var previousRoutes: [String: Totals] = [:]
  private var previousUpstreams: [String: Totals] = [:]

  public init() {}

  /// Adds one sample at `atMs` from the loops' summed counters. `routeUpstreams` names the
  /// running config's routes (with the upstream each sends to, nil for a stub-only route);
  /// series of other names are dropped. Requests that matched no route count under "".
  public mutating func record(atMs: Int64, sample: MetricsSample, routeUpstreams: [(route: String, upstream: String?)])
  {
    var routeTotals: [String: Totals] = [:]
    var upstreamTotals: [String: Totals] = [:]
    for (route, upstream) in routeUpstreams {
      let totals = Self.totals(sample.routes[route])
      routeTotals[route] = totals
      if let upstream { upstreamTotals[upstream, default: Totals()].add(totals) }
    }
    routeTotals[""] = Self.totals(sample.routes[""])

    times.append(atMs)
    routes = Self.advance(routes, totals: routeTotals, previous: previousRoutes, filled: times.count)
    upstreams = Self.advance(upstreams, totals: upstreamTotals, previous: previousUpstreams, filled: times.count)
    previousRoutes = routeTotals
    previousUpstreams = upstreamTotals
  }

  static func totals(_ sample: RouteSample?) -> Totals {
    guard let sample else { return Totals() }
    return Totals(byStatus: sample.byStatus, buckets: sample.buckets, count: sample.count)
  }

  /// Appends each series' new point; a new series is padded with empty points so that every
  /// series lines up with `times`.
  static func advance(
    _ series: [String: Ring<Point>], totals: [String: Totals], previous: [String: Totals], filled: Int
  ) -> [String: Ring<Point>] {
    var next: [String: Ring<Point>] = [:]
    for (name, now) in totals {
      var ring = series[name] ?? Ring<Point>(capacity: capacity)
      while ring.count < filled - 1 { ring.append(.empty) }
      // A series seen for the first time has no previous sum: its first point counts from 0,
      // unless the counters ran before the history did (they start with the process, the
      // history with the first sample), in which case the first point is left empty.
      if let before = previous[name] {
        ring.append(point(now: now, before: before))
      } else {
        ring.append(filled == 1 ? .empty : point(now: now, before: Totals()))
      }
      next[name] = ring
    }
    return next
  }

  /// The difference between two sums as a point. A counter that went down was reset (a
  /// route removed and added again starts from zero): the new sum is then the difference.
  static func point(now: Totals, before: Totals) -> Point {
    func delta(_ a: UInt64, _ b: UInt64) -> UInt64 { a >= b ? a - b : a }
    let reset = now.count < before.count
    let base = reset ? Totals() : before
    let requests = delta(now.count, base.count)
    var errors: UInt64 = 0
    for (status, value) in now.byStatus where status >= 500 {
      errors &+= delta(value, base.byStatus[status] ?? 0)
    }
    var buckets = now.buckets
    for index in buckets.indices where index < base.buckets.count {
      buckets[index] = delta(buckets[index], base.buckets[index])
    }
    return Point(
      requests: requests, serverErrors: errors,
      p50Milliseconds: percentileMilliseconds(0.5, buckets: buckets),
      p99Milliseconds: percentileMilliseconds(0.99, buckets: buckets))
  }

  /// The `q` quantile (0...1) of the latencies counted in `buckets` (the buckets of
  /// `LatencyBuckets`, the last one unbounded), in milliseconds, interpolated linearly
  /// within the bucket it falls in, as Prometheus' `histogram_quantile` does. A quantile in
  /// the unbounded bucket is reported as the last bound. Nil when nothing was counted.
  public static func percentileMilliseconds(_ q: Double, buckets: [UInt64]) -> Double? {
    let total = buckets.reduce(0, &+)
    guard total > 0 else { return nil }
    let bounds = LatencyBuckets.bounds
    let rank = q * Double(total)
    var below: UInt64 = 0
    for (index, count) in buckets.enumerated() {
      let through = below + count
      if Double(through) >= rank && count > 0 {
        guard index < bounds.count else { return bounds[bounds.count - 1] * 1000 }
        let lower = index == 0 ? 0 : bounds[index - 1]
        let upper = bounds[index]
        let fraction = (rank - Double(below)) / Double(count)
        return (lower + (upper - lower) * min(1, max(0, fraction))) * 1000
      }
      below = through
    }
    return bounds[bounds.count - 1] * 1000
  }
}

extension MetricsHistory.Totals {
  mutating func add(_ other: MetricsHistory.Totals) {
    for (status, value) in other.byStatus { byStatus[status, default: 0] &+= value }
    if buckets.count < other.buckets.count {
      buckets += [UInt64](repeating: 0, count: other.buckets.count - buckets.count)
    }
    for index in other.buckets.indices { buckets[index] &+= other.buckets[index] }
    count &+= other.count
  }
}

extension MetricsHistory {
  /// `GET /admin/history`: sample times, then per route and per upstream one array per
  /// figure, each lined up with `at` (oldest first). Latencies are rounded to 0.01 ms.
  /// Requests that matched no route are the route named "".
  public func document(routeUpstreams: [(route: String, upstream: String?)]) -> JSONValue {
    let upstreamOf = Dictionary(routeUpstreams.map { ($0.route, $0.upstream) }, uniquingKeysWith: { first, _ in first })
    func milliseconds(_ value: Double?) -> JSONValue {
      guard let value else { return .null }
      return .number(JSONNumber(double: (value * 100).rounded() / 100))
    }
    func series(_ name: String, _ ring: Ring<Point>, extra: [(String, JSONValue)]) -> JSONValue {
      let points = ring.elements
      return .object(
        [("name", .string(name))] + extra + [
          ("requests", .array(points.map { .int($0.requests) })),
          ("5xx", .array(points.map { .int($0.serverErrors) })),
          ("p50_ms", .array(points.map { milliseconds($0.p50Milliseconds) })),
          ("p99_ms", .array(points.map { milliseconds($0.p99Milliseconds) })),
        ])
    }
    // Config order for routes (the unmatched series last), names sorted for upstreams.
    let routeNames = routeUpstreams.map(\.route).filter { routes[$0] != nil } + (routes[""] != nil ? [""] : [])
    return .object([
      ("interval_s", .int(Self.intervalSeconds)), ("capacity", .int(Self.capacity)),
      ("at", .array(times.elements.map { .string(RFC3339.string(seconds: $0 / 1000)) })),
      (
        "routes",
        .array(
          routeNames.map { name in
            series(name, routes[name]!, extra: [("upstream", .optionalString(upstreamOf[name] ?? nil))])
          })
      ),
      ("upstreams", .array(upstreams.keys.sorted().map { series($0, upstreams[$0]!, extra: []) })),
    ])
  }
}
