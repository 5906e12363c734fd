import CGatehouseLinux
import Glibc

/// A listening TCP socket (non-blocking, SO_REUSEADDR, optionally SO_REUSEPORT) that accepts in batches on
/// one event loop. With SO_REUSEPORT each loop gets its own listener on the same port and the kernel spreads
/// connections between them, so loops never share an accept queue or a lock.
public final class TCPListener: IOEventHandler {
  /// The bound address, with the port the kernel picked when asked for port 0.
  public let localAddress: SocketAddress
  /// The bound port.
  public var localPort: UInt16 { localAddress.port }
  /// The descriptor, or -1 once closed.
  public private(set) var fileDescriptor: Int32

  /// How long accepting pauses after EMFILE/ENFILE/ENOBUFS/ENOMEM. The listen socket stays readable while
  /// connections wait, so with level-triggered epoll retrying at once would spin the loop at 100% CPU.
  public var exhaustionBackoff: Duration = .milliseconds(100)
  /// Told about accept errors other than a client giving up early (for logs and metrics).
  public var onAcceptError: ((SystemError) -> Void)?

  private var loop: EventLoop?
  private var registration: IORegistration?
  private var onAccept: ((TCPSocket) -> Void)?
  private var batchSize = 64
  private var backoffTimer: TimerHandle?
  /// Tests set this to make every accept fail as if the process ran out of descriptors; lowering
  /// RLIMIT_NOFILE instead would break every other test running in the same process.
  var simulatedAcceptError: SystemError?

  /// Binds and listens on `address`. Port 0 picks a free port; read it from `localPort`.
  public init(address: SocketAddress, backlog: Int32 = 1024, reusePort: Bool = true) throws(SystemError) {
    let fd = try Syscall.socket(family: address.family)
    do {
      try Syscall.setOption(fd, level: SOL_SOCKET, name: SO_REUSEADDR, Int32(1))
      if reusePort {
        try Syscall.setOption(fd, level: SOL_SOCKET, name: GH_SO_REUSEPORT, Int32(1))
      }
      try Syscall.bind(fd, address)
      try Syscall.listen(fd, backlog: backlog)
      localAddress = try Syscall.localAddress(fd)
    } catch {
      Syscall.close(fd)
      throw error
    }
    fileDescriptor = fd
  }

  /// `count` SO_REUSEPORT listeners on one port, for one loop each. With port 0 the first bind picks the
  /// port and the others bind that same port (binding port 0 again would pick a different one).
  public static func bindReusePortGroup(
    address: SocketAddress, count: Int, backlog: Int32 = 1024
  ) throws(SystemError) -> [TCPListener] {
    precondition(count > 0)
    try checkNobodyListens(on: address)
    let first = try TCPListener(address: address, backlog: backlog, reusePort: true)
    var listeners = [first]
    for _ in 1..<count {
      listeners.append(
        try TCPListener(address: address.withPort(first.localPort), backlog: backlog, reusePort: true))
    }
    return listeners
  }

  /// Throws EADDRINUSE when something listens on `address` already, another gateway
  /// included: with SO_REUSEPORT a second process of the same user would otherwise join the
  /// port and take part of its connections with its own config. The test is a bind without
  /// SO_REUSEPORT, never listened on and closed at once. Port 0 needs none.
  public static func checkNobodyListens(on address: SocketAddress) throws(SystemError) {
    guard address.port != 0 else { return }
    let fd = try Syscall.socket(family: address.family)
    defer { Syscall.close(fd) }
    // SO_REUSEADDR as the real listener has it: a port with connections in TIME_WAIT is free.
    try Syscall.setOption(fd, level: SOL_SOCKET, name: SO_REUSEADDR, Int32(1))
    try Syscall.bind(fd, address)
  }

  deinit {
    if fileDescriptor >= 0 { Syscall.close(fileDescriptor) }
  }

  /// Accepts one waiting connection, if any, as a non-blocking, close-on-exec socket with TCP_NODELAY.
  public func accept() throws(SystemError) -> IOResult<TCPSocket> {
    var peer = sockaddr_storage()
    switch try Syscall.accept(fileDescriptor, peer: &peer) {
    case .processed(let fd):
      return .processed(TCPSocket(fileDescriptor: fd, peerAddress: SocketAddress(storage: peer)))
    case .wouldBlock:
      return .wouldBlock
    }
  }

  /// Registers on `loop` and hands each accepted socket to `onAccept`, up to `batchSize` per wake-up so one
  /// busy listener cannot starve the loop's connections. Loop thread only.
  public func startAccepting(
    on loop: EventLoop, batchSize: Int = 64, _ onAccept: @escaping (TCPSocket) -> Void
  ) throws(SystemError) {
    loop.assertInEventLoop()
    precondition(registration == nil, "already accepting")
    precondition(fileDescriptor >= 0, "listener is closed")
    self.loop = loop
    self.onAccept = onAccept
    self.batchSize = max(1, batchSize)
    registration = try loop.register(fileDescriptor: fileDescriptor, interest: .read, handler: self)
  }

  /// Leaves the loop; connections keep queueing in the kernel until `close()`.
  public func stopAccepting() {
    if let backoffTimer { loop?.cancelTimer(backoffTimer) }
    backoffTimer = nil
    if let registration { loop?.deregister(registration) }
    registration = nil
    onAccept = nil
    onAcceptError = nil
    loop = nil
  }

  /// Stops accepting and closes the socket (queued, not yet accepted connections are reset). Idempotent.
  public func close() {
    stopAccepting()
    guard fileDescriptor >= 0 else { return }
    Syscall.close(fileDescriptor)
    fileDescriptor = -1
  }

  public func handleIOEvents(_ events: IOEvents) {
    if events.contains(.loopStopping) {
      stopAccepting()
      return
    }
    acceptBatch()
  }

  private func acceptBatch() {
    for _ in 0..<batchSize {
      // onAccept may stop or close the listener.
      guard registration != nil, let onAccept else { return }
      do throws(SystemError) {
        if let simulatedAcceptError { throw simulatedAcceptError }
        switch try accept() {
        case .processed(let socket):
          onAccept(socket)
        case .wouldBlock:
          return
        }
      } catch {
        switch error.errno {
        case ECONNABORTED, EPROTO:
          continue  // the client reset before we took it; the next one may be fine
        case EMFILE, ENFILE, ENOBUFS, ENOMEM:
          onAcceptError?(error)
          pauseAccepting()
          return
        default:
          // Unknown trouble: report it and back off the same way rather than spin on a readable socket.
          onAcceptError?(error)
          pauseAccepting()
          return
        }
      }
    }
  }

  private func pauseAccepting() {
    guard let loop, let registration, backoffTimer == nil else { return }
    do {
      try loop.modify(registration, interest: [])
    } catch {
      onAcceptError?(error)
    }
    backoffTimer = loop.scheduleTimer(after: exhaustionBackoff) { [weak self] in
      guard let self else { return }
      self.backoffTimer = nil
      guard let loop = self.loop, let registration = self.registration else { return }
      do throws(SystemError) {
        try loop.modify(registration, interest: .read)
      } catch {
        self.onAcceptError?(error)
      }
    }
  }
}
