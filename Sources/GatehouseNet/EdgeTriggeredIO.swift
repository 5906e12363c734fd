/// A plain TCP connection's reads, writes and readiness handling. Plain TCP runs edge-triggered (see
/// `BufferedConnection.edgeTriggered`): each arrival is reported once, so what an event leaves unread is
/// remembered here and read by a later pass. TLS connections never come here (`ConnectionTLS`).
///
/// The connection keeps it inline. The functions are static and take the connection rather than being
/// mutating methods: they call the owner back, the owner may call into the connection again, and a
/// mutating method would hold this state for the whole call.
struct EdgeTriggeredIO {
  /// Input may be waiting in the kernel (an edge came, and no short read, EAGAIN or EOF since). Reading
  /// paused or cut short leaves it set, and a read pass picks it up later.
  var inputMayBeWaiting = false
  /// The hang-up was reported (once); it ends the connection when input is done.
  var hangupSeen = false
  /// The peer's FIN (or a hang-up) was reported, so reads go on past a short one until they reach the EOF.
  var peerFinishedSending = false
  var readPassScheduled = false

  /// Remembers what an event says about input; the event itself is reported only this once.
  private mutating func note(_ events: IOEvents, failing: Bool) {
    if events.contains(.readable) || failing { inputMayBeWaiting = true }
    if events.contains(.hangup) { hangupSeen = true }
    if events.contains(.readHangup) || events.contains(.hangup) {
      peerFinishedSending = true
      inputMayBeWaiting = true
    }
  }

  static func handleActiveEvents(_ events: IOEvents, _ connection: BufferedConnection) {
    if connection.lingering {
      connection.discardInputUntilEOF()
      return
    }
    let failing = events.contains(.error) || events.contains(.hangup)
    connection.edge.note(events, failing: failing)
    if !connection.queue.isEmpty, events.contains(.writable) || failing {
      connection.flush()
      guard connection.state == .active else { return }
    }
    if !connection.readingPaused, !connection.inputEnded, !connection.closeRequested,
      connection.edge.inputMayBeWaiting
    {
      read(connection)
      guard connection.state == .active else { return }
    }
    connection.handleErrorAndHangup(events)
  }

  /// Writes the queue until it is empty or the kernel is full (see `WriteQueue`).
  static func flush(_ connection: BufferedConnection) {
    guard connection.state == .active else { return }
    do {
      try connection.queue.write(to: connection.socket, attempts: &connection.writeAttemptCount)
    } catch {
      connection.finishClose(.failed(error), abortive: true)
    }
  }

  static func read(_ connection: BufferedConnection) {
    let buffer = connection.loop.readBuffer
    for _ in 0..<BufferedConnection.maxReadsPerEvent {
      guard connection.state == .active, !connection.readingPaused, !connection.inputEnded,
        !connection.closeRequested
      else { return }
      let result: IOResult<Int>
      do {
        result = try connection.socket.read(into: buffer)
      } catch {
        connection.finishClose(.failed(error), abortive: true)
        return
      }
      switch result {
      case .wouldBlock:
        connection.edge.inputMayBeWaiting = false
        return
      case .processed(0):
        connection.edge.inputMayBeWaiting = false
        connection.inputDidEnd()
        return
      case .processed(let count):
        // A short read emptied the kernel buffer; epoll reports every arrival after this read. When the
        // peer's FIN is known to be there, the next read returns its EOF: reading goes on to it.
        let drained = count < buffer.count && !connection.edge.peerFinishedSending
        if drained { connection.edge.inputMayBeWaiting = false }
        connection.delegate?.connection(connection, didRead: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        if drained { return }
      }
    }
    // Reads per event used up with input left: epoll does not report it again, so a pass after this
    // turn's other events continues.
    if connection.edge.inputMayBeWaiting { scheduleReadPass(connection) }
  }

  /// Reads what the last event left in the kernel, after the loop's current events (so one busy connection
  /// does not starve the others), or on resume.
  static func scheduleReadPass(_ connection: BufferedConnection) {
    guard !connection.edge.readPassScheduled else { return }
    connection.edge.readPassScheduled = true
    connection.loop.executeLater { [connection] in
      connection.edge.readPassScheduled = false
      guard connection.state == .active else { return }
      if connection.edge.inputMayBeWaiting, !connection.readingPaused, !connection.inputEnded,
        !connection.closeRequested
      {
        read(connection)
        guard connection.state == .active else { return }
      }
      finishAfterHangupIfDone(connection)
    }
  }

  /// A hang-up reported while input was still unread is acted on once it is read (what a level-triggered
  /// registration does when the hang-up is reported again).
  private static func finishAfterHangupIfDone(_ connection: BufferedConnection) {
    guard connection.edge.hangupSeen, connection.state == .active,
      connection.inputEnded || connection.closeRequested
    else { return }
    connection.finishClose(.hangup, abortive: false)
  }
}
