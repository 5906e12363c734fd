import CGatehouseLinux
import Glibc
import Synchronization

/// N event loops, each running on its own thread; `next()` hands them out round robin.
public final class EventLoopGroup: Sendable {
  /// The loops, in thread order.
  public let loops: [EventLoop]
  private let threads: Mutex<[pthread_t]>
  private let nextIndex = Atomic<UInt>(0)

  /// The number of online processors, what `loopCount: 0` means.
  public static var processorCount: Int {
    max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
  }

  /// Starts `loopCount` loops (0: one per core), each on a new thread named `gh-loop-<i>`.
  /// Block signals (see `SignalReceiver`) before this, so the loop threads inherit the mask.
  public init(loopCount: Int = 0) throws(SystemError) {
    let count = loopCount > 0 ? loopCount : EventLoopGroup.processorCount
    var loops: [EventLoop] = []
    for _ in 0..<count {
      loops.append(try EventLoop())
    }
    self.loops = loops
    var started: [pthread_t] = []
    for (index, loop) in loops.enumerated() {
      do {
        started.append(try LoopThread.start(name: "gh-loop-\(index)") { loop.run() })
      } catch {
        for (stopIndex, thread) in started.enumerated() {
          loops[stopIndex].stop()
          pthread_join(thread, nil)
        }
        throw error
      }
    }
    threads = Mutex(started)
  }

  /// A group dropped without `shutdown()` still stops its loops; it joins their threads unless the last
  /// reference went away on one of them (a thread cannot join itself), in which case they just exit.
  deinit {
    if loops.contains(where: { $0.inEventLoop }) {
      for loop in loops { loop.stop() }
      threads.withLock { threads in
        for thread in threads { pthread_detach(thread) }
        threads.removeAll()
      }
    } else {
      shutdown()
    }
  }

  /// The next loop, round robin.
  public func next() -> EventLoop {
    let index = nextIndex.wrappingAdd(1, ordering: .relaxed).oldValue
    return loops[Int(index % UInt(loops.count))]
  }

  /// Stops every loop and waits for its thread to finish. Idempotent; must not be called on a loop thread.
  public func shutdown() {
    precondition(!loops.contains { $0.inEventLoop }, "shutdown() from a loop thread would join itself")
    let toJoin = threads.withLock { threads -> [pthread_t] in
      let taken = threads
      threads.removeAll()
      return taken
    }
    for loop in loops { loop.stop() }
    for thread in toJoin { pthread_join(thread, nil) }
  }
}

/// Starts a joinable pthread that runs a closure (Foundation's Thread is not joinable).
public enum LoopThread {
  private final class Body {
    let name: String
    let run: @Sendable () -> Void
    init(name: String, _ run: @escaping @Sendable () -> Void) {
      self.name = name
      self.run = run
    }
  }

  public static func start(name: String, _ body: @escaping @Sendable () -> Void) throws(SystemError) -> pthread_t {
    let context = Unmanaged.passRetained(Body(name: name, body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(
      &thread, nil,
      { context in
        let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
        gh_set_thread_name(body.name)
        body.run()
        return nil
      }, context)
    guard result == 0 else {
      Unmanaged<Body>.fromOpaque(context).release()
      throw SystemError(errno: result, syscall: "pthread_create")
    }
    return thread
  }
}
