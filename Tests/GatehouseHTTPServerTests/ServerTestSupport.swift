import Dispatch
import GatehouseHTTP
import GatehouseHTTPServer
import Glibc
import Synchronization

@testable import GatehouseNet

struct TestFailure: Error, CustomStringConvertible {
  let description: String
}

/// Polls `condition` every 5 ms until it holds or `timeout` passes: tests assert outcomes,
/// not speed, so the deadline is generous.
@discardableResult
func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
  let deadline = ContinuousClock.now + timeout
  while ContinuousClock.now < deadline {
    if condition() { return true }
    usleep(5_000)
  }
  return condition()
}

/// What happened on the server, in order, written on the loop and read by the test.
final class EventLog: Sendable {
  private let entries = Mutex<[String]>([])
  func append(_ entry: String) { entries.withLock { $0.append(entry) } }
  var all: [String] { entries.withLock { $0 } }
  func contains(_ entry: String) -> Bool { all.contains(entry) }
  func index(of entry: String) -> Int? { all.firstIndex(of: entry) }
}

/// A responder that logs what it hears and answers each request with its target as the body
/// (or `bodySize` bytes), at the request's end, at its head, or when the test says so.
final class TestResponder: ServerResponder {
  enum Timing {
    case atEnd
    case atHead
    /// `TestServer.answerPending()` answers.
    case manual
  }

  private(set) var http: HTTP1ServerConnection!
  let log: EventLog
  var timing = Timing.atEnd
  var bodySize: Int?
  /// Asks for 100 Continue twice at every head (it must go out once).
  var continueAtHead = false
  private var target = ""
  private(set) var waiting = false

  init(loop: EventLoop, limits: HTTP1ServerLimits, log: EventLog) {
    self.log = log
    http = HTTP1ServerConnection(responder: self, loop: loop, parserLimits: HTTPLimits(), limits: limits)
  }

  func serverReceivedHead(_ head: HTTPRequestHead) {
    target = head.targetString
    log.append("head \(target)")
    if continueAtHead {
      http.writeContinue()
      http.writeContinue()
    }
    if timing == .atHead { answer() }
  }

  func serverReceivedBody(_ bytes: UnsafeRawBufferPointer) {
    log.append("body \(String(decoding: bytes, as: UTF8.self))")
  }

  func serverReceivedEnd() {
    log.append("end \(target)")
    switch timing {
    case .atEnd: answer()
    case .manual: waiting = true
    case .atHead: break
    }
  }

  func answer() {
    waiting = false
    let body = bodySize.map { [UInt8](repeating: UInt8(ascii: "x"), count: $0) } ?? Array(target.utf8)
    write(status: 200, body: body)
    log.append("answered \(target)")
  }

  private func write(status: Int, body: [UInt8]) {
    let close = http.beginAnswer(.whole)
    var out = Array("HTTP/1.1 \(status) X\r\nContent-Length: \(body.count)\r\n".utf8)
    if close { out += Array("Connection: close\r\n".utf8) }
    out += Array("\r\n".utf8) + body
    http.write(out)
    http.endAnswer()
  }

  func serverRefusedRequest(_ error: HTTPParseError) {
    log.append("refused \(error.status)")
    write(status: error.status, body: [])
  }

  func serverRequestTimedOut() {
    log.append("timed out")
    write(status: 408, body: [])
  }

  func serverExchangeFinished() { log.append("finished \(target)") }

  func serverClosed(reason: ConnectionCloseReason, answerStarted: Bool) {
    log.append("closed")
  }
}

/// A listener on a loop of its own whose connections are `HTTP1ServerConnection`s with a
/// `TestResponder`, and a sweep checking their deadlines every 20 ms.
final class TestServer: @unchecked Sendable {
  let group: EventLoopGroup
  let loop: EventLoop
  let port: UInt16
  let log = EventLog()
  private let listener: TCPListener
  private let limits: HTTP1ServerLimits
  private let configure: @Sendable (TestResponder) -> Void
  /// Loop thread only.
  private var responders: [TestResponder] = []
  private var sweep: TimerHandle?

  init(
    limits: HTTP1ServerLimits = TestServer.relaxed, configure: @escaping @Sendable (TestResponder) -> Void = { _ in }
  ) throws {
    group = try EventLoopGroup(loopCount: 1)
    loop = group.loops[0]
    listener = try TCPListener(address: .loopback(port: 0))
    port = listener.localPort
    self.limits = limits
    self.configure = configure
    try onLoop { [self] in
      try listener.startAccepting(on: loop) { [self] socket in accept(socket) }
      scheduleSweep()
    }
  }

  /// Timeouts no test waits for.
  static let relaxed = HTTP1ServerLimits(
    headerTimeoutNanoseconds: 30_000_000_000, idleTimeoutNanoseconds: 30_000_000_000)

  static func short(milliseconds: UInt64) -> HTTP1ServerLimits {
    HTTP1ServerLimits(
      headerTimeoutNanoseconds: milliseconds * 1_000_000, idleTimeoutNanoseconds: milliseconds * 1_000_000)
  }

  private func accept(_ socket: TCPSocket) {
    let responder = TestResponder(loop: loop, limits: limits, log: log)
    configure(responder)
    responders.append(responder)
    do {
      responder.http.start(try BufferedConnection(socket: socket, loop: loop, delegate: responder.http))
    } catch {
      log.append("accept failed")
    }
  }

  private func scheduleSweep() {
    sweep = loop.scheduleTimer(after: .milliseconds(20)) { [self] in
      for responder in responders { responder.http.checkDeadline(now: loop.iterationTime) }
      scheduleSweep()
    }
  }

  /// Runs `body` on the loop and waits (at most 10 s) for it.
  func onLoop<T: Sendable>(_ body: @escaping () throws -> T) throws -> T {
    let slot = ResultSlot<T>()
    let done = DispatchSemaphore(value: 0)
    let task = UncheckedTask(body)
    loop.execute {
      slot.store(Result { try task.body() })
      done.signal()
    }
    guard done.wait(timeout: .now() + 10) == .success, let result = slot.take() else {
      throw TestFailure(description: "loop did not answer")
    }
    return try result.get()
  }

  /// The first connection's layer, read on the loop.
  func inspect<T: Sendable>(_ read: @escaping (HTTP1ServerConnection) -> T) throws -> T? {
    try onLoop { [self] in responders.first.map { read($0.http) } }
  }

  /// Answers the request a `.manual` responder waits to answer.
  func answerPending() throws {
    try onLoop { [self] in
      for responder in responders where responder.waiting { responder.answer() }
    }
  }

  func shutdown() {
    try? onLoop { [self] in
      if let sweep { loop.cancelTimer(sweep) }
      listener.close()
      for responder in responders { responder.http.abort() }
    }
    group.shutdown()
  }
}

final class ResultSlot<T: Sendable>: Sendable {
  private let value = Mutex<Result<T, any Error>?>(nil)
  func store(_ result: Result<T, any Error>) { value.withLock { $0 = result } }
  func take() -> Result<T, any Error>? { value.withLock { $0 } }
}

/// Carries a loop-confined closure to the loop. `@unchecked Sendable`: it runs only there.
struct UncheckedTask<T>: @unchecked Sendable {
  let body: () throws -> T
  init(_ body: @escaping () throws -> T) { self.body = body }
}

/// A plain blocking client socket, independent of the code under test.
final class Client {
  private(set) var fd: Int32
  private var buffered: [UInt8] = []
  /// Where unread bytes of `buffered` begin.
  private var start = 0

  init(port: UInt16, receiveBufferSize: Int32? = nil) throws {
    fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw TestFailure(description: "socket: \(errno)") }
    if var size = receiveBufferSize {
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let result = SocketAddress.loopback(port: port).withSockAddr { Glibc.connect(fd, $0, $1) }
    guard result == 0 else {
      Glibc.close(fd)
      throw TestFailure(description: "connect: \(errno)")
    }
  }

  deinit { if fd >= 0 { Glibc.close(fd) } }

  func send(_ text: String) throws { try send(Array(text.utf8)) }

  func send(_ bytes: [UInt8]) throws {
    var offset = 0
    while offset < bytes.count {
      let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
      guard sent > 0 else { throw TestFailure(description: "send: \(errno)") }
      offset += sent
    }
  }

  func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }

  /// Reads more into the buffer; false at EOF, an error or the 10 s timeout.
  private func fill() -> Bool {
    // Consumed bytes are dropped only here, in one move: removing them per answer costs
    // a move of the whole buffer each time, slow in debug builds.
    if start > 0 {
      buffered.removeFirst(start)
      start = 0
    }
    var chunk = [UInt8](repeating: 0, count: 65536)
    let got = chunk.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
    guard got > 0 else { return false }
    buffered += chunk[0..<got]
    return true
  }

  /// The next answer (head text and body; a `100 Continue` is an answer of its own), or
  /// nil if the connection ended first. Bodies are framed by `Content-Length`.
  func readAnswer() -> (head: String, body: String)? {
    var headEnd: Int?
    for _ in 0..<10_000 {
      headEnd = buffered.withUnsafeBufferPointer { bytes in
        var index = start
        while index + 3 < bytes.count {
          if bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
          }
          index += 1
        }
        return nil
      }
      if headEnd != nil { break }
      guard fill() else { return nil }
    }
    guard var headEnd else { return nil }
    headEnd -= start
    let head = String(decoding: buffered[start..<(start + headEnd)], as: UTF8.self)
    var length = 0
    for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
      length = Int(line.dropFirst("content-length:".count).drop { $0 == " " }) ?? 0
    }
    let total = headEnd + 4 + length
    var fills = 0
    while buffered.count - start < total, fills < 100_000 {
      guard fill() else { return nil }
      fills += 1
    }
    guard buffered.count - start >= total else { return nil }
    let body = String(decoding: buffered[(start + headEnd + 4)..<(start + total)], as: UTF8.self)
    start += total
    return (head, body)
  }

  /// Whether the server ended the connection (EOF or reset) with nothing more to read,
  /// within the 10 s receive timeout.
  func endsWithoutMoreBytes() -> Bool {
    guard buffered.count == start else { return false }
    var chunk = [UInt8](repeating: 0, count: 64)
    let got = chunk.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
    return got == 0 || (got < 0 && errno == ECONNRESET)
  }
}

func request(_ target: String, headers: [String] = [], version: String = "1.1") -> String {
  "GET \(target) HTTP/\(version)\r\nHost: test\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n"
}
