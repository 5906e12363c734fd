import Dispatch
import Glibc
import Synchronization

@testable import GatehouseNet

struct TestFailure: Error, CustomStringConvertible {
  let description: String
}

/// Polls `condition` every 2 ms until it holds or `timeout` passes. Tests assert outcomes, not speed,
/// so the deadline is generous.
@discardableResult
func waitUntil(timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
  let deadline = ContinuousClock.now + timeout
  while ContinuousClock.now < deadline {
    if condition() { return true }
    usleep(2_000)
  }
  return condition()
}

func sleep(milliseconds: Int) {
  usleep(useconds_t(milliseconds * 1_000))
}

/// Runs `body` on `loop` and waits (at most 10 s) for its result.
func onLoop<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () throws -> T) throws -> T {
  let slot = ResultSlot<T>()
  let done = DispatchSemaphore(value: 0)
  loop.execute {
    slot.store(Result { try body() })
    done.signal()
  }
  guard done.wait(timeout: .now() + 10) == .success else {
    throw TestFailure(description: "loop did not answer")
  }
  guard let result = slot.take() else { throw TestFailure(description: "no result") }
  return try result.get()
}

final class ResultSlot<T: Sendable>: Sendable {
  private let value = Mutex<Result<T, any Error>?>(nil)
  func store(_ result: Result<T, any Error>) { value.withLock { $0 = result } }
  func take() -> Result<T, any Error>? { value.withLock { $0 } }
}

/// Carries a loop-confined object between `onLoop` calls. `@unchecked Sendable` because tests only touch
/// `value` inside closures that run on the object's loop.
final class LoopConfined<Value>: @unchecked Sendable {
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// What happened, in order, written from loop threads and read by the test.
final class EventLog: Sendable {
  private let entries = Mutex<[String]>([])
  private let bytes = Mutex<[UInt8]>([])
  private let byteTotal = Atomic<Int>(0)

  func append(_ entry: String) { entries.withLock { $0.append(entry) } }
  var all: [String] { entries.withLock { $0 } }
  func count(_ entry: String) -> Int { all.filter { $0 == entry }.count }
  func count(prefix: String) -> Int { all.filter { $0.hasPrefix(prefix) }.count }

  func received(_ data: UnsafeRawBufferPointer, keep: Bool) {
    if keep { bytes.withLock { $0.append(contentsOf: data) } }
    byteTotal.add(data.count, ordering: .relaxed)
  }
  var receivedBytes: [UInt8] { bytes.withLock { $0 } }
  var receivedCount: Int { byteTotal.load(ordering: .relaxed) }
}

/// A connection delegate that logs every callback and can echo, with hooks for what a test needs.
final class RecordingDelegate: ConnectionDelegate {
  let log: EventLog
  var echo = false
  var keepBytes = true
  var closeOnEOF = true
  var onConnect: ((BufferedConnection) -> Void)?
  /// Called after each read with the bytes this delegate has received so far.
  var onRead: ((BufferedConnection, Int) -> Void)?
  private(set) var bytesReceived = 0
  var onDrain: ((BufferedConnection) -> Void)?

  init(log: EventLog) { self.log = log }

  func connectionDidConnect(_ connection: BufferedConnection) {
    log.append("connect")
    onConnect?(connection)
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    log.received(bytes, keep: keepBytes)
    bytesReceived += bytes.count
    if echo { connection.write(bytes) }
    onRead?(connection, bytesReceived)
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    log.append("eof")
    if closeOnEOF { connection.close() }
  }

  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    log.append("high")
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    log.append("drain")
    onDrain?(connection)
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    switch reason {
    case .closedByOwner: log.append("close:owner")
    case .hangup: log.append("close:hangup")
    case .failed(let error): log.append("close:errno=\(error.errno)")
    case .connectTimedOut: log.append("close:timeout")
    case .loopStopped: log.append("close:loopStopped")
    case .tlsFailed(let error): log.append("close:tls=\(error)")
    }
  }
}

/// A plain blocking client socket, independent of the code under test, for driving a server from a test.
final class BlockingClient {
  private(set) var fd: Int32

  init(port: UInt16, receiveBufferSize: Int32? = nil) throws {
    fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw TestFailure(description: "socket: \(errno)") }
    if let receiveBufferSize { setOption(SO_RCVBUF, receiveBufferSize) }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let result = SocketAddress.loopback(port: port).withSockAddr { Glibc.connect(fd, $0, $1) }
    guard result == 0 else {
      let code = errno
      Glibc.close(fd)
      fd = -1
      throw TestFailure(description: "connect: \(code)")
    }
  }

  deinit { close() }

  private func setOption(_ name: Int32, _ value: Int32) {
    var value = value
    setsockopt(fd, SOL_SOCKET, name, &value, socklen_t(MemoryLayout<Int32>.size))
  }

  func send(_ bytes: [UInt8]) throws {
    var offset = 0
    while offset < bytes.count {
      let sent = bytes[offset...].withUnsafeBytes {
        Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      guard sent > 0 else { throw TestFailure(description: "send: \(errno)") }
      offset += sent
    }
  }

  /// Reads until `count` bytes arrived, EOF, or the 10 s receive timeout.
  func receive(count: Int) -> [UInt8] {
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while result.count < count {
      let got = buffer.withUnsafeMutableBytes {
        Glibc.recv(fd, $0.baseAddress, min($0.count, count - result.count), 0)
      }
      if got <= 0 { break }
      result.append(contentsOf: buffer[0..<got])
    }
    return result
  }

  /// Reads everything until EOF; returns the byte count and whether EOF (not an error) ended it.
  func drainUntilEOF(limit: Int = 512 << 20) -> (count: Int, sawEOF: Bool) {
    var total = 0
    var buffer = [UInt8](repeating: 0, count: 65536)
    while total <= limit {
      let got = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
      if got == 0 { return (total, true) }
      if got < 0 { return (total, false) }
      total += got
    }
    return (total, false)
  }

  /// Reads to EOF, checking that byte `i` equals `i / chunkSize` (mod 256); counts the bytes that do not.
  func drainVerifyingChunkPattern(chunkSize: Int) -> (count: Int, sawEOF: Bool, mismatches: Int) {
    var total = 0
    var mismatches = 0
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
      let got = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
      if got <= 0 { return (total, got == 0, mismatches) }
      buffer.withUnsafeBufferPointer { bytes in
        for index in 0..<got where bytes[index] != UInt8(truncatingIfNeeded: (total + index) / chunkSize) {
          mismatches += 1
        }
      }
      total += got
    }
  }

  func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }

  /// Closes with RST.
  func reset() {
    var option = linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    close()
  }

  func close() {
    if fd >= 0 { Glibc.close(fd) }
    fd = -1
  }
}

/// Entries in /proc/self/fd, not counting the directory handle used to read it.
func openFileDescriptorCount() -> Int {
  guard let directory = opendir("/proc/self/fd") else { return -1 }
  defer { closedir(directory) }
  var count = 0
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) {
      String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
    }
    if name != "." && name != ".." { count += 1 }
  }
  return count - 1
}

/// Starts an echo server: one listener on `loop`, every accepted connection echoes and logs to `log`.
func startEchoServer(on loop: EventLoop, log: EventLog) throws -> (
  port: UInt16, listener: LoopConfined<TCPListener>
) {
  let listener = try TCPListener(address: .loopback(port: 0))
  let port = listener.localPort
  let box = LoopConfined(listener)
  try onLoop(loop) {
    try box.value.startAccepting(on: loop) { socket in
      let delegate = RecordingDelegate(log: log)
      delegate.echo = true
      delegate.keepBytes = false
      do {
        _ = try BufferedConnection(socket: socket, loop: loop, delegate: delegate)
        log.append("accept")
      } catch {
        log.append("accept-failed")
      }
    }
  }
  return (port, box)
}

/// A listener on one loop whose accepted connections record into a log, the last one kept in
/// `accepted` (loop thread only). Accepting starts with `start`, so a test can first have a
/// client connect and send into the backlog.
/// Runs `body` with a `RecordingServer` on a loop of its own; stops it and shuts the loop down
/// afterwards.
func withRecordingServer(_ body: (RecordingServer) throws -> Void) throws {
  let group = try EventLoopGroup(loopCount: 1)
  defer { group.shutdown() }
  let server = try RecordingServer(loop: group.next(), log: EventLog())
  defer { try? server.stop() }
  try body(server)
}

final class RecordingServer: Sendable {
  let loop: EventLoop
  let log: EventLog
  let port: UInt16
  let listener: LoopConfined<TCPListener>
  let accepted = LoopConfined<BufferedConnection?>(nil)

  init(loop: EventLoop, log: EventLog) throws {
    self.loop = loop
    self.log = log
    let listener = try TCPListener(address: .loopback(port: 0))
    port = listener.localPort
    self.listener = LoopConfined(listener)
  }

  /// Accepts from now on; `prepare` runs on each new connection (pause it, write to it) before
  /// "accept" is logged.
  func start(prepare: @escaping @Sendable (BufferedConnection) -> Void = { _ in }) throws {
    try onLoop(loop) { [self] in
      try listener.value.startAccepting(on: loop) { [self] socket in
        let connection = try? BufferedConnection(socket: socket, loop: loop, delegate: RecordingDelegate(log: log))
        if let connection { prepare(connection) }
        accepted.value = connection
        log.append("accept")
      }
    }
  }

  /// Drops the accepted connection and closes the listener.
  func stop() throws {
    try onLoop(loop) { [self] in
      accepted.value = nil
      listener.value.close()
    }
  }
}
