import GatehouseHTTP
import GatehouseNet

/// One HTTP/1.1 server connection: parsing, pipelining order, keep-alive, 100-continue,
/// read pausing and the connection's deadlines, for a responder that only answers.
///
/// Set-up: the responder makes the layer (`init(responder:loop:parserLimits:limits:)`), the
/// accepted socket becomes a `BufferedConnection` whose delegate is the layer, and
/// `start(_:)` arms the first request's header timeout.
///
/// Per request: `serverReceivedHead`, `serverReceivedBody` (slices, no copy) and
/// `serverReceivedEnd` reach the responder as bytes are parsed. It answers, now or later,
/// with `beginAnswer(_:)` (which says whether the answer must carry `Connection: close`),
/// `write(_:)` as often as needed, and `endAnswer()`. When both the request and its answer
/// are complete the exchange is over (`serverExchangeFinished`) and the next request is
/// parsed. A client that sends `Expect: 100-continue` gets `100 Continue` only when the
/// responder asks for it (`writeContinue()`); an answer made while it still waits for it
/// ends the connection (RFC 9110 §10.1.1).
///
/// Input behind a whole request whose answer is not complete is held (one read at most:
/// reading pauses) and parsed after; so is input while the client is behind on reading
/// (its queue above the high watermark), so answers never pile up. Nothing more is parsed
/// once the connection is to close after the current answer (`Connection: close`, HTTP/1.0,
/// the client's EOF, a parse error, `closeAfterCurrentAnswer()`).
///
/// Deadlines: one `deadline` (the earlier of the connection's own and the responder's
/// `setResponderDeadline`) for the owner's periodic sweep to compare and pass to
/// `checkDeadline(now:)`, so no timer is armed per request.
///
/// Closing: `closeAfterCurrentAnswer()`, `abort()`, or by the rules above; the responder
/// hears `serverClosed(reason:answerStarted:)` once, last.
public final class HTTP1ServerConnection: ConnectionDelegate {
  /// unowned(unsafe): the responder owns this layer and outlives its calls (it is released
  /// from `serverClosed`, the last one); plain `unowned` would cost an atomic
  /// reference-count operation per call, several per request. A class-bound existential is
  /// two words, not a box.
  public unowned(unsafe) let responder: any ServerResponder
  /// unowned(unsafe): a loop outlives everything on it.
  public unowned(unsafe) let loop: EventLoop
  public private(set) var connection: BufferedConnection?
  public var limits: HTTP1ServerLimits
  private var parser: HTTPRequestParser
  /// Input not parsed yet: it came behind a whole request still being answered, or while
  /// the client was behind on reading. Reading is paused while there is any.
  private var held: [UInt8] = []
  public private(set) var pausedReasons: ReadPauseReasons = []
  /// Bytes of input held for later (at most about one read).
  public var heldByteCount: Int { held.count }

  // MARK: The current exchange

  /// A request head was delivered and the exchange (request and answer) is not over.
  public private(set) var exchangeOpen = false
  /// The current request's end was parsed (or it will not be read any further).
  public private(set) var requestComplete = false
  /// Some of the current request's body arrived.
  public private(set) var requestBodyStarted = false
  /// Bytes followed the current request's head in the read that brought it: a client that
  /// did not wait for 100 Continue.
  public private(set) var inputFollowsHead = false
  /// The current request asked for 100 Continue and has a body.
  public private(set) var continueExpected = false
  /// `100 Continue` was written for the current request.
  public private(set) var continueSent = false
  /// `beginAnswer` was called for the current request (or for a refusal or timeout).
  public private(set) var answerStarted = false
  /// `endAnswer` was called for the current request.
  public private(set) var answerComplete = false
  private var answerKind = AnswerKind.whole
  /// The answer went out before the body was all read: the connection lingers on close.
  private var bodyLeftUnread = false

  // MARK: The connection

  /// The connection ends after the current answer (or now, between answers).
  public private(set) var closeAfterAnswer = false
  /// The connection reported its close.
  public private(set) var isClosed = false
  /// A close was asked of the connection (asking twice would start a second linger).
  private var closing = false
  /// Inside `consume`: an exchange finished there must not re-enter the parse loop (its
  /// loop goes on by itself; re-entering would nest one frame per pipelined request).
  private var consuming = false
  /// Held input waits for the client to drain its queue.
  private var resumeOnDrain = false

  // MARK: Deadlines

  /// Monotonic nanoseconds of the earlier of the connection's and the responder's
  /// deadlines; 0 for none. The owner's sweep calls `checkDeadline(now:)` once it passes.
  public private(set) var deadline: UInt64 = 0
  public private(set) var deadlineKind = HTTP1DeadlineKind.header
  private var connectionDue: UInt64 = 0
  /// The responder's own deadline (the exchange's); 0 for none.
  public private(set) var responderDeadline: UInt64 = 0
  private var writeWatch = WriteProgress()

  public init(
    responder: any ServerResponder, loop: EventLoop, parserLimits: HTTPLimits, limits: HTTP1ServerLimits
  ) {
    self.responder = responder
    self.loop = loop
    self.limits = limits
    parser = HTTPRequestParser(limits: parserLimits)
  }

  /// `connection` (whose delegate is this layer) is registered: the first request's header
  /// timeout starts, counted from now.
  public func start(_ connection: BufferedConnection) {
    self.connection = connection
    setConnectionDeadline(.header, nanoseconds: limits.headerTimeoutNanoseconds)
  }

  // MARK: Input

  public func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    if !held.isEmpty {
      // Reading was paused as input was held; a read already under way still lands here.
      hold(bytes)
      return
    }
    consume(bytes)
  }

  public func connectionDidReadEOF(_ connection: BufferedConnection) {
    // Reading pauses while input is held, so nothing is held here.
    do {
      // A body delimited by the close ends here.
      if case .end? = try parser.finish() { requestEnded() }
    } catch {
      // A request cut short cannot be answered; a partial head or a body that was being
      // dropped after its answer loses nothing by a graceful close.
      if exchangeOpen && !answerComplete {
        abort()
        return
      }
      // A body being read and dropped after its answer will not come now: the exchange
      // is over (nothing is owed), and the connection closes at once rather than wait for
      // the idle timeout.
      if exchangeOpen && answerComplete && !requestComplete {
        closeAfterAnswer = true
        requestComplete = true
        finishExchange()
        return
      }
    }
    // A client may half-close after sending its request; the answer still goes out.
    closeAfterAnswer = true
    if !exchangeOpen { closeGracefully() }
  }

  /// Parses as many events as `bytes` hold, delivering them to the responder. Input behind a
  /// whole request still being answered, or arriving while the client is behind on
  /// reading, is held and reading pauses.
  private func consume(_ bytes: UnsafeRawBufferPointer) {
    consuming = true
    defer { consuming = false }
    var offset = 0
    while !isClosed {
      if exchangeOpen {
        if requestComplete {
          if offset < bytes.count { hold(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
          return
        }
      } else {
        // A request behind an answer that ends the connection would never be answered.
        if closeAfterAnswer { return }
        if offset < bytes.count, connection?.isAboveHighWatermark == true {
          hold(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
          waitForClientToCatchUp()
          return
        }
      }
      let start = offset
      let step: (step: HTTPParseStep, consumed: Int)
      do {
        step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        refuse(error)
        return
      }
      offset += step.consumed
      switch step.step {
      case .needMore:
        // The first byte of a later request starts its header timeout; the first request
        // keeps the one from accept (trickling its first byte late buys nothing).
        if !exchangeOpen && !parser.isIdle && deadlineKind != .header {
          setConnectionDeadline(.header, nanoseconds: limits.headerTimeoutNanoseconds)
        }
        return
      case .head:
        inputFollowsHead = offset < bytes.count
        openExchange(parser.takeHead())
      case .body(let range):
        // After a complete answer the rest of the body is read and dropped.
        guard exchangeOpen, !answerComplete else { continue }
        requestBodyStarted = true
        responder.serverReceivedBody(
          UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)]))
      case .end:
        requestEnded()
      }
    }
  }

  /// Keeps input for later and stops reading more until it is parsed. A connection that
  /// closes after the current answer will parse nothing more: its input is dropped.
  private func hold(_ bytes: UnsafeRawBufferPointer) {
    guard !bytes.isEmpty else { return }
    if !closeAfterAnswer { held.append(contentsOf: bytes) }
    setReadingPaused(true, reason: .pipelining)
  }

  private func openExchange(_ head: HTTPRequestHead) {
    exchangeOpen = true
    requestComplete = false
    requestBodyStarted = false
    continueSent = false
    answerStarted = false
    answerComplete = false
    answerKind = .whole
    bodyLeftUnread = false
    let hasBody: Bool
    switch head.bodyFraming {
    case .none, .contentLength(0): hasBody = false
    case .contentLength, .chunked, .untilClose: hasBody = true
    }
    continueExpected = head.expectsContinue && hasBody
    if !head.keepAlive { closeAfterAnswer = true }
    if !limits.headerTimeoutCoversBody {
      clearConnectionDeadline()
    } else if deadlineKind != .header {
      // A head that came whole in one read never armed its header timeout: it starts now,
      // so the idle timeout does not go on running under the request.
      setConnectionDeadline(.header, nanoseconds: limits.headerTimeoutNanoseconds)
    }
    responder.serverReceivedHead(head)
  }

  private func requestEnded() {
    guard exchangeOpen else { return }
    requestComplete = true
    if deadlineKind == .header { clearConnectionDeadline() }
    if answerComplete {
      finishExchange()
    } else {
      responder.serverReceivedEnd()
    }
  }

  /// Input the parser refused: the responder's error answer, then close.
  private func refuse(_ error: HTTPParseError) {
    closeAfterAnswer = true
    held = []
    if exchangeOpen {
      // Part of an answer is out: cutting the connection is the only honest signal left.
      if answerStarted && !answerComplete {
        abort()
        return
      }
      requestComplete = true
      // Already answered while the body was coming: a second answer would be one too many.
      if answerComplete {
        finishExchange()
        return
      }
    }
    responder.serverRefusedRequest(error)
    closeGracefully()
  }

  /// The trailers of the request that just ended (from `serverReceivedEnd`), if any.
  public func takeTrailers() -> HTTPHeaders? { parser.takeTrailers() }

  // MARK: Output

  /// Whether the current request asked for 100 Continue, did not get it, and sent none of its
  /// body: an answer now means the body is not coming, and the connection cannot carry
  /// another request after it.
  public var bodyWithheld: Bool {
    exchangeOpen && continueExpected && !continueSent && !requestComplete && !requestBodyStarted
      && !inputFollowsHead
  }

  /// Writes `100 Continue` if the current request asked for it and has not had it (and no
  /// answer started). Returns whether it was written.
  @discardableResult
  public func writeContinue() -> Bool {
    guard exchangeOpen, continueExpected, !continueSent, !requestComplete, !answerStarted, let connection else {
      return false
    }
    continueSent = true
    // A static string: no allocation per request.
    let line: StaticString = "HTTP/1.1 100 Continue\r\n\r\n"
    _ = line.withUTF8Buffer { connection.write(UnsafeRawBufferPointer($0)) }
    return true
  }

  /// Starts the answer to the current request (or, from `serverRefusedRequest` and
  /// `serverRequestTimedOut`, the connection's last answer). Returns whether it must say
  /// `Connection: close`: the client asked, the connection is closing, the client still
  /// waits for 100 Continue, or a streamed answer starts before the body was all read.
  @discardableResult
  public func beginAnswer(_ kind: AnswerKind) -> Bool {
    answerStarted = true
    answerKind = kind
    if exchangeOpen && !requestComplete && (kind == .streamed || bodyWithheld) { closeAfterAnswer = true }
    return closeAfterAnswer
  }

  /// Answer bytes for the client. Returns false when the connection no longer takes writes.
  @discardableResult
  public func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
    connection?.write(bytes) ?? false
  }

  @discardableResult
  public func write(_ bytes: [UInt8]) -> Bool {
    connection?.write(bytes) ?? false
  }

  /// The answer is complete. The exchange is over once the request is too; a body still
  /// coming after a whole answer is read and dropped (within the idle timeout).
  public func endAnswer() {
    guard !isClosed else { return }
    answerComplete = true
    guard exchangeOpen else {
      // A refusal or timeout answer: the connection's last.
      closeGracefully()
      return
    }
    if !requestComplete {
      if closeAfterAnswer || answerKind == .streamed || bodyWithheld {
        // The rest of the body will not be read: the connection lingers while the client
        // finishes sending, so the unread input does not reset the answer away.
        closeAfterAnswer = true
        bodyLeftUnread = true
        requestComplete = true
      } else {
        // Reading may have paused for the responder's sake; the body now only needs
        // dropping. A client that declared one and sends nothing must not hold the
        // connection: it gets the idle timeout.
        setReadingPaused(false, reason: Self.responderReasons)
        armWriteDeadline(.idle)
        return
      }
    }
    finishExchange()
  }

  private func finishExchange() {
    exchangeOpen = false
    // The responder's pauses and deadline belong to the exchange, whoever was to end them.
    setReadingPaused(false, reason: Self.responderReasons)
    setResponderDeadline(at: 0)
    responder.serverExchangeFinished()
    guard !isClosed else { return }
    if closeAfterAnswer {
      closeGracefully(draining: bodyLeftUnread)
      return
    }
    armWriteDeadline(.idle)
    guard !consuming else { return }
    resumeHeldInput()
  }

  /// Parses what arrived while the last answer was made, unless the client is still behind
  /// on reading (then the drain brings this back).
  private func resumeHeldInput() {
    if connection?.isAboveHighWatermark == true {
      waitForClientToCatchUp()
      return
    }
    resumeOnDrain = false
    if !held.isEmpty {
      let input = held
      held = []
      input.withUnsafeBytes { consume($0) }
    }
    if held.isEmpty && !(exchangeOpen && requestComplete) && !isClosed {
      setReadingPaused(false, reason: .pipelining)
    }
  }

  /// A client that does not read its answers gets no new ones until it has caught up.
  private func waitForClientToCatchUp() {
    resumeOnDrain = true
    setReadingPaused(true, reason: .pipelining)
    armWriteDeadline(.pipelineWait)
  }

  // MARK: Flow control

  /// Pauses reading for `reason` (or resumes once no reason is left). Reading pauses with
  /// the first reason and resumes with the last.
  public func setReadingPaused(_ paused: Bool, reason: ReadPauseReasons) {
    if paused {
      if pausedReasons.isEmpty { connection?.pauseReading() }
      pausedReasons.formUnion(reason)
    } else if !pausedReasons.isEmpty {
      pausedReasons.subtract(reason)
      if pausedReasons.isEmpty { connection?.resumeReading() }
    }
  }

  /// Every pause reason but the layer's own.
  /// Computed, not a stored `static let`: a global's lazy initialization check would run
  /// on every exchange.
  private static var responderReasons: ReadPauseReasons {
    ReadPauseReasons(rawValue: ~ReadPauseReasons.pipelining.rawValue)
  }

  /// The client's queue is above its high watermark.
  public var isAboveHighWatermark: Bool { connection?.isAboveHighWatermark ?? false }

  public func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    if exchangeOpen && answerStarted && !answerComplete { armWriteDeadline(.clientWrite) }
    responder.serverClientFellBehind()
  }

  public func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    if deadlineKind == .clientWrite { clearConnectionDeadline() }
    responder.serverClientCaughtUp()
    // Still open while an answer is being written: a drain reported from inside its write
    // must not parse the next request ahead of this one's bookkeeping.
    guard resumeOnDrain, !exchangeOpen, !consuming, !closeAfterAnswer, !isClosed else { return }
    armWriteDeadline(.idle)
    resumeHeldInput()
  }

  // MARK: Deadlines

  /// Sets the responder's deadline (monotonic nanoseconds; 0 clears it). It runs beside the
  /// connection's own; cleared when the exchange finishes.
  public func setResponderDeadline(at due: UInt64) {
    responderDeadline = due
    updateDeadline()
  }

  /// Sets the responder's deadline `nanoseconds` after the loop's current iteration.
  public func setResponderDeadline(after nanoseconds: UInt64) {
    setResponderDeadline(at: loop.iterationTime &+ nanoseconds)
  }

  private func setConnectionDeadline(_ kind: HTTP1DeadlineKind, nanoseconds: UInt64) {
    deadlineKind = kind
    connectionDue = loop.iterationTime &+ nanoseconds
    updateDeadline()
  }

  private func clearConnectionDeadline() {
    deadlineKind = .none
    connectionDue = 0
    updateDeadline()
  }

  private func updateDeadline() {
    if connectionDue == 0 || responderDeadline == 0 {
      deadline = connectionDue | responderDeadline
    } else {
      deadline = min(connectionDue, responderDeadline)
    }
  }

  /// The idle timeout for a connection that may have output queued: when it passes, a client
  /// that took none of its queued bytes meanwhile is reset, one that took some gets another
  /// period (nginx's `send_timeout`: a bound on silence, not on a slow download).
  private func armWriteDeadline(_ kind: HTTP1DeadlineKind) {
    setConnectionDeadline(kind, nanoseconds: limits.idleTimeoutNanoseconds)
    writeWatch.arm(connection)
  }

  /// The owner's sweep: acts on the deadlines that passed by `now`.
  public func checkDeadline(now: UInt64) {
    guard deadline != 0, now >= deadline, !isClosed else { return }
    if responderDeadline != 0, now >= responderDeadline {
      setResponderDeadline(at: 0)
      responder.serverResponderDeadlinePassed()
    }
    guard !isClosed, connectionDue != 0, now >= connectionDue else { return }
    let kind = deadlineKind
    clearConnectionDeadline()
    connectionDeadlinePassed(kind)
  }

  private func connectionDeadlinePassed(_ kind: HTTP1DeadlineKind) {
    guard let connection else { return }
    switch kind {
    case .none:
      return
    case .header:
      if exchangeOpen && answerStarted {
        abort()
        return
      }
      // Nothing came: nothing is owed.
      guard exchangeOpen || !parser.isIdle else {
        closeGracefully()
        return
      }
      closeAfterAnswer = true
      held = []
      responder.serverRequestTimedOut()
      closeGracefully()
    case .idle, .clientWrite, .pipelineWait:
      if writeWatch.clientTookOutput(connection) {
        armWriteDeadline(kind)
      } else if kind == .clientWrite || connection.queuedByteCount > 0 {
        abort()
      } else if exchangeOpen {
        // Answered, and the request's body still has not all come: the connection ends,
        // letting the client finish sending.
        closeGracefully(draining: true)
      } else {
        closeGracefully()
      }
    }
  }

  // MARK: Switching protocols

  /// Gives the connection up after the current request switched protocols (a WebSocket
  /// handshake the upstream accepted): returns it with the input held behind the request,
  /// or nil when the request is not whole, an answer has begun, or the connection is gone.
  /// The layer is then finished: the responder hears nothing more from it (not even
  /// `serverClosed`), and the caller becomes the connection's delegate.
  public func handOver() -> (connection: BufferedConnection, input: [UInt8])? {
    guard let connection, exchangeOpen, requestComplete, !answerStarted, !isClosed, !closing else { return nil }
    let input = held
    held = []
    self.connection = nil
    isClosed = true
    exchangeOpen = false
    closeAfterAnswer = true
    clearConnectionDeadline()
    setResponderDeadline(at: 0)
    deadline = 0
    pausedReasons = []
    return (connection, input)
  }

  // MARK: Closing

  /// Ends the connection after the current answer, or now when none is being made
  /// (shutdown). Nothing more is parsed.
  public func closeAfterCurrentAnswer() {
    closeAfterAnswer = true
    if !exchangeOpen { closeGracefully() }
  }

  /// Resets the connection at once, dropping queued output.
  public func abort() {
    closeAfterAnswer = true
    closing = true
    held = []
    connection?.abort()
  }

  /// Closes once the queued output is out (`draining`: then reads and drops input until the
  /// client's EOF, so unread input does not reset the answer away). A client that stops
  /// taking its output is reset when the write deadline passes (a graceful close alone
  /// would wait for it forever).
  private func closeGracefully(draining: Bool = false) {
    closeAfterAnswer = true
    held = []
    guard !closing, let connection, !connection.isClosed else { return }
    closing = true
    if draining { connection.closeDrainingInput() } else { connection.close() }
    if !connection.isClosed { armWriteDeadline(.idle) }
  }

  public func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    isClosed = true
    self.connection = nil
    held = []
    deadline = 0
    responder.serverClosed(reason: reason, answerStarted: exchangeOpen && answerStarted)
  }
}
