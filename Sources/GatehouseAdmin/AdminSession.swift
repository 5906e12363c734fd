import GatehouseHTTP
import GatehouseNet

/// One admin connection: requests parsed with the same codec as client traffic, bodies
/// buffered (admin bodies are small and bounded), answered one at a time in order.
///
/// Like a gateway client, an admin client that does not read its answers gets no new ones
/// until it has caught up: while an answer is being worked on, or the write queue is above
/// its high watermark, pipelined requests are not parsed and reading pauses, so a
/// connection holds at most one read of input and about one answer beyond the watermark.
/// The timeouts of `AdminConnectionLimits` run through `deadline`, which the service's
/// sweep checks.
final class AdminSession: ConnectionDelegate {
  unowned let service: AdminService
  var connection: BufferedConnection?
  /// The client's address, counted against the per-peer cap until the session closes.
  var peer: SocketAddress?
  /// CONNECT and TRACE reach the router, which answers them like any method a path does
  /// not take (401 without the token, else 405 with `Allow`).
  private var parser = HTTPRequestParser(
    limits: HTTPLimits(maxHeaderBytes: 16384, maxBodyBytes: 1 << 20, refusesConnectAndTrace: false))
  private var head: HTTPRequestHead?
  private var body: [UInt8] = []
  /// An answer is being worked on.
  private var busy = false
  /// Input not parsed yet because parsing stopped (an answer in the works, or the client
  /// behind on reading); reading is paused while there is any, so it stays one read long.
  private var held: [UInt8] = []
  private var closeAfter = false
  /// Inside `consume`: an answer completed there must not re-enter the parse loop (its
  /// loop goes on by itself; re-entering nested one frame per pipelined request).
  private var consuming = false
  private(set) var deadline = AdminDeadline()

  init(service: AdminService) {
    self.service = service
  }

  /// The connection is registered: the first request's header timeout starts.
  func start() {
    deadline.start(.request(started: false), now: now, limits: service.limits)
  }

  private var now: UInt64 { service.loop.iterationTime }

  /// Whether the next request may be parsed now.
  private var mayParse: Bool {
    guard let connection, !connection.isClosed else { return false }
    return !busy && !closeAfter && !connection.isAboveHighWatermark
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    if !held.isEmpty || !mayParse {
      hold(bytes)
      return
    }
    consume(bytes)
  }

  /// Keeps input for later and stops reading more until it is parsed.
  private func hold(_ bytes: UnsafeRawBufferPointer) {
    guard !bytes.isEmpty else { return }
    held.append(contentsOf: bytes)
    connection?.pauseReading()
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    // Reading pauses while input is held, so nothing is held here. A request being
    // answered still gets its answer (with `Connection: close`).
    closeAfter = true
    if !busy { closeGracefully() }
  }

  private func consume(_ bytes: UnsafeRawBufferPointer) {
    consuming = true
    defer { consuming = false }
    var offset = 0
    while true {
      guard mayParse else {
        // A closing connection reads nothing more; otherwise the rest waits its turn.
        guard !closeAfter else { return }
        hold(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
        if !busy { startWaiting(.output) }
        return
      }
      if offset < bytes.count { deadline.requestBytesArrived(now: now, limits: service.limits) }
      let start = offset
      let step: (event: HTTPRequestEvent?, consumed: Int)
      do {
        step = try parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        closeAfter = true
        send(.error(error.status, "bad request: \(error)"), headOnly: false, requestID: Array("-".utf8))
        return
      }
      offset += step.consumed
      guard let event = step.event else { return }
      switch event {
      case .head(let requestHead):
        head = requestHead
        body = []
      case .body(let range):
        body.append(
          contentsOf: UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)]))
      case .end:
        guard let head else { continue }
        answer(head)
      }
    }
  }

  /// Hands a complete request to the service. Synchronous answers complete inside this
  /// call and `consume`'s loop goes on; later ones resume the held input themselves.
  private func answer(_ head: HTTPRequestHead) {
    busy = true
    if !head.keepAlive { closeAfter = true }
    startWaiting(.answer)
    let requestID = service.nextRequestID()
    service.handle(head: head, body: body, requestID: requestID, peer: connection?.peerAddress) { [self] response in
      // Still busy while writing: a drain reported from inside the write must not parse
      // the next request ahead of this one's bookkeeping.
      send(response, headOnly: head.method == .head, requestID: requestID)
      busy = false
      guard !closeAfter else { return }
      startWaiting(.nextRequest)
      guard !consuming else { return }
      resumeHeldInput()
    }
  }

  /// Parses what arrived meanwhile, unless the client is still behind on reading (then the
  /// drain callback comes back here).
  private func resumeHeldInput() {
    guard mayParse else {
      if connection?.isAboveHighWatermark == true { startWaiting(.output) }
      return
    }
    startWaiting(.nextRequest)
    connection?.resumeReading()
    guard !held.isEmpty else { return }
    let input = held
    held = []
    input.withUnsafeBytes { consume($0) }
  }

  private func send(_ response: AdminResponse, headOnly: Bool, requestID: [UInt8]) {
    _ = connection?.write(response.serialized(requestID: requestID, headOnly: headOnly, close: closeAfter))
    if closeAfter { closeGracefully() }
  }

  /// Closes once the queued answers are out; a client that stops taking them is reset when
  /// its `.output` wait runs out (a graceful close alone would wait for it forever).
  private func closeGracefully() {
    closeAfter = true
    held = []
    guard let connection else { return }
    connection.close()
    if !connection.isClosed { startWaiting(.output) }
  }

  private func startWaiting(_ wait: AdminWait) {
    deadline.start(wait, now: now, limits: service.limits, acknowledged: acknowledged(during: wait))
  }

  /// What the client has acknowledged, asked of the kernel only under an `.output` wait (a
  /// syscall); -1 (no progress, ever) when it cannot say, so the send timeout still cuts.
  private func acknowledged(during wait: AdminWait) -> Int64 {
    guard wait == .output else { return 0 }
    return connection?.peerAcknowledgedBytes ?? -1
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    guard !busy, !closeAfter, !consuming else { return }
    resumeHeldInput()
  }

  /// The service's sweep: acts on a wait that ran out.
  func checkDeadline() {
    guard let connection, !connection.isClosed else { return }
    let action = deadline.check(now: now, acknowledged: acknowledged(during: deadline.wait), limits: service.limits)
    switch action {
    case nil:
      return
    case .requestTimedOut?:
      closeAfter = true
      send(.error(408, "request not received in time"), headOnly: false, requestID: service.nextRequestID())
    case .close?:
      closeGracefully()
    case .abort?:
      connection.abort()
    }
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    service.sessionClosed(self)
  }
}
