import CGatehouseOpenSSL
import Glibc

/// TLS on a buffered connection: the handshake, `SSL_read`/`SSL_write` in place of the plain
/// socket calls, and close_notify. The plain path in `BufferedConnection.swift` never enters here.
extension BufferedConnection {
  /// SSL_read calls per readiness event (each returns one record, at most 16 KB), about the bytes a plain
  /// connection reads per event, before yielding to other connections.
  static let maxTLSReadsPerEvent = 16
  /// Small queued chunks (an answer's head and the first body slice) are gathered into one record of up to
  /// this size, so they cost one record header and one send instead of one each.
  static let tlsCoalescingLimit = 16 * 1024

  func startHandshakeTimer(_ timeout: Duration) {
    connectTimer = loop.scheduleTimer(after: timeout) { [weak self] in
      guard let self, self.state == .handshaking else { return }
      self.connectTimer = nil
      let error = TLSError(kind: .handshakeTimedOut, message: "no TLS handshake within \(timeout)")
      self.finishClose(.tlsFailed(error), abortive: true)
    }
  }

  /// Runs the handshake as far as the socket allows; on success becomes active, tells an outbound owner it
  /// is connected, sends what was queued meanwhile and delivers input that came with the last flight.
  func continueHandshake(_ tls: TLSStream) {
    switch tls.handshake() {
    case .wantRead:
      tlsWantsWrite = false
      updateInterest()
    case .wantWrite:
      tlsWantsWrite = true
      updateInterest()
    case .failed(let reason):
      failTLS(reason)
    case .done:
      if let connectTimer { loop.cancelTimer(connectTimer) }
      connectTimer = nil
      tlsWantsWrite = false
      state = .active
      updateInterest()
      guard state == .active else { return }
      if tls.isClient { delegate?.connectionDidConnect(self) }
      guard state == .active else { return }
      if !queue.isEmpty {
        flush()
      } else if closeRequested {
        finishGracefulClose()
      } else {
        finishOutputIfRequested()
      }
      scheduleBufferedTLSReadIfNeeded()
    }
  }

  /// A TLS failure may have queued an alert for the peer, so it closes with a FIN that lets the alert out;
  /// a socket error leaves nothing to say and resets.
  private func failTLS(_ reason: ConnectionCloseReason) {
    if case .failed = reason {
      finishClose(reason, abortive: true)
    } else {
      finishClose(reason, abortive: false)
    }
  }

  /// `write(UnsafeRawBufferPointer)` with an empty queue: encrypts straight from the caller's bytes. Returns
  /// how many were taken (the rest is copied into the queue by the caller), nil if the connection failed.
  func writeBorrowed(_ bytes: UnsafeRawBufferPointer, through tls: TLSStream) -> Int? {
    var taken = 0
    while taken < bytes.count {
      writeAttemptCount += 1
      switch tls.write(UnsafeRawBufferPointer(rebasing: bytes[taken...])) {
      case .processed(let count):
        taken += count
      case .wantWrite:
        tlsWantsRead = false
        return taken
      case .wantRead:
        tlsWantsRead = true
        return taken
      case .endOfInput:
        failTLS(.failed(SystemError(errno: EPIPE, syscall: "SSL_write")))
        return nil
      case .failed(let reason):
        failTLS(reason)
        return nil
      }
    }
    return taken
  }

  /// Encrypts queued plaintext record by record until the queue is empty or the socket is full. The queue
  /// keeps each chunk until SSL_write reports it done, so a retry after WANT_WRITE passes the same bytes.
  func flushTLS(_ tls: TLSStream) {
    tlsWantsRead = false
    while !queue.isEmpty, state == .active {
      writeAttemptCount += 1
      let outcome: TLSStream.Transfer
      if queue.chunkCount == 1 {
        outcome = queue.withFirstChunk { tls.write($0) }
      } else {
        outcome = queue.withIOVecs { vectors, _ in writeCoalescing(vectors, through: tls) }
      }
      switch outcome {
      case .processed(let count):
        queue.consume(count)
      case .wantWrite:
        return
      case .wantRead:
        tlsWantsRead = true
        return
      case .endOfInput:
        failTLS(.failed(SystemError(errno: EPIPE, syscall: "SSL_write")))
        return
      case .failed(let reason):
        failTLS(reason)
        return
      }
    }
  }

  /// Writes the first chunk as it is when it fills a record, or else the first chunks copied together (up to
  /// one record). The gathered prefix only grows as chunks are appended, which keeps retries valid.
  private func writeCoalescing(_ vectors: UnsafeMutableBufferPointer<iovec>, through tls: TLSStream)
    -> TLSStream.Transfer
  {
    let limit = BufferedConnection.tlsCoalescingLimit
    if vectors[0].iov_len >= limit {
      return tls.write(UnsafeRawBufferPointer(start: vectors[0].iov_base, count: vectors[0].iov_len))
    }
    return withUnsafeTemporaryAllocation(byteCount: limit, alignment: 16) { scratch in
      var filled = 0
      for vector in vectors where filled < limit {
        let count = min(vector.iov_len, limit - filled)
        scratch.baseAddress!.advanced(by: filled).copyMemory(from: vector.iov_base!, byteCount: count)
        filled += count
      }
      return tls.write(UnsafeRawBufferPointer(rebasing: scratch[..<filled]))
    }
  }

  /// Sends close_notify. False while it waits for the socket to take it (the caller is called again then).
  func sendCloseNotify(_ tls: TLSStream) -> Bool {
    switch tls.shutdown() {
    case .done, .failed:
      tlsCloseNotifyPending = false
      return true
    case .wantWrite, .wantRead:
      tlsCloseNotifyPending = true
      updateInterest()
      return false
    }
  }

  /// Interest for an active TLS connection. A TLS call that needs the other readiness (SSL_read sending a
  /// pending alert or key update, SSL_write reading) swaps what its direction waits for, and only while that
  /// direction is wanted, so a paused reader is never woken for a write it does not want.
  var desiredTLSInterest: IOInterest {
    if lingering { return .read }
    let readWanted = !readingPaused && !inputEnded && !closeRequested
    let writeWanted = !queue.isEmpty
    var interest: IOInterest = []
    if (readWanted && !tlsWantsWrite) || (writeWanted && tlsWantsRead) { interest.insert(.read) }
    if (writeWanted && !tlsWantsRead) || (readWanted && tlsWantsWrite) || tlsCloseNotifyPending {
      interest.insert(.write)
    }
    return interest
  }

  func handleTLSActiveEvents(_ events: IOEvents, _ tls: TLSStream) {
    if lingering {
      discardInputUntilEOF()
      return
    }
    let failing = events.contains(.error) || events.contains(.hangup)
    if tlsCloseNotifyPending {
      if events.contains(.writable) || failing {
        if closeRequested {
          finishGracefulClose()
        } else {
          finishOutputIfRequested()
        }
        guard state == .active else { return }
      }
    } else if !queue.isEmpty, events.contains(tlsWantsRead ? .readable : .writable) || failing {
      flush()
      guard state == .active else { return }
    }
    if !readingPaused, !inputEnded, !closeRequested,
      events.contains(tlsWantsWrite ? .writable : .readable) || failing
    {
      readTLS(tls)
      guard state == .active else { return }
    }
    handleErrorAndHangup(events)
  }

  /// Decrypts and delivers record by record. Stops at WANT_READ (epoll will say when more comes), at EOF,
  /// or after `maxTLSReadsPerEvent` records; input OpenSSL already holds is then read on a later turn.
  func readTLS(_ tls: TLSStream) {
    let buffer = loop.readBuffer
    for _ in 0..<BufferedConnection.maxTLSReadsPerEvent {
      guard state == .active, !readingPaused, !inputEnded, !closeRequested else { return }
      switch tls.read(into: buffer) {
      case .processed(let count):
        delegate?.connection(self, didRead: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
      case .wantRead:
        if tlsWantsWrite {
          tlsWantsWrite = false
          updateInterest()
        }
        return
      case .wantWrite:
        if !tlsWantsWrite {
          tlsWantsWrite = true
          updateInterest()
        }
        return
      case .endOfInput:
        inputEnded = true
        updateInterest()
        guard state == .active else { return }
        delegate?.connectionDidReadEOF(self)
        return
      case .failed(let reason):
        failTLS(reason)
        return
      }
    }
    scheduleBufferedTLSReadIfNeeded()
  }

  /// epoll cannot see plaintext OpenSSL has already read ahead, so when reading stops with some left (read
  /// budget used up, reading resumed, handshake just finished) a read pass is scheduled for the next turn.
  func scheduleBufferedTLSReadIfNeeded() {
    guard let tls, !tlsBufferedReadScheduled, state == .active, !readingPaused, !inputEnded, !closeRequested,
      tls.hasBufferedInput
    else { return }
    tlsBufferedReadScheduled = true
    loop.executeLater { [weak self] in
      guard let self else { return }
      self.tlsBufferedReadScheduled = false
      guard self.state == .active, let tls = self.tls else { return }
      self.readTLS(tls)
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
