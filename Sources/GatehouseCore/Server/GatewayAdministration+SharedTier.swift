import GatehouseJSON
import GatehouseSharedTier

/// The shared tier in `/admin/status` and `/metrics` (Docs/shared-tier.md).
extension GatewayAdministration {
  /// `shared: {url (redacted), up, latency_ms}` added to the status document: up while every
  /// loop's connection is up (`RedisConnection.isUp`: connected, and its commands not timing
  /// out again and again), the slowest loop's last round trip. `null` without a tier.
  func completeStatus(
    _ document: [(String, JSONValue)], sharedTier plan: SharedTierPlan?,
    completion: @escaping @Sendable (JSONValue) -> Void
  ) {
    guard let plan else {
      completion(.object(document + [("shared", .null)]))
      return
    }
    let url = plan.redactedURL
    server.gather({ context in context.sharedTier?.health.snapshot }) { perLoop in
      let healths = perLoop.compactMap { $0 }
      let up = !healths.isEmpty && healths.allSatisfy(\.isUp)
      let latency = healths.compactMap(\.lastRoundTripMilliseconds).max()
      var shared: [(String, JSONValue)] = [
        ("url", .string(url)), ("up", .bool(up)),
        ("latency_ms", latency.map { .number(JSONNumber(double: $0)) } ?? .null),
      ]
      if !up, let problem = healths.compactMap(\.lastProblem).first {
        shared.append(("last_problem", .string(problem)))
      }
      completion(.object(document + [("shared", .object(shared))]))
    }
  }

  /// `gatehouse_shared_up`, `gatehouse_shared_requests_total{op,result}` and
  /// `gatehouse_shared_records_refused_total{reason}`, summed over loops.
  static func appendSharedTier(_ perLoop: [LoopSharedTier.Figures], configured: Bool, to text: inout PrometheusText) {
    guard configured else { return }
    let up = !perLoop.isEmpty && perLoop.allSatisfy(\.health.isUp)
    text.family(
      "gatehouse_shared_up", type: "gauge",
      help: "1 while every loop's connection to the shared tier is up and answering.",
      samples: [([], up ? 1 : 0)])
    var samples: [(labels: [(String, String)], value: Double)] = []
    for operation in LoopSharedTier.Operation.allCases {
      for (index, outcome) in RedisOutcome.allCases.enumerated() {
        let total = perLoop.reduce(UInt64(0)) { $0 &+ $1.counts[operation.rawValue][index] }
        samples.append(([("op", operation.label), ("result", outcome.label)], Double(total)))
      }
    }
    text.family(
      "gatehouse_shared_requests_total", type: "counter",
      help: "Commands sent to the shared tier by operation and result.",
      samples: samples)
    text.family(
      "gatehouse_shared_records_refused_total", type: "counter",
      help: "Records read from the shared tier and refused (served as misses), by reason.",
      samples: LoopSharedTier.refusalReasons.enumerated().map { index, reason in
        ([("reason", reason)], Double(perLoop.reduce(UInt64(0)) { $0 &+ $1.refused[index] }))
      })
  }
}
