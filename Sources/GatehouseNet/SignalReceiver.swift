import CGatehouseLinux
import Glibc

/// The process signals a gateway acts on.
public enum ProcessSignal: Int32, Sendable, CaseIterable {
  /// Stop accepting, drain, exit.
  case terminate
  /// Same as terminate (Ctrl-C).
  case interrupt
  /// Reload the config.
  case hangup

  public init?(rawValue: Int32) {
    switch rawValue {
    case SIGTERM: self = .terminate
    case SIGINT: self = .interrupt
    case SIGHUP: self = .hangup
    default: return nil
    }
  }

  public var rawValue: Int32 {
    switch self {
    case .terminate: SIGTERM
    case .interrupt: SIGINT
    case .hangup: SIGHUP
    }
  }
}

/// Receives signals as events on an event loop through a signalfd, instead of in an async signal handler.
///
/// Create it on the main thread before any other thread starts (before `EventLoopGroup`): it blocks the
/// signals in the calling thread, threads created afterwards inherit that mask, and so the signals stay
/// pending for the signalfd instead of killing the process or landing in some thread's default handler.
public final class SignalReceiver: IOEventHandler {
  public let signals: [ProcessSignal]
  private var fileDescriptor: Int32
  private var loop: EventLoop?
  private var registration: IORegistration?
  private var onSignal: ((ProcessSignal) -> Void)?

  /// Blocks `signals` in the calling thread and opens a signalfd for them.
  public init(signals: [ProcessSignal] = ProcessSignal.allCases) throws(SystemError) {
    self.signals = signals
    let numbers = signals.map(\.rawValue)
    fileDescriptor = try numbers.withUnsafeBufferPointer { pointer throws(SystemError) in
      try Syscall.run("signalfd") { gh_signalfd_for(pointer.baseAddress, Int32(pointer.count)) }
    }
  }

  deinit {
    if fileDescriptor >= 0 { Syscall.close(fileDescriptor) }
  }

  /// Starts delivering signals to `onSignal` on `loop`. Loop thread only.
  public func start(on loop: EventLoop, _ onSignal: @escaping (ProcessSignal) -> Void) throws(SystemError) {
    loop.assertInEventLoop()
    precondition(registration == nil, "already started")
    precondition(fileDescriptor >= 0, "closed")
    self.loop = loop
    self.onSignal = onSignal
    registration = try loop.register(fileDescriptor: fileDescriptor, interest: .read, handler: self)
  }

  /// Stops delivery and closes the signalfd; the signals stay blocked. Idempotent.
  public func close() {
    if let registration { loop?.deregister(registration) }
    registration = nil
    loop = nil
    onSignal = nil
    if fileDescriptor >= 0 { Syscall.close(fileDescriptor) }
    fileDescriptor = -1
  }

  public func handleIOEvents(_ events: IOEvents) {
    if events.contains(.loopStopping) {
      close()
      return
    }
    // Several signals may be queued; take them all now (bounded, in case of a signal storm).
    for _ in 0..<32 {
      guard fileDescriptor >= 0 else { return }
      var number: UInt32 = 0
      let result: IOResult<Int>
      do {
        let fd = fileDescriptor
        result = try Syscall.runNonBlocking("read(signalfd)") { gh_signalfd_read(fd, &number) }
      } catch {
        preconditionFailure("signalfd read: \(error)")
      }
      switch result {
      case .wouldBlock:
        return
      case .processed:
        if let signal = ProcessSignal(rawValue: Int32(number)) { onSignal?(signal) }
      }
    }
  }
}
