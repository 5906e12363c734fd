import Foundation
import Synchronization

/// A moment on the monotonic clock by which a bounded operation must be done.
struct Deadline: Sendable {
  let instant: ContinuousClock.Instant

  /// The deadline `seconds` from now.
  init(seconds: Double) {
    instant = .now + .milliseconds(Int(seconds * 1000))
  }

  var hasPassed: Bool { ContinuousClock.now >= instant }

  /// What is left, in whole milliseconds clamped for `poll(2)` (0 once passed).
  var pollMilliseconds: Int32 {
    let left = instant - ContinuousClock.now
    guard left > .zero else { return 0 }
    let (seconds, attoseconds) = left.components
    let millis = seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1
    return Int32(clamping: millis)
  }
}

/// Polls `condition` every `interval` until it holds or `timeout` seconds have passed, and
/// returns whether it held. Used instead of fixed sleeps wherever a state can be observed.
@discardableResult
func waitUntil(
  timeout: Double = 10, interval: Duration = .milliseconds(10), _ condition: () throws -> Bool
) rethrows -> Bool {
  let deadline = Deadline(seconds: timeout)
  while true {
    if try condition() { return true }
    if deadline.hasPassed { return false }
    sleep(for: interval)
  }
}

/// Blocks the calling thread for `duration` (only for pacing a simulated peer, never as
/// synchronization).
func sleep(for duration: Duration) {
  let (seconds, attoseconds) = duration.components
  var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
  var remaining = timespec()
  while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// A one-way latch a test opens to let a test backend go on (for example, finish an answer
/// that is held in flight), so ordering is decided by the test rather than by timing.
final class Gate: Sendable {
  private let isOpen = Mutex(false)

  init() {}

  /// Lets every waiter through, now and later.
  func open() { isOpen.withLock { $0 = true } }

  var opened: Bool { isOpen.withLock { $0 } }

  /// Waits until the gate opens, `giveUp` returns true, or `timeout` passes; returns
  /// whether the gate opened.
  @discardableResult
  func wait(timeout: Double = 30, giveUp: () -> Bool = { false }) -> Bool {
    waitUntil(timeout: timeout, interval: .milliseconds(5)) { opened || giveUp() } && opened
  }
}
