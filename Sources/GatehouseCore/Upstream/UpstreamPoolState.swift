/// The decisions of one loop's keep-alive pool for one upstream, as a pure state machine:
/// the owner asks what to do and performs the I/O (the shape of async-http-client's pool).
///
/// Idle connections are reused last-in first-out, so the warmest socket goes first and the
/// coldest ones age out when the upstream closes them.
///
/// `maxIdle` bounds the idle connections kept for long, not at every moment: one released
/// while `maxIdle` are already idle (the surplus) stays idle until it has been so for
/// `surplusIdleNanoseconds`, and the owner's sweep then closes it (`trimSurplus`). Why: under
/// a load whose concurrency swings above `maxIdle`, closing each surplus connection at once
/// only to open another for the next request a few milliseconds later costs a connect, a
/// close and the upstream's accept per swing, which on a fast upstream is most of a proxied
/// request's cost (HAProxy purges its idle connections gradually for the same reason). The
/// surplus were all open a moment before, so the open total never grows past what the
/// load already needed, and `max_connections` still bounds it.
public struct UpstreamPoolState<ConnectionID: Hashable & Sendable>: Sendable {
  public enum LeaseDecision: Equatable, Sendable {
    case reuse(ConnectionID)
    case connect
  }

  public enum ReleaseDecision: Equatable, Sendable {
    case keepIdle
    case close
  }

  /// How long a surplus connection may stay idle: far above the gaps of a busy load (its
  /// next request comes within milliseconds), short enough that a burst's connections are
  /// gone a second after it.
  public static var surplusIdleNanoseconds: UInt64 { 1_000_000_000 }

  public let maxIdle: Int
  /// Idle connections with the time each went idle, coldest first (reuse takes the last).
  private var idleEntries: [(id: ConnectionID, since: UInt64)] = []
  /// The idle connections, coldest first.
  public var idle: [ConnectionID] { idleEntries.map(\.id) }
  public private(set) var leased = 0
  public private(set) var connecting = 0

  public init(maxIdle: Int) {
    self.maxIdle = max(0, maxIdle)
  }

  /// Open connections: idle, leased and still connecting.
  public var openCount: Int { idleEntries.count + leased + connecting }

  /// A request needs a connection.
  public mutating func lease() -> LeaseDecision {
    if let entry = idleEntries.popLast() {
      leased += 1
      return .reuse(entry.id)
    }
    connecting += 1
    return .connect
  }

  /// A request needs the idle connection at `index` of `idle` (the warmest one to the
  /// endpoint it chose).
  public mutating func lease(at index: Int) -> LeaseDecision {
    let entry = index == idleEntries.count - 1 ? idleEntries.removeLast() : idleEntries.remove(at: index)
    leased += 1
    return .reuse(entry.id)
  }

  /// A request needs a new connection whatever is idle (the retry after a reused one failed).
  public mutating func leaseNew() -> LeaseDecision {
    connecting += 1
    return .connect
  }

  /// A connection asked for with `.connect` is established and now leased.
  public mutating func connectSucceeded() {
    precondition(connecting > 0, "connectSucceeded without a pending connect")
    connecting -= 1
    leased += 1
  }

  public mutating func connectFailed() {
    precondition(connecting > 0, "connectFailed without a pending connect")
    connecting -= 1
  }

  /// A leased connection finished its exchange at `now` (nanoseconds). `reusable` is false
  /// when the answer said close, was close-delimited, failed, or left unread bytes behind.
  /// A `maxIdle` of 0 keeps nothing; otherwise a connection beyond `maxIdle` is kept as
  /// surplus (see the type's comment).
  public mutating func release(_ id: ConnectionID, reusable: Bool, now: UInt64) -> ReleaseDecision {
    precondition(leased > 0, "release without a lease")
    leased -= 1
    guard reusable, maxIdle > 0 else { return .close }
    idleEntries.append((id, now))
    return .keepIdle
  }

  /// Whether more than `maxIdle` connections are idle.
  public var hasSurplus: Bool { idleEntries.count > maxIdle }

  /// Takes off the idle list the surplus connections idle for `surplusIdleNanoseconds` by
  /// `now`, coldest first, never leaving fewer than `maxIdle`; the owner closes them. They
  /// are the first ones of `idle`.
  public mutating func trimSurplus(now: UInt64) -> [ConnectionID] {
    let excess = idleEntries.count - maxIdle
    var count = 0
    while count < excess && now &- idleEntries[count].since >= Self.surplusIdleNanoseconds { count += 1 }
    guard count > 0 else { return [] }
    let trimmed = idleEntries[..<count].map(\.id)
    idleEntries.removeFirst(count)
    return trimmed
  }

  /// Takes the coldest idle connection off the list, for the owner to close so a new one
  /// fits under its cap of open connections.
  public mutating func takeColdest() -> ConnectionID? {
    guard !idleEntries.isEmpty else { return nil }
    return idleEntries.removeFirst().id
  }

  /// A leased connection failed or was closed while in use.
  public mutating func leasedConnectionClosed() {
    precondition(leased > 0, "close of a lease that does not exist")
    leased -= 1
  }

  /// The upstream closed (or sent garbage on) an idle connection.
  public mutating func idleConnectionClosed(_ id: ConnectionID) {
    if let index = idleEntries.firstIndex(where: { $0.id == id }) { idleEntries.remove(at: index) }
  }

  /// Empties the idle list (shutdown, reload of the upstream); the owner closes them.
  public mutating func drainIdle() -> [ConnectionID] {
    defer { idleEntries.removeAll() }
    return idle
  }
}

/// When a failed upstream exchange is tried again (once) on a fresh connection.
public enum UpstreamRetryPolicy {
  /// A keep-alive connection can be closed by the upstream just as a request goes out; the
  /// request never reached the application, so replaying it is safe when the method is
  /// idempotent and nothing of the answer arrived, and the body (if any) can be sent again.
  public static func shouldRetry(
    idempotent: Bool, connectionWasReused: Bool, answerBytesReceived: Bool, bodyReplayable: Bool,
    attempts: Int
  ) -> Bool {
    idempotent && connectionWasReused && !answerBytesReceived && bodyReplayable && attempts == 1
  }
}

/// Whether an upstream answer leaves its connection in doubt: it has no body by rule (it
/// answers a HEAD, or is a 204 or 304) while its head announces one. A backend that sends
/// that body all the same leaves bytes on the connection that the next exchange on it
/// would read as its own answer, and nothing on the wire tells the two apart. The next
/// answer on such a connection is still passed on, but never stored: one client may get a
/// wrong answer, not every client after it from the store.
public enum UpstreamAnswerDoubt {
  public static func leavesDoubt(requestWasHEAD: Bool, status: Int, announcedLength: Int64?, announcesChunked: Bool)
    -> Bool
  {
    guard requestWasHEAD || status == 204 || status == 304 else { return false }
    return announcesChunked || (announcedLength ?? 0) > 0
  }
}
