import CGatehouseNghttp2
import GatehouseHTTP
import GatehouseNet

/// What an `HTTP2ServerConnection` asks of its owner. Every method runs on the connection's loop.
public protocol HTTP2ServerOwner: AnyObject {
  /// The responder of a new stream's exchange: it answers through `channel`, as it would
  /// through an HTTP/1.1 connection.
  func responder(for channel: HTTP2StreamChannel) -> any ServerResponder
  /// The client abused the connection; a GOAWAY is queued and the connection ends.
  func http2Connection(_ connection: HTTP2ServerConnection, abused abuse: HTTP2Abuse)
  /// The connection is closed; every stream's responder has heard `serverClosed`.
  func http2ConnectionClosed(_ connection: HTTP2ServerConnection)
}

/// The timeouts an `HTTP2ServerConnection` runs under.
public struct HTTP2ServerLimits: Sendable, Equatable {
  /// The connection preface and first request must come within this.
  public var headerTimeoutNanoseconds: UInt64
  /// A connection with no open stream closes (GOAWAY) after this; a client that takes none
  /// of its queued answer bytes for this long is cut.
  public var idleTimeoutNanoseconds: UInt64

  public init(headerTimeoutNanoseconds: UInt64, idleTimeoutNanoseconds: UInt64) {
    self.headerTimeoutNanoseconds = headerTimeoutNanoseconds
    self.idleTimeoutNanoseconds = idleTimeoutNanoseconds
  }
}

/// One HTTP/2 client connection (SPEC §11): the socket's bytes through the codec
/// (`HTTP2Codec`, libnghttp2), each stream an `HTTP2StreamChannel` whose responder runs one
/// exchange exactly as on an HTTP/1.1 connection. Output is gathered: frames leave once per
/// loop turn, and stop while the socket's queue is above its high watermark (the streams'
/// answers then wait in their own queues, and each stream's responder is told when its
/// client falls behind).
///
/// Confined to one loop.
public final class HTTP2ServerConnection: ConnectionDelegate, HTTP2CodecDelegate {
  public unowned(unsafe) let owner: any HTTP2ServerOwner
  public unowned(unsafe) let loop: EventLoop
  public private(set) var connection: BufferedConnection?
  public var limits: HTTP2ServerLimits
  /// Made in `init` (it needs `self`); never nil after.
  public private(set) var codec: HTTP2Codec!
  private var channels: [Int32: HTTP2StreamChannel] = [:]
  /// Channels of streams whose exchange finished, kept with their responders for the
  /// connection's next streams: a stream then costs no new channel, session, driver or
  /// reader (four objects made and freed per request showed in profiles). A few only, so
  /// an idle connection holds little.
  private var spare: [HTTP2StreamChannel] = []
  static let spareLimit = 16
  /// Channels whose client fell behind, watched until they catch up.
  private var behind: [HTTP2StreamChannel] = []
  private var flushScheduled = false
  /// Frames gathered for one write.
  private var output: [UInt8] = []
  /// Frames are gathered up to this much per write.
  static let gatheredBytes = 64 * 1024
  /// The socket's queue is above its high watermark: no frames are pulled from the codec.
  private var socketFull = false
  private var draining = false
  private var closing = false
  public private(set) var isClosed = false
  /// The connection's own deadline: the preface's, the idle one, or the socket's write one.
  private var connectionDue: UInt64 = 0
  private var writeWatch = WriteProgress()
  /// `limits.max_body_bytes`: a body without `content-length` is counted as it comes.
  let maxBodyBytes: Int64?

  public init(
    owner: any HTTP2ServerOwner, loop: EventLoop, settings: HTTP2Settings, parserLimits: HTTPLimits,
    limits: HTTP2ServerLimits
  ) {
    self.owner = owner
    self.loop = loop
    self.limits = limits
    maxBodyBytes = parserLimits.maxBodyBytes
    codec = HTTP2Codec(
      settings: settings, parserLimits: parserLimits, delegate: self,
      now: { [unowned(unsafe) loop] in loop.iterationTime })
  }

  /// `connection` (whose delegate is this) is registered; `initial`: bytes already read
  /// from it (the connection preface, when it was looked at to choose the protocol).
  public func start(_ connection: BufferedConnection, initial: UnsafeRawBufferPointer? = nil) {
    self.connection = connection
    connectionDue = loop.iterationTime &+ limits.headerTimeoutNanoseconds
    if let initial, !initial.isEmpty {
      self.connection(connection, didRead: initial)
    } else {
      flush()
    }
  }

  /// The earliest deadline of the connection and its streams (0: none).
  public var deadline: UInt64 {
    var earliest = connectionDue
    for channel in channels.values {
      let due = channel.deadline
      if due != 0 && (earliest == 0 || due < earliest) { earliest = due }
    }
    return earliest
  }

  /// The owner's sweep: acts on the deadlines that passed by `now`.
  public func checkDeadline(now: UInt64) {
    guard !isClosed else { return }
    for channel in Array(channels.values) where channel.deadline != 0 && channel.deadline <= now {
      channel.checkDeadline(now: now)
    }
    if connectionDue != 0, now >= connectionDue { connectionDeadlinePassed() }
    scheduleFlush()
  }

  private func connectionDeadlinePassed() {
    guard let connection else { return }
    connectionDue = 0
    if socketFull {
      // The client takes none of what the socket holds for it.
      if writeWatch.clientTookOutput(connection) {
        armWriteDeadline()
      } else {
        abort()
      }
      return
    }
    guard channels.isEmpty else { return }
    // No stream for the idle timeout (or no preface within the header timeout).
    codec.goAway()
    closing = true
    flush()
  }

  private func armWriteDeadline() {
    connectionDue = loop.iterationTime &+ limits.idleTimeoutNanoseconds
    writeWatch.arm(connection)
  }

  /// No stream is open: the idle timeout runs.
  private func armIdleDeadline() {
    connectionDue = loop.iterationTime &+ limits.idleTimeoutNanoseconds
  }

  // MARK: Lifecycle

  /// Shutdown or reload: GOAWAY, no new streams; the connection closes once the open ones
  /// have finished.
  public func drain() {
    guard !draining, !isClosed else { return }
    draining = true
    codec.goAway()
    flush()
  }

  /// Resets the connection at once, dropping queued output.
  public func abort() {
    closing = true
    connection?.abort()
  }

  // MARK: The socket

  public func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    guard !closing else { return }
    if !codec.receive(bytes) { closing = true }
    // The client spoke HTTP/2: from now on a connection with no stream open waits for the
    // idle timeout (the header timeout covered only the preface).
    if channels.isEmpty && !socketFull { armIdleDeadline() }
    flush()
  }

  public func connectionDidReadEOF(_ connection: BufferedConnection) {
    // HTTP/2 clients do not half-close: the client is gone.
    closing = true
    connection.close()
  }

  public func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    socketFull = true
    armWriteDeadline()
  }

  public func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    socketFull = false
    connectionDue = channels.isEmpty ? loop.iterationTime &+ limits.idleTimeoutNanoseconds : 0
    flush()
  }

  public func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    isClosed = true
    self.connection = nil
    let open = channels.values.sorted { $0.stream < $1.stream }
    channels = [:]
    behind = []
    for channel in open { channel.connectionClosed(reason: reason) }
    releaseSpares()
    owner.http2ConnectionClosed(self)
  }

  deinit {
    // Closed connections have let their kept channels go (`didCloseWith`); one dropped
    // without closing only breaks the channels' hold on their sessions.
    for channel in spare { channel.responder = nil }
  }

  /// The kept channels' responders hear that the connection is closed, as they would have
  /// when their streams closed, and let go of their channels.
  private func releaseSpares() {
    let kept = spare
    spare = []
    for channel in kept { channel.releaseResponder() }
  }

  // MARK: Output

  /// Frames leave at the end of the loop's turn: answers of several streams made in one
  /// turn share a write.
  func scheduleFlush() {
    guard !flushScheduled, !isClosed else { return }
    flushScheduled = true
    loop.executeLater { [self] in
      flushScheduled = false
      flush()
    }
  }

  /// Writes what the codec has to send, as far as the socket takes it; closes the
  /// connection when it is done (a fatal error, an abuse, or a drain with no stream left).
  func flush() {
    guard let connection, !isClosed else { return }
    while !socketFull && codec.wantsWrite {
      // The frames nghttp2 has ready go out together: one write (one TLS record, one
      // system call) for the HEADERS and DATA of every stream answered this turn, rather
      // than one per frame.
      codec.drainOutput { bytes in
        output.append(contentsOf: bytes)
        return output.count < Self.gatheredBytes
      }
      guard !output.isEmpty else { break }
      let written = output.withUnsafeBytes { connection.write($0) }
      output.removeAll(keepingCapacity: true)
      if !written || connection.isAboveHighWatermark { break }
    }
    if !behind.isEmpty { noticeCaughtUp() }
    if closing || codec.failed || (draining && channels.isEmpty) || codec.isFinished {
      closing = true
      if !codec.wantsWrite || codec.failed { connection.close() }
    }
  }

  /// A channel whose client stopped reading: watched until its queue drains.
  func noteBehind(_ channel: HTTP2StreamChannel) {
    behind.append(channel)
  }

  private func noticeCaughtUp() {
    var index = 0
    while index < behind.count {
      let channel = behind[index]
      if channel.isClosed || channel.queuedBytes <= HTTP2StreamChannel.lowWatermark {
        behind.remove(at: index)
        channel.caughtUp()
      } else {
        index += 1
      }
    }
  }

  // MARK: The codec's events

  public func streamReceivedHead(
    _ stream: Int32, head: Result<HTTPRequestHead, HTTP2RequestProblem>, endOfStream: Bool
  ) {
    let channel: HTTP2StreamChannel
    if let kept = spare.popLast() {
      kept.reuse(for: stream)
      channel = kept
    } else {
      channel = HTTP2StreamChannel(stream: stream, connection: self)
      channel.responder = owner.responder(for: channel)
    }
    channels[stream] = channel
    if !socketFull { connectionDue = 0 }
    channel.receivedHead(head, endOfStream: endOfStream)
  }

  public func streamReceivedBody(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) {
    channels[stream]?.receivedBody(bytes)
  }

  public func streamReceivedEnd(_ stream: Int32) {
    channels[stream]?.receivedEnd()
  }

  public func streamClosed(_ stream: Int32, errorCode: UInt32) {
    guard let channel = channels.removeValue(forKey: stream) else { return }
    if channels.isEmpty && !socketFull { armIdleDeadline() }
    if errorCode == 0, channel.canServeAgain, spare.count < Self.spareLimit, !draining, !closing, !isClosed {
      if channel.isBehind { behind.removeAll { $0 === channel } }
      channel.streamEnded()
      spare.append(channel)
    } else {
      channel.streamClosed(errorCode: errorCode)
    }
  }

  public func connectionAbused(_ abuse: HTTP2Abuse) {
    closing = true
    owner.http2Connection(self, abused: abuse)
  }

  /// A stream's client kept its windows shut while an answer waited: the connection's own
  /// window shut too is a client that will never read (abuse); else only the stream is cut.
  func streamStalled(_ channel: HTTP2StreamChannel) {
    if codec.remoteWindow <= 0 {
      codec.abused(.windowNeverOpened, code: NGHTTP2_FLOW_CONTROL_ERROR.rawValue)
    } else {
      codec.reset(channel.stream, errorCode: UInt32(NGHTTP2_CANCEL.rawValue))
    }
    flush()
  }
}

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
