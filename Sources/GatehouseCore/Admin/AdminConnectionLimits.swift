/// The limits every admin connection runs under. The admin port shares the process's
/// descriptors and its first event loop with the gateway, so it must not be able to hold
/// more of either than a few probes, scrapers and dashboards need.
struct AdminConnectionLimits: Sendable, Equatable {
  /// Admin connections open at once; more are closed as soon as they are accepted.
  /// Fixed rather than `limits.max_connections`: probes, a scraper and a few dashboards
  /// need a handful, and a separate small cap means a flood of gateway clients cannot lock
  /// the probes out, nor admin clients take the gateway's descriptors.
  static let maxConnections = 64

  /// The running config's `limits.header_timeout_ms`: a request (head and body) must
  /// arrive within it, counted from accept or from the request's first byte.
  var headerTimeoutNanoseconds: UInt64
  /// The running config's `limits.idle_timeout_ms`: how long a connection may wait for its
  /// next request, and how long a client may go without taking any of its queued answers.
  var idleTimeoutNanoseconds: UInt64

  /// The SPEC §2 defaults (10 s, 60 s), for when no gateway is there to ask.
  static let defaults = AdminConnectionLimits(
    headerTimeoutNanoseconds: 10_000_000_000, idleTimeoutNanoseconds: 60_000_000_000)
}

/// What an admin connection waits for, each with its own timeout.
enum AdminWait: Equatable {
  /// A request, from accept or, once `started`, from its first byte (header timeout).
  case request(started: Bool)
  /// The next request after an answer (idle timeout).
  case nextRequest
  /// The gateway works on an answer (a reload, a store call): no deadline here, the work
  /// is bounded where it runs.
  case answer
  /// The client must take queued answers (after backpressure stopped parsing, or before a
  /// close): idle timeout, restarted whenever it takes some. An nginx `send_timeout`.
  case output
}

/// What to do with an admin connection whose wait ran out.
enum AdminTimeoutAction: Equatable {
  /// Part of a request came, not all of it: answer 408 and close.
  case requestTimedOut
  /// Nothing is owed either way: close (after the queued output, under an `.output` wait).
  case close
  /// The client stopped taking its answers: reset, dropping them.
  case abort
}

/// The deadline of one admin connection: pure bookkeeping, fed the monotonic time and the
/// bytes the client has acknowledged, so its rules are tested without sockets.
struct AdminDeadline: Equatable {
  private(set) var wait = AdminWait.request(started: false)
  /// Monotonic nanoseconds at which `wait` runs out; 0 for never.
  private(set) var due: UInt64 = 0
  /// What the client had acknowledged when `.output` was last (re)started: more later
  /// means it reads. (A shrinking queue would not do: the kernel's send buffer can grow and
  /// take queued bytes while the client reads nothing.)
  private var acknowledgedAtStart: Int64 = 0

  /// Starts waiting for `wait` now.
  mutating func start(_ wait: AdminWait, now: UInt64, limits: AdminConnectionLimits, acknowledged: Int64 = 0) {
    self.wait = wait
    acknowledgedAtStart = acknowledged
    switch wait {
    case .request: due = now &+ limits.headerTimeoutNanoseconds
    case .nextRequest, .output: due = now &+ limits.idleTimeoutNanoseconds
    case .answer: due = 0
    }
  }

  /// Request bytes arrived. A request's first byte starts its header timeout; the first
  /// request of a connection keeps the one that started at accept (so trickling the first
  /// byte late buys nothing).
  mutating func requestBytesArrived(now: UInt64, limits: AdminConnectionLimits) {
    switch wait {
    case .request(started: false): wait = .request(started: true)
    case .nextRequest: start(.request(started: true), now: now, limits: limits)
    case .request(started: true), .answer, .output: break
    }
  }

  /// The periodic check: nil while time is left, else what to do (the deadline is then
  /// cleared; the caller starts the next wait). Under `.output`, any byte the client
  /// acknowledged since the wait (re)started is progress and restarts it.
  mutating func check(now: UInt64, acknowledged: Int64, limits: AdminConnectionLimits) -> AdminTimeoutAction? {
    if wait == .output, acknowledged > acknowledgedAtStart {
      start(.output, now: now, limits: limits, acknowledged: acknowledged)
      return nil
    }
    guard due != 0, now >= due else { return nil }
    due = 0
    switch wait {
    case .request(started: true): return .requestTimedOut
    case .request(started: false), .nextRequest: return .close
    case .output: return .abort
    case .answer: return nil
    }
  }
}

/// Lets one log line through per `interval`, and counts the ones it held back, so a flood
/// of refused connections is reported without flooding the log.
struct LogThrottle {
  let intervalNanoseconds: UInt64
  private var nextAllowed: UInt64 = 0
  private var held = 0

  init(intervalNanoseconds: UInt64) {
    self.intervalNanoseconds = intervalNanoseconds
  }

  /// Whether to log the event that happened `now`; if so, how many were held back before it.
  mutating func admit(now: UInt64) -> Int? {
    guard now >= nextAllowed else {
      held += 1
      return nil
    }
    nextAllowed = now &+ intervalNanoseconds
    defer { held = 0 }
    return held
  }

  /// The events held back, once a line may go out again at `now` (the line then reports
  /// them, and the interval restarts), so the last of a burst is not left unreported until
  /// the next event; nil when there are none or it is too soon.
  mutating func flush(now: UInt64) -> Int? {
    guard held > 0, now >= nextAllowed else { return nil }
    nextAllowed = now &+ intervalNanoseconds
    defer { held = 0 }
    return held
  }
}
