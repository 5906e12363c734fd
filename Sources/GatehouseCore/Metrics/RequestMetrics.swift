/// Latency buckets (seconds) of `gatehouse_request_duration_seconds`.
public enum LatencyBuckets {
  public static let bounds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

  /// Index of the first bucket whose bound is ≥ `nanoseconds` (the last index is +Inf).
  @inline(__always)
  static func index(nanoseconds: UInt64) -> Int {
    let seconds = Double(nanoseconds) / 1e9
    var index = 0
    while index < bounds.count && seconds > bounds[index] { index += 1 }
    return index
  }
}

/// One route's counters on one loop. A class so the request path bumps fields in place.
final class RouteCounters {
  /// Requests by status, HTTP/1.1 and HTTP/2 apart (`gatehouse_requests_total{protocol}`).
  private var http1 = StatusTally()
  private var http2 = StatusTally()
  var buckets = [UInt64](repeating: 0, count: LatencyBuckets.bounds.count + 1)
  var durationSum: Double = 0
  var count: UInt64 = 0

  /// Both protocols together.
  var byStatus: [Int: UInt64] {
    var all = http1.all
    for (status, value) in http2.all { all[status, default: 0] &+= value }
    return all
  }

  /// HTTP/2 requests alone.
  var http2ByStatus: [Int: UInt64] { http2.all }

  func record(status: Int, nanoseconds: UInt64, http2 isHTTP2: Bool = false) {
    if isHTTP2 { http2.record(status) } else { http1.record(status) }
    buckets[LatencyBuckets.index(nanoseconds: nanoseconds)] &+= 1
    durationSum += Double(nanoseconds) / 1e9
    count &+= 1
  }
}

/// Counts by status. A route answers the same status many times in a row: such a run is
/// counted apart and moved into the table when another status comes, so the request path
/// does not hash.
struct StatusTally {
  private var tallied: [Int: UInt64] = [:]
  private var runStatus = 0
  private var runCount: UInt64 = 0

  var all: [Int: UInt64] {
    var all = tallied
    if runCount > 0 { all[runStatus, default: 0] &+= runCount }
    return all
  }

  mutating func record(_ status: Int) {
    if status == runStatus {
      runCount &+= 1
    } else {
      if runCount > 0 { tallied[runStatus, default: 0] &+= runCount }
      runStatus = status
      runCount = 1
    }
  }
}

/// A loop's counters. Each loop owns one and only it writes to it; readers ask the loop for
/// a `MetricsSample` and sum the samples (no shared counters, no locks per request).
final class LoopMetrics {
  private var routes: [String: RouteCounters] = [:]
  /// The counters of the current snapshot's routes, by route index.
  private(set) var routeSlots: [RouteCounters] = []
  /// Requests that matched no route, or failed before routing.
  let unrouted = RouteCounters()
  /// Outcomes by upstream, except the current run (as in `RouteCounters`: the same
  /// upstream and outcome over and over is counted without hashing two strings each time).
  private var talliedOutcomes: [UpstreamOutcomeKey: UInt64] = [:]
  private var outcomeRun = UpstreamOutcomeKey(upstream: "", outcome: "")
  private var outcomeRunCount: UInt64 = 0
  var cacheResults = CacheResultCounts()
  /// Requests that waited for another's upstream exchange (collapsed forwarding).
  var collapsed: UInt64 = 0
  /// Requests written behind another on an upstream connection (pipelining), and those of
  /// them sent again alone (their connection ended first, or they waited too long).
  var pipelined: UInt64 = 0
  var pipelineResent: UInt64 = 0
  /// Tries made again on another endpoint, by upstream and the failure retried (`outcome`).
  private(set) var upstreamRetries: [UpstreamOutcomeKey: UInt64] = [:]

  func countRetry(upstream: String, reason: String) {
    upstreamRetries[UpstreamOutcomeKey(upstream: upstream, outcome: reason), default: 0] &+= 1
  }
  /// Answers that said a route's token was rejected (status or body field), by token and
  /// route: where a backend refuses a token shows per route, not as a global token state.
  private(set) var tokenRejections: [TokenRouteKey: UInt64] = [:]

  /// Answers the gateway made itself, by route name ("" unrouted) and reason. Only local
  /// answers hash here, never an upstream's.
  private(set) var localAnswers: [LocalAnswerKey: UInt64] = [:]

  func countLocalAnswer(route: String, reason: LocalAnswerReason) {
    localAnswers[LocalAnswerKey(route: route, reason: reason.rawValue), default: 0] &+= 1
  }

  /// Bearer tokens checked on JWT routes, by provider, then by result (`JWTResult.index`).
  /// A config has a handful of providers: a search comparing names (short strings compare
  /// inline) costs less per check than hashing the name.
  private var jwtTallies: [(provider: String, counts: [UInt64])] = []

  func countJWT(provider: String, result: JWTResult) {
    for index in jwtTallies.indices where jwtTallies[index].provider == provider {
      jwtTallies[index].counts[result.index] &+= 1
      return
    }
    var counts = [UInt64](repeating: 0, count: JWTResult.allCases.count)
    counts[result.index] = 1
    jwtTallies.append((provider, counts))
  }

  /// `gatehouse_jwt_total`'s samples.
  var jwtResults: [JWTResultKey: UInt64] {
    var all: [JWTResultKey: UInt64] = [:]
    for (provider, counts) in jwtTallies {
      for result in JWTResult.allCases where counts[result.index] > 0 {
        all[JWTResultKey(provider: provider, result: result.rawValue)] = counts[result.index]
      }
    }
    return all
  }

  func countTokenRejection(token: String, route: String) {
    tokenRejections[TokenRouteKey(token: token, route: route), default: 0] &+= 1
  }

  /// JSON success answers whose route's `key_path` found nothing, by route.
  private(set) var keyPathMissing: [String: UInt64] = [:]

  func countKeyPathMissing(route: String) {
    keyPathMissing[route, default: 0] &+= 1
  }

  var upstreamOutcomes: [UpstreamOutcomeKey: UInt64] {
    var all = talliedOutcomes
    if outcomeRunCount > 0 { all[outcomeRun, default: 0] &+= outcomeRunCount }
    return all
  }

  /// Lines up counters with a snapshot's routes (by name, so counts survive reloads). A
  /// route the new config no longer has stops being exported: config pipelines rename
  /// routes (`orders-v12`), and each name kept would add its series for the life of the
  /// process. A request of the old config that ends later counts under its name again
  /// until the next reload (Prometheus takes the restart as a counter reset).
  func bind(routeNames: [String]) {
    var kept: [String: RouteCounters] = [:]
    kept.reserveCapacity(routeNames.count)
    routeSlots = routeNames.map { name in
      let counters = kept[name] ?? routes[name] ?? RouteCounters()
      kept[name] = counters
      return counters
    }
    routes = kept
  }

  func counters(forRoute name: String) -> RouteCounters {
    if let existing = routes[name] { return existing }
    let counters = RouteCounters()
    routes[name] = counters
    return counters
  }

  func recordUpstream(_ upstream: String, outcome: String) {
    if outcomeRunCount > 0, outcome == outcomeRun.outcome, upstream == outcomeRun.upstream {
      outcomeRunCount &+= 1
      return
    }
    if outcomeRunCount > 0 { talliedOutcomes[outcomeRun, default: 0] &+= outcomeRunCount }
    outcomeRun = UpstreamOutcomeKey(upstream: upstream, outcome: outcome)
    outcomeRunCount = 1
  }

  func sample() -> MetricsSample {
    var sample = MetricsSample()
    for (name, counters) in routes {
      sample.routes[name] = RouteSample(counters)
    }
    sample.routes[""] = RouteSample(unrouted)
    sample.upstreamOutcomes = upstreamOutcomes
    sample.cacheResults = cacheResults
    sample.collapsed = collapsed
    sample.pipelined = pipelined
    sample.pipelineResent = pipelineResent
    sample.upstreamRetries = upstreamRetries
    sample.tokenRejections = tokenRejections
    sample.jwtResults = jwtResults
    sample.keyPathMissing = keyPathMissing
    sample.localAnswers = localAnswers
    return sample
  }
}

struct JWTResultKey: Hashable, Sendable {
  let provider: String
  let result: String
}

/// The `result` label of `gatehouse_jwt_total`. Raw values are part of the metrics
/// contract: add cases, never rename.
enum JWTResult: String, Sendable, CaseIterable {
  /// Verified (or found verified in the loop's cache), scopes granted.
  case valid
  /// No bearer token on a route that requires one.
  case missing
  /// Malformed, badly signed, wrong issuer or audience, unknown key, refused claim value.
  case invalid
  case expired
  case insufficientScope = "insufficient_scope"
  /// The provider had no keys to verify with (503).
  case noKeys = "no_keys"

  /// The position in `allCases`, for counters kept in an array.
  var index: Int {
    switch self {
    case .valid: 0
    case .missing: 1
    case .invalid: 2
    case .expired: 3
    case .insufficientScope: 4
    case .noKeys: 5
    }
  }
}

struct TokenRouteKey: Hashable, Sendable {
  let token: String
  let route: String
}

struct LocalAnswerKey: Hashable, Sendable {
  let route: String
  let reason: String
}

struct UpstreamOutcomeKey: Hashable, Sendable {
  let upstream: String
  let outcome: String
}

/// A copy of one route's counters, summed across loops when the metrics are read.
public struct RouteSample: Sendable {
  /// Both protocols together; `http2ByStatus` the HTTP/2 part of it.
  var byStatus: [Int: UInt64] = [:]
  var http2ByStatus: [Int: UInt64] = [:]
  var buckets = [UInt64](repeating: 0, count: LatencyBuckets.bounds.count + 1)
  var durationSum: Double = 0
  var count: UInt64 = 0

  init() {}

  init(_ counters: RouteCounters) {
    byStatus = counters.byStatus
    http2ByStatus = counters.http2ByStatus
    buckets = counters.buckets
    durationSum = counters.durationSum
    count = counters.count
  }

  mutating func add(_ other: RouteSample) {
    for (status, value) in other.byStatus { byStatus[status, default: 0] &+= value }
    for (status, value) in other.http2ByStatus { http2ByStatus[status, default: 0] &+= value }
    for index in buckets.indices { buckets[index] &+= other.buckets[index] }
    durationSum += other.durationSum
    count &+= other.count
  }
}

/// Counters copied from one or more loops.
public struct MetricsSample: Sendable {
  var routes: [String: RouteSample] = [:]
  var upstreamOutcomes: [UpstreamOutcomeKey: UInt64] = [:]
  var cacheResults = CacheResultCounts()
  var collapsed: UInt64 = 0
  var pipelined: UInt64 = 0
  var pipelineResent: UInt64 = 0
  var upstreamRetries: [UpstreamOutcomeKey: UInt64] = [:]
  /// The fleets' endpoints as the loops see them, by upstream and endpoint address.
  var endpoints: [EndpointSampleKey: EndpointSample] = [:]
  var tokenRejections: [TokenRouteKey: UInt64] = [:]
  var jwtResults: [JWTResultKey: UInt64] = [:]
  var keyPathMissing: [String: UInt64] = [:]
  var localAnswers: [LocalAnswerKey: UInt64] = [:]

  public init() {}

  public mutating func add(_ other: MetricsSample) {
    for (name, sample) in other.routes { routes[name, default: RouteSample()].add(sample) }
    for (key, value) in other.upstreamOutcomes { upstreamOutcomes[key, default: 0] &+= value }
    cacheResults.add(other.cacheResults)
    collapsed &+= other.collapsed
    pipelined &+= other.pipelined
    pipelineResent &+= other.pipelineResent
    for (key, value) in other.upstreamRetries { upstreamRetries[key, default: 0] &+= value }
    for (key, value) in other.endpoints { endpoints[key, default: EndpointSample()].add(value) }
    for (key, value) in other.tokenRejections { tokenRejections[key, default: 0] &+= value }
    for (key, value) in other.jwtResults { jwtResults[key, default: 0] &+= value }
    for (key, value) in other.keyPathMissing { keyPathMissing[key, default: 0] &+= value }
    for (key, value) in other.localAnswers { localAnswers[key, default: 0] &+= value }
  }

  /// Requests answered, by status, over all routes.
  public var totalRequests: UInt64 { routes.values.reduce(0) { $0 &+ $1.count } }
}

struct EndpointSampleKey: Hashable, Sendable {
  let upstream: String
  let endpoint: String
}

/// One endpoint's figures summed over the loops: the tries each loop made and saw fail,
/// and how many loops see it in each state.
struct EndpointSample: Sendable {
  var requests: UInt64 = 0
  var failures: UInt64 = 0
  var inFlight = 0
  /// By the admin API's state word (`healthy`, `unhealthy`, `ejected`, `draining`).
  var loopsByState: [String: Int] = [:]

  mutating func add(_ other: EndpointSample) {
    requests &+= other.requests
    failures &+= other.failures
    inFlight += other.inFlight
    for (state, count) in other.loopsByState { loopsByState[state, default: 0] += count }
  }

  /// The state the process reports: draining if any loop drains it (it left the list),
  /// else ejected if any loop has it ejected, else unhealthy if the checks say so, else
  /// healthy. Loops judge their own tries, so one loop's ejection is worth showing.
  var state: String {
    for word in ["draining", "ejected", "unhealthy"] where (loopsByState[word] ?? 0) > 0 { return word }
    return "healthy"
  }
}
