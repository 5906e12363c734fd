import Foundation
import Synchronization

/// A request as a `TestBackend` received it.
struct ReceivedRequest: Sendable {
  let head: MessageHead
  let method: String
  /// The request target as sent (path and query).
  let target: String
  /// The decoded body (empty when the backend discards bodies).
  let body: [UInt8]
  /// Body bytes received, after de-chunking.
  let bodyLength: Int64
  /// Whether the body came chunked.
  let bodyWasChunked: Bool
  /// The bytes as received: head, then the body as framed on the wire (empty body part when
  /// bodies are discarded).
  let raw: [UInt8]
  /// Which TCP connection (0 for the first one accepted) and which request on it.
  let connectionIndex: Int
  let indexOnConnection: Int
  /// Bytes of this request were already received when the answer before it on the same
  /// connection was complete: the client pipelined it.
  let arrivedWithPrevious: Bool
  /// Whether the body matched `BodyPattern` (only checked when the backend discards bodies).
  let bodyMatchedPattern: Bool?

  var path: String { String(target.prefix { $0 != "?" }) }
  var query: String? { target.firstIndex(of: "?").map { String(target[target.index(after: $0)...]) } }
  var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// How a `TestBackend` answers one request.
enum BackendAction: Sendable {
  /// An HTTP answer.
  case respond(BackendAnswer)
  /// Reads the request, then resets the connection (RST, through SO_LINGER 0).
  case reset
  /// Reads the request, then closes the connection (FIN) without a byte of answer.
  case close
  /// Sends part of a status line and head, then closes.
  case closeMidHeaders
  /// Sends a head announcing `declared` body bytes, only `sent` of them, then closes.
  case closeMidBody(declared: Int, sent: Int)
}

/// One answer of a `TestBackend`.
struct BackendAnswer: Sendable {
  /// How the body is produced and framed.
  enum Body: Sendable {
    /// These bytes, with a Content-Length.
    case bytes([UInt8])
    /// These chunks, chunked.
    case chunked([[UInt8]])
    /// `length` bytes of `BodyPattern`, streamed, with a Content-Length or chunked.
    case generated(length: Int64, chunked: Bool)
    /// The request's body, with a Content-Length.
    case echo
    /// These bytes without Content-Length or chunking; the connection closes after them.
    case untilClose([UInt8])
  }

  var status: Int = 200
  var reason: String = "OK"
  var headers: [HeaderField] = []
  var body: Body = .bytes([])
  /// Waits this long before sending anything.
  var delay: Duration = .zero
  /// Waits for this gate before sending anything.
  var holdUntil: Gate?
  /// Sends the head one byte at a time, this far apart.
  var headByteInterval: Duration?
  /// Sends the body in pieces of `size` bytes, `interval` apart.
  var bodyTrickle: (size: Int, interval: Duration)?
  /// After the first body piece (first chunk, or first block of a generated body), waits
  /// for this gate before the rest.
  var pauseAfterFirstPiece: Gate?
  /// Closes the connection after this answer.
  var closeAfter = false
  /// Raw bytes sent before the head, such as interim `1xx` answers.
  var preamble: [UInt8] = []
  /// Bytes sent in place of a well-formed head and body (the framing is then the caller's).
  var rawReplacement: [UInt8]?

  init(
    status: Int = 200, reason: String = "OK", headers: [(String, String)] = [], body: Body = .bytes([]),
    delay: Duration = .zero
  ) {
    self.status = status
    self.reason = reason
    self.headers = headers.map { HeaderField(name: $0.0, value: $0.1) }
    self.body = body
    self.delay = delay
  }

  /// A 200 with a text body.
  static func text(_ text: String, status: Int = 200, headers: [(String, String)] = []) -> BackendAnswer {
    BackendAnswer(status: status, headers: [("Content-Type", "text/plain")] + headers, body: .bytes(Array(text.utf8)))
  }
}

/// An in-process HTTP/1.1 server on 127.0.0.1 (kernel-chosen port) standing in for the
/// gateway's backend. It accepts on one thread and serves each connection on its own thread
/// (keep-alive), records every request it receives, and answers as its handler says:
/// normal answers, slow heads or bodies, delays, chunked, huge streamed bodies, echo, or
/// failures (reset, close, close mid-head or mid-body). `stop()` ends every thread.
final class TestBackend: Sendable {
  /// Settings that hold for every request.
  struct Options: Sendable {
    /// Keep request bodies; when false they are read, counted and checked against
    /// `BodyPattern`, then dropped.
    var keepBodies = true
    /// How long a connection may wait idle for its next request before the backend closes
    /// it, as servers with a keep-alive timeout do (2 minutes when nil).
    var keepAliveTimeout: Duration?
    /// TCP_NODELAY on accepted connections. Off, an answer written as head then body waits
    /// for the gateway's delayed ACK (tens of milliseconds), so the backend looks slow.
    var noDelay = false
    init(keepBodies: Bool = true, keepAliveTimeout: Duration? = nil, noDelay: Bool = false) {
      self.keepBodies = keepBodies
      self.keepAliveTimeout = keepAliveTimeout
      self.noDelay = noDelay
    }
  }

  private struct State {
    var requests: [ReceivedRequest] = []
    var connectionsAccepted = 0
    var openSockets: [Int: TestSocket] = [:]
    var bodyBytesSent: Int64 = 0
    var closedWithUnreadRequests = 0
  }

  let port: UInt16
  let options: Options
  private let listener: TestSocket
  private let handler: @Sendable (ReceivedRequest) -> BackendAction
  private let state = Mutex(State())
  private let stopped = Atomic<Bool>(false)
  private let acceptLoopEnded = Atomic<Bool>(false)

  /// Starts a backend that answers each request as `handler` decides, on `port` (0: any
  /// free one; a given one lets a test bring back a backend that was down).
  init(
    options: Options = Options(), port requestedPort: UInt16 = 0, host: UInt8 = 1,
    handler: @escaping @Sendable (ReceivedRequest) -> BackendAction
  ) throws {
    listener = try TestSocket.listen(port: requestedPort, host: host)
    port = listener.localPort
    self.options = options
    self.handler = handler
    let thread = Thread { [self] in acceptLoop() }
    thread.name = "TestBackend.accept"
    thread.start()
  }

  /// Starts a backend that answers every request the same way.
  convenience init(options: Options = Options(), always action: BackendAction) throws {
    try self.init(options: options) { _ in action }
  }

  deinit { stop() }

  /// Every request received so far, in arrival order.
  var requests: [ReceivedRequest] { state.withLock { $0.requests } }

  /// TCP connections accepted so far.
  var connectionCount: Int { state.withLock { $0.connectionsAccepted } }

  /// TCP connections open right now.
  var openConnectionCount: Int { state.withLock { $0.openSockets.count } }

  /// Connections the backend ended (an answer with Connection: close) while more request
  /// bytes were already waiting on them: requests the client had pipelined.
  var closedWithUnreadRequests: Int { state.withLock { $0.closedWithUnreadRequests } }

  /// Body bytes of all answers written so far.
  var bodyBytesSent: Int64 { state.withLock { $0.bodyBytesSent } }

  /// Waits until at least `count` requests have arrived; false if not within `timeout`.
  @discardableResult
  func waitForRequests(_ count: Int, timeout: Double = 10) -> Bool {
    waitUntil(timeout: timeout) { requests.count >= count }
  }

  /// Stops accepting and ends every connection.
  func stop() {
    guard !stopped.exchange(true, ordering: .relaxed) else { return }
    let sockets = state.withLock { Array($0.openSockets.values) }
    for socket in sockets { socket.shutdownBoth() }
    // The accept loop polls in short slices and closes the listener when it sees `stopped`.
    waitUntil(timeout: 5) { acceptLoopEnded.load(ordering: .relaxed) }
  }

  private var isStopped: Bool { stopped.load(ordering: .relaxed) }

  private func acceptLoop() {
    defer {
      listener.close()
      acceptLoopEnded.store(true, ordering: .relaxed)
    }
    while !isStopped {
      guard let socket = try? listener.accept(deadline: Deadline(seconds: 0.05)) else { continue }
      let index = state.withLock { state in
        let index = state.connectionsAccepted
        state.connectionsAccepted += 1
        state.openSockets[index] = socket
        return index
      }
      if isStopped { socket.shutdownBoth() }
      if options.noDelay { socket.setNoDelay() }
      let thread = Thread { [self] in serve(socket, index: index) }
      thread.name = "TestBackend.connection.\(index)"
      thread.start()
    }
  }

  /// Serves one connection: requests one after another until the client closes, the
  /// answer closes, or the backend stops. Idle waits are bounded (2 minutes).
  private func serve(_ socket: TestSocket, index: Int) {
    defer {
      _ = state.withLock { $0.openSockets.removeValue(forKey: index) }
      socket.close()
    }
    let reader = WireReader(socket: socket)
    var served = 0
    while !isStopped {
      guard let request = try? readRequest(reader, connectionIndex: index, indexOnConnection: served) else { return }
      served += 1
      state.withLock { $0.requests.append(request) }
      let keepGoing = (try? perform(handler(request), for: request, on: socket)) ?? false
      if !keepGoing {
        if reader.bufferedCount > 0 { state.withLock { $0.closedWithUnreadRequests += 1 } }
        return
      }
    }
  }

  private func readRequest(_ reader: WireReader, connectionIndex: Int, indexOnConnection: Int) throws
    -> ReceivedRequest?
  {
    var deadline = Deadline(seconds: 120)
    if indexOnConnection > 0, let idle = options.keepAliveTimeout {
      let (seconds, attoseconds) = idle.components
      deadline = Deadline(seconds: Double(seconds) + Double(attoseconds) / 1e18)
    }
    let arrivedWithPrevious = indexOnConnection > 0 && reader.bufferedCount > 0
    reader.transcript = []
    guard let raw = try reader.readHead(deadline: deadline) else { return nil }
    deadline = Deadline(seconds: 120)
    let head = try MessageHead(raw: raw)
    let parts = head.startLine.split(separator: " ")
    guard parts.count == 3 else { throw TestSocketError.malformed("request line '\(head.startLine)'") }
    if !options.keepBodies { reader.transcript = nil }
    var body: [UInt8] = []
    var length: Int64 = 0
    var verifier = BodyPattern.Verifier()
    let keep = options.keepBodies
    let collect: BodySink = { bytes in
      length += Int64(bytes.count)
      if keep { body.append(contentsOf: bytes) } else { verifier.check(bytes) }
    }
    if head.isChunked {
      _ = try reader.readChunkedBody(deadline: deadline, into: collect)
    } else if let contentLength = head.contentLength {
      try reader.readBody(length: contentLength, deadline: deadline, into: collect)
    }
    let transcript = reader.transcript ?? raw
    reader.transcript = nil
    return ReceivedRequest(
      head: head, method: String(parts[0]), target: String(parts[1]), body: body, bodyLength: length,
      bodyWasChunked: head.isChunked, raw: transcript, connectionIndex: connectionIndex,
      indexOnConnection: indexOnConnection, arrivedWithPrevious: arrivedWithPrevious,
      bodyMatchedPattern: keep ? nil : verifier.firstMismatch == nil)
  }

  /// Sleeps in short steps so a stopping backend is not held up; false if it stopped.
  private func pause(_ duration: Duration) -> Bool {
    let end = ContinuousClock.now + duration
    while ContinuousClock.now < end {
      if isStopped { return false }
      sleep(for: min(.milliseconds(10), end - ContinuousClock.now))
    }
    return !isStopped
  }

  /// Carries out `action`; returns whether the connection stays open for another request.
  private func perform(_ action: BackendAction, for request: ReceivedRequest, on socket: TestSocket) throws -> Bool {
    let deadline = Deadline(seconds: 120)
    switch action {
    case .reset:
      socket.setLingerZero()
      return false
    case .close:
      return false
    case .closeMidHeaders:
      try socket.send(Array("HTTP/1.1 200 OK\r\nContent-Type: text/pl".utf8), deadline: deadline)
      return false
    case .closeMidBody(let declared, let sent):
      try socket.send(Array("HTTP/1.1 200 OK\r\nContent-Length: \(declared)\r\n\r\n".utf8), deadline: deadline)
      try socket.send(BodyPattern.bytes(sent), deadline: deadline)
      return false
    case .respond(let answer):
      return try respond(answer, to: request, on: socket, deadline: deadline)
    }
  }

  private func respond(
    _ answer: BackendAnswer, to request: ReceivedRequest, on socket: TestSocket, deadline: Deadline
  )
    throws -> Bool
  {
    if answer.delay > .zero && !pause(answer.delay) { return false }
    if let gate = answer.holdUntil, !gate.wait(timeout: 60, giveUp: { isStopped }) { return false }
    if !answer.preamble.isEmpty { try socket.send(answer.preamble, deadline: deadline) }
    if let raw = answer.rawReplacement {
      try socket.send(raw, deadline: deadline)
      return !answer.closeAfter
    }
    let noBody = request.method == "HEAD" || answer.status == 204 || answer.status == 304
    var head = "HTTP/1.1 \(answer.status) \(answer.reason)\r\n"
    for field in answer.headers { head += "\(field.name): \(field.value)\r\n" }
    switch answer.body {
    case .bytes where answer.status == 204 || answer.status == 304: break
    case .bytes(let bytes): head += "Content-Length: \(bytes.count)\r\n"
    case .echo: head += "Content-Length: \(request.body.count)\r\n"
    case .generated(let length, false): head += "Content-Length: \(length)\r\n"
    case .chunked, .generated(_, true): head += "Transfer-Encoding: chunked\r\n"
    case .untilClose: head += "Connection: close\r\n"
    }
    if answer.closeAfter { head += "Connection: close\r\n" }
    head += "\r\n"
    if let interval = answer.headByteInterval {
      for byte in head.utf8 {
        try socket.send([byte], deadline: deadline)
        if !pause(interval) { return false }
      }
    } else {
      try socket.send(Array(head.utf8), deadline: deadline)
    }
    if !noBody {
      switch answer.body {
      case .bytes(let bytes), .untilClose(let bytes):
        try sendPieces(bytes, answer: answer, on: socket, deadline: deadline)
      case .echo:
        try sendPieces(request.body, answer: answer, on: socket, deadline: deadline)
      case .chunked(let chunks):
        for (index, chunk) in chunks.enumerated() where !chunk.isEmpty {
          try socket.send(Array((String(chunk.count, radix: 16) + "\r\n").utf8) + chunk + [13, 10], deadline: deadline)
          countSent(chunk.count)
          if index == 0, let gate = answer.pauseAfterFirstPiece, !gate.wait(timeout: 60, giveUp: { isStopped }) {
            return false
          }
        }
        try socket.send(Array("0\r\n\r\n".utf8), deadline: deadline)
      case .generated(let length, let chunked):
        try sendGenerated(length: length, chunked: chunked, answer: answer, on: socket)
      }
    }
    if case .untilClose = answer.body { return false }
    let clientWantsClose = request.head.values("Connection").contains { $0.lowercased().contains("close") }
    return !answer.closeAfter && !clientWantsClose
  }

  private func countSent(_ count: Int) {
    state.withLock { $0.bodyBytesSent += Int64(count) }
  }

  private func sendPieces(_ bytes: [UInt8], answer: BackendAnswer, on socket: TestSocket, deadline: Deadline) throws {
    guard let trickle = answer.bodyTrickle else {
      try socket.send(bytes, deadline: deadline)
      countSent(bytes.count)
      return
    }
    var offset = 0
    while offset < bytes.count {
      let end = min(bytes.count, offset + max(1, trickle.size))
      try socket.send(Array(bytes[offset..<end]), deadline: deadline)
      countSent(end - offset)
      offset = end
      if offset < bytes.count && !pause(trickle.interval) { return }
    }
  }

  /// Streams `length` pattern bytes. A stalled reader is waited for up to 60 s per block,
  /// which is how backpressure shows up here.
  private func sendGenerated(length: Int64, chunked: Bool, answer: BackendAnswer, on socket: TestSocket) throws {
    var first = true
    try BodyPattern.stream(length: length) { piece in
      if isStopped { throw TestSocketError.closedEarly("backend stopped") }
      if chunked {
        try socket.send(Array((String(piece.count, radix: 16) + "\r\n").utf8), deadline: Deadline(seconds: 60))
      }
      try socket.send(piece, deadline: Deadline(seconds: 60))
      if chunked { try socket.send([13, 10], deadline: Deadline(seconds: 60)) }
      countSent(piece.count)
      if first, let gate = answer.pauseAfterFirstPiece {
        first = false
        if !gate.wait(timeout: 60, giveUp: { isStopped }) { throw TestSocketError.closedEarly("backend stopped") }
      }
    }
    if chunked { try socket.send(Array("0\r\n\r\n".utf8), deadline: Deadline(seconds: 60)) }
  }
}
