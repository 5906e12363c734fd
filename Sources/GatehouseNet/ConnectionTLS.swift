import CGatehouseOpenSSL
import Glibc

/// TLS on a buffered connection: its session and the state of the last TLS call, the handshake,
/// `SSL_read`/`SSL_write` in place of the plain socket calls, and close_notify. The plain path never
/// enters here.
///
/// Owned by the connection, which passes itself to every call instead of being referred to: no
/// back-reference to keep valid, and no reference counting for one.
final class ConnectionTLS {
  /// SSL_read calls per readiness event (each returns one record, at most 16 KB), about the bytes a plain
  /// connection reads per event, before yielding to other connections.
  static let maxReadsPerEvent = 16

  let stream: TLSStream
  /// Outbound TLS: the handshake starts when TCP connects, with this deadline.
  var clientHandshakeTimeout: Duration = .zero
  /// The last TLS operation asked for the other readiness: a handshake or SSL_write that needs to read,
  /// an SSL_read that needs to write.
  var wantsRead = false
  var wantsWrite = false
  /// close_notify could not be sent yet (socket full); then close or shut down output.
  var closeNotifyPending = false
  /// A read pass is scheduled for input OpenSSL already holds (epoll cannot report it).
  var bufferedReadScheduled = false

  init(stream: TLSStream) {
    self.stream = stream
  }

  func startHandshakeTimer(_ timeout: Duration, on connection: BufferedConnection) {
    connection.connectTimer = connection.loop.scheduleTimer(after: timeout) { [weak connection] in
      guard let connection, connection.state == .handshaking else { return }
      connection.connectTimer = nil
      let error = TLSError(kind: .handshakeTimedOut, message: "no TLS handshake within \(timeout)")
      connection.finishClose(.tlsFailed(error), abortive: true)
    }
  }

  /// Runs the handshake as far as the socket allows; on success becomes active, tells an outbound owner it
  /// is connected, sends what was queued meanwhile and delivers input that came with the last flight.
  func continueHandshake(_ connection: BufferedConnection) {
    switch stream.handshake() {
    case .wantRead:
      wantsWrite = false
      connection.updateInterest()
    case .wantWrite:
      wantsWrite = true
      connection.updateInterest()
    case .failed(let reason):
      fail(reason, connection)
    case .done:
      if let connectTimer = connection.connectTimer { connection.loop.cancelTimer(connectTimer) }
      connection.connectTimer = nil
      wantsWrite = false
      connection.state = .active
      connection.updateInterest()
      guard connection.state == .active else { return }
      if stream.isClient { connection.delegate?.connectionDidConnect(connection) }
      guard connection.state == .active else { return }
      if !connection.queue.isEmpty {
        connection.flush()
      } else if connection.closeRequested {
        connection.finishGracefulClose()
      } else {
        connection.finishOutputIfRequested()
      }
      scheduleBufferedReadIfNeeded(connection)
    }
  }

  /// A TLS failure may have queued an alert for the peer, so it closes with a FIN that lets the alert out;
  /// a socket error leaves nothing to say and resets.
  private func fail(_ reason: ConnectionCloseReason, _ connection: BufferedConnection) {
    if case .failed = reason {
      connection.finishClose(reason, abortive: true)
    } else {
      connection.finishClose(reason, abortive: false)
    }
  }

  /// `write(UnsafeRawBufferPointer)` with an empty queue: encrypts straight from the caller's bytes. Returns
  /// how many were taken (the rest is copied into the queue by the caller), nil if the connection failed.
  func writeBorrowed(_ bytes: UnsafeRawBufferPointer, _ connection: BufferedConnection) -> Int? {
    var taken = 0
    while taken < bytes.count {
      connection.writeAttemptCount += 1
      switch stream.write(UnsafeRawBufferPointer(rebasing: bytes[taken...])) {
      case .processed(let count):
        taken += count
      case .wantWrite:
        wantsRead = false
        return taken
      case .wantRead:
        wantsRead = true
        return taken
      case .endOfInput:
        fail(.failed(SystemError(errno: EPIPE, syscall: "SSL_write")), connection)
        return nil
      case .failed(let reason):
        fail(reason, connection)
        return nil
      }
    }
    return taken
  }

  /// Encrypts queued plaintext until the queue is empty or the socket is full (see `WriteQueue`).
  func flush(_ connection: BufferedConnection) {
    wantsRead = false
    guard connection.state == .active else { return }
    switch connection.queue.write(through: stream, attempts: &connection.writeAttemptCount) {
    case nil, .processed?, .wantWrite?:
      return
    case .wantRead?:
      wantsRead = true
    case .endOfInput?:
      fail(.failed(SystemError(errno: EPIPE, syscall: "SSL_write")), connection)
    case .failed(let reason)?:
      fail(reason, connection)
    }
  }

  /// Sends close_notify. False while it waits for the socket to take it (the caller is called again then).
  func sendCloseNotify(_ connection: BufferedConnection) -> Bool {
    switch stream.shutdown() {
    case .done, .failed:
      closeNotifyPending = false
      return true
    case .wantWrite, .wantRead:
      closeNotifyPending = true
      connection.updateInterest()
      return false
    }
  }

  /// Interest for an active TLS connection. A TLS call that needs the other readiness (SSL_read sending a
  /// pending alert or key update, SSL_write reading) swaps what its direction waits for, and only while that
  /// direction is wanted, so a paused reader is never woken for a write it does not want.
  func desiredInterest(_ connection: BufferedConnection) -> IOInterest {
    if connection.lingering { return .read }
    let readWanted = !connection.readingPaused && !connection.inputEnded && !connection.closeRequested
    let writeWanted = !connection.queue.isEmpty
    var interest: IOInterest = []
    if (readWanted && !wantsWrite) || (writeWanted && wantsRead) { interest.insert(.read) }
    if (writeWanted && !wantsRead) || (readWanted && wantsWrite) || closeNotifyPending {
      interest.insert(.write)
    }
    return interest
  }

  func handleActiveEvents(_ events: IOEvents, _ connection: BufferedConnection) {
    if connection.lingering {
      connection.discardInputUntilEOF()
      return
    }
    let failing = events.contains(.error) || events.contains(.hangup)
    if closeNotifyPending {
      if events.contains(.writable) || failing {
        if connection.closeRequested {
          connection.finishGracefulClose()
        } else {
          connection.finishOutputIfRequested()
        }
        guard connection.state == .active else { return }
      }
    } else if !connection.queue.isEmpty, events.contains(wantsRead ? .readable : .writable) || failing {
      connection.flush()
      guard connection.state == .active else { return }
    }
    if !connection.readingPaused, !connection.inputEnded, !connection.closeRequested,
      events.contains(wantsWrite ? .writable : .readable) || failing
    {
      read(connection)
      guard connection.state == .active else { return }
    }
    connection.handleErrorAndHangup(events)
  }

  /// Decrypts and delivers record by record. Stops at WANT_READ (epoll will say when more comes), at EOF,
  /// or after `maxReadsPerEvent` records; input OpenSSL already holds is then read on a later turn.
  func read(_ connection: BufferedConnection) {
    let buffer = connection.loop.readBuffer
    for _ in 0..<ConnectionTLS.maxReadsPerEvent {
      guard connection.state == .active, !connection.readingPaused, !connection.inputEnded,
        !connection.closeRequested
      else { return }
      switch stream.read(into: buffer) {
      case .processed(let count):
        connection.delegate?.connection(connection, didRead: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
      case .wantRead:
        if wantsWrite {
          wantsWrite = false
          connection.updateInterest()
        }
        return
      case .wantWrite:
        if !wantsWrite {
          wantsWrite = true
          connection.updateInterest()
        }
        return
      case .endOfInput:
        connection.inputDidEnd()
        return
      case .failed(let reason):
        fail(reason, connection)
        return
      }
    }
    scheduleBufferedReadIfNeeded(connection)
  }

  /// epoll cannot see plaintext OpenSSL has already read ahead, so when reading stops with some left (read
  /// budget used up, reading resumed, handshake just finished) a read pass is scheduled for the next turn.
  func scheduleBufferedReadIfNeeded(_ connection: BufferedConnection) {
    guard !bufferedReadScheduled, connection.state == .active, !connection.readingPaused,
      !connection.inputEnded, !connection.closeRequested, stream.hasBufferedInput
    else { return }
    bufferedReadScheduled = true
    connection.loop.executeLater { [weak connection] in
      guard let connection, let tls = connection.tls else { return }
      tls.bufferedReadScheduled = false
      guard connection.state == .active else { return }
      tls.read(connection)
    }
  }
}
