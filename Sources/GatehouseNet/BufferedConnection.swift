import Glibc

/// A TCP socket registered on one event loop, with a write queue, backpressure watermarks, pausable reads,
/// graceful and abortive close, (for upstreams) a non-blocking connect with a timeout, and optional TLS.
///
/// With TLS the delegate sees exactly what it sees without: plaintext in `didRead`, `didConnect` only once
/// the handshake is done, EOF when the peer sends close_notify (or closes TCP). The write queue and the
/// watermarks count plaintext bytes not yet taken by `SSL_write`; OpenSSL holds at most one encrypted
/// record (about 16 KB) beyond that when the socket is full. `close()` sends close_notify after the queue.
///
/// Loop-confined and deliberately not Sendable: create it, call it and drop it on its loop's thread.
public final class BufferedConnection: IOEventHandler {
  /// The lifecycle. Valid transitions: connecting → active (connect done, plain), connecting → handshaking
  /// (connect done, TLS), handshaking → active (handshake done), connecting / handshaking → closed (failed,
  /// timed out, aborted), active → closed (close, abort, error, hang-up, loop stop). Nothing leaves closed.
  /// Graceful close and half-close are flags on `active`, because the queue must still flush.
  enum State: Equatable {
    case connecting
    /// TLS handshake in progress: writes are queued, nothing is delivered yet.
    case handshaking
    case active
    case closed
  }

  /// Reads per readiness event before yielding to other connections on the loop.
  static let maxReadsPerEvent = 4

  /// The loop this connection lives on.
  public let loop: EventLoop
  /// The owner; released after it has been told the connection closed.
  public var delegate: (any ConnectionDelegate)?
  public let watermarks: WriteWatermarks

  let socket: TCPSocket
  var state: State
  private var registration: IORegistration?
  private var registeredInterest: IOInterest = []
  var queue = WriteQueue()
  var readingPaused = false
  var inputEnded = false
  var closeRequested = false
  private var outputShutdownRequested = false
  var outputShutDown = false
  private var aboveHighWatermark = false
  /// Deregistered after a hang-up that arrived while reading was paused (see `handleIOEvents`).
  private(set) var parkedAfterHangup = false
  /// Readiness events handled; tests use it to see that a connection is not woken in a loop.
  private(set) var eventsHandled = 0
  /// A hang-up came while reading was paused and is held until the owner resumes (level-triggered: out
  /// of epoll; edge-triggered: reported once and remembered).
  var holdsHangupUntilResume: Bool {
    parkedAfterHangup || (edgeTriggered && edge.hangupSeen && readingPaused && state == .active)
  }
  /// The connect deadline, then (TLS) the handshake deadline.
  var connectTimer: TimerHandle?

  /// The TLS session and its state, nil for plain TCP. A `let`, so the plain path costs one nil check per
  /// read or write call and nothing per byte.
  let tls: ConnectionTLS?
  /// Graceful close in its last phase: (close_notify and) FIN sent, input read and dropped until the peer's
  /// EOF (see `startLingering`).
  var lingering = false
  /// `closeDrainingInput` was asked for: a plain connection lingers on close too (TLS
  /// connections always do).
  private var lingerOnClose = false

  /// Plain TCP runs edge-triggered: registered once for both directions and never modified. That spares
  /// the kernel re-checking every socket it reported at the next epoll_wait (level-triggered items go back
  /// on the ready list until a poll finds them idle) and the epoll_ctl calls that toggled write interest.
  /// TLS stays level-triggered: OpenSSL may hold input that epoll cannot see, and its handshake asks for
  /// reads and writes in turn.
  let edgeTriggered: Bool
  /// Edge-triggered (plain) only: what the events said about input, and its reads.
  var edge = EdgeTriggeredIO()

  /// How many write system calls were made; tests use it to see that a full socket is not retried.
  var writeAttemptCount = 0

  /// Wraps an accepted socket and starts reading. With `tls`, runs a server handshake first (bounded by the
  /// context's `handshakeTimeout`); a failed one closes with `.tlsFailed`. Throws only if the socket cannot
  /// be registered, or (as ENOMEM from `SSL_new`) if OpenSSL cannot allocate a session. Loop thread only.
  public init(
    socket: TCPSocket, loop: EventLoop, delegate: any ConnectionDelegate,
    watermarks: WriteWatermarks = WriteWatermarks(), tls context: TLSContext? = nil
  ) throws(SystemError) {
    loop.assertInEventLoop()
    if let context {
      do {
        tls = ConnectionTLS(stream: try TLSStream(server: context, fileDescriptor: socket.fileDescriptor))
      } catch {
        // SSL_new and BIO_new fail only when out of memory; the context was checked when it was built.
        throw SystemError(errno: ENOMEM, syscall: "SSL_new")
      }
    } else {
      tls = nil
    }
    self.socket = socket
    self.loop = loop
    self.delegate = delegate
    self.watermarks = watermarks
    state = tls == nil ? .active : .handshaking
    edgeTriggered = tls == nil
    let interest: IOInterest = edgeTriggered ? [.read, .write, .edgeTriggered] : .read
    registration = try loop.register(fileDescriptor: socket.fileDescriptor, interest: interest, handler: self)
    registeredInterest = interest
    if let tls, let context {
      tls.startHandshakeTimer(context.handshakeTimeout, on: self)
    }
  }

  private init(
    connecting socket: TCPSocket, loop: EventLoop, delegate: any ConnectionDelegate,
    watermarks: WriteWatermarks, tls: ConnectionTLS?
  ) {
    self.socket = socket
    self.loop = loop
    self.delegate = delegate
    self.watermarks = watermarks
    self.tls = tls
    edgeTriggered = tls == nil
    state = .connecting
  }

  /// Opens an outbound connection. Throws only if no socket can be made (EMFILE…); the outcome of the connect
  /// (`connectionDidConnect`, or close with `.failed(ECONNREFUSED)` / `.connectTimedOut`) goes to the delegate.
  /// Writes made before the connect finishes are queued and sent once it does. Loop thread only.
  ///
  /// With `tls`, a client handshake follows the TCP connect and `connectionDidConnect` comes only after it;
  /// `timeout` covers TCP, `tls.handshakeTimeout` the handshake. Handshake and verification failures close
  /// with `.tlsFailed`.
  public static func connect(
    to address: SocketAddress, on loop: EventLoop, timeout: Duration, delegate: any ConnectionDelegate,
    watermarks: WriteWatermarks = WriteWatermarks(), tls options: TLSClientOptions? = nil
  ) throws(SystemError) -> BufferedConnection {
    loop.assertInEventLoop()
    let socket = TCPSocket(fileDescriptor: try Syscall.socket(family: address.family), peerAddress: address)
    var tls: ConnectionTLS?
    var setupError: TLSError?
    if let options {
      do {
        tls = ConnectionTLS(stream: try TLSStream(client: options, fileDescriptor: socket.fileDescriptor))
        tls?.clientHandshakeTimeout = options.handshakeTimeout
      } catch {
        setupError = error
      }
    }
    let connection = BufferedConnection(
      connecting: socket, loop: loop, delegate: delegate, watermarks: watermarks, tls: tls)
    if let setupError {
      // A server name OpenSSL refuses: reported from the loop, like a refused connect.
      connection.finishClose(.tlsFailed(setupError), abortive: true)
      return connection
    }
    do {
      // An immediate success still waits for writability, so both paths finish in `completeConnect`.
      _ = try Syscall.connect(socket.fileDescriptor, address)
    } catch {
      // Refused at once (ECONNREFUSED, ENETUNREACH…): reported like a late failure, from the loop.
      connection.finishClose(.failed(error), abortive: true)
      return connection
    }
    // Edge-triggered connections wait for the connect with the interest they keep for good.
    let interest: IOInterest = connection.edgeTriggered ? [.read, .write, .edgeTriggered] : .write
    connection.registration = try loop.register(
      fileDescriptor: socket.fileDescriptor, interest: interest, handler: connection)
    connection.registeredInterest = interest
    // A strong capture: the timer is cancelled when the connect completes or the connection
    // closes. A weak one would give every outbound connection a side table, which makes
    // each of its (many) retains and releases take the runtime's slow path.
    connection.connectTimer = loop.scheduleTimer(after: timeout) { [connection] in
      guard connection.state == .connecting else { return }
      connection.connectTimer = nil
      connection.finishClose(.connectTimedOut, abortive: true)
    }
    return connection
  }

  // MARK: State for owners

  /// The peer's address (the client for accepted connections, the target for outbound ones).
  public var peerAddress: SocketAddress? { socket.peerAddress }
  /// Bytes queued and not yet taken by the kernel.
  public var queuedByteCount: Int { queue.byteCount }
  /// How many bytes the peer has acknowledged (TCP), nil if the kernel cannot say: compared
  /// between two moments, it tells a peer that reads slowly from one that stopped reading
  /// (bytes the socket takes into its own buffer say nothing about the peer).
  public var peerAcknowledgedBytes: Int64? { socket.bytesAcknowledgedByPeer }
  /// Whether the peer sent something (bytes or its end) that has not been delivered yet,
  /// whether or not epoll has reported it: for a kept-alive connection about to carry a
  /// new request, where anything already there was sent while no request was outstanding.
  /// Plain TCP asks the kernel (a one-byte MSG_PEEK, one system call); TLS answers only
  /// from what was seen, since TLS records that are no data (a session ticket) may sit
  /// there harmlessly.
  public var hasUndeliveredInput: Bool {
    guard state == .active else { return false }
    if inputEnded || edge.hangupSeen { return true }
    return tls == nil && socket.hasInput
  }
  /// True between the high-watermark and drain callbacks.
  public var isAboveHighWatermark: Bool { aboveHighWatermark }
  public var isReadingPaused: Bool { readingPaused }
  /// True once the connection is closed (the close callback may still be on its way).
  public var isClosed: Bool { state == .closed }
  /// True while an outbound connect, or any TLS handshake, is in progress.
  public var isConnecting: Bool { state == .connecting || state == .handshaking }
  /// True for TLS connections.
  public var isTLS: Bool { tls != nil }
  /// The negotiated TLS parameters, once the handshake is done; nil for plain connections and before.
  public var tlsInfo: TLSConnectionInfo? {
    guard let tls, tls.stream.handshakeDone, state != .closed else { return nil }
    return tls.stream.info
  }

  // MARK: Writing

  /// Sends `bytes`, queueing what the kernel does not take now. The array's storage is shared, not copied.
  /// Returns false (and drops the bytes) once the connection is closing or closed, including when this very
  /// write failed; the reason then follows in `connection(_:didCloseWith:)`.
  @discardableResult
  public func write(_ bytes: [UInt8]) -> Bool {
    write(bytes[...])
  }

  /// Sends a slice, queueing the rest without copying it.
  @discardableResult
  public func write(_ bytes: ArraySlice<UInt8>) -> Bool {
    guard acceptsWrites else { return false }
    let wasEmpty = queue.isEmpty
    queue.append(bytes)
    afterEnqueue(wasEmpty: wasEmpty)
    return state != .closed
  }

  /// Sends several chunks (say an answer's head and its body) with one sendmsg where possible.
  @discardableResult
  public func write(chunks: [ArraySlice<UInt8>]) -> Bool {
    guard acceptsWrites else { return false }
    let wasEmpty = queue.isEmpty
    for chunk in chunks { queue.append(chunk) }
    afterEnqueue(wasEmpty: wasEmpty)
    return state != .closed
  }

  /// Sends borrowed bytes (for example straight from another connection's read buffer). What the kernel
  /// does not take now is copied once into the queue.
  @discardableResult
  public func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard acceptsWrites else { return false }
    guard !bytes.isEmpty else { return true }
    var taken = 0
    if let tls, queue.isEmpty, state == .active {
      switch tls.writeBorrowed(bytes, self) {
      case .some(let count): taken = count
      case .none: return false
      }
      if taken == bytes.count { return true }
    } else if queue.isEmpty, state == .active {
      writeAttemptCount += 1
      do {
        switch try socket.write(bytes) {
        case .processed(let count): taken = count
        case .wouldBlock: taken = 0
        }
      } catch {
        finishClose(.failed(error), abortive: true)
        return false
      }
      if taken == bytes.count { return true }
    }
    let wasEmpty = queue.isEmpty
    queue.append(Array(UnsafeRawBufferPointer(rebasing: bytes[taken...]))[...])
    afterEnqueue(wasEmpty: wasEmpty, alreadyTried: wasEmpty && state == .active)
    return state != .closed
  }

  /// Sends any byte sequence; contiguous ones are written without an intermediate copy when possible.
  @discardableResult
  public func write(contentsOf bytes: some Sequence<UInt8>) -> Bool {
    if let done = bytes.withContiguousStorageIfAvailable({ write(UnsafeRawBufferPointer($0)) }) {
      return done
    }
    return write(Array(bytes))
  }

  private var acceptsWrites: Bool {
    switch state {
    case .connecting, .handshaking, .active: !closeRequested && !outputShutdownRequested
    case .closed: false
    }
  }

  private func afterEnqueue(wasEmpty: Bool, alreadyTried: Bool = false) {
    // With bytes already queued, the socket was full a moment ago: wait for EPOLLOUT instead of trying.
    if wasEmpty, !alreadyTried, state == .active {
      flush()
      guard state != .closed else { return }
    } else {
      updateInterest()
    }
    if !aboveHighWatermark, queue.byteCount > watermarks.high {
      aboveHighWatermark = true
      delegate?.connectionWriteQueueDidRiseAboveHighWatermark(self)
    }
  }

  /// Writes queued bytes until the queue is empty or the kernel is full, then fixes the interest set and
  /// tells the owner about drain and finishes a requested close or half-close.
  func flush() {
    if let tls {
      tls.flush(self)
    } else {
      EdgeTriggeredIO.flush(self)
    }
    afterFlush()
  }

  /// After a flush: fix the interest set, tell the owner about drain, finish a requested close or half-close.
  private func afterFlush() {
    guard state == .active else { return }
    updateInterest()
    guard state == .active else { return }
    if aboveHighWatermark, queue.byteCount <= watermarks.low {
      aboveHighWatermark = false
      delegate?.connectionWriteQueueDidDrainBelowLowWatermark(self)
      guard state == .active else { return }
    }
    if queue.isEmpty {
      if closeRequested {
        finishGracefulClose()
      } else {
        finishOutputIfRequested()
      }
    }
  }

  /// The queue is empty and the owner asked to close: for TLS send close_notify first (waiting for
  /// writability if the socket is full) and linger until the peer's EOF, then close with a FIN.
  func finishGracefulClose() {
    if let tls {
      guard tls.sendCloseNotify(self) else { return }
      if !inputEnded {
        startLingering()
        return
      }
    } else if lingerOnClose && !inputEnded {
      startLingering()
      return
    }
    finishClose(.closedByOwner, abortive: false)
  }

  func finishOutputIfRequested() {
    guard outputShutdownRequested, !outputShutDown, queue.isEmpty, state == .active else { return }
    if let tls, !tls.sendCloseNotify(self) { return }
    outputShutDown = true
    do {
      try socket.shutdownOutput()
    } catch {
      finishClose(.failed(error), abortive: true)
    }
  }

  // MARK: Reading

  /// Stops reading (drops EPOLLIN): the kernel buffer fills and TCP flow control slows the peer.
  public func pauseReading() {
    guard !readingPaused else { return }
    readingPaused = true
    updateInterest()
  }

  /// Reads again; buffered input is delivered on the next loop turn, not from inside this call.
  public func resumeReading() {
    guard readingPaused else { return }
    readingPaused = false
    if parkedAfterHangup {
      parkedAfterHangup = false
      guard state == .active else { return }
      do {
        registration = try loop.register(
          fileDescriptor: socket.fileDescriptor, interest: desiredInterest, handler: self)
        registeredInterest = desiredInterest
      } catch {
        finishClose(.failed(error), abortive: true)
      }
      tls?.scheduleBufferedReadIfNeeded(self)
      return
    }
    updateInterest()
    tls?.scheduleBufferedReadIfNeeded(self)
    if edgeTriggered && edge.inputMayBeWaiting { EdgeTriggeredIO.scheduleReadPass(self) }
  }

  // MARK: Closing

  /// Closes gracefully: no more reads or writes are accepted, the queue is flushed, then the socket closes
  /// with a FIN. Idempotent. Pair it with a timeout if the peer might never read.
  public func close() {
    switch state {
    case .closed:
      return
    case .connecting:
      closeRequested = true
      if queue.isEmpty { finishClose(.closedByOwner, abortive: true) }
    case .handshaking:
      // No session yet, so no close_notify: a plain FIN (queued writes wait for the handshake).
      closeRequested = true
      if queue.isEmpty { finishClose(.closedByOwner, abortive: false) }
    case .active:
      closeRequested = true
      if queue.isEmpty {
        finishGracefulClose()
      } else {
        updateInterest()
      }
    }
  }

  /// Like `close()`, for a connection whose peer may still be sending (a request body the
  /// answer came before): after the queue is flushed the socket sends FIN, then reads and
  /// drops input until the peer's EOF or `lingerTimeout`, and only then closes, so the
  /// unread input does not make the kernel answer with an RST that destroys the answer.
  public func closeDrainingInput() {
    lingerOnClose = true
    close()
  }

  /// Closes at once with RST (SO_LINGER 0), dropping queued bytes: for errors and timeouts.
  public func abort() {
    finishClose(.closedByOwner, abortive: true)
  }

  /// Half-close: after the queue is flushed, send FIN but keep reading.
  public func closeOutputAfterFlush() {
    guard state != .closed, !outputShutdownRequested else { return }
    outputShutdownRequested = true
    if state == .active, queue.isEmpty, tls?.closeNotifyPending != true { finishOutputIfRequested() }
  }

  func finishClose(_ reason: ConnectionCloseReason, abortive: Bool) {
    guard state != .closed else { return }
    state = .closed
    if let connectTimer { loop.cancelTimer(connectTimer) }
    connectTimer = nil
    if let registration { loop.deregister(registration) }
    registration = nil
    parkedAfterHangup = false
    tls?.stream.detachSocket()
    if abortive { socket.abort() } else { socket.close() }
    queue.removeAll()
    // Delivered from the loop, never from inside the owner's own call, so owners are not re-entered while
    // they are in the middle of something. The closure keeps self alive until then.
    loop.executeLater { [self] in
      let owner = delegate
      delegate = nil
      owner?.connection(self, didCloseWith: reason)
    }
  }

  // MARK: Events

  private var desiredInterest: IOInterest {
    switch state {
    case .connecting:
      return .write
    case .handshaking:
      return tls?.wantsWrite == true ? .write : .read
    case .active:
      if let tls { return tls.desiredInterest(self) }
      if lingering { return .read }
      var interest: IOInterest = []
      if !readingPaused, !inputEnded, !closeRequested { interest.insert(.read) }
      if !queue.isEmpty { interest.insert(.write) }
      return interest
    case .closed:
      return []
    }
  }

  func updateInterest() {
    guard !edgeTriggered, state != .closed, let registration else { return }
    let wanted = desiredInterest
    guard wanted != registeredInterest else { return }
    do {
      try loop.modify(registration, interest: wanted)
      registeredInterest = wanted
    } catch {
      finishClose(.failed(error), abortive: true)
    }
  }

  public func handleIOEvents(_ events: IOEvents) {
    eventsHandled &+= 1
    if events.contains(.loopStopping) {
      finishClose(.loopStopped, abortive: true)
      return
    }
    switch state {
    case .closed:
      return
    case .connecting:
      completeConnect()
      // Edge-triggered: input or a hang-up that came with the connect is reported only now.
      if edgeTriggered, state == .active, !events.isDisjoint(with: [.readable, .hangup, .error]) {
        EdgeTriggeredIO.handleActiveEvents(events, self)
      }
    case .handshaking:
      if let tls { tls.continueHandshake(self) }
    case .active:
      if let tls {
        tls.handleActiveEvents(events, self)
      } else {
        EdgeTriggeredIO.handleActiveEvents(events, self)
      }
    }
  }

  private func completeConnect() {
    do {
      try socket.finishConnect()
    } catch {
      finishClose(.failed(error), abortive: true)
      return
    }
    if let connectTimer { loop.cancelTimer(connectTimer) }
    connectTimer = nil
    if let tls {
      state = .handshaking
      tls.startHandshakeTimer(tls.clientHandshakeTimeout, on: self)
      tls.continueHandshake(self)  // the ClientHello goes out now
      return
    }
    state = .active
    updateInterest()
    guard state == .active else { return }
    delegate?.connectionDidConnect(self)
    if state == .active, !queue.isEmpty { flush() }
  }

  /// A read (plain or TLS) reached the peer's EOF: no more reads, and the owner hears of it.
  func inputDidEnd() {
    inputEnded = true
    updateInterest()
    guard state == .active else { return }
    delegate?.connectionDidReadEOF(self)
  }

  /// What is left of an event after reading and writing: a pending socket error, or a hang-up.
  func handleErrorAndHangup(_ events: IOEvents) {
    if events.contains(.error) {
      let code = (try? socket.takePendingError()) ?? 0
      if code != 0 {
        finishClose(.failed(SystemError(errno: code, syscall: "socket")), abortive: true)
        return
      }
    }
    if events.contains(.hangup) {
      if inputEnded || closeRequested {
        finishClose(.hangup, abortive: false)
      } else if readingPaused, !edgeTriggered {
        // EPOLLHUP is reported whatever the interest set, so a paused reader would be woken in a loop.
        // Leave epoll until the owner resumes; unread input stays in the kernel buffer meanwhile.
        if let registration { loop.deregister(registration) }
        registration = nil
        parkedAfterHangup = true
      }
      // Otherwise input is still coming: level-triggered epoll brings us back to read it; an edge-triggered
      // connection has `edge.hangupSeen` and finishes after its last read (see `EdgeTriggeredIO`).
    }
  }

  /// How long a lingering close (TLS, or `closeDrainingInput`) waits for the peer's EOF.
  static let lingerTimeout: Duration = .seconds(2)

  /// Closing a socket that has unread input makes the kernel send RST, and an RST makes the peer's kernel
  /// drop whatever it has not yet delivered, including our last bytes. With TLS 1.3 there is nearly always
  /// unread input (the server's session tickets), so after close_notify the connection sends FIN, then reads
  /// and drops input until the peer's EOF or `lingerTimeout`, and only then closes (nginx's
  /// lingering close). The owner hears `didCloseWith(.closedByOwner)` at the end of it.
  func startLingering() {
    guard !lingering else { return }
    lingering = true
    if !outputShutDown {
      outputShutDown = true
      do {
        try socket.shutdownOutput()
      } catch {
        finishClose(.closedByOwner, abortive: false)
        return
      }
    }
    connectTimer = loop.scheduleTimer(after: BufferedConnection.lingerTimeout) { [weak self] in
      guard let self, self.lingering, self.state == .active else { return }
      self.connectTimer = nil
      self.finishClose(.closedByOwner, abortive: false)
    }
    updateInterest()
    guard state == .active else { return }
    discardInputUntilEOF()
  }

  /// Runs inside other callbacks (a close asked for while handling input), so it must not
  /// use the loop's read buffer: a caller up the stack may still be reading bytes from it.
  func discardInputUntilEOF() {
    withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 16) { buffer in
      for _ in 0..<BufferedConnection.maxReadsPerEvent {
        guard state == .active else { return }
        switch try? socket.read(into: buffer) {
        case .processed(let count)?:
          if count == 0 {
            finishClose(.closedByOwner, abortive: false)
            return
          }
        case .wouldBlock?:
          return
        case nil:
          // Reset or other error: everything we sent was already handed over; nothing left to protect.
          finishClose(.closedByOwner, abortive: false)
          return
        }
      }
    }
  }
}
