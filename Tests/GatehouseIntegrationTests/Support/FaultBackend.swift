import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// One fault a `FaultBackend` applies to an answer, named after the toxics of proxy-fault
/// tools (latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data).
enum Toxic: Sendable {
  /// Waits `base` plus a random part of `jitter` before the first byte.
  case latency(Duration, jitter: Duration = .zero)
  /// Sends at most `bytesPerSecond`, in pieces a twentieth of a second apart.
  case bandwidth(bytesPerSecond: Int)
  /// After the answer, keeps the connection open until `gate` opens (or `limit` passes),
  /// then closes it.
  case slowClose(gate: Gate, limit: Duration)
  /// A black hole: reads the request, never answers, and keeps the connection open until
  /// the peer closes it or the backend stops.
  case blackHole
  /// Reads the request, then resets the connection (RST) without a byte of answer.
  case resetPeer
  /// Sends the answer in writes of `size` bytes (`TCP_NODELAY`, so each is its own
  /// segment), `interval` apart.
  case slicer(size: Int, interval: Duration)
  /// Sends only the first `bytes` bytes of the answer, then closes (FIN).
  case limitData(bytes: Int)
}

/// What a `FaultBackend` does with one request: raw answer bytes (well-formed or not, sent
/// in `pieces` with `pause` between them), the toxics applied to them, and whether the
/// connection stays open for another request afterwards.
struct FaultAnswer: Sendable {
  var pieces: [[UInt8]]
  var pause: Duration = .zero
  var toxics: [Toxic] = []
  /// Reads another request on the connection after this answer; false closes it (FIN).
  var keepAlive = true

  init(_ pieces: [[UInt8]], pause: Duration = .zero, toxics: [Toxic] = [], keepAlive: Bool = true) {
    self.pieces = pieces
    self.pause = pause
    self.toxics = toxics
    self.keepAlive = keepAlive
  }

  /// A well-formed answer: `status`, `headers` and `body` with a Content-Length.
  static func http(
    status: Int = 200, reason: String = "OK", headers: [(String, String)] = [], body: [UInt8],
    toxics: [Toxic] = []
  ) -> FaultAnswer {
    var head = "HTTP/1.1 \(status) \(reason)\r\n"
    for (name, value) in headers { head += "\(name): \(value)\r\n" }
    head += "Content-Length: \(body.count)\r\n\r\n"
    return FaultAnswer([Array(head.utf8) + body], toxics: toxics)
  }

  /// A 200 JSON answer with `json` as its body.
  static func json(_ json: String, toxics: [Toxic] = []) -> FaultAnswer {
    http(headers: [("Content-Type", "application/json")], body: Array(json.utf8), toxics: toxics)
  }

  /// These exact bytes, one write, then the connection closes.
  static func raw(_ bytes: [UInt8], keepAlive: Bool = false) -> FaultAnswer {
    FaultAnswer([bytes], keepAlive: keepAlive)
  }

  /// These exact bytes (UTF-8), one write, then the connection closes.
  static func raw(_ text: String, keepAlive: Bool = false) -> FaultAnswer {
    raw(Array(text.utf8), keepAlive: keepAlive)
  }
}

/// An in-process HTTP/1.1 backend on 127.0.0.1 that misbehaves on purpose: each request is
/// answered as the handler says, through toxics (latency, bandwidth cap, slow close, black
/// hole, reset, tiny segments, close after N bytes) or with malformed raw bytes. It also keeps
/// every byte received on each connection, including bytes that never made a complete
/// request, so smuggling tests can check exactly what reached the backend.
///
/// One accept thread and one thread per connection; every wait is bounded, and `stop()` ends
/// them all.
final class FaultBackend: Sendable {
  private struct State {
    var requests: [ReceivedRequest] = []
    /// Every byte received, per connection (index = order of accept).
    var received: [[UInt8]] = []
    var openSockets: [Int: TestSocket] = [:]
    var openConnections = 0
  }

  let port: UInt16
  private let listener: TestSocket
  private let handler: Mutex<@Sendable (ReceivedRequest) -> FaultAnswer>
  /// Answers a request from its head alone, before its body is read (as authentication
  /// middleware answers 401), when it returns an answer. The request is recorded with no
  /// body; the connection ends after the answer unless the answer keeps it alive, and then
  /// whatever comes next on it is read as the next request (the unread body included, as
  /// a careless server would).
  private let headAnswer: (@Sendable (MessageHead) -> FaultAnswer?)?
  private let state = Mutex(State())
  private let stopped = Atomic<Bool>(false)
  private let acceptLoopEnded = Atomic<Bool>(false)

  /// Starts a backend that answers each request as `handler` decides.
  init(
    headAnswer: (@Sendable (MessageHead) -> FaultAnswer?)? = nil,
    handler: @escaping @Sendable (ReceivedRequest) -> FaultAnswer
  ) throws {
    listener = try TestSocket.listen(backlog: 512)
    port = listener.localPort
    self.handler = Mutex(handler)
    self.headAnswer = headAnswer
    let thread = Thread { [self] in acceptLoop() }
    thread.name = "FaultBackend.accept"
    thread.start()
  }

  deinit { stop() }

  /// Replaces the handler for requests that arrive from now on.
  func setHandler(_ handler: @escaping @Sendable (ReceivedRequest) -> FaultAnswer) {
    self.handler.withLock { $0 = handler }
  }

  /// Every complete request received so far, in arrival order.
  var requests: [ReceivedRequest] { state.withLock { $0.requests } }

  /// The bytes received on each connection so far, in accept order.
  var receivedPerConnection: [[UInt8]] { state.withLock { $0.received } }

  /// Connections accepted so far.
  var connectionCount: Int { state.withLock { $0.received.count } }

  /// Connections open right now.
  var openConnectionCount: Int { state.withLock { $0.openConnections } }

  /// Stops accepting and ends every connection (bounded wait for the accept thread).
  func stop() {
    guard !stopped.exchange(true, ordering: .relaxed) else { return }
    let sockets = state.withLock { Array($0.openSockets.values) }
    for socket in sockets { socket.shutdownBoth() }
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
        state.received.append([])
        state.openSockets[state.received.count - 1] = socket
        state.openConnections += 1
        return state.received.count - 1
      }
      if isStopped { socket.shutdownBoth() }
      let thread = Thread { [self] in serve(socket, index: index) }
      thread.name = "FaultBackend.connection.\(index)"
      thread.start()
    }
  }

  private func record(_ bytes: [UInt8], connection index: Int) {
    guard !bytes.isEmpty else { return }
    state.withLock { $0.received[index].append(contentsOf: bytes) }
  }

  private func serve(_ socket: TestSocket, index: Int) {
    let reader = WireReader(socket: socket)
    // Set when an answer ends the connection: then it closes at once, as servers do.
    var closesByChoice = false
    defer {
      // Whatever else arrived (a request cut short, bytes after a refusal) is kept too.
      var rest: [UInt8] = []
      reader.transcript = nil
      try? reader.readToEnd(deadline: Deadline(seconds: closesByChoice ? 0 : 0.2)) { rest.append(contentsOf: $0) }
      record(rest, connection: index)
      state.withLock { state in
        state.openSockets.removeValue(forKey: index)
        state.openConnections -= 1
      }
      socket.close()
    }
    var served = 0
    while !isStopped {
      reader.transcript = []
      let request: ReceivedRequest?
      do {
        request = try readRequest(reader, connection: index, indexOnConnection: served)
      } catch {
        record(reader.transcript ?? [], connection: index)
        return
      }
      record(reader.transcript ?? [], connection: index)
      reader.transcript = nil
      guard let request else { return }
      served += 1
      state.withLock { $0.requests.append(request) }
      if request.bodyLength < 0, let answer = headAnswer?(request.head) {
        guard (try? perform(answer, on: socket, reader: reader)) == true, answer.keepAlive else {
          closesByChoice = true
          return
        }
        continue
      }
      let answer = handler.withLock { $0 }(request)
      guard (try? perform(answer, on: socket, reader: reader)) == true else {
        closesByChoice = true
        return
      }
    }
  }

  private func readRequest(_ reader: WireReader, connection: Int, indexOnConnection: Int) throws -> ReceivedRequest? {
    let deadline = Deadline(seconds: 60)
    guard let raw = try reader.readHead(deadline: deadline) else { return nil }
    let head = try MessageHead(raw: raw)
    let parts = head.startLine.split(separator: " ")
    guard parts.count == 3 else { throw TestSocketError.malformed("request line '\(head.startLine)'") }
    if let headAnswer, headAnswer(head) != nil {
      // Answered from the head: a body length of -1 tells `serve` so.
      return ReceivedRequest(
        head: head, method: String(parts[0]), target: String(parts[1]), body: [], bodyLength: -1,
        bodyWasChunked: head.isChunked, raw: raw, connectionIndex: connection, indexOnConnection: indexOnConnection,
        arrivedWithPrevious: false, bodyMatchedPattern: nil)
    }
    var body: [UInt8] = []
    let collect: BodySink = { body.append(contentsOf: $0) }
    if head.isChunked {
      _ = try reader.readChunkedBody(deadline: deadline, into: collect)
    } else if let length = head.contentLength {
      try reader.readBody(length: length, deadline: deadline, into: collect)
    }
    return ReceivedRequest(
      head: head, method: String(parts[0]), target: String(parts[1]), body: body, bodyLength: Int64(body.count),
      bodyWasChunked: head.isChunked, raw: reader.transcript ?? raw, connectionIndex: connection,
      indexOnConnection: indexOnConnection, arrivedWithPrevious: false, bodyMatchedPattern: nil)
  }

  /// Sleeps in short steps; false if the backend stopped meanwhile.
  private func pause(_ duration: Duration) -> Bool {
    let end = ContinuousClock.now + duration
    while ContinuousClock.now < end {
      if isStopped { return false }
      sleep(for: min(.milliseconds(10), end - ContinuousClock.now))
    }
    return !isStopped
  }

  /// Waits (bounded, 60 s) until the peer closes the connection or the backend stops.
  private func holdUntilPeerCloses(_ socket: TestSocket, reader: WireReader) {
    let end = Deadline(seconds: 60)
    while !isStopped && !end.hasPassed {
      do {
        try reader.readToEnd(deadline: Deadline(seconds: 0.1)) { _ in }
        return
      } catch TestSocketError.timedOut {
        continue
      } catch {
        return
      }
    }
  }

  /// Carries out one answer; returns whether the connection stays open for another request.
  private func perform(_ answer: FaultAnswer, on socket: TestSocket, reader: WireReader) throws -> Bool {
    let deadline = Deadline(seconds: 60)
    var sliceSize = Int.max
    var sliceInterval = Duration.zero
    var limit = Int.max
    var slowClose: (gate: Gate, limit: Duration)?
    for toxic in answer.toxics {
      switch toxic {
      case .resetPeer:
        socket.setLingerZero()
        return false
      case .blackHole:
        holdUntilPeerCloses(socket, reader: reader)
        return false
      case .latency(let base, let jitter):
        let extra = jitter > .zero ? jitter * Double.random(in: 0...1) : .zero
        if !pause(base + extra) { return false }
      case .bandwidth(let bytesPerSecond):
        sliceSize = min(sliceSize, max(1, bytesPerSecond / 20))
        sliceInterval = max(sliceInterval, .milliseconds(50))
      case .slicer(let size, let interval):
        sliceSize = min(sliceSize, max(1, size))
        sliceInterval = max(sliceInterval, interval)
        var one: Int32 = 1
        setsockopt(socket.descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
      case .limitData(let bytes):
        limit = min(limit, bytes)
      case .slowClose(let gate, let duration):
        slowClose = (gate, duration)
      }
    }
    var sent = 0
    for (pieceIndex, piece) in answer.pieces.enumerated() {
      if pieceIndex > 0 && answer.pause > .zero && !pause(answer.pause) { return false }
      var offset = 0
      while offset < piece.count && sent < limit {
        let end = min(piece.count, offset + sliceSize, offset + (limit - sent))
        try socket.send(Array(piece[offset..<end]), deadline: deadline)
        sent += end - offset
        offset = end
        if sliceInterval > .zero && offset < piece.count && !pause(sliceInterval) { return false }
      }
      if sent >= limit { return false }
    }
    if let slowClose {
      let seconds = Double(slowClose.limit.components.seconds)
      _ = slowClose.gate.wait(timeout: seconds) { isStopped }
      return false
    }
    return answer.keepAlive
  }
}
