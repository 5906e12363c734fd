import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseNet

/// One admin connection: requests parsed with the same codec as client traffic, bodies
/// buffered (admin bodies are small and bounded), answered one at a time in order.
///
/// The HTTP/1.1 mechanics are `HTTP1ServerConnection`'s: pipelined requests wait for the
/// answer before them, and for a client that is behind on reading, so a connection holds at
/// most one read of input and about one answer beyond the watermark. The timeouts of
/// `AdminConnectionLimits` are its header timeout (covering the body: a request must arrive
/// whole within it) and idle timeout; the service's sweep checks them.
final class AdminSession: ServerResponder {
  unowned let service: AdminService
  /// Made in `init` (it needs `self`); never nil afterwards.
  private(set) var server: HTTP1ServerConnection!
  /// The client's address, counted against the per-peer cap until the session closes.
  var peer: SocketAddress?
  private var head: HTTPRequestHead?
  private var body: [UInt8] = []

  /// CONNECT and TRACE reach the router, which answers them like any method a path does
  /// not take (401 without the token, else 405 with `Allow`).
  private static let parserLimits = HTTPLimits(
    maxHeaderBytes: 16384, maxBodyBytes: 1 << 20, refusesConnectAndTrace: false)

  init(service: AdminService) {
    self.service = service
    server = HTTP1ServerConnection(
      responder: self, loop: service.loop, parserLimits: Self.parserLimits, limits: Self.serverLimits(service.limits))
  }

  var connection: BufferedConnection? { server.connection }

  private static func serverLimits(_ limits: AdminConnectionLimits) -> HTTP1ServerLimits {
    HTTP1ServerLimits(
      headerTimeoutNanoseconds: limits.headerTimeoutNanoseconds, idleTimeoutNanoseconds: limits.idleTimeoutNanoseconds,
      headerTimeoutCoversBody: true)
  }

  /// `connection` (whose delegate is `server`) is registered: the first request's header
  /// timeout starts.
  func start(_ connection: BufferedConnection) {
    server.start(connection)
  }

  /// The service's sweep: the running config's timeouts, and whether one ran out.
  func checkDeadline() {
    server.limits = Self.serverLimits(service.limits)
    server.checkDeadline(now: service.loop.iterationTime)
  }

  func serverReceivedHead(_ head: HTTPRequestHead) {
    self.head = head
    body = []
  }

  func serverReceivedBody(_ bytes: UnsafeRawBufferPointer) {
    body.append(contentsOf: bytes)
  }

  /// Hands the complete request to the service. Synchronous answers complete inside this
  /// call; later ones whenever the service is done.
  func serverReceivedEnd() {
    guard let head else { return }
    self.head = nil
    let requestID = service.nextRequestID()
    service.handle(head: head, body: body, requestID: requestID, peer: connection?.peerAddress) { [self] answer in
      send(answer, headOnly: head.method == .head, requestID: requestID)
    }
    body = []
  }

  func serverRefusedRequest(_ error: HTTPParseError) {
    send(.error(error.status, "bad request: \(error)"), headOnly: false, requestID: Array("-".utf8))
  }

  func serverRequestTimedOut() {
    send(.error(408, "request not received in time"), headOnly: false, requestID: service.nextRequestID())
  }

  private func send(_ answer: AdminAnswer, headOnly: Bool, requestID: [UInt8]) {
    guard !server.isClosed else { return }
    let close = server.beginAnswer(.whole)
    server.write(answer.serialized(requestID: requestID, headOnly: headOnly, close: close))
    server.endAnswer()
  }

  func serverClosed(reason: ConnectionCloseReason, answerStarted: Bool) {
    service.sessionClosed(self)
  }
}
