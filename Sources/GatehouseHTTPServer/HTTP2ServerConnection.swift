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

/// One HTTP/2 client connection (Docs/http2.md): the socket's bytes through the codec
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
