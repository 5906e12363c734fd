import GatehouseHTTP
import GatehouseNet

/// A session's output and flow control (pausing reads on either side, stalled readers) and
/// its deadlines: which one runs, and what happens when it passes.
extension ClientSession {
  // MARK: Output, flow control, deadlines

  func flushOutput() {
    guard !context.output.isEmpty else { return }
    if let exchange, exchange.machine.answerBegan { exchange.responseFlushed = true }
    context.output.withUnsafeBytes { _ = connection?.write($0) }
    context.output.removeAll(keepingCapacity: true)
  }

  func upstreamWantsClientPaused(_ paused: Bool) {
    setClientReadingPaused(paused, reason: .upstreamBackpressure)
  }

  func setClientReadingPaused(_ paused: Bool, reason: PauseReason) {
    if paused {
      if pausedReasons.isEmpty { connection?.pauseReading() }
      pausedReasons.insert(reason)
    } else if !pausedReasons.isEmpty, pausedReasons.remove(reason) != nil, pausedReasons.isEmpty {
      connection?.resumeReading()
    }
  }

  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    // Only the exchange whose answer is being read may pause a pipelined connection.
    guard let leased = exchange?.upstream, leased.owner === self, let upstream = leased.connection else { return }
    upstream.pauseReading()
    setWriteDeadline(.clientWrite)
    stalledSince = loop.iterationTime
    leased.pool.noteStalled(self)
  }

  /// Whether this session still holds a connection of `pool` for a client that stopped reading.
  func holdsStalledConnection(of pool: UpstreamPool) -> Bool {
    guard stalledSince != 0, !closed, let leased = exchange?.upstream, leased.owner === self else { return false }
    return leased.pool === pool
  }

  /// Cut for holding an upstream connection others wait for while its client reads nothing.
  func cutForStall(of pool: UpstreamPool) {
    guard holdsStalledConnection(of: pool) else { return }
    abort()
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    if heldBufferCharge > 0 { releaseHeldBufferCharge() }
    if stalledSince != 0 {
      stalledSince = 0
      exchange?.upstream?.pool.noteNoLongerStalled(self)
    }
    if resumeOnDrain && exchange == nil {
      resumeOnDrain = false
      resumeHeldInput()
      return
    }
    guard let exchange, let leased = exchange.upstream, leased.owner === self, let upstream = leased.connection
    else { return }
    upstream.resumeReading()
    if deadlineKind == .clientWrite, let timeout = exchange.pool?.plan.responseTimeoutNanoseconds {
      setDeadline(.exchange, nanoseconds: timeout)
    }
  }

  /// The idle timeout for a connection that may have output queued (`.idle`, `.clientWrite`):
  /// when it passes, a client that took none of its queued bytes meanwhile is cut, one that
  /// took some gets another period (nginx's `send_timeout`: a bound on silence, not on a
  /// slow download).
  func setWriteDeadline(_ kind: DeadlineKind) {
    setDeadline(kind, nanoseconds: context.snapshot.idleTimeoutNanoseconds)
    // Asked only with output queued: it costs a syscall, and most answers leave nothing
    // queued. Without a mark, a deadline that finds output queued gives one more period.
    if let connection, connection.queuedByteCount > 0 {
      writeMark = connection.peerAcknowledgedBytes ?? Self.acknowledgedUnknown
    } else {
      writeMark = Self.noWriteMark
    }
  }

  /// `writeMark` when nothing was queued as the deadline was armed.
  static let noWriteMark: Int64 = -1
  /// `writeMark` when the kernel could not say what the client acknowledged: the deadline
  /// then cuts a client with output still queued, as a plain timeout would.
  static let acknowledgedUnknown: Int64 = -2

  /// At an `.idle` or `.clientWrite` deadline with output queued: whether the client read
  /// some of its answer since the deadline was armed (the kernel saw it acknowledge bytes).
  private var clientTookQueuedOutput: Bool {
    guard let connection, connection.queuedByteCount > 0 else { return false }
    guard writeMark != Self.noWriteMark else { return true }
    guard writeMark != Self.acknowledgedUnknown, let acknowledged = connection.peerAcknowledgedBytes else {
      return false
    }
    return acknowledged > writeMark
  }

  func setDeadline(_ kind: DeadlineKind, after duration: Duration) {
    setDeadline(kind, nanoseconds: EventLoop.nanoseconds(of: duration))
  }

  /// The per-request deadlines take nanoseconds worked out at config load: `Duration`
  /// arithmetic goes through 128-bit multiplication, measurable at this call rate.
  func setDeadline(_ kind: DeadlineKind, nanoseconds: UInt64) {
    deadlineKind = kind
    deadline = loop.iterationTime &+ nanoseconds
  }

  /// No client deadline runs while the request waits on something the gateway bounds
  /// itself (a token refresh, the exchange a collapsed request shares).
  func clearDeadline() {
    deadline = 0
  }

  func deadlinePassed() {
    deadline = 0
    switch deadlineKind {
    case .header:
      guard sawAnyByte, exchange == nil else {
        abort()
        return
      }
      closeAfterResponse = true
      let requestID = context.requestIDs.next()
      var out: [UInt8] = []
      let body = GatewayResponse.writeFailure(.headerTimeout, requestID: requestID, closeConnection: true, into: &out)
      _ = connection?.write(out)
      logLocal(status: 408, reason: .requestTimeout, requestID: requestID, bytes: out.count, bodyBytes: body)
      connection?.close()
    case .idle:
      if clientTookQueuedOutput {
        setWriteDeadline(.idle)
      } else if connection.map({ $0.queuedByteCount > 0 }) == true {
        abort()
      } else if exchange != nil {
        // A local answer is out and the request's body still has not all come (see
        // `respondLocally`): the connection ends here, letting the client finish sending.
        closeAfterResponse = true
        connection?.closeDrainingInput()
      } else {
        connection?.close()
      }
    case .pipelineWait:
      guard let exchange, let upstream = exchange.upstream, let pool = exchange.pool else { return }
      if upstream.owner === self {
        // Its turn came in time: from here the response timeout applies, counted from when
        // the request went out (or, once the answer streams, from now, as for any answer).
        let timeout = pool.plan.responseTimeoutNanoseconds
        let due = exchange.machine.answerBegan ? loop.iterationTime &+ timeout : exchange.sentAt &+ timeout
        guard due > loop.iterationTime else {
          upstreamFailed(.timedOut)
          return
        }
        deadlineKind = .exchange
        deadline = due
        return
      }
      exchange.upstream = nil
      pool.discard(upstream, by: self)
      sendAgainAlone(exchange)
    case .exchange:
      exchangeDeadlinePassed()
    case .clientWrite:
      if clientTookQueuedOutput {
        setWriteDeadline(.clientWrite)
      } else {
        abort()
      }
    }
  }

  /// Shutdown: idle connections close now; busy ones after the current answer.
  func drain() {
    closeAfterResponse = true
    if exchange == nil { connection?.close() }
  }

  func abort() {
    closeAfterResponse = true
    // Whatever this answer had gathered in the loop's output buffer must not go out with
    // the next session's answer.
    context.output.removeAll(keepingCapacity: true)
    if let exchange, let upstream = exchange.upstream {
      self.exchange?.upstream = nil
      exchange.pool?.discard(upstream, by: self)
    }
    connection?.abort()
  }
}
