/// How one try of a request on one endpoint failed, in the words of `retry.on`: the kinds
/// that count towards passive ejection and that a retry may be made for.
enum AttemptFailure: Sendable, Hashable, CaseIterable, CustomStringConvertible {
  /// The connection could not be made (refused, unreachable, connect timeout, TLS
  /// handshake): the request was never sent.
  case connect
  /// The connection was reset or closed before any byte of the answer came.
  case reset
  /// No answer head within the answer timeout.
  case timeout
  /// The endpoint answered 502, 503 or 504.
  case status502
  case status503
  case status504

  /// The failure an answered status stands for; nil for every other status (a 500 is the
  /// application's answer to this request, not a sign that the endpoint is broken).
  init?(status: Int) {
    switch status {
    case 502: self = .status502
    case 503: self = .status503
    case 504: self = .status504
    default: return nil
    }
  }

  /// Reads one `retry.on` value: `connect`, `reset`, `timeout`, `502`, `503` or `504`.
  init?(configValue: String) {
    switch configValue {
    case "connect": self = .connect
    case "reset": self = .reset
    case "timeout": self = .timeout
    case "502": self = .status502
    case "503": self = .status503
    case "504": self = .status504
    default: return nil
    }
  }

  /// The spelling in `retry.on` (also the default `last_error` text of an endpoint).
  var configValue: String {
    switch self {
    case .connect: return "connect"
    case .reset: return "reset"
    case .timeout: return "timeout"
    case .status502: return "502"
    case .status503: return "503"
    case .status504: return "504"
    }
  }

  var description: String { configValue }

  /// The kind of an exchange's upstream failure on an established try; nil for failures
  /// that are no try's (an open circuit, no connection free) or say nothing about the
  /// endpoint (an answer that was no HTTP is the application's).
  init?(_ failure: UpstreamFailure) {
    switch failure {
    case .unavailable, .connectTimedOut: self = .connect
    case .closed: self = .reset
    case .timedOut: self = .timeout
    case .invalidAnswer, .circuitOpen, .unhealthy, .busy: return nil
    }
  }

  /// Whether the request may have reached the endpoint. Only a connect failure proves it
  /// did not; after a reset or a timeout the endpoint may have acted on it.
  var requestWasSent: Bool { self != .connect }
}

/// How one try ended, as the caller reports it to `EndpointSet.attemptFinished` and
/// `OutlierDetector.record`.
enum AttemptOutcome: Sendable, Hashable {
  /// An answer came that is not one of the failure statuses (a 500 or a 404 included).
  case success
  case failure(AttemptFailure)

  /// The outcome of an answer with `status`.
  init(status: Int) {
    if let failure = AttemptFailure(status: status) {
      self = .failure(failure)
    } else {
      self = .success
    }
  }

  var failure: AttemptFailure? {
    if case .failure(let failure) = self { return failure }
    return nil
  }
}

/// One try of a request on one endpoint of a fleet. A request makes one of these per try
/// (`tryNumber` 1 for the first, up to `retry.attempts`), so its log line and the admin API
/// can say where each try went and how it ended.
struct UpstreamAttempt: Sendable, Hashable {
  let endpoint: EndpointID
  /// 1 for the first try of the request, 2 for the first retry, and so on.
  let tryNumber: Int
  /// Nil until the try's exchange says how it went (a client that left says nothing).
  var outcome: AttemptOutcome?
  /// The failure's text for the endpoint's `last_error` (the kind's name when nil).
  var error: String?
  // The connection this try uses holds the value (`UpstreamConnection.attempt`), so this
  // file stays free of I/O types.

  init(endpoint: EndpointID, tryNumber: Int, outcome: AttemptOutcome? = nil, error: String? = nil) {
    self.endpoint = endpoint
    self.tryNumber = tryNumber
    self.outcome = outcome
    self.error = error
  }
}
