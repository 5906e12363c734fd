import Testing

@testable import GatehouseSharedTier

/// The link's decisions, event by event, with no socket and no clock.
@Suite struct RedisLinkMachineTests {
  private let ms: UInt64 = 1_000_000
  private let settings = RedisLinkMachine.Settings(
    initialBackoff: .milliseconds(100), maxBackoff: .seconds(10), stableAfter: .seconds(5),
    unresponsiveAfter: .seconds(2))

  private func delay(_ actions: [RedisLinkMachine.Action]) -> Duration? {
    for case .scheduleReconnect(let after) in actions { return after }
    return nil
  }

  @Test func connectsHandshakesAndComesUp() {
    var machine = RedisLinkMachine(settings: settings, seed: 1)
    #expect(!machine.isUp)
    #expect(machine.handle(.start) == [.connect])
    #expect(machine.handle(.start) == [])
    #expect(machine.handle(.handshakeDone(now: 0)) == [])  // not before the transport
    #expect(machine.handle(.transportReady) == [.sendHandshake])
    #expect(machine.phase == .handshaking)
    #expect(machine.handle(.handshakeDone(now: 5 * ms)) == [.markUp])
    #expect(machine.isUp)
    #expect(machine.lastProblem == nil)
  }

  @Test func failuresBackOffExponentiallyWithJitterUpToTheCap() {
    var machine = RedisLinkMachine(settings: settings, seed: 42)
    _ = machine.handle(.start)
    var previousFull: Duration = .zero
    for attempt in 1...12 {
      let actions = machine.handle(.lost(problem: "refused", now: 0))
      #expect(actions.first == .closeTransport)
      #expect(actions.contains(.failPending(.disconnected("refused"))))
      let full = min(Duration.milliseconds(100 * (1 << (attempt - 1))), .seconds(10))
      let wait = delay(actions)!
      #expect(wait <= full && wait >= full / 2, "attempt \(attempt): \(wait) for \(full)")
      #expect(full >= previousFull)
      previousFull = full
      #expect(machine.phase == .backingOff)
      #expect(machine.lastProblem == "refused")
      #expect(machine.handle(.lost(problem: "again", now: 0)) == [])  // already down
      #expect(machine.handle(.backoffElapsed) == [.connect])
    }
    #expect(machine.failures == 12)
  }

  @Test func jitterDiffersBetweenSeedsAndRepeatsForOne() {
    func waits(seed: UInt64) -> [Duration] {
      var machine = RedisLinkMachine(settings: settings, seed: seed)
      _ = machine.handle(.start)
      return (0..<6).map { _ in
        let wait = delay(machine.handle(.lost(problem: "x", now: 0)))!
        _ = machine.handle(.backoffElapsed)
        return wait
      }
    }
    #expect(waits(seed: 7) == waits(seed: 7))
    #expect(waits(seed: 7) != waits(seed: 8))
  }

  @Test func aStableLinkStartsCountingAgainAndAFlappingOneDoesNot() {
    var machine = RedisLinkMachine(settings: settings, seed: 3)
    _ = machine.handle(.start)
    for _ in 0..<4 {
      _ = machine.handle(.lost(problem: "down", now: 0))
      _ = machine.handle(.backoffElapsed)
    }
    _ = machine.handle(.transportReady)
    _ = machine.handle(.handshakeDone(now: 1_000 * ms))
    // Dropped after one second up: still flapping, the count goes on.
    _ = machine.handle(.lost(problem: "hung up", now: 2_000 * ms))
    #expect(machine.failures == 5)
    _ = machine.handle(.backoffElapsed)
    _ = machine.handle(.transportReady)
    _ = machine.handle(.handshakeDone(now: 10_000 * ms))
    // Up for a minute: back to the first step.
    let actions = machine.handle(.lost(problem: "restart", now: 70_000 * ms))
    #expect(machine.failures == 1)
    #expect(delay(actions)! <= .milliseconds(100))
  }

  @Test func aRefusedHandshakeIsAFailure() {
    var machine = RedisLinkMachine(settings: settings, seed: 1)
    _ = machine.handle(.start)
    _ = machine.handle(.transportReady)
    let actions = machine.handle(.lost(problem: "AUTH refused: WRONGPASS", now: 0))
    #expect(actions.contains(.closeTransport))
    #expect(!machine.isUp)
    #expect(machine.lastProblem == "AUTH refused: WRONGPASS")
  }

  @Test func timeoutsResetOnlyAServerSilentForLong() {
    var machine = RedisLinkMachine(settings: settings, seed: 1)
    _ = machine.handle(.start)
    _ = machine.handle(.transportReady)
    _ = machine.handle(.handshakeDone(now: 0))
    #expect(machine.handle(.commandTimedOut(now: 1_000 * ms, silentSince: 900 * ms)) == [])
    #expect(machine.isUp)
    let actions = machine.handle(.commandTimedOut(now: 3_000 * ms, silentSince: 900 * ms))
    #expect(actions.first == .closeTransport)
    #expect(actions.contains(.failPending(.disconnected("no reply for 2100 ms"))))
    #expect(!machine.isUp)
    // While down, timeouts mean nothing.
    #expect(machine.handle(.commandTimedOut(now: 9_000 * ms, silentSince: 0)) == [])
  }

  private func upMachine() -> RedisLinkMachine {
    var machine = RedisLinkMachine(settings: settings, seed: 1)
    _ = machine.handle(.start)
    _ = machine.handle(.transportReady)
    _ = machine.handle(.handshakeDone(now: 0))
    return machine
  }

  /// A hung server (every command times out, well within `unresponsiveAfter` of the first):
  /// the link reads as down at the third timeout in a row, says why, is not reset (commands
  /// still go out), and reads as up at the first command answered in time.
  @Test func timeoutsInARowMakeAnUpLinkReadAsDownUntilACommandIsAnswered() {
    var machine = upMachine()
    // A timeout, an answer: the count starts again.
    #expect(machine.handle(.commandTimedOut(now: 100 * ms, silentSince: 50 * ms)) == [])
    #expect(machine.handle(.commandTimedOut(now: 200 * ms, silentSince: 50 * ms)) == [])
    #expect(machine.handle(.commandAnswered) == [])
    #expect(machine.timeoutsInARow == 0 && machine.isUp)

    #expect(machine.handle(.commandTimedOut(now: 300 * ms, silentSince: 250 * ms)) == [])
    #expect(machine.handle(.commandTimedOut(now: 400 * ms, silentSince: 250 * ms)) == [])
    #expect(machine.isUp && machine.lastProblem == nil)
    let problem = "commands timed out 3 times in a row (no reply within 50 ms)"
    #expect(
      machine.handle(.commandTimedOut(now: 500 * ms, silentSince: 250 * ms)) == [.markUnanswered(problem: problem)])
    #expect(!machine.isUp && machine.isConnected)
    #expect(machine.lastProblem == problem)
    // Said once: later timeouts change nothing.
    #expect(machine.handle(.commandTimedOut(now: 600 * ms, silentSince: 250 * ms)) == [])
    #expect(machine.timeoutsInARow == 4 && !machine.isUp)

    #expect(machine.handle(.commandAnswered) == [.markAnswered])
    #expect(machine.isUp && machine.lastProblem == nil && machine.timeoutsInARow == 0)
    #expect(machine.handle(.commandAnswered) == [])
  }

  /// A server silent for `unresponsiveAfter` is reset, read as down or not; the next
  /// connection starts with no timeouts counted, and timeouts or answers while the link is
  /// not up count for nothing.
  @Test func aResetStartsTheCountAgain() {
    var machine = upMachine()
    for step in 1...3 {
      _ = machine.handle(.commandTimedOut(now: UInt64(step) * 100 * ms, silentSince: 50 * ms))
    }
    #expect(!machine.isUp)
    let actions = machine.handle(.commandTimedOut(now: 2_100 * ms, silentSince: 50 * ms))
    #expect(actions.contains(.failPending(.disconnected("no reply for 2050 ms"))))
    #expect(machine.phase == .backingOff && machine.timeoutsInARow == 0)
    #expect(machine.lastProblem == "no reply for 2050 ms")
    #expect(machine.handle(.commandAnswered) == [])
    #expect(machine.handle(.commandTimedOut(now: 2_200 * ms, silentSince: 2_150 * ms)) == [])
    #expect(machine.timeoutsInARow == 0)

    _ = machine.handle(.backoffElapsed)
    _ = machine.handle(.transportReady)
    #expect(machine.handle(.handshakeDone(now: 3_000 * ms)) == [.markUp])
    #expect(machine.isUp && machine.lastProblem == nil)
    #expect(machine.handle(.commandTimedOut(now: 3_100 * ms, silentSince: 3_050 * ms)) == [])
    #expect(machine.handle(.commandTimedOut(now: 3_200 * ms, silentSince: 3_050 * ms)) == [])
    #expect(machine.isUp)
  }

  /// The count, and the timeout the problem names, are settings.
  @Test func theCountIsASetting() {
    var settings = settings
    settings.downAfterTimeouts = 1
    settings.commandTimeout = .milliseconds(200)
    var machine = RedisLinkMachine(settings: settings, seed: 1)
    _ = machine.handle(.start)
    _ = machine.handle(.transportReady)
    _ = machine.handle(.handshakeDone(now: 0))
    #expect(
      machine.handle(.commandTimedOut(now: 300 * ms, silentSince: 100 * ms)) == [
        .markUnanswered(problem: "commands timed out once (no reply within 200 ms)")
      ])
  }

  @Test func stopIsFinal() {
    var machine = RedisLinkMachine(settings: settings, seed: 1)
    #expect(machine.handle(.stop) == [.failPending(.stopped)])
    #expect(machine.handle(.start) == [])

    var running = RedisLinkMachine(settings: settings, seed: 1)
    _ = running.handle(.start)
    _ = running.handle(.transportReady)
    _ = running.handle(.handshakeDone(now: 0))
    #expect(running.handle(.stop) == [.closeTransport, .failPending(.stopped)])
    #expect(running.handle(.lost(problem: "late close", now: 0)) == [])
    #expect(running.handle(.backoffElapsed) == [])
    #expect(running.handle(.stop) == [])
    #expect(running.phase == .stopped)
  }
}
