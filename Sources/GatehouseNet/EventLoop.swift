import CGatehouseLinux
import Glibc
import Synchronization

/// What a registered descriptor wants to hear about. Empty still reports errors and hang-ups (epoll always does).
public struct IOInterest: OptionSet, Sendable, Hashable {
  public let rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }

  public static let read = IOInterest(rawValue: 1 << 0)
  public static let write = IOInterest(rawValue: 1 << 1)
  public static let readWrite: IOInterest = [.read, .write]
  /// EPOLLET: each change of readiness is reported once. The handler must then read until a
  /// short read or EAGAIN (or remember that it did not), and write until EAGAIN before it
  /// waits for writability. Used by plain connections, registered once for both directions.
  /// It comes with EPOLLRDHUP: a short read no longer proves that nothing is pending, since
  /// the peer's FIN may have arrived with the data, and no later edge would report it.
  public static let edgeTriggered = IOInterest(rawValue: 1 << 2)

  /// Level-triggered unless `.edgeTriggered` is given: pausing reads is then just dropping EPOLLIN, and a
  /// handler may stop reading before EAGAIN without losing a wake-up. EPOLLRDHUP is not asked for: EOF shows up as a read of 0 bytes,
  /// and a paused reader must not be woken again and again by a half-close it is not ready to read.
  var epollEvents: UInt32 {
    var events: UInt32 = 0
    if contains(.read) { events |= GH_EPOLLIN }
    if contains(.write) { events |= GH_EPOLLOUT }
    if contains(.edgeTriggered) { events |= GH_EPOLLET | GH_EPOLLRDHUP }
    return events
  }
}

/// What happened to a registered descriptor, as given to its `IOEventHandler`.
public struct IOEvents: OptionSet, Sendable, Hashable {
  public let rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }

  public static let readable = IOEvents(rawValue: 1 << 0)
  public static let writable = IOEvents(rawValue: 1 << 1)
  /// EPOLLHUP: both directions are finished (peer reset, or we shut down output and the peer closed).
  public static let hangup = IOEvents(rawValue: 1 << 2)
  /// EPOLLERR: a pending socket error (read it with SO_ERROR).
  public static let error = IOEvents(rawValue: 1 << 3)
  /// Sent once to every handler still registered when the loop stops, so it can close its descriptor.
  public static let loopStopping = IOEvents(rawValue: 1 << 4)
  /// EPOLLRDHUP (edge-triggered registrations only): the peer finished sending; its EOF is to be read.
  public static let readHangup = IOEvents(rawValue: 1 << 5)

  init(epollEvents: UInt32) {
    var events: IOEvents = []
    if epollEvents & GH_EPOLLIN != 0 { events.insert(.readable) }
    if epollEvents & GH_EPOLLOUT != 0 { events.insert(.writable) }
    if epollEvents & GH_EPOLLHUP != 0 { events.insert(.hangup) }
    if epollEvents & GH_EPOLLERR != 0 { events.insert(.error) }
    if epollEvents & GH_EPOLLRDHUP != 0 { events.insert(.readHangup) }
    self = events
  }
}

/// An object the loop calls when its descriptor is ready. Called on the loop thread only.
public protocol IOEventHandler: AnyObject {
  func handleIOEvents(_ events: IOEvents)
}

/// A descriptor's place in its loop: a slot index plus the slot's generation, both carried in epoll's u64,
/// so dispatch is an array index and events that were queued for an earlier user of the slot are dropped.
public struct IORegistration: Hashable, Sendable {
  public let fileDescriptor: Int32
  let slot: UInt32
  let generation: UInt32

  var epollData: UInt64 { UInt64(generation) << 32 | UInt64(slot) }
}

/// One epoll set, one thread: runs I/O handlers, timers and tasks until `stop()`.
///
/// `@unchecked Sendable` because the loop is handed to other threads, but only `execute`, `stop` and
/// `inEventLoop` may be used from them (they go through a `Mutex`, an `Atomic` and an eventfd); every other
/// member is confined to the loop thread, which debug builds assert.
public final class EventLoop: @unchecked Sendable {
  private struct Slot {
    var generation: UInt32 = 0
    var handler: (any IOEventHandler)?
  }

  /// A task that came in through `execute`. Its closure was passed as `sending`, so nothing outside
  /// the closure can still reach what it captured; that is what makes moving it to the loop thread safe.
  private struct TransferredTask: @unchecked Sendable {
    let run: () -> Void
  }

  private struct InboundTasks {
    var tasks: [TransferredTask] = []
    /// True while an eventfd write is outstanding, so a burst of `execute` calls costs one wake-up.
    var wakeupPending = false
  }

  private static let wakeupToken = UInt64.max
  private static let eventBatchSize = 256
  /// The per-loop read buffer size: large enough that a read rarely needs a second call.
  public static let readBufferSize = 64 * 1024

  private let epollFD: Int32
  private let wakeupFD: Int32
  private let inboundTasks = Mutex(InboundTasks())
  private let stopRequested = Atomic<Bool>(false)
  /// The running thread's pthread_t, 0 when not running.
  private let runningThread = Atomic<UInt>(0)

  private var slots: [Slot] = []
  private var freeSlots: [UInt32] = []
  private var timers = TimerQueue<() -> Void>()
  private var localTasks: [() -> Void] = []
  private var hasRun = false
  private let events: UnsafeMutableBufferPointer<gh_epoll_event>

  /// Scratch space for reads on this loop: whatever is read into it is valid only until the handler returns.
  public let readBuffer: UnsafeMutableRawBufferPointer

  /// Creates the epoll set and its wake-up eventfd. The loop does nothing until some thread calls `run()`.
  public init() throws(SystemError) {
    let epollFD = try Syscall.epollCreate()
    let wakeupFD: Int32
    do {
      wakeupFD = try Syscall.eventFD()
      try Syscall.epollControl(
        epollFD, GH_EPOLL_CTL_ADD, wakeupFD, events: GH_EPOLLIN, data: EventLoop.wakeupToken)
    } catch {
      Syscall.close(epollFD)
      throw error
    }
    self.epollFD = epollFD
    self.wakeupFD = wakeupFD
    events = .allocate(capacity: EventLoop.eventBatchSize)
    readBuffer = .allocate(byteCount: EventLoop.readBufferSize, alignment: 16)
  }

  deinit {
    Syscall.close(wakeupFD)
    Syscall.close(epollFD)
    events.deallocate()
    readBuffer.deallocate()
  }

  // MARK: Any thread

  /// True when called on the thread currently running this loop.
  public var inEventLoop: Bool {
    runningThread.load(ordering: .acquiring) == UInt(pthread_self())
  }

  /// Runs `task` on the loop thread, soon. The only way in from other threads.
  public func execute(_ task: sending @escaping () -> Void) {
    let transferred = TransferredTask(run: task)
    let needsWakeup = inboundTasks.withLock { state in
      state.tasks.append(transferred)
      if state.wakeupPending { return false }
      state.wakeupPending = true
      return true
    }
    if needsWakeup { wakeUp() }
  }

  /// Asks `run()` to return after the current iteration. Safe from any thread, idempotent.
  public func stop() {
    stopRequested.store(true, ordering: .releasing)
    wakeUp()
  }

  private func wakeUp() {
    do {
      try Syscall.signalEventFD(wakeupFD)
    } catch {
      preconditionFailure("could not wake event loop: \(error)")
    }
  }

  // MARK: Loop thread

  /// Turns the calling thread into the loop thread until `stop()`. A loop runs once; it is not restartable.
  ///
  /// When it stops, handlers still registered get `.loopStopping`, deferred tasks run, and pending timers
  /// and tasks from other threads are dropped.
  public func run() {
    precondition(!hasRun, "an EventLoop runs once")
    hasRun = true
    runningThread.store(UInt(pthread_self()), ordering: .releasing)
    while !stopRequested.load(ordering: .acquiring) {
      let count: Int
      do {
        count = try Syscall.epollWait(epollFD, into: events, timeoutMilliseconds: nextTimeoutMilliseconds())
      } catch {
        preconditionFailure("epoll_wait: \(error)")  // only EINVAL is left, and that is a bug
      }
      iterationTime = Syscall.monotonicNanoseconds()
      for index in 0..<count {
        dispatch(events[index])
      }
      runExpiredTimers()
      runLocalTasks()
      runInboundTasks()
      noteTurnLength()
    }
    tearDown()
    runningThread.store(0, ordering: .releasing)
  }

  @inline(__always)
  private func dispatch(_ event: gh_epoll_event) {
    let token = event.data
    if token == EventLoop.wakeupToken {
      do {
        try Syscall.drainEventFD(wakeupFD)
      } catch {
        preconditionFailure("eventfd read: \(error)")
      }
      return
    }
    let slot = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
    guard slot < slots.count, slots[slot].generation == UInt32(truncatingIfNeeded: token >> 32),
      let handler = slots[slot].handler
    else { return }  // deregistered earlier in this batch, or an event meant for a previous user of the slot
    handler.handleIOEvents(IOEvents(epollEvents: event.events))
  }

  private func nextTimeoutMilliseconds() -> Int32 {
    if !localTasks.isEmpty { return 0 }
    guard let deadline = timers.nearestDeadline else { return -1 }
    let now = Syscall.monotonicNanoseconds()
    if deadline <= now { return 0 }
    // Round up: waking a little late is harmless, waking early would spin until the deadline.
    let milliseconds = (deadline - now + 999_999) / 1_000_000
    return Int32(min(milliseconds, UInt64(Int32.max)))
  }

  private func runExpiredTimers() {
    guard !timers.isEmpty else { return }
    // One reading of the clock: timers scheduled by these actions land after `now` and wait a turn.
    let now = Syscall.monotonicNanoseconds()
    while let action = timers.popExpired(now: now) {
      action()
    }
  }

  private func runLocalTasks() {
    guard !localTasks.isEmpty else { return }
    let batch = localTasks
    localTasks.removeAll(keepingCapacity: true)
    for task in batch { task() }
  }

  private func runInboundTasks() {
    let batch = inboundTasks.withLock { state -> [TransferredTask] in
      state.wakeupPending = false
      guard !state.tasks.isEmpty else { return [] }
      var taken: [TransferredTask] = []
      swap(&taken, &state.tasks)
      return taken
    }
    for task in batch { task.run() }
  }

  private func tearDown() {
    for index in slots.indices {
      let generation = slots[index].generation
      // Re-read each slot: an earlier handler may have deregistered (or registered) others.
      guard let handler = slots[index].handler else { continue }
      handler.handleIOEvents(.loopStopping)
      if slots[index].generation == generation, slots[index].handler != nil {
        slots[index].handler = nil  // it ignored the notice; at least release it
      }
    }
    var rounds = 0
    while !localTasks.isEmpty, rounds < 16 {
      runLocalTasks()
      rounds += 1
    }
    localTasks.removeAll()
    timers.removeAll()
    inboundTasks.withLock { state in state.tasks.removeAll() }
  }

  /// Debug-build check that loop-confined API is used on the loop thread.
  @inline(__always)
  public func assertInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
    assert(inEventLoop, "called off its event loop thread", file: file, line: line)
  }

  /// Adds `fileDescriptor` to the epoll set; `handler` is kept alive until `deregister`.
  public func register(
    fileDescriptor: Int32, interest: IOInterest, handler: any IOEventHandler
  ) throws(SystemError) -> IORegistration {
    assertInEventLoop()
    let slot: UInt32
    if let reused = freeSlots.popLast() {
      slot = reused
    } else {
      slot = UInt32(slots.count)
      slots.append(Slot())
    }
    slots[Int(slot)].handler = handler
    let registration = IORegistration(
      fileDescriptor: fileDescriptor, slot: slot, generation: slots[Int(slot)].generation)
    do {
      try Syscall.epollControl(
        epollFD, GH_EPOLL_CTL_ADD, fileDescriptor, events: interest.epollEvents, data: registration.epollData)
    } catch {
      release(slot: slot)
      throw error
    }
    return registration
  }

  /// Changes what a registered descriptor is woken for.
  public func modify(_ registration: IORegistration, interest: IOInterest) throws(SystemError) {
    assertInEventLoop()
    precondition(isCurrent(registration), "modify of a registration that was already removed")
    try Syscall.epollControl(
      epollFD, GH_EPOLL_CTL_MOD, registration.fileDescriptor, events: interest.epollEvents,
      data: registration.epollData)
  }

  /// Removes a descriptor from the epoll set and releases its handler. Call it before closing the descriptor.
  /// Removing an already removed registration does nothing.
  public func deregister(_ registration: IORegistration) {
    assertInEventLoop()
    guard isCurrent(registration) else { return }
    do {
      try Syscall.epollControl(epollFD, GH_EPOLL_CTL_DEL, registration.fileDescriptor, events: 0, data: 0)
    } catch {
      // Only ENOENT is possible here, and slots track exactly what was added; drop the slot regardless.
      assertionFailure("epoll_ctl(DEL): \(error)")
    }
    release(slot: registration.slot)
  }

  private func isCurrent(_ registration: IORegistration) -> Bool {
    let slot = Int(registration.slot)
    return slot < slots.count && slots[slot].generation == registration.generation
      && slots[slot].handler != nil
  }

  private func release(slot: UInt32) {
    slots[Int(slot)].handler = nil
    slots[Int(slot)].generation &+= 1
    freeSlots.append(slot)
  }

  /// Number of registered descriptors (for tests and metrics).
  public var registrationCount: Int {
    assertInEventLoop()
    return slots.count - freeSlots.count
  }

  /// The monotonic clock as read once when this turn's events arrived. Handlers use it
  /// for deadlines and durations instead of reading the clock per request; it lags the
  /// true time by the length of one turn at most. Loop thread only.
  public private(set) var iterationTime: UInt64 = Syscall.monotonicNanoseconds()

  /// Turns that took longer than `stallNanoseconds` from their events' arrival to their
  /// last task: every connection of the loop waited that long. Read from any thread.
  public let stalls = Atomic<Int>(0)
  /// The longest turn since the loop started, in nanoseconds. Read from any thread.
  public let longestTurnNanoseconds = Atomic<UInt64>(0)
  /// A turn longer than this is a stall: 10 ms, a hundred times a busy turn's usual length.
  public static let stallNanoseconds: UInt64 = 10_000_000

  /// One clock read a turn (a vDSO call, no system call); the counters are touched only
  /// when a turn is long, so the usual turn writes nothing shared.
  @inline(__always)
  private func noteTurnLength() {
    let length = Syscall.monotonicNanoseconds() &- iterationTime
    guard length > Self.stallNanoseconds / 4 else { return }
    if length > longestTurnNanoseconds.load(ordering: .relaxed) {
      longestTurnNanoseconds.store(length, ordering: .relaxed)
    }
    if length > Self.stallNanoseconds { stalls.add(1, ordering: .relaxed) }
  }

  /// Nanoseconds on the monotonic clock, the time base of timers.
  public static func monotonicNanoseconds() -> UInt64 {
    Syscall.monotonicNanoseconds()
  }

  /// Runs `action` on this loop once `delay` has passed; timers with equal deadlines fire in scheduling order.
  @discardableResult
  public func scheduleTimer(after delay: Duration, _ action: @escaping () -> Void) -> TimerHandle {
    assertInEventLoop()
    let deadline = Syscall.monotonicNanoseconds() &+ EventLoop.nanoseconds(delay)
    return timers.schedule(deadline: deadline, action)
  }

  /// Cancels a timer that has not fired; false if it already fired or was cancelled.
  @discardableResult
  public func cancelTimer(_ handle: TimerHandle) -> Bool {
    assertInEventLoop()
    return timers.cancel(handle)
  }

  /// Runs `task` on this loop after the current batch of events and timers, without locking or a wake-up.
  /// Used to deliver callbacks outside the call that caused them.
  public func executeLater(_ task: @escaping () -> Void) {
    assertInEventLoop()
    localTasks.append(task)
  }

  static func nanoseconds(_ duration: Duration) -> UInt64 {
    let (seconds, attoseconds) = duration.components
    if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
    let whole = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
    if whole.overflow { return UInt64.max / 2 }
    return whole.partialValue &+ UInt64(attoseconds / 1_000_000_000)
  }
}
