import GatehouseNet

/// What went wrong with the upstream, for choosing the answer.
enum UpstreamFailure: Equatable {
  case unavailable
  case closed
  case timedOut
  case invalidAnswer
  /// Refused without a connect attempt: the circuit is open.
  case circuitOpen
  /// Refused without a connect attempt: the health checks call the upstream down.
  case unhealthy
  /// The connection to the upstream was not established in time.
  case connectTimedOut
  /// No connection came free within the queue timeout (`max_connections`).
  case busy

  /// The `outcome` label of `gatehouse_upstream_requests_total`.
  var outcome: String {
    switch self {
    case .unavailable: return "unavailable"
    case .closed: return "reset"
    case .timedOut: return "timeout"
    case .invalidAnswer: return "invalid_response"
    case .circuitOpen: return "circuit_open"
    case .unhealthy: return "unhealthy"
    case .connectTimedOut: return "timeout"
    case .busy: return "busy"
    }
  }

  /// The access line's `reason` for the answer the failure leads to (the caller may know
  /// better: a TLS failure is `unavailable` too).
  var reason: LocalAnswerReason {
    switch self {
    case .unavailable: return .connectRefused
    case .closed: return .reset
    case .timedOut: return .answerTimeout
    case .invalidAnswer: return .badAnswer
    case .circuitOpen: return .circuitOpen
    case .unhealthy: return .unhealthy
    case .connectTimedOut: return .connectTimeout
    case .busy: return .upstreamBusy
    }
  }

  /// Which breaker the failure counts against: not reaching the upstream is the
  /// upstream's; what goes wrong once the request is with it may be the route's alone.
  var breakerScope: BreakerScope {
    switch self {
    case .unavailable, .connectTimedOut: return .upstream
    case .closed, .timedOut, .invalidAnswer: return .route
    case .circuitOpen, .unhealthy, .busy: return .none
    }
  }

  /// The gateway's own answer when nothing better (a stored answer, a stub) is at hand.
  var answer: GatewayAnswer.Failure {
    switch self {
    case .timedOut, .connectTimedOut: return .upstreamTimedOut
    case .busy: return .upstreamBusy
    case .unavailable, .closed, .invalidAnswer, .circuitOpen, .unhealthy: return .upstreamUnavailable
    }
  }
}

extension UpstreamFailure {
  /// What the end of an upstream connection means for the exchange on it, with what
  /// `/admin/upstreams` shows as the upstream's last error when there is more to say than
  /// the outcome (`received`: some of the answer had arrived).
  static func of(_ reason: ConnectionCloseReason, received: Bool) -> (failure: UpstreamFailure, detail: String?) {
    switch reason {
    case .connectTimedOut:
      return (.connectTimedOut, nil)
    case .tlsFailed(let error):
      // A bad certificate or a failed handshake: the upstream is unusable, like a refusal.
      return (.unavailable, "TLS: \(error.description)")
    case .failed(let error) where error.syscall == "connect":
      // Refused or unreachable before a byte was exchanged: the upstream is down (outcome
      // `unavailable`), which a reset of an established exchange is not.
      return (.unavailable, "cannot connect: \(error.description)")
    case .closedByOwner, .hangup, .failed, .loopStopped:
      return (received ? .invalidAnswer : .closed, nil)
    }
  }
}
