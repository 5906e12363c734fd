import Foundation
import Synchronization

/// An in-process WebSocket backend on 127.0.0.1 (kernel-chosen port), one thread per
/// connection: it reads a handshake and answers as its handler says (a `101` and then echo,
/// hold, flood or silence; or a plain HTTP refusal), recording every handshake head.
final class WebSocketBackend: Sendable {
  /// What happens after a `101`.
  enum Mode: Sendable {
    /// Every frame comes back as it came (unmasked); a close is answered and ends it.
    case echo
    /// Reads nothing until `gate` opens, then counts every byte until the end of stream.
    case hold(Gate)
    /// Sends `bytes` in binary frames of 64 KiB, then a close frame, then keeps reading.
    case flood(bytes: Int)
    /// Reads and drops whatever comes, until the end of stream.
    case silent
  }

  /// How one handshake is answered.
  enum Answer: Sendable {
    case accept(Mode)
    /// A plain answer (`status`, a JSON body); the connection stays for the next request.
    case refuse(status: Int, body: String)
    /// A `101` without `Sec-WebSocket-Accept`.
    case switchWithoutAccept
  }

  private struct State {
    var heads: [MessageHead] = []
    var sockets: [TestSocket] = []
    var bytesAfterHandshake = 0
    var endsOfStream = 0
  }

  let port: UInt16
  private let listener: TestSocket
  private let handler: @Sendable (MessageHead) -> Answer
  private let state = Mutex(State())
  private let stopped = Atomic<Bool>(false)

  init(handler: @escaping @Sendable (MessageHead) -> Answer) throws {
    listener = try TestSocket.listen(backlog: 1024)
    port = listener.localPort
    self.handler = handler
    let thread = Thread { [self] in acceptLoop() }
    thread.stackSize = 1 << 20
    thread.start()
  }

  convenience init(always mode: Mode) throws {
    try self.init { _ in .accept(mode) }
  }

  deinit { stop() }

  var heads: [MessageHead] { state.withLock { $0.heads } }
  /// Bytes read after the `101` in `hold` and `silent` modes, all connections together.
  var bytesAfterHandshake: Int { state.withLock { $0.bytesAfterHandshake } }
  /// Connections whose peer (the gateway) ended its side after a `101`.
  var endsOfStream: Int { state.withLock { $0.endsOfStream } }

  func stop() {
    guard !stopped.exchange(true, ordering: .relaxed) else { return }
    for socket in state.withLock({ $0.sockets }) { socket.shutdownBoth() }
    listener.shutdownBoth()
  }

  private func acceptLoop() {
    while !stopped.load(ordering: .relaxed) {
      guard let socket = try? listener.accept(deadline: Deadline(seconds: 0.05)) else { continue }
      state.withLock { $0.sockets.append(socket) }
      let thread = Thread { [self] in serve(socket) }
      thread.stackSize = 1 << 20
      thread.start()
    }
  }

  private func serve(_ socket: TestSocket) {
    let reader = WireReader(socket: socket)
    let deadline = Deadline(seconds: 120)
    while let raw = try? reader.readHead(deadline: deadline), let head = try? MessageHead(raw: raw) {
      state.withLock { $0.heads.append(head) }
      switch handler(head) {
      case .refuse(let status, let body):
        let text =
          "HTTP/1.1 \(status) Refused\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
          + body
        guard (try? socket.send(Array(text.utf8), deadline: deadline)) != nil else { return }
      case .switchWithoutAccept:
        _ = try? socket.send(
          Array("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".utf8), deadline: deadline)
        return
      case .accept(let mode):
        let key = head.value("Sec-WebSocket-Key") ?? ""
        var text = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        text += "Sec-WebSocket-Accept: \(WebSocketWire.accept(for: key))\r\n"
        if let proto = head.value("Sec-WebSocket-Protocol")?.split(separator: ",").first {
          text += "Sec-WebSocket-Protocol: \(proto.trimmingCharacters(in: .whitespaces))\r\n"
        }
        text += "X-Powered-By: backend\r\n\r\n"
        guard (try? socket.send(Array(text.utf8), deadline: deadline)) != nil else { return }
        run(mode, socket: socket, reader: reader, deadline: deadline)
        return
      }
    }
  }

  private func run(_ mode: Mode, socket: TestSocket, reader: WireReader, deadline: Deadline) {
    switch mode {
    case .echo:
      while let frame = try? WebSocketWire.readFrame(reader, deadline: deadline) {
        let back = WebSocketWire.encode(frame.opcode, frame.payload, fin: frame.fin, masked: false)
        guard (try? socket.send(back, deadline: deadline)) != nil else { return }
        if frame.opcode == .close {
          socket.shutdownWrite()
          break
        }
      }
      countToEnd(reader)
    case .hold(let gate):
      gate.wait(timeout: 120)
      countToEnd(reader)
    case .flood(let bytes):
      let frame = WebSocketWire.encode(.binary, [UInt8](repeating: 0x5A, count: 64 << 10), masked: false)
      var sent = 0
      while sent < bytes {
        guard (try? socket.send(frame, deadline: deadline)) != nil else { return }
        sent += 64 << 10
      }
      _ = try? socket.send(WebSocketWire.encode(.close, [0x03, 0xE8], masked: false), deadline: deadline)
      countToEnd(reader)
    case .silent:
      countToEnd(reader)
    }
  }

  /// Reads until the end of stream (or a reset), counting what came, then closes: the
  /// backend has nothing more to say once its peer is done.
  private func countToEnd(_ reader: WireReader) {
    var total = 0
    do {
      try reader.readToEnd(deadline: Deadline(seconds: 120)) { total += $0.count }
      state.withLock { $0.endsOfStream += 1 }
    } catch {}
    state.withLock { $0.bytesAfterHandshake += total }
    reader.socket.shutdownBoth()
  }
}
