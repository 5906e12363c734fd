/// The life of the link to the shared tier as a pure state machine: when to connect, when the
/// link counts as up, when to give up on a connection, and how long to wait before the next try.
/// It does no I/O and reads no clock: `RedisConnection` feeds it events (with the time) and
/// performs the actions it returns, in order.
///
/// The phases:
/// - `idle`: not started.
/// - `connecting`: TCP (and TLS) under way.
/// - `handshaking`: `AUTH`, `SELECT` and a `PING` sent; the link is up when the `PING` answers.
/// - `up`: commands are sent.
/// - `backingOff`: waiting to reconnect; commands fail at once.
/// - `stopped`: the owner stopped it; nothing leaves this phase.
///
/// A link that is `up` can still read as down (`isUp` false, `isConnected` true): when
/// commands time out `downAfterTimeouts` times in a row with none answered in time between
/// them, the server is taken for hung (stopped, partitioned, swamped). Commands still go
/// out, each giving up after its own timeout as before, and the first one answered in time
/// makes the link read as up again. See `Settings.downAfterTimeouts` for the count.
///
/// Backoff: after the n-th failure in a row the wait is `initialBackoff × 2^(n-1)`, capped at
/// `maxBackoff`, of which a random half is taken off (so replicas that lost the same server do
/// not come back in step). A link that was up for `stableAfter` starts counting again from one
/// when it drops; one that drops sooner goes on counting, so a server that accepts and then
/// hangs up at once is not hammered.
struct RedisLinkMachine {
  struct Settings: Sendable, Equatable {
    var initialBackoff: Duration = .milliseconds(100)
    var maxBackoff: Duration = .seconds(10)
    var stableAfter: Duration = .seconds(5)
    /// A command timed out and nothing at all came back for this long: the server is taken
    /// for unresponsive (stopped, partitioned) and the connection is reset, so that commands
    /// fail at once instead of each waiting out its timeout.
    var unresponsiveAfter: Duration = .seconds(2)
    /// Timeouts in a row (`commandTimedOut` events, with no `commandAnswered` between them)
    /// after which a link that is up reads as down, before `unresponsiveAfter` resets it:
    /// without this a hung server read as up for as long as its silence was shorter than
    /// that (a few requests' commands, then none), and for good when no command came later.
    ///
    /// Why 3: one timeout is a single slow command (a big value, a server busy for a moment,
    /// a lost packet on its way to being resent), and two can be that and the next one sent
    /// behind it; three in a row, with nothing answered in time between them, is a server
    /// that does not answer within `timeout_ms` at all, which is what the gateway then gets
    /// from it. Larger counts keep the tier reading as up through more requests that each
    /// wait out `timeout_ms` for nothing. An event covers every command whose deadline passed
    /// together (one deadline sweep), since a write's `SET` and `ZADD`, or a rate limit's
    /// `INCR` and `PEXPIRE`, go out in one pipeline and one slow reply fails all of them: that
    /// is one piece of evidence, not two.
    var downAfterTimeouts = 3
    /// Each command's timeout, only for what `lastProblem` says.
    var commandTimeout: Duration = .milliseconds(50)
  }

  enum Phase: Equatable {
    case idle
    case connecting
    case handshaking
    /// `since`: monotonic nanoseconds when the handshake finished.
    case up(since: UInt64)
    case backingOff
    case stopped
  }

  enum Event: Equatable {
    case start
    /// The transport (TCP, TLS) is connected.
    case transportReady
    /// The handshake's last reply arrived.
    case handshakeDone(now: UInt64)
    /// The connection failed, closed, or has to be reset (a refused `AUTH`, a protocol
    /// error, an oversized reply); `problem` says why, without secrets.
    case lost(problem: String, now: UInt64)
    /// Callers' commands timed out (one or more, in one deadline sweep); `silentSince` is
    /// when the oldest reply still owed was asked for, or the last reply arrived, whichever
    /// is later.
    case commandTimedOut(now: UInt64, silentSince: UInt64)
    /// A caller's command was answered within its timeout (an error reply too: the server
    /// answers). A late reply to a command that already timed out is not one.
    case commandAnswered
    case backoffElapsed
    case stop
  }

  enum Action: Equatable {
    /// Open a new transport.
    case connect
    /// Send `AUTH`, `SELECT`, `PING`.
    case sendHandshake
    case markUp
    /// Close the transport if it is open (abortively) and forget it.
    case closeTransport
    /// Complete every command still waiting with this failure.
    case failPending(RedisFailure)
    /// Feed `backoffElapsed` after this long.
    case scheduleReconnect(after: Duration)
    /// The link is up but its commands time out (`downAfterTimeouts`): it reads as down, for
    /// `problem`, until a command is answered in time.
    case markUnanswered(problem: String)
    /// A command was answered in time again: the link reads as up.
    case markAnswered
  }

  let settings: Settings
  private(set) var phase = Phase.idle
  /// Failures since the link was last stably up.
  private(set) var failures = 0
  /// Why the link last went down, for status pages; cleared when it comes up.
  private(set) var lastProblem: String?
  /// `commandTimedOut` events since a command was last answered in time, on this connection.
  private(set) var timeoutsInARow = 0
  /// Up, but `downAfterTimeouts` timeouts came in a row: reads as down.
  private(set) var unanswered = false
  private var random: SplitMix64

  init(settings: Settings, seed: UInt64) {
    self.settings = settings
    random = SplitMix64(seed: seed)
  }

  /// Handshaken and not lost: commands are sent.
  var isConnected: Bool {
    if case .up = phase { return true }
    return false
  }

  /// Connected and answering: what status pages and metrics call up.
  var isUp: Bool { isConnected && !unanswered }

  mutating func handle(_ event: Event) -> [Action] {
    switch event {
    case .start:
      guard phase == .idle else { return [] }
      phase = .connecting
      return [.connect]
    case .transportReady:
      guard phase == .connecting else { return [] }
      phase = .handshaking
      return [.sendHandshake]
    case .handshakeDone(let now):
      guard phase == .handshaking else { return [] }
      phase = .up(since: now)
      lastProblem = nil
      return [.markUp]
    case .lost(let problem, let now):
      return lose(problem, now: now)
    case .commandTimedOut(let now, let silentSince):
      guard case .up = phase else { return [] }
      timeoutsInARow += 1
      let silence = now >= silentSince ? now - silentSince : 0
      if silence >= Self.nanoseconds(settings.unresponsiveAfter) {
        return lose("no reply for \(silence / 1_000_000) ms", now: now)
      }
      guard !unanswered, timeoutsInARow >= settings.downAfterTimeouts else { return [] }
      unanswered = true
      let times = timeoutsInARow == 1 ? "once" : "\(timeoutsInARow) times in a row"
      let problem =
        "commands timed out \(times) (no reply within \(Self.nanoseconds(settings.commandTimeout) / 1_000_000) ms)"
      lastProblem = problem
      return [.markUnanswered(problem: problem)]
    case .commandAnswered:
      guard case .up = phase else { return [] }
      timeoutsInARow = 0
      guard unanswered else { return [] }
      unanswered = false
      lastProblem = nil
      return [.markAnswered]
    case .backoffElapsed:
      guard phase == .backingOff else { return [] }
      phase = .connecting
      return [.connect]
    case .stop:
      switch phase {
      case .stopped: return []
      case .idle, .backingOff:
        phase = .stopped
        return [.failPending(.stopped)]
      case .connecting, .handshaking, .up:
        phase = .stopped
        return [.closeTransport, .failPending(.stopped)]
      }
    }
  }

  private mutating func lose(_ problem: String, now: UInt64) -> [Action] {
    switch phase {
    case .idle, .backingOff, .stopped:
      return []
    case .up(let since):
      let upFor = now >= since ? now - since : 0
      failures = upFor >= Self.nanoseconds(settings.stableAfter) ? 1 : failures + 1
    case .connecting, .handshaking:
      failures += 1
    }
    phase = .backingOff
    lastProblem = problem
    // A new connection starts with a clean record.
    timeoutsInARow = 0
    unanswered = false
    return [.closeTransport, .failPending(.disconnected(problem)), .scheduleReconnect(after: backoff())]
  }

  /// The wait after `failures` failures in a row: the capped exponential, less a random part
  /// of up to half of it.
  private mutating func backoff() -> Duration {
    let initial = Self.nanoseconds(settings.initialBackoff)
    let cap = Self.nanoseconds(settings.maxBackoff)
    let doublings = min(max(failures - 1, 0), 40)
    let (scaled, overflow) = initial.multipliedReportingOverflow(by: 1 << UInt64(doublings))
    let full = overflow ? cap : min(scaled, cap)
    let half = full / 2
    let jitter = half == 0 ? 0 : random.next() % (half + 1)
    return .nanoseconds(Int64(full - jitter))
  }

  static func nanoseconds(_ duration: Duration) -> UInt64 {
    let (seconds, attoseconds) = duration.components
    guard seconds >= 0, attoseconds >= 0 else { return 0 }
    return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
  }
}

/// A small, fast, seedable generator for backoff jitter: seeded per connection, so tests can
/// pin it and replicas differ.
struct SplitMix64: RandomNumberGenerator {
  private var state: UInt64

  init(seed: UInt64) {
    state = seed
  }

  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var value = state
    value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
    value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
    return value ^ (value >> 31)
  }
}
