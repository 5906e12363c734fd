import CGatehouseLinux
import Glibc

/// Whether a non-blocking connect finished at once or goes on in the background.
public enum ConnectStatus: Sendable, Equatable {
  case connected
  /// Wait for writability, then call `finishConnect()`.
  case inProgress
}

/// A non-blocking, close-on-exec TCP socket with TCP_NODELAY set. Owns its descriptor: `close()` or deinit
/// releases it. Not thread-safe; use it from one thread (its loop).
public final class TCPSocket {
  /// The descriptor, or -1 once closed.
  public private(set) var fileDescriptor: Int32
  /// The other end: the client for accepted sockets, the target for outbound ones.
  public let peerAddress: SocketAddress?

  init(fileDescriptor: Int32, peerAddress: SocketAddress?) {
    self.fileDescriptor = fileDescriptor
    self.peerAddress = peerAddress
    // Proxies write small heads and want them out now; Nagle would hold them for the peer's delayed ACK.
    // A failure (the peer already reset) shows up on the first read or write, so it is not reported here.
    try? Syscall.setOption(fileDescriptor, level: GH_IPPROTO_TCP, name: GH_TCP_NODELAY, Int32(1))
  }

  deinit {
    if fileDescriptor >= 0 { Syscall.close(fileDescriptor) }
  }

  /// Creates a socket and starts connecting it to `address`. Errors such as ECONNREFUSED may be thrown here
  /// or come later from `finishConnect()`, depending on how fast the kernel knows.
  public static func connect(to address: SocketAddress) throws(SystemError) -> (TCPSocket, ConnectStatus) {
    let fd = try Syscall.socket(family: address.family)
    let socket = TCPSocket(fileDescriptor: fd, peerAddress: address)
    let done = try Syscall.connect(fd, address)
    return (socket, done ? .connected : .inProgress)
  }

  /// After an in-progress connect reported writability: throws the connect's error (SO_ERROR), if any.
  public func finishConnect() throws(SystemError) {
    let code = try Syscall.getIntOption(fileDescriptor, level: SOL_SOCKET, name: SO_ERROR)
    if code != 0 { throw SystemError(errno: code, syscall: "connect") }
  }

  /// The pending socket error (SO_ERROR), clearing it; 0 if none.
  public func takePendingError() throws(SystemError) -> Int32 {
    try Syscall.getIntOption(fileDescriptor, level: SOL_SOCKET, name: SO_ERROR)
  }

  /// The bytes the peer has acknowledged so far (`tcp_info`), nil if the kernel cannot say.
  public var bytesAcknowledgedByPeer: Int64? {
    guard fileDescriptor >= 0 else { return nil }
    let acknowledged = gh_tcp_bytes_acked(fileDescriptor)
    return acknowledged >= 0 ? acknowledged : nil
  }

  /// Reads into `buffer`: `.processed(0)` is end of file.
  @inline(__always)
  public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> IOResult<Int> {
    try Syscall.receive(fileDescriptor, into: buffer)
  }

  /// Whether a read would return something now (a byte, or the end of file), without
  /// taking it. An error counts as something: a read would report it.
  public var hasInput: Bool {
    var byte: UInt8 = 0
    switch try? Syscall.peek(fileDescriptor, into: &byte) {
    case .wouldBlock?: return false
    case .processed?, nil: return true
    }
  }

  /// Writes as much of `bytes` as the kernel takes now.
  @inline(__always)
  public func write(_ bytes: UnsafeRawBufferPointer) throws(SystemError) -> IOResult<Int> {
    try Syscall.send(fileDescriptor, bytes)
  }

  /// Writes several buffers with one call (at most 1024); returns the total taken.
  public func write(vectors buffers: UnsafeBufferPointer<UnsafeRawBufferPointer>) throws(SystemError)
    -> IOResult<Int>
  {
    let count = min(buffers.count, Int(UIO_MAXIOV))
    return try withUnsafeTemporaryAllocation(of: iovec.self, capacity: count) { vectors throws(SystemError) in
      for index in 0..<count {
        vectors[index] = iovec(
          iov_base: UnsafeMutableRawPointer(mutating: buffers[index].baseAddress),
          iov_len: buffers[index].count)
      }
      return try Syscall.sendmsg(fileDescriptor, vectors)
    }
  }

  /// `write(vectors:)` for internal callers that already built iovecs.
  func write(iovecs: UnsafeMutableBufferPointer<iovec>) throws(SystemError) -> IOResult<Int> {
    try Syscall.sendmsg(fileDescriptor, iovecs)
  }

  /// Sends FIN: no more writes, reads go on.
  public func shutdownOutput() throws(SystemError) {
    try Syscall.shutdownOutput(fileDescriptor)
  }

  /// Closes the descriptor (a normal FIN close). Idempotent.
  public func close() {
    guard fileDescriptor >= 0 else { return }
    Syscall.close(fileDescriptor)
    fileDescriptor = -1
  }

  /// Closes with SO_LINGER 0, so the peer gets RST and no TIME_WAIT is left: for errors and timeouts.
  public func abort() {
    guard fileDescriptor >= 0 else { return }
    try? Syscall.setOption(
      fileDescriptor, level: SOL_SOCKET, name: SO_LINGER, linger(l_onoff: 1, l_linger: 0))
    close()
  }

  /// The local address the kernel picked or was given.
  public func localAddress() throws(SystemError) -> SocketAddress {
    try Syscall.localAddress(fileDescriptor)
  }

  /// The peer host as text for X-Forwarded-For (`127.0.0.1`, `::1`), or "unknown".
  public var peerHostText: String {
    peerAddress?.hostText ?? "unknown"
  }
}
