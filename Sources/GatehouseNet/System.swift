import CGatehouseLinux
import Glibc

/// The outcome of a non-blocking system call: it did its work, or the kernel had nothing to give yet.
public enum IOResult<Value> {
  case processed(Value)
  case wouldBlock
}

extension IOResult: Sendable where Value: Sendable {}
extension IOResult: Equatable where Value: Equatable {}

/// A failed system call: which call, and the errno it left behind.
public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The `errno` value (`ECONNREFUSED`, `EMFILE`, …).
  public let errno: Int32
  /// The name of the call that failed, for logs (`connect`, `accept4`, …).
  public let syscall: String

  public init(errno: Int32, syscall: String) {
    self.errno = errno
    self.syscall = syscall
  }

  public var description: String {
    "\(syscall) failed: \(SystemError.message(for: errno)) (errno \(errno))"
  }

  static func message(for errno: Int32) -> String {
    // glibc's strerror returns static text for known errnos and a thread-local buffer for others (since 2.32).
    String(cString: strerror(errno))
  }
}

/// Every system call in GatehouseNet goes through here, so errno handling is decided in one place:
/// EINTR is retried, EAGAIN becomes `.wouldBlock` (or an error where blocking is impossible), errnos that
/// can only mean a bug in this process crash, and everything else is thrown as a `SystemError`.
enum Syscall {
  /// errnos that mean we passed a closed or wrong descriptor or a bad pointer: continuing would corrupt state.
  @inline(__always)
  static func isBug(_ code: Int32) -> Bool {
    code == EBADF || code == EFAULT || code == ENOTSOCK
  }

  /// Runs a call that returns -1 on failure and is not expected to block.
  @inline(__always)
  static func run<R: FixedWidthInteger>(_ name: StaticString, _ call: () -> R) throws(SystemError) -> R {
    while true {
      let result = call()
      if result != -1 { return result }
      let code = Glibc.errno
      if code == EINTR { continue }
      if isBug(code) { preconditionFailure("\(name) failed with \(SystemError.message(for: code)): a bug") }
      throw SystemError(errno: code, syscall: String(describing: name))
    }
  }

  /// Runs a call on a non-blocking descriptor: EAGAIN/EWOULDBLOCK come back as `.wouldBlock`.
  @inline(__always)
  static func runNonBlocking<R: FixedWidthInteger>(
    _ name: StaticString, _ call: () -> R
  ) throws(SystemError) -> IOResult<R> {
    while true {
      let result = call()
      if result != -1 { return .processed(result) }
      let code = Glibc.errno
      if code == EINTR { continue }
      if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
      if isBug(code) { preconditionFailure("\(name) failed with \(SystemError.message(for: code)): a bug") }
      throw SystemError(errno: code, syscall: String(describing: name))
    }
  }

  // MARK: Descriptors

  /// Closes a descriptor. EINTR is not retried: on Linux the descriptor is already released when close
  /// returns EINTR, and retrying could close a descriptor another thread has just been given.
  static func close(_ fd: Int32) {
    if Glibc.close(fd) == -1 {
      let code = Glibc.errno
      if isBug(code) { preconditionFailure("close(\(fd)) failed: \(SystemError.message(for: code))") }
      // EIO and EINTR: the descriptor is gone either way; nothing useful to do.
    }
  }

  static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> IOResult<
    Int
  > {
    try runNonBlocking("read") { Glibc.read(fd, buffer.baseAddress, buffer.count) }
  }

  /// Reads from a socket. recv rather than read: the kernel then goes straight to the socket
  /// layer, skipping what read(2) does on every call for any file (position lock, access
  /// check, fsnotify); measurable per request on a proxy's small reads.
  static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> IOResult<
    Int
  > {
    try runNonBlocking("recv") { Glibc.recv(fd, buffer.baseAddress, buffer.count, 0) }
  }

  /// Looks at the next byte without taking it (MSG_PEEK): `.processed(0)` is end of file,
  /// `.wouldBlock` that nothing is there.
  static func peek(_ fd: Int32, into byte: UnsafeMutablePointer<UInt8>) throws(SystemError) -> IOResult<Int> {
    try runNonBlocking("recv") { Glibc.recv(fd, byte, 1, GH_MSG_PEEK) }
  }

  /// Sends from several buffers with MSG_NOSIGNAL, so a peer that went away gives EPIPE, not SIGPIPE.
  static func sendmsg(
    _ fd: Int32, _ vectors: UnsafeMutableBufferPointer<iovec>
  ) throws(SystemError) -> IOResult<Int> {
    var message = msghdr()
    message.msg_iov = vectors.baseAddress
    message.msg_iovlen = vectors.count
    return try runNonBlocking("sendmsg") { Glibc.sendmsg(fd, &message, GH_MSG_NOSIGNAL) }
  }

  static func send(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) throws(SystemError) -> IOResult<Int> {
    try runNonBlocking("send") { Glibc.send(fd, buffer.baseAddress, buffer.count, GH_MSG_NOSIGNAL) }
  }

  // MARK: Sockets

  static func socket(family: Int32) throws(SystemError) -> Int32 {
    let type = Int32(SOCK_STREAM.rawValue) | GH_SOCK_NONBLOCK | GH_SOCK_CLOEXEC
    return try run("socket") { Glibc.socket(family, type, 0) }
  }

  /// `Value` is a plain C value (Int32, linger), copied to the stack for the call.
  static func setOption<Value: BitwiseCopyable>(
    _ fd: Int32, level: Int32, name: Int32, _ value: Value
  ) throws(SystemError) {
    _ = try withUnsafeBytes(of: value) { bytes throws(SystemError) in
      try run("setsockopt") { setsockopt(fd, level, name, bytes.baseAddress, socklen_t(bytes.count)) }
    }
  }

  static func getIntOption(_ fd: Int32, level: Int32, name: Int32) throws(SystemError) -> Int32 {
    var value: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    _ = try run("getsockopt") { getsockopt(fd, level, name, &value, &length) }
    return value
  }

  static func bind(_ fd: Int32, _ address: SocketAddress) throws(SystemError) {
    _ = try address.withSockAddr { (pointer, length) throws(SystemError) in
      try run("bind") { Glibc.bind(fd, pointer, length) }
    }
  }

  static func listen(_ fd: Int32, backlog: Int32) throws(SystemError) {
    _ = try run("listen") { Glibc.listen(fd, backlog) }
  }

  /// Starts a connect; `true` if it completed at once, `false` if it is in progress (EINPROGRESS).
  static func connect(_ fd: Int32, _ address: SocketAddress) throws(SystemError) -> Bool {
    try address.withSockAddr { (pointer, length) throws(SystemError) -> Bool in
      while true {
        if Glibc.connect(fd, pointer, length) == 0 { return true }
        let code = Glibc.errno
        // EINTR on connect means the attempt goes on in the background, exactly like EINPROGRESS.
        if code == EINPROGRESS || code == EINTR { return false }
        if isBug(code) { preconditionFailure("connect failed: \(SystemError.message(for: code)): a bug") }
        throw SystemError(errno: code, syscall: "connect")
      }
    }
  }

  static func accept(_ fd: Int32, peer: inout sockaddr_storage) throws(SystemError) -> IOResult<Int32> {
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    return try withUnsafeMutablePointer(to: &peer) { storage throws(SystemError) in
      try storage.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer throws(SystemError) in
        try runNonBlocking("accept4") {
          gh_accept4(fd, pointer, &length, GH_SOCK_NONBLOCK | GH_SOCK_CLOEXEC)
        }
      }
    }
  }

  static func localAddress(_ fd: Int32) throws(SystemError) -> SocketAddress {
    var storage = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    _ = try withUnsafeMutablePointer(to: &storage) { pointer throws(SystemError) in
      try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(SystemError) in
        try run("getsockname") { getsockname(fd, address, &length) }
      }
    }
    guard let address = SocketAddress(storage: storage) else {
      throw SystemError(errno: EAFNOSUPPORT, syscall: "getsockname")
    }
    return address
  }

  static func shutdownOutput(_ fd: Int32) throws(SystemError) {
    _ = try run("shutdown") { Glibc.shutdown(fd, Int32(SHUT_WR)) }
  }

  // MARK: epoll and eventfd

  static func epollCreate() throws(SystemError) -> Int32 {
    try run("epoll_create1") { gh_epoll_create() }
  }

  static func epollControl(
    _ epoll: Int32, _ operation: Int32, _ fd: Int32, events: UInt32, data: UInt64
  ) throws(SystemError) {
    _ = try run("epoll_ctl") { gh_epoll_ctl(epoll, operation, fd, events, data) }
  }

  static func epollWait(
    _ epoll: Int32, into events: UnsafeMutableBufferPointer<gh_epoll_event>, timeoutMilliseconds: Int32
  ) throws(SystemError) -> Int {
    Int(
      try run("epoll_wait") {
        gh_epoll_wait(epoll, events.baseAddress, Int32(events.count), timeoutMilliseconds)
      })
  }

  static func eventFD() throws(SystemError) -> Int32 {
    try run("eventfd") { gh_eventfd(0, GH_EFD_NONBLOCK | GH_EFD_CLOEXEC) }
  }

  /// Adds one to an eventfd; a full counter (EAGAIN) still leaves it readable, which is all a wake-up needs.
  static func signalEventFD(_ fd: Int32) throws(SystemError) {
    var one: UInt64 = 1
    _ = try runNonBlocking("write(eventfd)") { Glibc.write(fd, &one, 8) }
  }

  static func drainEventFD(_ fd: Int32) throws(SystemError) {
    var counter: UInt64 = 0
    _ = try runNonBlocking("read(eventfd)") { Glibc.read(fd, &counter, 8) }
  }

  // MARK: Clock

  /// Nanoseconds on CLOCK_MONOTONIC: never jumps with wall-clock changes.
  static func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
  }
}
