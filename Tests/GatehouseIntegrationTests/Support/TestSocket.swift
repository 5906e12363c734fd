import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Why a test socket operation failed.
enum TestSocketError: Error, CustomStringConvertible, Equatable {
  /// A system call failed with `errno`.
  case system(call: String, errno: Int32)
  /// The deadline passed first.
  case timedOut(String)
  /// The peer reset the connection (RST).
  case connectionReset
  /// The peer closed the connection before the expected bytes arrived.
  case closedEarly(String)
  /// The peer sent bytes that are not the HTTP/1.1 the test expected.
  case malformed(String)

  var description: String {
    switch self {
    case .system(let call, let code): return "\(call) failed: \(String(cString: strerror(code))) (\(code))"
    case .timedOut(let what): return "timed out: \(what)"
    case .connectionReset: return "connection reset by peer"
    case .closedEarly(let what): return "connection closed early: \(what)"
    case .malformed(let what): return "malformed message: \(what)"
    }
  }
}

/// Serializes making descriptors without an atomic close-on-exec flag (`accept`, `pipe`)
/// with starting child processes, so no child inherits a test's socket or pipe (the Glibc
/// module exposes neither `accept4` nor `pipe2`).
enum DescriptorCreation {
  static let lock = Mutex(())
}

/// A TCP socket on 127.0.0.1 for test peers: plain POSIX calls, close-on-exec (so gateway
/// processes started by other tests never inherit it), and every wait bounded by a deadline.
/// Reads and writes are meant for one thread at a time; `shutdown` may be called from any
/// thread to wake that thread.
final class TestSocket: Sendable {
  let descriptor: Int32
  private let isClosed = Mutex(false)

  private init(descriptor: Int32) {
    self.descriptor = descriptor
  }

  deinit { close() }

  /// A listening socket on 127.0.0.1 with a port chosen by the kernel.
  /// `host`: the last byte of a 127.0.0.x address (1 by default; Linux routes all of 127/8
  /// to the loopback interface), so tests can run several backends that differ by address.
  static func listen(backlog: Int32 = 128, port: UInt16 = 0, host: UInt8 = 1) throws -> TestSocket {
    let socket = try make()
    var one: Int32 = 1
    setsockopt(socket.descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var address = loopback(port: port)
    address.sin_addr.s_addr = (UInt32(0x7F00_0000) | UInt32(host)).bigEndian
    let bound = withUnsafePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(socket.descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard bound == 0 else { throw TestSocketError.system(call: "bind", errno: errno) }
    guard Glibc.listen(socket.descriptor, backlog) == 0 else {
      throw TestSocketError.system(call: "listen", errno: errno)
    }
    return socket
  }

  /// A port on 127.0.0.1 that nothing listens on: bound once by the kernel's choice, then
  /// released. Connections to it are refused, but only until something binds it again: the
  /// kernel hands a released port to later `bind(0)` calls like any other free port (a
  /// gateway's listener or admin port, a backend of a test running beside). A test that
  /// needs the port to stay refused for longer than a moment holds `refusingPort()` instead.
  static func unusedPort() throws -> UInt16 {
    let socket = try refusingPort()
    defer { socket.close() }
    return socket.localPort
  }

  /// A socket bound to a port of the kernel's choice on 127.0.0.1 and never listening:
  /// connections to its `localPort` are refused for as long as it stays open. Bound without
  /// SO_REUSEADDR or SO_REUSEPORT, it also keeps every other socket (this process's or a
  /// gateway's, even with SO_REUSEPORT) from binding that port meanwhile.
  static func refusingPort() throws -> TestSocket {
    let socket = try make()
    var address = loopback(port: 0)
    let bound = withUnsafePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(socket.descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard bound == 0 else { throw TestSocketError.system(call: "bind", errno: errno) }
    return socket
  }

  /// Connects to `host`:`port`, `host` being a loopback IPv4 address (loopback connects
  /// complete or fail at once).
  /// With `sourceHost` (another loopback address, such as 127.0.0.2) the connection comes
  /// from that address, so a test can play several peers.
  static func connect(
    port: UInt16, host: String = "127.0.0.1", sourceHost: String? = nil, receiveBufferSize: Int32? = nil
  ) throws -> TestSocket {
    let socket = try make()
    if let receiveBufferSize { socket.setReceiveBufferSize(receiveBufferSize) }
    if let sourceHost {
      var source = loopback(port: 0)
      guard inet_pton(AF_INET, sourceHost, &source.sin_addr) == 1 else {
        throw TestSocketError.malformed("address \(sourceHost)")
      }
      let bound = withUnsafePointer(to: &source) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          bind(socket.descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
      }
      guard bound == 0 else { throw TestSocketError.system(call: "bind", errno: errno) }
    }
    var address = loopback(port: port)
    guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw TestSocketError.malformed("address \(host)") }
    let result = withUnsafePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        Glibc.connect(socket.descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard result == 0 else { throw TestSocketError.system(call: "connect", errno: errno) }
    return socket
  }

  /// Whether something accepts TCP connections on 127.0.0.1:`port` right now.
  static func isListening(port: UInt16) -> Bool {
    (try? connect(port: port)) != nil
  }

  private static func make() throws -> TestSocket {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard descriptor >= 0 else { throw TestSocketError.system(call: "socket", errno: errno) }
    return TestSocket(descriptor: descriptor)
  }

  private static func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(port).bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
  }

  /// The local port (after `bind` or `connect`).
  var localPort: UInt16 {
    var address = sockaddr_in()
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
  }

  /// Waits for a connection until `deadline`; nil when none came in time.
  func accept(deadline: Deadline) throws -> TestSocket? {
    guard try waitFor(Int16(POLLIN), deadline: deadline) else { return nil }
    let accepted = DescriptorCreation.lock.withLock { _ in
      let accepted = Glibc.accept(descriptor, nil, nil)
      if accepted >= 0 { _ = fcntl(accepted, F_SETFD, FD_CLOEXEC) }
      return accepted
    }
    if accepted < 0 {
      if errno == EAGAIN || errno == EINTR || errno == ECONNABORTED { return nil }
      throw TestSocketError.system(call: "accept4", errno: errno)
    }
    return TestSocket(descriptor: accepted)
  }

  /// Waits until `events` is ready or `deadline` passes; false on timeout.
  private func waitFor(_ events: Int16, deadline: Deadline) throws -> Bool {
    while true {
      var entry = pollfd(fd: descriptor, events: events, revents: 0)
      let result = poll(&entry, 1, deadline.pollMilliseconds)
      if result > 0 { return true }
      if result == 0 { return false }
      if errno != EINTR { throw TestSocketError.system(call: "poll", errno: errno) }
    }
  }

  /// Sends all of `bytes` before `deadline`.
  func send(_ bytes: UnsafeRawBufferPointer, deadline: Deadline) throws {
    var offset = 0
    while offset < bytes.count {
      let sent = Glibc.send(
        descriptor, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
      if sent >= 0 {
        offset += sent
        continue
      }
      switch errno {
      case EAGAIN, EINTR:
        guard try waitFor(Int16(POLLOUT), deadline: deadline) else {
          throw TestSocketError.timedOut("sending \(bytes.count - offset) more bytes")
        }
      case ECONNRESET, EPIPE:
        throw TestSocketError.connectionReset
      default:
        throw TestSocketError.system(call: "send", errno: errno)
      }
    }
  }

  /// Sends all of `bytes` before `deadline`.
  func send(_ bytes: [UInt8], deadline: Deadline) throws {
    try bytes.withUnsafeBytes { try send($0, deadline: deadline) }
  }

  /// Reads what is there (waiting until `deadline` for something): the count read, 0 at
  /// end of stream.
  func receive(into buffer: UnsafeMutableRawBufferPointer, deadline: Deadline) throws -> Int {
    while true {
      let count = recv(descriptor, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
      if count >= 0 { return count }
      switch errno {
      case EAGAIN, EINTR:
        guard try waitFor(Int16(POLLIN), deadline: deadline) else {
          throw TestSocketError.timedOut("waiting for bytes")
        }
      case ECONNRESET:
        throw TestSocketError.connectionReset
      default:
        throw TestSocketError.system(call: "recv", errno: errno)
      }
    }
  }

  /// Makes `close` send RST instead of FIN.
  func setLingerZero() {
    var option = linger(l_onoff: 1, l_linger: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
  }

  /// Sends small writes at once instead of waiting for the peer's delayed ACK (Nagle),
  /// as production servers do; a head and body written apart then arrive together.
  func setNoDelay() {
    var value: Int32 = 1
    setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &value, socklen_t(MemoryLayout<Int32>.size))
  }

  /// Shrinks the kernel's receive buffer, so a client that stops reading soon stops the sender.
  func setReceiveBufferSize(_ size: Int32) {
    var value = size
    setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size))
  }

  /// Ends the sending direction (FIN); reading goes on.
  func shutdownWrite() { _ = Glibc.shutdown(descriptor, Int32(SHUT_WR)) }

  /// Ends both directions, which also wakes a thread waiting to read.
  func shutdownBoth() {
    isClosed.withLock { closed in
      if !closed { _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR)) }
    }
  }

  /// Closes the descriptor (once).
  func close() {
    isClosed.withLock { closed in
      guard !closed else { return }
      closed = true
      _ = Glibc.close(descriptor)
    }
  }
}
