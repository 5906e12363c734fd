import Glibc

/// Why a connection ended; delivered exactly once through `connection(_:didCloseWith:)`.
public enum ConnectionCloseReason: Sendable, Equatable {
  /// The owner called `close()` (and the queue was flushed) or `abort()`.
  case closedByOwner
  /// Both directions finished without an error: end of input was read and output was shut down, or the
  /// kernel reported a hang-up after end of input.
  case hangup
  /// A read, write or connect failed (ECONNRESET, ECONNREFUSED, EPIPE, ETIMEDOUT…).
  case failed(SystemError)
  /// An outbound connect did not finish within its timeout.
  case connectTimedOut
  /// The event loop stopped while the connection was open.
  case loopStopped
}

/// Queue sizes at which the owner is told to stop and to resume producing (see `ConnectionDelegate`).
public struct WriteWatermarks: Sendable, Equatable {
  /// Told "drained" when the queue falls to this size or below after having been above `high`.
  public var low: Int
  /// Told "above high watermark" when the queue grows past this size.
  public var high: Int

  public init(low: Int = 16 * 1024, high: Int = 64 * 1024) {
    precondition(low >= 0 && low <= high, "need 0 <= low <= high")
    self.low = low
    self.high = high
  }
}

/// The owner of a `BufferedConnection`. Every method is called on the connection's loop.
///
/// The connection keeps its delegate alive until it has delivered `didCloseWith`, then lets go of it, so an
/// owner that holds its connections strongly forms a cycle that ends exactly when the connection does.
public protocol ConnectionDelegate: AnyObject {
  /// An outbound connect finished; queued writes are being sent.
  func connectionDidConnect(_ connection: BufferedConnection)
  /// Bytes arrived. `bytes` points into the loop's shared read buffer: valid only during this call.
  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer)
  /// The peer will send nothing more (FIN). Writing may go on. The default closes gracefully.
  func connectionDidReadEOF(_ connection: BufferedConnection)
  /// The write queue grew past the high watermark: stop producing (e.g. pause reading the other side).
  /// May be called from inside `write`.
  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection)
  /// The write queue fell to the low watermark after being above the high one: produce again.
  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection)
  /// The connection is closed and its descriptor released. Always the last call, exactly once, and always
  /// from the loop, never from inside a method the owner called.
  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason)
}

extension ConnectionDelegate {
  public func connectionDidConnect(_ connection: BufferedConnection) {}
  public func connectionDidReadEOF(_ connection: BufferedConnection) { connection.close() }
  public func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {}
  public func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {}
}

/// A TCP socket registered on one event loop, with a write queue, backpressure watermarks, pausable reads,
/// graceful and abortive close, and (for upstreams) a non-blocking connect with a timeout.
///
/// Loop-confined and deliberately not Sendable: create it, call it and drop it on its loop's thread.
public final class BufferedConnection: IOEventHandler {
  /// The lifecycle. Valid transitions: connecting → active (connect done), connecting → closed (connect
  /// failed, timed out, aborted), active → closed (close, abort, error, hang-up, loop stop). Nothing leaves
  /// closed. Graceful close and half-close are flags on `active`, because the queue must still flush.
  enum State: Equatable {
    case connecting
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

  private let socket: TCPSocket
  private(set) var state: State
  private var registration: IORegistration?
  private var registeredInterest: IOInterest = []
  private var queue = WriteQueue()
  private var readingPaused = false
  private var inputEnded = false
  private var closeRequested = false
  private var outputShutdownRequested = false
  private var outputShutDown = false
  private var aboveHighWatermark = false
  /// Deregistered after a hang-up that arrived while reading was paused (see `handleIOEvents`).
  private(set) var parkedAfterHangup = false
  private var connectTimer: TimerHandle?

  /// How many write system calls were made; tests use it to see that a full socket is not retried.
  private(set) var writeAttemptCount = 0

  /// Wraps an accepted socket and starts reading. Loop thread only.
  public init(
    socket: TCPSocket, loop: EventLoop, delegate: any ConnectionDelegate,
    watermarks: WriteWatermarks = WriteWatermarks()
  ) throws(SystemError) {
    loop.assertInEventLoop()
    self.socket = socket
    self.loop = loop
    self.delegate = delegate
    self.watermarks = watermarks
    state = .active
    registration = try loop.register(fileDescriptor: socket.fileDescriptor, interest: .read, handler: self)
    registeredInterest = .read
  }

  private init(
    connecting socket: TCPSocket, loop: EventLoop, delegate: any ConnectionDelegate,
    watermarks: WriteWatermarks
  ) {
    self.socket = socket
    self.loop = loop
    self.delegate = delegate
    self.watermarks = watermarks
    state = .connecting
  }

  /// Opens an outbound connection. Throws only if no socket can be made (EMFILE…); the outcome of the connect
  /// (`connectionDidConnect`, or close with `.failed(ECONNREFUSED)` / `.connectTimedOut`) goes to the delegate.
  /// Writes made before the connect finishes are queued and sent once it does. Loop thread only.
  public static func connect(
    to address: SocketAddress, on loop: EventLoop, timeout: Duration, delegate: any ConnectionDelegate,
    watermarks: WriteWatermarks = WriteWatermarks()
  ) throws(SystemError) -> BufferedConnection {
    loop.assertInEventLoop()
    let socket = TCPSocket(fileDescriptor: try Syscall.socket(family: address.family), peerAddress: address)
    let connection = BufferedConnection(
      connecting: socket, loop: loop, delegate: delegate, watermarks: watermarks)
    do {
      // An immediate success still waits for writability, so both paths finish in `completeConnect`.
      _ = try Syscall.connect(socket.fileDescriptor, address)
    } catch {
      // Refused at once (ECONNREFUSED, ENETUNREACH…): reported like a late failure, from the loop.
      connection.finishClose(.failed(error), abortive: true)
      return connection
    }
    connection.registration = try loop.register(
      fileDescriptor: socket.fileDescriptor, interest: .write, handler: connection)
    connection.registeredInterest = .write
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
  /// True between the high-watermark and drain callbacks.
  public var isAboveHighWatermark: Bool { aboveHighWatermark }
  public var isReadingPaused: Bool { readingPaused }
  /// True once the connection is closed (the close callback may still be on its way).
  public var isClosed: Bool { state == .closed }
  /// True while an outbound connect is in progress.
  public var isConnecting: Bool { state == .connecting }

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

  /// Sends several chunks (say a response head and its body) with one sendmsg where possible.
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
    if queue.isEmpty, state == .active {
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
    case .connecting, .active: !closeRequested && !outputShutdownRequested
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
  private func flush() {
    while !queue.isEmpty, state == .active {
      writeAttemptCount += 1
      let attempted: Int
      let result: Result<IOResult<Int>, SystemError>
      if queue.chunkCount == 1 {
        attempted = queue.byteCount
        result = queue.withFirstChunk { bytes in Result { () throws(SystemError) in try socket.write(bytes) }
        }
      } else {
        (result, attempted) = queue.withIOVecs { vectors, total in
          (Result { () throws(SystemError) in try socket.write(iovecs: vectors) }, total)
        }
      }
      switch result {
      case .failure(let error):
        finishClose(.failed(error), abortive: true)
        return
      case .success(.wouldBlock):
        break
      case .success(.processed(let written)):
        queue.consume(written)
        // A short write means the send buffer is full; another try now would only return EAGAIN.
        if written == attempted { continue }
      }
      break
    }
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
        finishClose(.closedByOwner, abortive: false)
      } else {
        finishOutputIfRequested()
      }
    }
  }

  private func finishOutputIfRequested() {
    guard outputShutdownRequested, !outputShutDown, queue.isEmpty, state == .active else { return }
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
      return
    }
    updateInterest()
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
    case .active:
      closeRequested = true
      if queue.isEmpty {
        finishClose(.closedByOwner, abortive: false)
      } else {
        updateInterest()
      }
    }
  }

  /// Closes at once with RST (SO_LINGER 0), dropping queued bytes: for errors and timeouts.
  public func abort() {
    finishClose(.closedByOwner, abortive: true)
  }

  /// Half-close: after the queue is flushed, send FIN but keep reading.
  public func closeOutputAfterFlush() {
    guard state != .closed, !outputShutdownRequested else { return }
    outputShutdownRequested = true
    if state == .active, queue.isEmpty { finishOutputIfRequested() }
  }

  private func finishClose(_ reason: ConnectionCloseReason, abortive: Bool) {
    guard state != .closed else { return }
    state = .closed
    if let connectTimer { loop.cancelTimer(connectTimer) }
    connectTimer = nil
    if let registration { loop.deregister(registration) }
    registration = nil
    parkedAfterHangup = false
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
    case .active:
      var interest: IOInterest = []
      if !readingPaused, !inputEnded, !closeRequested { interest.insert(.read) }
      if !queue.isEmpty { interest.insert(.write) }
      return interest
    case .closed:
      return []
    }
  }

  private func updateInterest() {
    guard state != .closed, let registration else { return }
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
    if events.contains(.loopStopping) {
      finishClose(.loopStopped, abortive: true)
      return
    }
    switch state {
    case .closed:
      return
    case .connecting:
      completeConnect()
    case .active:
      handleActiveEvents(events)
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
    state = .active
    updateInterest()
    guard state == .active else { return }
    delegate?.connectionDidConnect(self)
    if state == .active, !queue.isEmpty { flush() }
  }

  private func handleActiveEvents(_ events: IOEvents) {
    let failing = events.contains(.error) || events.contains(.hangup)
    if !queue.isEmpty, events.contains(.writable) || failing {
      flush()
      guard state == .active else { return }
    }
    if !readingPaused, !inputEnded, !closeRequested,
      events.contains(.readable) || failing
    {
      readAvailable()
      guard state == .active else { return }
    }
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
      } else if readingPaused {
        // EPOLLHUP is reported whatever the interest set, so a paused reader would be woken in a loop.
        // Leave epoll until the owner resumes; unread input stays in the kernel buffer meanwhile.
        if let registration { loop.deregister(registration) }
        registration = nil
        parkedAfterHangup = true
      }
      // Otherwise input is still coming: level-triggered epoll brings us back to read it.
    }
  }

  private func readAvailable() {
    let buffer = loop.readBuffer
    for _ in 0..<BufferedConnection.maxReadsPerEvent {
      guard state == .active, !readingPaused, !inputEnded, !closeRequested else { return }
      let result: IOResult<Int>
      do {
        result = try socket.read(into: buffer)
      } catch {
        finishClose(.failed(error), abortive: true)
        return
      }
      switch result {
      case .wouldBlock:
        return
      case .processed(0):
        inputEnded = true
        updateInterest()
        guard state == .active else { return }
        delegate?.connectionDidReadEOF(self)
        return
      case .processed(let count):
        delegate?.connection(self, didRead: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        // A short read emptied the kernel buffer; level-triggered epoll tells us when more comes.
        if count < buffer.count { return }
      }
    }
  }
}
