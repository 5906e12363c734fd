import GatehouseHTTP
import GatehouseNet

/// One admin connection: requests parsed with the same codec as client traffic, bodies
/// buffered (admin bodies are small and bounded), answered one at a time in order.
final class AdminSession: ConnectionDelegate {
  unowned let service: AdminService
  var connection: BufferedConnection?
  /// CONNECT and TRACE reach the router, which answers them like any method a path does
  /// not take (401 without the token, else 405 with `Allow`).
  private var parser = HTTPRequestParser(
    limits: HTTPLimits(maxHeaderBytes: 16384, maxBodyBytes: 1 << 20, refusesConnectAndTrace: false))
  private var head: HTTPRequestHead?
  private var body: [UInt8] = []
  private var busy = false
  private var held: [UInt8] = []
  private var closeAfter = false

  init(service: AdminService) {
    self.service = service
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    if busy || !held.isEmpty {
      held.append(contentsOf: bytes)
      if held.count > 1 << 21 { connection.abort() }
      return
    }
    consume(bytes)
  }

  private func consume(_ bytes: UnsafeRawBufferPointer) {
    var offset = 0
    while !busy {
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
        busy = true
        if !head.keepAlive { closeAfter = true }
        if offset < bytes.count { held.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
        let requestID = service.nextRequestID()
        service.handle(head: head, body: body, requestID: requestID) { [self] response in
          send(response, headOnly: head.method == .head, requestID: requestID)
          busy = false
          if !closeAfter && !held.isEmpty {
            let input = held
            held = []
            input.withUnsafeBytes { consume($0) }
          }
        }
        return
      }
    }
  }

  private func send(_ response: AdminResponse, headOnly: Bool, requestID: [UInt8]) {
    _ = connection?.write(response.serialized(requestID: requestID, headOnly: headOnly, close: closeAfter))
    if closeAfter { connection?.close() }
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    service.sessionClosed(self)
  }
}
