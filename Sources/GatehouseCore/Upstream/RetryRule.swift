import GatehouseHTTP

/// The failures a retry may be made for (`retry.on`).
struct RetryConditions: OptionSet, Sendable, Hashable {
  let rawValue: UInt8

  init(rawValue: UInt8) {
    self.rawValue = rawValue
  }

  init(_ failure: AttemptFailure) {
    switch failure {
    case .connect: self = .connect
    case .reset: self = .reset
    case .timeout: self = .timeout
    case .status502: self = .status502
    case .status503: self = .status503
    case .status504: self = .status504
    }
  }

  static let connect = RetryConditions(rawValue: 1 << 0)
  static let reset = RetryConditions(rawValue: 1 << 1)
  static let timeout = RetryConditions(rawValue: 1 << 2)
  static let status502 = RetryConditions(rawValue: 1 << 3)
  static let status503 = RetryConditions(rawValue: 1 << 4)
  static let status504 = RetryConditions(rawValue: 1 << 5)

  /// `["connect", "reset", "503"]`. Not `timeout`: a request that timed out may still be
  /// running on the endpoint, and a retry doubles the load of an endpoint that is slow
  /// because it is loaded. Not 502 and 504: they are often a proxy behind the endpoint
  /// saying that its own upstream failed, which another endpoint of this fleet reaches too.
  static let `default`: RetryConditions = [.connect, .reset, .status503]

  /// Reads a `retry.on` list; nil when a value is not one of `connect`, `reset`, `timeout`,
  /// `502`, `503`, `504`.
  init?(configValues: [String]) {
    self = []
    for value in configValues {
      guard let failure = AttemptFailure(configValue: value) else { return nil }
      insert(RetryConditions(failure))
    }
  }

  func contains(_ failure: AttemptFailure) -> Bool {
    contains(RetryConditions(failure))
  }
}

/// Why a failed try is not retried.
enum RetryRefusal: Sendable, Hashable {
  /// The request made its `retry.attempts` tries.
  case attemptsUsed
  /// The failure is not in `retry.on`.
  case notListed
  /// The request was sent and its method does not allow a replay (POST or PATCH without
  /// an `Idempotency-Key`, and every other method).
  case notReplayable
  /// The request was sent and its body is no longer held (it was streamed on and let go).
  case bodyReleased
  /// The upstream's retry budget is spent.
  case budgetExhausted
}

enum RetryDecision: Sendable, Hashable {
  case retry
  case stop(RetryRefusal)
}

/// Whether a failed try is tried again on another endpoint (`retry.on`, `retry.attempts`),
/// as a pure rule over what the caller knows of the request:
///
/// - Never beyond `attempts` tries in all (the first included).
/// - A connect failure (the request never left) is retried whatever the method, if
///   `connect` is in `on`.
/// - Any other failure (the endpoint may have acted on the request) only if it is in `on`,
///   the request is replayable (GET, HEAD, OPTIONS, PUT, DELETE, or any method with an
///   `Idempotency-Key`) and its body is still held to be sent again.
/// - Every retry, connect failures included, must fit the upstream's `RetryBudget`.
struct RetryRule: Sendable, Hashable {
  /// `retry.on`.
  let on: RetryConditions
  /// `retry.attempts`: tries in all, the first included (default 2: one retry). 1 or less
  /// turns retries off.
  let attempts: Int

  static let defaultAttempts = 2

  init(on: RetryConditions = .default, attempts: Int = RetryRule.defaultAttempts) {
    self.on = on
    self.attempts = attempts
  }

  /// Whether a request with `method` may be sent twice. TRACE is left out although it is
  /// idempotent: it echoes the request and is not worth a second try. POST and PATCH
  /// become replayable with an `Idempotency-Key`, whose whole point is that the server
  /// recognizes the repeat.
  static func isReplayable(method: HTTPMethod, hasIdempotencyKey: Bool) -> Bool {
    if hasIdempotencyKey { return true }
    switch method {
    case .get, .head, .options, .put, .delete: return true
    case .post, .patch, .trace, .connect, .other: return false
    }
  }

  /// The rule without the budget: whether try `tryNumber` (1 for the first), which ended in
  /// `failure`, may be followed by another.
  func decide(
    after failure: AttemptFailure, tryNumber: Int, method: HTTPMethod, hasIdempotencyKey: Bool, bodyHeld: Bool
  ) -> RetryDecision {
    guard tryNumber < attempts else { return .stop(.attemptsUsed) }
    guard on.contains(failure) else { return .stop(.notListed) }
    // Nothing was sent: the endpoint cannot have acted on the request, and the body (if
    // any) has not been read on yet.
    guard failure.requestWasSent else { return .retry }
    guard Self.isReplayable(method: method, hasIdempotencyKey: hasIdempotencyKey) else {
      return .stop(.notReplayable)
    }
    guard bodyHeld else { return .stop(.bodyReleased) }
    return .retry
  }

  /// The rule, then the budget: the budget is asked last, so that only a retry actually
  /// made is counted in it.
  func decide(
    after failure: AttemptFailure, tryNumber: Int, method: HTTPMethod, hasIdempotencyKey: Bool, bodyHeld: Bool,
    budget: inout RetryBudget, now: UInt64
  ) -> RetryDecision {
    let decision = decide(
      after: failure, tryNumber: tryNumber, method: method, hasIdempotencyKey: hasIdempotencyKey, bodyHeld: bodyHeld)
    guard decision == .retry else { return decision }
    return budget.mayRetry(now: now) ? .retry : .stop(.budgetExhausted)
  }
}
