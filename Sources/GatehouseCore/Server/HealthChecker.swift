import GatehouseConfig
import GatehouseHTTP
import GatehouseLogging
import GatehouseNet

/// Runs the active health checks of `upstreams.*.health` (Config/REFERENCE.md) on the control loop: a GET of each
/// upstream's health path (under its url's base path) every `interval_ms`, 2xx meaning
/// healthy. Changes are logged and handed to every request loop, which then refuses an
/// unhealthy upstream's requests as an open circuit would (no connect attempt; stale answer,
/// stub fallback or 502), counted and logged as `unhealthy`: its circuit stays as it is.
final class HealthChecker {
  private let loop: EventLoop
  private let logger: Logger
  private let publish: ([String: Bool]) -> Void
  private var checks: [Check] = []
  private var generation = 0

  final class Check {
    let plan: UpstreamPlan
    let config: HealthCheckConfig
    /// The path asked, joined to the upstream url's base path (`HealthCheckConfig.target`).
    let target: String
    var state: HealthState
    var timer: TimerHandle?

    init(plan: UpstreamPlan, config: HealthCheckConfig, basePath: String) {
      self.plan = plan
      self.config = config
      target = config.target(basePath: basePath)
      state = HealthState(unhealthyAfter: config.unhealthyAfter, healthyAfter: config.healthyAfter)
    }
  }

  init(loop: EventLoop, logger: Logger, publish: @escaping ([String: Bool]) -> Void) {
    self.loop = loop
    self.logger = logger
    self.publish = publish
  }

  /// (Re)starts checks for `snapshot`'s upstreams. Control loop only.
  func apply(_ snapshot: GatewaySnapshot) {
    stop()
    generation += 1
    let previous = checks
    checks = snapshot.config.upstreams.compactMap { upstream in
      guard let health = upstream.health, let plan = snapshot.upstreamPlans.first(where: { $0.name == upstream.name })
      else { return nil }
      let check = Check(plan: plan, config: health, basePath: upstream.url.basePath)
      // A reload does not make a down upstream healthy: the same check of the same address
      // keeps what it has seen, and requests keep avoiding the upstream until it recovers.
      if let old = previous.first(where: { $0.plan.name == upstream.name }), old.config == health,
        old.target == check.target, old.plan.address == plan.address, old.plan.hostHeader == plan.hostHeader
      {
        check.state = old.state
      }
      return check
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

  /// The checked upstreams' states, by name, for the admin API and metrics. Control loop only.
  func states() -> [String: HealthState] {
    var states: [String: HealthState] = [:]
    for check in checks { states[check.plan.name] = check.state }
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
    HTTPOneShotClient.send(request, to: check.plan.address, on: loop, limits: limits, tls: check.plan.tls) {
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
        if check.state.healthy {
          logger.info("upstream healthy", ["upstream": .string(check.plan.name), "path": .string(check.target)])
        } else {
          logger.warn(
            "upstream unhealthy",
            [
              "upstream": .string(check.plan.name), "path": .string(check.target),
              "status": status.map { .int($0) } ?? .null, "error": .string(error ?? "check failed"),
            ])
        }
        publishStates()
      }
      schedule(check, generation: generation)
    }
  }

  private func publishStates() {
    var healthy: [String: Bool] = [:]
    for check in checks { healthy[check.plan.name] = check.state.healthy }
    publish(healthy)
  }
}
