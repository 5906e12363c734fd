import Dispatch
import GatehouseHTTP
import GatehouseNet
import Synchronization

/// The demo's sample backend on loopback: a small JSON API behind bearer tokens, and the
/// OAuth2 token endpoint that issues them. Runs on its own event loop thread.
final class DemoBackend: @unchecked Sendable {
  /// What the backend saw and issued; read by the walkthrough from the main thread.
  struct Record {
    var lastAuthorization: String?
    var requests = 0
    var logins = 0
    var validTokens: Set<String> = []
  }

  let loop: EventLoop
  private let listener: TCPListener
  let port: UInt16
  let record = Mutex(Record())
  private var connections: [ObjectIdentifier: DemoConnection] = [:]

  init() throws {
    loop = try EventLoop()
    listener = try TCPListener(address: .loopback(port: 0), reusePort: false)
    port = listener.localPort
    let loop = self.loop
    _ = try LoopThread.start(name: "gh-demo-backend") { loop.run() }
    loop.execute { [self] in
      do {
        try listener.startAccepting(on: loop) { [self] socket in accept(socket) }
      } catch {
        FileHandleStandardError.write("demo backend: \(error)\n")
      }
    }
  }

  /// Stops answering: the port is closed, so the gateway's connects are refused.
  func goDown() {
    let done = DispatchSemaphore(value: 0)
    loop.execute { [self] in
      listener.close()
      for connection in connections.values { connection.connection?.abort() }
      done.signal()
    }
    done.wait()
  }

  /// Forgets every token it issued, as a backend does when tokens expire or are revoked.
  func expireTokens() {
    record.withLock { $0.validTokens.removeAll() }
  }

  func stop() {
    loop.stop()
  }

  private func accept(_ socket: TCPSocket) {
    let handler = DemoConnection(backend: self)
    do {
      handler.connection = try BufferedConnection(socket: socket, loop: loop, delegate: handler)
      connections[ObjectIdentifier(handler)] = handler
    } catch {
      socket.close()
    }
  }

  fileprivate func closed(_ handler: DemoConnection) {
    connections[ObjectIdentifier(handler)] = nil
  }

  /// The answer to one request: status and JSON body.
  fileprivate func answer(_ head: HTTPRequestHead) -> (Int, String) {
    let path = String(decoding: head.path, as: UTF8.self)
    if head.method == .post && path == "/oauth/token" {
      let token = record.withLock { record -> String in
        record.logins += 1
        let token = "demo-token-\(record.logins)"
        record.validTokens.insert(token)
        return token
      }
      return (200, #"{"access_token":"\#(token)","token_type":"Bearer","expires_in":3600}"#)
    }
    let authorization = head.headers["authorization"]
    let allowed = record.withLock { record -> Bool in
      record.requests += 1
      record.lastAuthorization = authorization
      let token = authorization.map { String($0.dropFirst("Bearer ".count)) } ?? ""
      return record.validTokens.contains(token)
    }
    guard allowed else { return (401, #"{"message":"token expired"}"#) }
    switch path {
    case "/api/v1/users":
      return (
        200,
        #"{"data":{"users":[{"id":1,"name":"hoge"},{"id":2,"name":"fuga"}]},"meta":{"count":2}}"#
      )
    default:
      return (404, #"{"message":"no such resource"}"#)
    }
  }
}

/// One connection to the demo backend.
private final class DemoConnection: ConnectionDelegate {
  unowned let backend: DemoBackend
  var connection: BufferedConnection?
  private var parser = HTTPRequestParser()
  private var head: HTTPRequestHead?

  init(backend: DemoBackend) {
    self.backend = backend
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    var offset = 0
    while true {
      let step: (event: HTTPRequestEvent?, consumed: Int)
      do {
        step = try parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        connection.abort()
        return
      }
      offset += step.consumed
      guard let event = step.event else { return }
      switch event {
      case .head(let requestHead): head = requestHead
      case .body: continue
      case .end:
        guard let head else { continue }
        let (status, body) = backend.answer(head)
        var out: [UInt8] = []
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        try? HTTPSerializer.writeResponseHead(
          status: status, headers: headers, framing: .contentLength(Int64(body.utf8.count)), into: &out)
        out.append(contentsOf: body.utf8)
        _ = connection.write(out)
      }
    }
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    backend.closed(self)
  }
}
