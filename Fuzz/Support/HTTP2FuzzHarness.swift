// The checks of the `http2` fuzz target: an HTTP/2 server connection (`HTTP2ServerConnection`,
// its `HTTP2Codec` on libnghttp2, an `HTTP2StreamChannel` per stream) fed what a client might
// send, with an owner whose responders answer each stream the ways the gateway does. Compiled
// into the target by Fuzz/run.sh; it uses only the package's public API.
//
// The connection runs on an `EventLoop` of its own thread over a real loopback socket (a
// `BufferedConnection` needs one); the input is handed to the connection directly, as its
// socket's reads would be, so the pieces are the same on every run. What the server writes is
// read from the client's end and dropped.

import Dispatch
import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseNet
import Glibc

/// libFuzzer's entry: runs one input on the loop and waits for it. A broken invariant traps
/// (`HTTP2FuzzRun.violated`), which libFuzzer reports with the input.
///
/// Byte 0 of an input is a control byte, the rest is what the client sent:
/// - bit 0: 0 sends the client connection preface before the rest, 1 sends the rest alone;
/// - bits 1–2: the rest arrives whole, or in reads of 9, 64 or 1000 bytes;
/// - bit 3: tight limits (4 streams, 4 KB windows, 1 KB header lists and heads);
/// - bits 4–5: how the connection ends: reset by the server, the client's EOF, a drain
///   (GOAWAY, then a reset if streams stay open), or the deadlines passed then the client's EOF;
/// - bit 6: the reads come back to back, with no loop turn between them;
/// - bit 7: each stream's answer is chosen by its id instead of by its path.
enum HTTP2FuzzHarness {
  static func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) {
    let input = size > 0 && data != nil ? [UInt8](UnsafeBufferPointer(start: data, count: size)) : []
    HTTP2FuzzDriver.shared.run(input)
  }
}

/// The loop thread and the listener the client connects through, made at the first input and
/// kept for the process.
final class HTTP2FuzzDriver: @unchecked Sendable {
  static let shared = HTTP2FuzzDriver()

  let group: EventLoopGroup
  let loop: EventLoop
  let listener: TCPListener

  private init() {
    do {
      group = try EventLoopGroup(loopCount: 1)
      listener = try TCPListener(address: .loopback(port: 0), backlog: 16, reusePort: false)
    } catch {
      fatalError("http2 fuzz harness: cannot start its loop or listener: \(error)")
    }
    loop = group.loops[0]
  }

  /// `GATEHOUSE_FUZZ_TRACE=1` prints what each run did, to see what a seed reaches.
  static let traces = getenv("GATEHOUSE_FUZZ_TRACE").map { String(cString: $0) == "1" } ?? false

  func run(_ input: [UInt8]) {
    let done = DispatchSemaphore(value: 0)
    loop.execute { [self] in
      HTTP2FuzzRun(driver: self, input: input) { done.signal() }.start()
    }
    done.wait()
  }
}

/// What the control byte chose.
struct HTTP2FuzzControl {
  enum Ending: UInt8 {
    case reset, clientEOF, drain, deadlines
  }

  let raw: UInt8

  var sendsPreface: Bool { raw & 1 == 0 }
  var readSize: Int { [Int.max, 9, 64, 1000][Int(raw >> 1 & 3)] }
  var tight: Bool { raw & 8 != 0 }
  var ending: Ending { Ending(rawValue: raw >> 4 & 3)! }
  var turnsBetweenReads: Bool { raw & 0x40 == 0 }
  var answersByStream: Bool { raw & 0x80 != 0 }

  var settings: HTTP2Settings {
    tight
      ? HTTP2Settings(maxConcurrentStreams: 4, initialWindowBytes: 4096, maxHeaderListBytes: 1024)
      : HTTP2Settings()
  }

  var parserLimits: HTTPLimits {
    tight
      ? HTTPLimits(
        maxHeaderBytes: 1024, maxHeaderCount: 16, maxLineLength: 256, maxChunkExtensionBytes: 16, maxBodyBytes: 4096)
      : HTTPLimits()
  }
}

/// One input's connection, from connect to the last check. Loop thread only.
final class HTTP2FuzzRun {
  static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
  /// Loop turns after each read: enough for the connection's flushes and closes and the
  /// responders' later steps (at most three turns apart) to run.
  static let settlingTurns = 8

  let driver: HTTP2FuzzDriver
  let loop: EventLoop
  let control: HTTP2FuzzControl
  let reads: [[UInt8]]
  let done: () -> Void
  let log = HTTP2FuzzLog()
  private var owner: HTTP2FuzzOwner?
  private var client: TCPSocket?
  private var socket: BufferedConnection?
  private var connection: HTTP2ServerConnection?
  private weak var weakConnection: HTTP2ServerConnection?
  private weak var weakCodec: HTTP2Codec?
  private weak var weakSocket: BufferedConnection?
  private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)

  init(driver: HTTP2FuzzDriver, input: [UInt8], done: @escaping () -> Void) {
    self.driver = driver
    loop = driver.loop
    control = HTTP2FuzzControl(raw: input.first ?? 0)
    var bytes = control.sendsPreface ? Self.preface : []
    bytes += input.dropFirst()
    var reads: [[UInt8]] = []
    var start = 0
    while start < bytes.count {
      let end = start + min(control.readSize, bytes.count - start)
      reads.append(Array(bytes[start..<end]))
      start = end
    }
    self.reads = reads
    self.done = done
  }

  deinit {
    scratch.deallocate()
  }

  static func violated(_ message: String) -> Never {
    fatalError("fuzz invariant violated (http2): \(message)")
  }

  // MARK: Steps

  func start() {
    let (client, accepted) = connect()
    self.client = client
    let owner = HTTP2FuzzOwner(log: log, control: control, loop: loop)
    self.owner = owner
    let connection = HTTP2ServerConnection(
      owner: owner, loop: loop, settings: control.settings, parserLimits: control.parserLimits,
      limits: HTTP2ServerLimits(headerTimeoutNanoseconds: 10_000_000_000, idleTimeoutNanoseconds: 30_000_000_000))
    let socket: BufferedConnection
    do {
      socket = try BufferedConnection(socket: accepted, loop: loop, delegate: connection)
    } catch {
      fatalError("http2 fuzz harness: cannot register the connection: \(error)")
    }
    self.connection = connection
    self.socket = socket
    weakConnection = connection
    weakCodec = connection.codec
    weakSocket = socket
    connection.start(socket)
    feed(from: 0)
  }

  /// The client connects to the driver's listener; both ends are non-blocking.
  private func connect() -> (client: TCPSocket, accepted: TCPSocket) {
    do {
      let (client, _) = try TCPSocket.connect(to: driver.listener.localAddress)
      for _ in 0..<1000 {
        if case .processed(let accepted) = try driver.listener.accept() { return (client, accepted) }
        var entry = pollfd(fd: driver.listener.fileDescriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&entry, 1, 10)
      }
    } catch {
      fatalError("http2 fuzz harness: loopback connect failed: \(error)")
    }
    fatalError("http2 fuzz harness: the listener never saw the connection")
  }

  private func feed(from index: Int) {
    var index = index
    while index < reads.count {
      guard let connection, let socket, !socket.isClosed else { break }
      // Each read in its own allocation, freed right after: a codec that kept a pointer into
      // it trips AddressSanitizer.
      let read = UnsafeMutableRawBufferPointer.allocate(byteCount: reads[index].count, alignment: 1)
      reads[index].withUnsafeBytes { read.copyMemory(from: $0) }
      connection.connection(socket, didRead: UnsafeRawBufferPointer(read))
      read.deallocate()
      index += 1
      if control.turnsBetweenReads && index < reads.count {
        let next = index
        after(turns: Self.settlingTurns) { [self] in
          checkStep()
          feed(from: next)
        }
        return
      }
    }
    after(turns: Self.settlingTurns) { [self] in
      checkStep()
      end()
    }
  }

  private func end() {
    guard let connection, let socket, !socket.isClosed else {
      waitForClose(turnsLeft: 64)
      return
    }
    switch control.ending {
    case .reset:
      connection.abort()
    case .clientEOF:
      clientSendsEOF()
    case .drain:
      connection.drain()
      after(turns: Self.settlingTurns) { [self] in
        drainClient()
        if let connection = self.connection, !connection.isClosed { connection.abort() }
        waitForClose(turnsLeft: 64)
      }
      return
    case .deadlines:
      // Far past every deadline: the responders', the stalled streams', the idle one. Twice,
      // as a stream that moved at the first check gets a second period.
      let now = loop.iterationTime &+ 86_400_000_000_000
      connection.checkDeadline(now: now)
      after(turns: Self.settlingTurns) { [self] in
        checkStep()
        if let connection = self.connection, !connection.isClosed {
          connection.checkDeadline(now: now &+ 86_400_000_000_000)
        }
        after(turns: Self.settlingTurns) { [self] in
          checkStep()
          clientSendsEOF()
          waitForClose(turnsLeft: 64)
        }
      }
      return
    }
    waitForClose(turnsLeft: 64)
  }

  private func clientSendsEOF() {
    drainClient()
    try? client?.shutdownOutput()
  }

  private func waitForClose(turnsLeft: Int) {
    drainClient()
    guard let connection, !connection.isClosed else {
      finish()
      return
    }
    guard turnsLeft > 0 else {
      Self.violated("the connection did not close (ending \(control.ending), client EOF or reset)")
    }
    loop.executeLater { [self] in waitForClose(turnsLeft: turnsLeft - 1) }
  }

  /// The connection is closed: every stream's responder must have heard so, and once the
  /// responders' leftover steps have run against their closed channels, nothing of the
  /// connection may be left.
  private func finish() {
    if log.connectionClosedCalls != 1 {
      Self.violated("http2ConnectionClosed called \(log.connectionClosedCalls) times")
    }
    client?.abort()
    client = nil
    connection = nil
    socket = nil
    owner = nil
    after(turns: Self.settlingTurns) { [self] in
      if log.responders != log.closes {
        Self.violated("\(log.responders) streams had a responder, \(log.closes) heard serverClosed")
      }
      if log.liveResponders != 0 { Self.violated("\(log.liveResponders) responders outlived their connection") }
      if weakConnection != nil { Self.violated("the HTTP2ServerConnection outlived its socket") }
      if weakCodec != nil { Self.violated("the HTTP2Codec outlived its connection") }
      if weakSocket != nil { Self.violated("the BufferedConnection outlived its close") }
      if loop.registrationCount != 0 {
        Self.violated("\(loop.registrationCount) descriptors still registered on the loop")
      }
      if HTTP2FuzzDriver.traces {
        print(
          "http2: \(reads.count) reads, \(log.responders) responders (\(log.finished) finished, "
            + "\(log.reuses) kept for another stream), "
            + "\(log.abuses) abuses, \(log.clientBytes) bytes to the client, ending \(control.ending)")
      }
      done()
    }
  }

  /// Checks that hold after every settled step: each stream holds at most the answer bytes
  /// its responder wrote, no more streams than allowed are open, and a failed codec has
  /// closed the connection.
  private func checkStep() {
    drainClient()
    guard let connection, !connection.isClosed else { return }
    let codec = connection.codec!
    for responder in log.openResponders() {
      let queued = codec.queuedBytes(responder.stream)
      if queued > responder.written {
        Self.violated("stream \(responder.stream) queues \(queued) bytes of an answer of \(responder.written)")
      }
    }
    if codec.openStreamCount > control.settings.maxConcurrentStreams {
      Self.violated("\(codec.openStreamCount) streams open, limit \(control.settings.maxConcurrentStreams)")
    }
    if codec.failed {
      Self.violated("the codec failed but the connection is still open after \(Self.settlingTurns) turns")
    }
  }

  /// Reads and drops what the server sent.
  private func drainClient() {
    guard let client else { return }
    while true {
      switch try? client.read(into: scratch) {
      case .processed(let count)? where count > 0: log.clientBytes += count
      default: return
      }
    }
  }

  func after(turns: Int, _ body: @escaping () -> Void) {
    if turns == 0 {
      body()
    } else {
      loop.executeLater { [self] in after(turns: turns - 1, body) }
    }
  }
}

/// What the responders heard, counted for the checks at the end of a run.
final class HTTP2FuzzLog {
  var responders = 0
  var closes = 0
  var liveResponders = 0
  var connectionClosedCalls = 0
  var abuses = 0
  var finished = 0
  /// Responders kept by the connection for a later stream.
  var reuses = 0
  var clientBytes = 0
  private var all: [Weak] = []

  private struct Weak {
    weak var responder: HTTP2FuzzResponder?
  }

  func add(_ responder: HTTP2FuzzResponder) {
    responders += 1
    all.append(Weak(responder: responder))
  }

  func openResponders() -> [HTTP2FuzzResponder] {
    all.compactMap { $0.responder }.filter { !$0.closed }
  }
}

/// The owner of the connection: a responder per stream, and the connection's end.
final class HTTP2FuzzOwner: HTTP2ServerOwner {
  let log: HTTP2FuzzLog
  let control: HTTP2FuzzControl
  let loop: EventLoop

  init(log: HTTP2FuzzLog, control: HTTP2FuzzControl, loop: EventLoop) {
    self.log = log
    self.control = control
    self.loop = loop
  }

  func responder(for channel: HTTP2StreamChannel) -> any ServerResponder {
    let responder = HTTP2FuzzResponder(channel: channel, loop: loop, log: log, byStream: control.answersByStream)
    log.add(responder)
    return responder
  }

  func http2Connection(_ connection: HTTP2ServerConnection, abused abuse: HTTP2Abuse) {
    log.abuses += 1
    if log.abuses > 1 { HTTP2FuzzRun.violated("a second abuse reported: \(abuse)") }
  }

  func http2ConnectionClosed(_ connection: HTTP2ServerConnection) {
    log.connectionClosedCalls += 1
    if log.closes != log.responders {
      HTTP2FuzzRun.violated("connection closed with \(log.responders - log.closes) responders not told")
    }
  }
}

/// How a responder answers its stream: the ways the gateway's exchanges end, from a whole
/// answer at the head to one cut halfway. Chosen by the last character of the request's
/// path (`/0` … `/9`), or by the stream id.
enum HTTP2FuzzAnswer: Int, CaseIterable {
  /// `200` with a 5-byte body, written whole when the head comes.
  case wholeAtHead
  /// A chunked answer streamed in pieces over three loop turns, a trailer at the end.
  case chunkedInPieces
  /// The body read whole, then sent back.
  case echoAtEnd
  /// The stream reset when the head comes.
  case resetAtHead
  /// Part of an answer, then a reset on a later turn.
  case resetMidAnswer
  /// Reading paused (upstream backpressure) for two turns, then the body echoed.
  case pausedThenEcho
  /// 150,000 bytes, more than any window: reading pauses while the client is behind.
  case large
  /// Nothing until the responder's deadline, then a `504`.
  case atDeadline
  /// A `103`, then a `200` with connection fields and a body that ends when the answer does.
  case unframed
  /// Bytes that do not read as an answer: the channel cuts the stream.
  case garbled
}

/// One stream's responder: answers as its `HTTP2FuzzAnswer` says and checks the order of what
/// the channel tells it. When its stream's exchange finished, the connection may keep it for
/// a later stream (`serverStreamEnded`): it then starts over, and its steps still pending for
/// the stream before are dropped, as the gateway's sessions drop the work of an exchange that
/// is over.
final class HTTP2FuzzResponder: ServerResponder {
  let channel: HTTP2StreamChannel
  private(set) var stream: Int32
  /// Bumped at each new stream it serves; a pending step runs only for its own stream.
  private var generation = 0
  let loop: EventLoop
  let log: HTTP2FuzzLog
  let byStream: Bool
  private var answer = HTTP2FuzzAnswer.wholeAtHead
  private var isHEAD = false
  private var heardHead = false
  private var refused = false
  private var requestEnded = false
  private var answerEnded = false
  /// The answer was cut (a reset, or bytes the channel could not read): the request's body
  /// may still come until the stream closes.
  private var aborted = false
  private var finished = false
  private var behind = false
  private(set) var closed = false
  /// Answer bytes written to the channel (head included): what its stream may hold queued.
  private(set) var written = 0
  private var body: [UInt8] = []

  init(channel: HTTP2StreamChannel, loop: EventLoop, log: HTTP2FuzzLog, byStream: Bool) {
    self.channel = channel
    stream = channel.stream
    self.loop = loop
    self.log = log
    self.byStream = byStream
    log.liveResponders += 1
  }

  deinit {
    log.liveResponders -= 1
  }

  private func expect(_ condition: Bool, _ what: @autoclosure () -> String) {
    if !condition { HTTP2FuzzRun.violated("stream \(stream): \(what())") }
  }

  private func expectOpen(_ event: String) {
    expect(!closed, "\(event) after serverClosed")
  }

  // MARK: The channel's events

  func serverReceivedHead(_ head: HTTPRequestHead) {
    expectOpen("serverReceivedHead")
    expect(!heardHead && !refused, "a second head or refusal")
    stream = channel.stream
    heardHead = true
    isHEAD = head.method == .head
    let chooser = byStream ? Int(stream >> 1) : Int((head.target.last ?? 0x30) &- 0x30)
    answer = HTTP2FuzzAnswer(rawValue: chooser % HTTP2FuzzAnswer.allCases.count)!
    switch answer {
    case .wholeAtHead:
      writeWhole(status: 200, body: Array("hello".utf8))
    case .chunkedInPieces:
      _ = channel.beginAnswer(.streamed)
      write("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-")
      write("encoding: chunked\r\n\r\n5\r\nfirst\r\n")
      later(1) { $0.write("6\r\nsecond\r\n") }
      later(3) {
        $0.write("0\r\nx-trailer: t\r\n\r\n")
        $0.endAnswer()
      }
    case .echoAtEnd, .pausedThenEcho:
      if answer == .pausedThenEcho {
        channel.setReadingPaused(true, reason: .backpressure)
        later(2) { $0.channel.setReadingPaused(false, reason: .backpressure) }
      }
    case .resetAtHead:
      abort()
    case .resetMidAnswer:
      _ = channel.beginAnswer(.streamed)
      write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
      later(1) { $0.abort() }
    case .large:
      _ = channel.beginAnswer(.whole)
      write("HTTP/1.1 200 OK\r\ncontent-length: 150000\r\n\r\n")
      if !isHEAD {
        let piece = [UInt8](repeating: 0x6C, count: 50_000)
        for _ in 0..<3 { write(piece) }
      }
      endAnswer()
    case .atDeadline:
      channel.setResponderDeadline(after: 1_000_000_000)
    case .unframed:
      _ = channel.beginAnswer(.streamed)
      write("HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n")
      write("HTTP/1.1 200 OK\r\nconnection: keep-alive\r\nkeep-alive: timeout=5\r\nupgrade: h2c\r\n\r\n")
      if !isHEAD { write("until the upstream closes") }
      later(1) { $0.endAnswer() }
    case .garbled:
      _ = channel.beginAnswer(.whole)
      if write("HTTP/1.1 2x0 Nope\r\n\r\n") {
        endAnswer()
      } else {
        aborted = true
      }
    }
  }

  func serverReceivedBody(_ bytes: UnsafeRawBufferPointer) {
    expectOpen("serverReceivedBody")
    expect(heardHead, "body before a head")
    expect(!requestEnded, "body after the request's end")
    expect(!answerEnded || aborted, "body after the answer ended")
    if body.count < 1 << 20 { body.append(contentsOf: bytes.prefix((1 << 20) - body.count)) }
  }

  func serverReceivedEnd() {
    expectOpen("serverReceivedEnd")
    expect(heardHead, "end before a head")
    expect(!requestEnded, "a second end")
    expect(!answerEnded || aborted, "end after the answer ended")
    requestEnded = true
    if answer == .echoAtEnd || answer == .pausedThenEcho { writeWhole(status: 200, body: body) }
  }

  func serverRefusedRequest(_ error: HTTPParseError) {
    expectOpen("serverRefusedRequest")
    stream = channel.stream
    expect(!heardHead && !refused, "a refusal after a head or refusal")
    refused = true
    // One refusal in ten goes unanswered (the channel resets the stream).
    if byStream || stream % 10 != 7 { writeWhole(status: error.status, body: []) }
  }

  func serverExchangeFinished() {
    expectOpen("serverExchangeFinished")
    expect(heardHead && !refused, "finished without a head")
    expect(answerEnded, "finished before the answer ended")
    expect(!finished, "finished twice")
    finished = true
    log.finished += 1
  }

  func serverResponderDeadlinePassed() {
    expectOpen("serverResponderDeadlinePassed")
    if answer == .atDeadline && !answerEnded { writeWhole(status: 504, body: Array("late".utf8)) }
  }

  func serverClientFellBehind() {
    expectOpen("serverClientFellBehind")
    expect(!behind, "fell behind twice")
    behind = true
    if !answerEnded { channel.setReadingPaused(true, reason: .backpressure) }
  }

  func serverClientCaughtUp() {
    expectOpen("serverClientCaughtUp")
    expect(behind, "caught up without falling behind")
    behind = false
    channel.setReadingPaused(false, reason: .backpressure)
  }

  func serverStreamEnded() {
    expectOpen("serverStreamEnded")
    expect(finished && !refused && !aborted, "kept for another stream without finishing this one")
    generation += 1
    log.reuses += 1
    isHEAD = false
    heardHead = false
    requestEnded = false
    answerEnded = false
    finished = false
    behind = false
    written = 0
    body = []
  }

  func serverClosed(reason: ConnectionCloseReason, answerStarted: Bool) {
    expectOpen("serverClosed")
    closed = true
    log.closes += 1
  }

  // MARK: Answering

  @discardableResult
  private func write(_ text: String) -> Bool {
    write(Array(text.utf8))
  }

  @discardableResult
  private func write(_ bytes: [UInt8]) -> Bool {
    written += bytes.count
    return channel.write(bytes)
  }

  private func abort() {
    aborted = true
    channel.abort()
  }

  private func endAnswer() {
    answerEnded = true
    channel.endAnswer()
  }

  private func writeWhole(status: Int, body: [UInt8]) {
    _ = channel.beginAnswer(.whole)
    write("HTTP/1.1 \(status) X\r\ncontent-length: \(body.count)\r\n\r\n")
    if !isHEAD && !body.isEmpty { write(body) }
    endAnswer()
  }

  /// `step` after `turns` loop turns, whether or not the stream is still open then: a
  /// gateway's upstream may answer after the client has gone.
  private func later(_ turns: Int, _ step: @escaping (HTTP2FuzzResponder) -> Void) {
    later(turns, of: generation, step)
  }

  private func later(_ turns: Int, of generation: Int, _ step: @escaping (HTTP2FuzzResponder) -> Void) {
    guard generation == self.generation else { return }
    if turns == 0 {
      step(self)
    } else {
      loop.executeLater { [self] in later(turns - 1, of: generation, step) }
    }
  }
}
