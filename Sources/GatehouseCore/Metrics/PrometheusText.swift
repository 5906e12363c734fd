/// Renders metrics in the Prometheus text exposition format (version 0.0.4) with the names
/// of Docs/logs.md. Label values are escaped; output is sorted so it is stable between scrapes.
public struct PrometheusText {
  private(set) var text = ""

  public init() {}

  mutating func header(_ name: String, _ type: String, _ help: String) {
    text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
  }

  mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
    text += name
    if !labels.isEmpty {
      text += "{" + labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",") + "}"
    }
    text += " " + Self.format(value) + "\n"
  }

  static func escape(_ value: String) -> String {
    var out = ""
    for character in value {
      switch character {
      case "\\": out += "\\\\"
      case "\"": out += "\\\""
      case "\n": out += "\\n"
      default: out.append(character)
      }
    }
    return out
  }

  static func format(_ value: Double) -> String {
    if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
    return String(value)
  }

  /// The request-path families: requests, latency, upstream outcomes, cache results.
  public mutating func append(_ sample: MetricsSample) {
    header("gatehouse_requests_total", "counter", "Requests answered, by route, HTTP status and client protocol.")
    for (route, routeSample) in sample.routes.sorted(by: { $0.key < $1.key }) {
      for (status, count) in routeSample.byStatus.sorted(by: { $0.key < $1.key }) {
        let http2 = routeSample.http2ByStatus[status] ?? 0
        for (version, share) in [("HTTP/1.1", count &- http2), ("HTTP/2", http2)] where share > 0 {
          self.sample(
            "gatehouse_requests_total", [("route", route), ("code", String(status)), ("protocol", version)],
            Double(share))
        }
      }
    }
    header("gatehouse_request_duration_seconds", "histogram", "Time from request head to the end of the answer.")
    for (route, routeSample) in sample.routes.sorted(by: { $0.key < $1.key }) where routeSample.count > 0 {
      var cumulative: UInt64 = 0
      for (index, bound) in LatencyBuckets.bounds.enumerated() {
        cumulative &+= routeSample.buckets[index]
        self.sample(
          "gatehouse_request_duration_seconds_bucket", [("route", route), ("le", String(bound))], Double(cumulative))
      }
      self.sample(
        "gatehouse_request_duration_seconds_bucket", [("route", route), ("le", "+Inf")], Double(routeSample.count))
      self.sample("gatehouse_request_duration_seconds_sum", [("route", route)], routeSample.durationSum)
      self.sample("gatehouse_request_duration_seconds_count", [("route", route)], Double(routeSample.count))
    }
    header("gatehouse_upstream_requests_total", "counter", "Upstream exchanges, by upstream and outcome.")
    for (key, count) in sample.upstreamOutcomes.sorted(by: {
      ($0.key.upstream, $0.key.outcome) < ($1.key.upstream, $1.key.outcome)
    }) {
      self.sample(
        "gatehouse_upstream_requests_total", [("upstream", key.upstream), ("outcome", key.outcome)], Double(count))
    }
    header(
      "gatehouse_local_answers_total", "counter",
      "Answers the gateway made itself (or served from the store instead of a failing upstream), by route and reason.")
    for (key, count) in sample.localAnswers.sorted(by: { ($0.key.route, $0.key.reason) < ($1.key.route, $1.key.reason) }
    ) {
      self.sample("gatehouse_local_answers_total", [("route", key.route), ("reason", key.reason)], Double(count))
    }
    header("gatehouse_cache_total", "counter", "Store lookups by result.")
    for result in ["hit", "stale", "miss", "bypass", "revalidated"] {
      self.sample("gatehouse_cache_total", [("result", result)], Double(sample.cacheResults[label: result]))
    }
    header(
      "gatehouse_cache_collapsed_total", "counter",
      "Requests answered by another request's upstream exchange for the same cache key.")
    self.sample("gatehouse_cache_collapsed_total", [], Double(sample.collapsed))
    header(
      "gatehouse_upstream_pipelined_total", "counter",
      "Requests written behind another on an upstream connection (pipelining).")
    self.sample("gatehouse_upstream_pipelined_total", [], Double(sample.pipelined))
    header(
      "gatehouse_upstream_pipeline_resent_total", "counter",
      "Pipelined requests sent again alone: their connection ended before their answer, or they waited too long.")
    self.sample("gatehouse_upstream_pipeline_resent_total", [], Double(sample.pipelineResent))
    family(
      "gatehouse_upstream_retries_total", type: "counter",
      help: "Tries made again on another endpoint of the upstream, by the failure retried.",
      samples: sample.upstreamRetries.sorted { ($0.key.upstream, $0.key.outcome) < ($1.key.upstream, $1.key.outcome) }
        .map { ([("upstream", $0.key.upstream), ("reason", $0.key.outcome)], Double($0.value)) })
    let endpoints = sample.endpoints.sorted { ($0.key.upstream, $0.key.endpoint) < ($1.key.upstream, $1.key.endpoint) }
    var byState: [String: [String: Int]] = [:]
    for (key, value) in endpoints { byState[key.upstream, default: [:]][value.state, default: 0] += 1 }
    family(
      "gatehouse_upstream_endpoints", type: "gauge", help: "Endpoints of each upstream by state.",
      samples: byState.keys.sorted().flatMap { upstream in
        ["healthy", "unhealthy", "ejected", "draining"].map { state in
          ([("upstream", upstream), ("state", state)], Double(byState[upstream]?[state] ?? 0))
        }
      })
    family(
      "gatehouse_upstream_endpoint_requests_total", type: "counter",
      help:
        "Tries sent to each endpoint (retries included) that have ended, by outcome: failure is a connect error, reset, timeout or 502/503/504.",
      samples: endpoints.flatMap { key, value in
        let ended = value.requests &- UInt64(max(0, value.inFlight))
        let failures = min(value.failures, ended)
        return [
          ([("upstream", key.upstream), ("endpoint", key.endpoint), ("outcome", "success")], Double(ended - failures)),
          ([("upstream", key.upstream), ("endpoint", key.endpoint), ("outcome", "failure")], Double(failures)),
        ]
      })
  }

  /// A gauge or counter family with one sample per label set.
  public mutating func family(
    _ name: String, type: String, help: String, samples: [(labels: [(String, String)], value: Double)]
  ) {
    header(name, type, help)
    for entry in samples { sample(name, entry.labels, entry.value) }
  }
}
