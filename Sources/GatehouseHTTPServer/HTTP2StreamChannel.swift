import GatehouseHTTP
import GatehouseNet

/// One HTTP/2 stream: one request and its answer, for a responder that speaks to it as to
/// an HTTP/1.1 connection. The answer arrives as HTTP/1.1 bytes (the gateway writes every
/// answer that way, `AnswerWriter`) and is read back by an `HTTPResponseParser` into a
/// HEADERS frame (connection-specific fields dropped, names lowercased) and DATA frames
/// (chunked framing undone), as Apache's mod_http2 does with HTTP/1 output: one writer of
/// answers for both protocols, so they cannot drift apart.
///
/// The request body is handed over as it comes; while the responder has reading paused it
/// is held here (at most the stream's window, which is not reopened meanwhile).
public final class HTTP2StreamChannel: ExchangeChannel {
  /// The stream it serves now: a channel whose exchange finished may serve a later stream
  /// of its connection (`reuse(for:)`).
  public private(set) var stream: Int32
  /// unowned(unsafe): a channel outlives its connection only closed (`isClosed`), and then
  /// touches nothing of it.
  unowned(unsafe) let connection: HTTP2ServerConnection
  unowned(unsafe) let loop: EventLoop
  /// The exchange's responder; the stream holds it for as long as it lives.
  var responder: (any ServerResponder)!
  private var parser: HTTPResponseParser
  /// A head read from the answer and made in the codec (`HTTP2Codec.beginHead`), not yet
  /// sent: sent with END_STREAM when the answer ends in the same write, else on its own at
  /// the end of the write (no other stream's head is made meanwhile).
  private var headPending = false
  private var headSent = false
  private var answerStarted = false
  /// The parser reached the answer's end (END_STREAM is queued).
  private var answerSent = false
  private var answerEnded = false
  private var requestComplete = false
  /// The answer ended first: the rest of the body is read and dropped.
  private var discardingBody = false
  /// The request was refused (`serverRefusedRequest`): no exchange to finish.
  private var refused = false
  private var finished = false
  public private(set) var isClosed = false
  private var pausedReasons: ReadPauseReasons = []
  /// Body bytes that came while reading was paused, and whether the end came after them.
  private var heldBody: [UInt8] = []
  private var endHeld = false
  /// Body bytes received so far, against `limits.max_body_bytes`.
  private var bodyBytes: Int64 = 0
  public private(set) var responderDeadline: UInt64 = 0
  /// While the client is behind: when its queue must have shrunk, and by how much it stood.
  private var stallDue: UInt64 = 0
  private var queuedAtStallCheck = 0
  private(set) var isBehind = false

  /// Answer bytes queued for the stream past which its client counts as not reading, and
  /// below which it has caught up (the socket's watermarks).
  static let highWatermark = 64 * 1024
  /// What the gateway's own answer may hold when read back: an upstream head as large as
  /// the upstream answer's parser takes (64 KiB, 100 fields) with the gateway's lines
  /// added, so an answer an HTTP/1.1 client gets is never cut on a stream for its size
  /// (nghttp2 still refuses a header block past 64 KiB: the stream is then reset).
  static let answerLimits = HTTPLimits(maxHeaderBytes: 72 * 1024, maxHeaderCount: 128, maxLineLength: 64 * 1024)
  static let lowWatermark = 16 * 1024

  init(stream: Int32, connection: HTTP2ServerConnection) {
    self.stream = stream
    self.connection = connection
    loop = connection.loop
    parser = HTTPResponseParser(limits: Self.answerLimits)
  }

  var deadline: UInt64 {
    if responderDeadline == 0 || stallDue == 0 { return responderDeadline | stallDue }
    return min(responderDeadline, stallDue)
  }

  var queuedBytes: Int { isClosed ? 0 : connection.codec.queuedBytes(stream) }

  // MARK: The request

  func receivedHead(_ head: Result<HTTPRequestHead, HTTP2RequestProblem>, endOfStream: Bool) {
    requestComplete = endOfStream
    switch head {
    case .success(let head):
      parser.requestWasHEAD = head.method == .head
      responder.serverReceivedHead(head)
    case .failure(let problem):
      switch problem {
      case .hostDisagrees: refuse(.invalidHost)
      case .invalid(let error): refuse(error)
      }
    }
  }

  /// The request breaks a rule of the codec: the responder answers with the error's status,
  /// or, when its answer has begun, the stream is cut.
  private func refuse(_ error: HTTPParseError) {
    if answerStarted || headSent {
      abort()
      return
    }
    refused = true
    responder.serverRefusedRequest(error)
    // The refusal is written as HTTP/1.1 writes its last answer (perhaps read until the
    // connection closes): on a stream, it ends here.
    endAnswer()
  }

  func receivedBody(_ bytes: UnsafeRawBufferPointer) {
    guard !isClosed else { return }
    if discardingBody || finished {
      connection.codec.consumed(stream, bytes.count)
      connection.scheduleFlush()
      return
    }
    if !pausedReasons.isEmpty {
      heldBody.append(contentsOf: bytes)
      return
    }
    bodyBytes += Int64(bytes.count)
    if let limit = connection.maxBodyBytes, bodyBytes > limit {
      // What the HTTP/1.1 parser says of a chunked body past the limit: a 413.
      connection.codec.consumed(stream, bytes.count)
      refuse(.bodyTooLarge)
      return
    }
    responder.serverReceivedBody(bytes)
    connection.codec.consumed(stream, bytes.count)
    connection.scheduleFlush()
  }

  func receivedEnd() {
    guard !isClosed, !requestComplete else { return }
    if !pausedReasons.isEmpty && !discardingBody {
      endHeld = true
      return
    }
    requestComplete = true
    if !discardingBody && !answerEnded { responder.serverReceivedEnd() }
    finishIfDone()
  }

  // MARK: ExchangeChannel

  public var inputFollowsHead: Bool { false }

  public var isAboveHighWatermark: Bool { queuedBytes > Self.highWatermark }

  public var sharesConnection: Bool { true }

  public func beginAnswer(_ kind: AnswerKind) -> Bool {
    answerStarted = true
    // HTTP/2 says nothing of the connection in an answer.
    return false
  }

  @discardableResult
  public func write(_ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBytes { write($0) }
  }

  @discardableResult
  public func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard !isClosed, !answerSent else { return false }
    let codec = connection.codec!
    var offset = 0
    if !headSent && !headPending {
      // The usual head, whole in this write, goes straight into HEADERS; any other is read
      // by the parser below with every check.
      let read = parser.readWrittenHead(
        bytes, begin: { codec.beginHead(status: $0, capacity: min(bytes.count, 1024)) },
        field: { name, value in
          if !Self.isConnectionField(name) { codec.addHeadField(name: name, value: value) }
        })
      if let read {
        offset = read.consumed
        headPending = true
      }
    }
    do throws(HTTPParseError) {
      while offset < bytes.count || headPending {
        let input = UnsafeRawBufferPointer(rebasing: bytes[offset...])
        let (event, consumed) = try parser.parse(input)
        offset += consumed
        guard let event else { break }
        switch event {
        case .head(let head):
          // `100 Continue` is never asked for on HTTP/2; other 1xx heads are not passed on.
          if head.status >= 200 {
            codec.beginHead(status: head.status, capacity: head.headers.serializedFieldsLength)
            head.headers.withEachField { name, value in
              if !Self.isConnectionField(name) { codec.addHeadField(name: name, value: value) }
            }
            headPending = true
          }
        case .body(let range):
          sendPendingHead(endOfStream: false)
          codec.sendBody(stream, UnsafeRawBufferPointer(rebasing: input[range]))
        case .end:
          answerSent = true
          if headPending {
            sendPendingHead(endOfStream: true)
          } else {
            codec.endBody(stream)
          }
        }
        if answerSent { break }
      }
    } catch {
      // The gateway's own answer did not read back: the stream is cut, never garbled, and
      // nothing of it is sent later (a head made in the codec's buffers is dropped).
      headPending = false
      answerSent = true
      abort()
      return false
    }
    sendPendingHead(endOfStream: false)
    connection.scheduleFlush()
    if !isBehind && isAboveHighWatermark {
      isBehind = true
      queuedAtStallCheck = queuedBytes
      stallDue = connection.loop.iterationTime &+ connection.limits.idleTimeoutNanoseconds
      connection.noteBehind(self)
      responder.serverClientFellBehind()
    }
    return true
  }

  /// Whether a field of HTTP/1.1 says something of the connection, not of the answer (RFC
  /// 9113 §8.2.2): never sent on a stream. The length picks the one name to compare.
  static func isConnectionField(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    switch name.count {
    case 7: return ASCIIBytes.equalsLowercase(name, "upgrade")
    case 10: return ASCIIBytes.equalsLowercase(name, "connection") || ASCIIBytes.equalsLowercase(name, "keep-alive")
    case 16: return ASCIIBytes.equalsLowercase(name, "proxy-connection")
    case 17: return ASCIIBytes.equalsLowercase(name, "transfer-encoding")
    default: return false
    }
  }

  private func sendPendingHead(endOfStream: Bool) {
    guard headPending else { return }
    headPending = false
    headSent = true
    connection.codec.submitHead(stream, endOfStream: endOfStream)
  }

  @discardableResult
  public func writeContinue() -> Bool { false }

  public func endAnswer() {
    guard !isClosed, !answerEnded else { return }
    answerEnded = true
    if !answerSent {
      if headSent || headPending {
        // A body whose framing never ended (read until the upstream closed): it ends here.
        sendPendingHead(endOfStream: false)
        connection.codec.endBody(stream)
        answerSent = true
        connection.scheduleFlush()
      } else {
        abort()
        return
      }
    }
    if !requestComplete {
      // The rest of the body is read and dropped; its windows still reopen.
      discardingBody = true
      requestComplete = true
      if !heldBody.isEmpty {
        connection.codec.consumed(stream, heldBody.count)
        heldBody = []
      }
    }
    finishIfDone()
  }

  public func closeAfterCurrentAnswer() {
    // A stream carries one exchange: nothing follows it anyway.
  }

  public func setReadingPaused(_ paused: Bool, reason: ReadPauseReasons) {
    if paused {
      pausedReasons.formUnion(reason)
      return
    }
    guard !pausedReasons.isEmpty else { return }
    pausedReasons.subtract(reason)
    guard pausedReasons.isEmpty, !isClosed else { return }
    if !heldBody.isEmpty {
      let held = heldBody
      heldBody = []
      held.withUnsafeBytes { receivedBody($0) }
    }
    if endHeld && pausedReasons.isEmpty {
      endHeld = false
      receivedEnd()
    }
  }

  public func setResponderDeadline(at due: UInt64) {
    responderDeadline = due
  }

  public func setResponderDeadline(after nanoseconds: UInt64) {
    responderDeadline = loop.iterationTime &+ nanoseconds
  }

  public func abort() {
    guard !isClosed else { return }
    headPending = false
    connection.codec.reset(stream)
    connection.scheduleFlush()
  }

  // MARK: The connection's turns

  private func finishIfDone() {
    guard answerEnded, requestComplete, !finished, !refused, !isClosed else { return }
    finished = true
    responderDeadline = 0
    pausedReasons = []
    responder.serverExchangeFinished()
  }

  func checkDeadline(now: UInt64) {
    if responderDeadline != 0, now >= responderDeadline, !isClosed {
      responderDeadline = 0
      responder.serverResponderDeadlinePassed()
    }
    if stallDue != 0, now >= stallDue, !isClosed {
      let queued = queuedBytes
      if queued < queuedAtStallCheck {
        // Slow, not stopped: another period.
        queuedAtStallCheck = queued
        stallDue = now &+ connection.limits.idleTimeoutNanoseconds
      } else {
        stallDue = 0
        connection.streamStalled(self)
      }
    }
  }

  func caughtUp() {
    guard isBehind else { return }
    isBehind = false
    stallDue = 0
    if !isClosed { responder.serverClientCaughtUp() }
  }

  func streamClosed(errorCode: UInt32) {
    guard !isClosed else { return }
    let answerCut = answerStarted && !finished && !refused
    isClosed = true
    heldBody = []
    // A stream closed before its exchange finished was reset (by the client, or here).
    responder.serverClosed(
      reason: finished || refused || errorCode == 0 ? .closedByOwner : .hangup, answerStarted: answerCut)
    responder = nil
  }

  /// Whether the stream ended with its exchange finished in full: its responder may serve
  /// another stream.
  var canServeAgain: Bool { finished && !refused && !isClosed && responder != nil }

  /// The stream closed after its exchange finished, and the channel is kept for another:
  /// the responder lets go of what it held for this one.
  func streamEnded() {
    isClosed = true
    heldBody = []
    responder.serverStreamEnded()
  }

  /// Serves `stream` from its start, with the same responder: every fact of the stream
  /// before is cleared.
  func reuse(for stream: Int32) {
    self.stream = stream
    parser = HTTPResponseParser(limits: Self.answerLimits)
    headPending = false
    headSent = false
    answerStarted = false
    answerSent = false
    answerEnded = false
    requestComplete = false
    discardingBody = false
    refused = false
    finished = false
    isClosed = false
    pausedReasons = []
    heldBody = []
    endHeld = false
    bodyBytes = 0
    responderDeadline = 0
    stallDue = 0
    queuedAtStallCheck = 0
    isBehind = false
  }

  /// A kept channel's connection closed: its responder hears it, as it would have when
  /// the stream it last served closed, and the two let go of each other.
  func releaseResponder() {
    guard let kept = responder else { return }
    responder = nil
    kept.serverClosed(reason: .closedByOwner, answerStarted: false)
  }

  func connectionClosed(reason: ConnectionCloseReason) {
    guard !isClosed else { return }
    let answerCut = answerStarted && !finished && !refused
    isClosed = true
    heldBody = []
    responder.serverClosed(reason: finished || refused ? .closedByOwner : reason, answerStarted: answerCut)
    responder = nil
  }
}
