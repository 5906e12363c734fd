import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseNet

/// A session's output and flow control (pausing reads on either side, stalled readers) and
/// its deadlines: the exchange's phase's, set as the connection's responder deadline.
extension ClientSession {
  // MARK: Output and flow control

  func flushOutput() {
    answers.flush(to: server, exchange: exchange)
  }

  /// Starts the client's answer; returns whether it must say `Connection: close` (the
  /// client asked, the gateway is draining, the client still waits for 100 Continue, or a
  /// streamed answer starts before the request body was all read).
  func beginAnswer(_ kind: AnswerKind) -> Bool {
    if context.draining { server.closeAfterCurrentAnswer() }
    return server.beginAnswer(kind)
  }

  func upstreamWantsClientPaused(_ paused: Bool) {
    server.setReadingPaused(paused, reason: .backpressure)
  }

  func serverClientFellBehind() {
    // Only the exchange whose answer is being read may pause a pipelined connection.
    guard let leased = exchange?.upstream, leased.owner === self, let upstream = leased.connection else { return }
    upstream.pauseReading()
    // The upstream's answer timeout does not run while the client is behind: the
    // connection's write deadline bounds that wait.
    server.setResponderDeadline(at: 0)
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

  func serverClientCaughtUp() {
    if heldBufferCharge > 0 { releaseHeldBufferCharge() }
    let wasStalled = stalledSince != 0
    if wasStalled {
      stalledSince = 0
      exchange?.upstream?.pool.noteNoLongerStalled(self)
    }
    guard let exchange, let leased = exchange.upstream, leased.owner === self, let upstream = leased.connection
    else { return }
    upstream.resumeReading()
    if wasStalled, exchange.machine.deadline == .upstreamAnswer,
      let timeout = exchange.pool?.plan.answerTimeoutNanoseconds
    {
      setDeadline(.exchange, nanoseconds: timeout)
    }
  }

  // MARK: Deadlines

  func setDeadline(_ kind: DeadlineKind, after duration: Duration) {
    setDeadline(kind, nanoseconds: EventLoop.nanoseconds(of: duration))
  }

  /// The per-request deadlines take nanoseconds worked out at config load: `Duration`
  /// arithmetic goes through 128-bit multiplication, measurable at this call rate.
  func setDeadline(_ kind: DeadlineKind, nanoseconds: UInt64) {
    deadlineKind = kind
    server.setResponderDeadline(after: nanoseconds)
  }

  /// Sets the deadline to `due` (loop time), when it is earlier than the one running.
  func shortenDeadline(to due: UInt64) {
    if server.responderDeadline == 0 || due < server.responderDeadline { server.setResponderDeadline(at: due) }
  }

  /// No deadline of the session's runs while the request waits on something the gateway
  /// bounds itself (a token refresh, the store).
  func clearDeadline() {
    deadlineKind = .exchange
    server.setResponderDeadline(at: 0)
  }

  /// Shutdown: idle connections close now; busy ones after the current answer.
  func drain() {
    // A tunnel runs on until the drain timeout (`abort`); it has no answer to end after.
    if exchange?.tunnel != nil { return }
    server.closeAfterCurrentAnswer()
  }

  func abort() {
    if let tunnel = exchange?.tunnel {
      tunnel.abort()
      return
    }
    // Whatever this answer had staged must not go out with the next session's answer.
    answers.discardStaged()
    if let exchange, let upstream = exchange.upstream {
      exchange.upstream = nil
      exchange.pool?.discard(upstream, by: self)
    }
    server.abort()
  }

  // MARK: The buffered-answer budget

  /// The exchange's budget charge passes to the session: held until its connection has
  /// taken the answer (its queue drained), or released now when it already has. On an
  /// HTTP/2 stream it is held until the stream ends (`serverStreamEnded`), or its queue
  /// drains after it fell behind: what one stream keeps below its watermark is small, but
  /// a connection has many streams and a client many connections.
  func settleBufferCharge(_ exchange: Exchange) {
    heldBufferCharge += exchange.bufferCharge
    exchange.bufferCharge = 0
    guard heldBufferCharge > 0 else { return }
    if closed || (!server.sharesConnection && !server.isAboveHighWatermark) { releaseHeldBufferCharge() }
  }

  func releaseHeldBufferCharge() {
    context.shared.releaseBufferedAnswer(heldBufferCharge)
    heldBufferCharge = 0
  }
}
