import GatehouseConfig
import GatehouseHTTP
import GatehouseLogging
import GatehouseNet

/// Runs the active health checks of `upstreams.*.health` (Config/REFERENCE.md) on the control loop: a GET of each
/// upstream's health path (under its url's base path) on each of its endpoints every
/// `interval_ms`, 2xx meaning healthy. Changes are logged and handed to every request loop:
/// an unhealthy endpoint gets no requests (outside panic, Docs/fleets.md), and an upstream
/// whose endpoints are all unhealthy is refused as an open circuit would be (no connect
/// attempt; stale answer, stub fallback or 502), counted and logged as `unhealthy`: its
/// circuit stays as it is.
final class HealthChecker {
  private let loop: EventLoop
  private let logger: Logger
  private let publish: (HealthVerdicts) -> Void
  private var checks: [Check] = []
  private var generation = 0

  /// What the checks say, as the request loops take it.
  struct HealthVerdicts: Sendable {
    /// By upstream: false when every endpoint is unhealthy.
    var upstreams: [String: Bool] = [:]
    /// By upstream, the addresses of its endpoints the checks call unhealthy.
    var unhealthyEndpoints: [String: Set<String>] = [:]
  }

  final class Check {
    let plan: UpstreamPlan
    /// The endpoint checked.
    let endpoint: SocketAddress
    let config: HealthCheckConfig
    /// The path asked, joined to the upstream url's base path (`HealthCheckConfig.target`).
    let target: String
    var state: HealthState
    var timer: TimerHandle?

    init(plan: UpstreamPlan, endpoint: SocketAddress, config: HealthCheckConfig, basePath: String) {
      self.plan = plan
      self.endpoint = endpoint
      self.config = config
      target = config.target(basePath: basePath)
      state = HealthState(unhealthyAfter: config.unhealthyAfter, healthyAfter: config.healthyAfter)
    }
  }

  init(loop: EventLoop, logger: Logger, publish: @escaping (HealthVerdicts) -> Void) {
    self.loop = loop
    self.logger = logger
    self.publish = publish
  }

  /// (Re)starts checks for `snapshot`'s upstreams. Control loop only.
  func apply(_ snapshot: GatewaySnapshot) {
    stop()
    generation += 1
    let previous = checks
    checks = snapshot.config.upstreams.flatMap { upstream -> [Check] in
      guard let health = upstream.health, let plan = snapshot.upstreamPlans.first(where: { $0.name == upstream.name })
      else { return [] }
      return plan.endpoints.map { endpoint in
        let check = Check(plan: plan, endpoint: endpoint.address, config: health, basePath: upstream.url.basePath)
        // A reload does not make a down endpoint healthy: the same check of the same address
        // keeps what it has seen, and requests keep avoiding it until it recovers.
        if let old = previous.first(where: { $0.plan.name == upstream.name && $0.endpoint == endpoint.address }),
          old.config == health, old.target == check.target, old.plan.hostHeader == plan.hostHeader
        {
          check.state = old.state
        }
        return check
      }
    }
    publishStates()
    for check in checks { schedule(check, generation: generation) }
  }

  func stop() {
    for check in checks {
      if let timer = check.timer { loop.cancelTimer(timer) }
      check.timer = nil
    }
  }

  /// The checked upstreams' states, by name, for the admin API and metrics: of an upstream
  /// of several endpoints, the first healthy endpoint's (the upstream takes requests while
  /// one is), else the first's. Control loop only.
  func states() -> [String: HealthState] {
    var states: [String: HealthState] = [:]
    for check in checks where states[check.plan.name].map({ !$0.healthy && check.state.healthy }) ?? true {
      states[check.plan.name] = check.state
    }
    return states
  }

  private func schedule(_ check: Check, generation: Int) {
    check.timer = loop.scheduleTimer(after: check.config.interval) { [self] in
      guard generation == self.generation else { return }
      run(check, generation: generation)
    }
  }

  private func run(_ check: Check, generation: Int) {
    var headers = HTTPHeaders()
    headers.add(name: "Host", value: String(decoding: check.plan.hostHeader, as: UTF8.self))
    headers.add(name: "User-Agent", value: "gatehouse-health/\(GatehouseVersion.string)")
    let request = HTTPOneShotClient.Request(method: .get, target: check.target, headers: headers)
    let limits = HTTPOneShotClient.Limits(
      connectTimeout: check.plan.connectTimeout,
      answerTimeout: min(check.plan.answerTimeout, check.config.interval),
      maxAnswerBytes: 64 * 1024)
    HTTPOneShotClient.send(request, to: check.endpoint, on: loop, limits: limits, tls: check.plan.tls) {
      [self] result in
      guard generation == self.generation else { return }
      let success: Bool
      let status: Int?
      let error: String?
      switch result {
      case .success(let answer):
        success = (200..<300).contains(answer.status)
        status = answer.status
        error = success ? nil : "status \(answer.status)"
      case .failure(let failure):
        success = false
        status = nil
        error = failure.description
      }
      if check.state.record(success: success, status: status, error: error, atMs: RFC3339.nowMilliseconds()) {
        // A recovery is good news (info, nothing failed); going down is a warning that says
        // what the check got and which path it asked.
        let endpoint = LogValue.string(check.endpoint.description)
        if check.state.healthy {
          logger.info(
            "upstream healthy",
            ["upstream": .string(check.plan.name), "endpoint": endpoint, "path": .string(check.target)])
        } else {
          logger.warn(
            "upstream unhealthy",
            [
              "upstream": .string(check.plan.name), "endpoint": endpoint, "path": .string(check.target),
              "status": status.map { .int($0) } ?? .null, "error": .string(error ?? "check failed"),
            ])
        }
        publishStates()
      }
      schedule(check, generation: generation)
    }
  }

  private func publishStates() {
    var verdicts = HealthVerdicts()
    for check in checks {
      verdicts.upstreams[check.plan.name] = (verdicts.upstreams[check.plan.name] ?? false) || check.state.healthy
      if !check.state.healthy {
        verdicts.unhealthyEndpoints[check.plan.name, default: []].insert(check.endpoint.description)
      }
    }
    publish(verdicts)
  }
}
