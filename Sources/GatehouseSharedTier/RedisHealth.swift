import Synchronization

/// What one `RedisConnection` reports about itself, readable from any thread (the admin
/// status page, `/metrics`) while the connection's loop writes it. Relaxed atomics: each value
/// is written by one loop, and readers want a recent figure, not a consistent cut.
public final class RedisHealth: Sendable {
  /// The counters a reader sees; `lastRoundTripMicroseconds` is nil before the first reply.
  public struct Snapshot: Sendable, Equatable {
    public var isUp: Bool
    public var lastRoundTripMicroseconds: Int?
    /// Commands written to the server (the handshake's included).
    public var commandsSent: Int
    /// Replies received, error replies included.
    public var replies: Int
    /// Commands completed with `.failure(.timedOut)`.
    public var timeouts: Int
    /// Commands failed at once because the link was down, or stopped.
    public var failedDown: Int
    /// Commands failed because the connection was lost or reset while they waited.
    public var failedDisconnected: Int
    /// Commands refused because `maxInFlight` were waiting.
    public var failedBusy: Int
    /// Connects tried, and how many of them ended with the link up.
    public var connectAttempts: Int
    public var handshakesCompleted: Int
    /// Why the link last went down; nil while up or before the first problem.
    public var lastProblem: String?

    /// The last round trip in milliseconds, for `/admin/status`.
    public var lastRoundTripMilliseconds: Double? {
      lastRoundTripMicroseconds.map { Double($0) / 1000 }
    }
  }

  private let up = Atomic<Bool>(false)
  private let roundTrip = Atomic<Int>(-1)
  private let sent = Atomic<Int>(0)
  private let replied = Atomic<Int>(0)
  private let timedOut = Atomic<Int>(0)
  private let down = Atomic<Int>(0)
  private let disconnected = Atomic<Int>(0)
  private let busy = Atomic<Int>(0)
  private let attempts = Atomic<Int>(0)
  private let handshakes = Atomic<Int>(0)
  private let problem = Mutex<String?>(nil)

  public init() {}

  public var isUp: Bool { up.load(ordering: .relaxed) }

  public var snapshot: Snapshot {
    let trip = roundTrip.load(ordering: .relaxed)
    return Snapshot(
      isUp: up.load(ordering: .relaxed), lastRoundTripMicroseconds: trip < 0 ? nil : trip,
      commandsSent: sent.load(ordering: .relaxed), replies: replied.load(ordering: .relaxed),
      timeouts: timedOut.load(ordering: .relaxed), failedDown: down.load(ordering: .relaxed),
      failedDisconnected: disconnected.load(ordering: .relaxed), failedBusy: busy.load(ordering: .relaxed),
      connectAttempts: attempts.load(ordering: .relaxed), handshakesCompleted: handshakes.load(ordering: .relaxed),
      lastProblem: problem.withLock { $0 })
  }

  // MARK: Written by the connection

  func setUp(_ value: Bool) { up.store(value, ordering: .relaxed) }
  func recordRoundTrip(nanoseconds: UInt64) {
    roundTrip.store(Int(min(nanoseconds / 1000, UInt64(Int.max))), ordering: .relaxed)
  }
  func countSent() { sent.add(1, ordering: .relaxed) }
  func countReply() { replied.add(1, ordering: .relaxed) }
  func countConnectAttempt() { attempts.add(1, ordering: .relaxed) }
  func countHandshake() { handshakes.add(1, ordering: .relaxed) }
  func setProblem(_ text: String?) { problem.withLock { $0 = text } }

  func countFailure(_ failure: RedisFailure) {
    switch failure {
    case .timedOut: timedOut.add(1, ordering: .relaxed)
    case .down, .stopped: down.add(1, ordering: .relaxed)
    case .disconnected: disconnected.add(1, ordering: .relaxed)
    case .tooManyInFlight, .emptyCommand: busy.add(1, ordering: .relaxed)
    }
  }
}
