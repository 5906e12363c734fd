import Testing

@testable import GatehouseCore

/// The deadline rules of an admin connection (`AdminDeadline`) and the throttle of the
/// refused-connection log line (`LogThrottle`), without sockets.
@Suite struct AdminConnectionLimitsTests {
  static let limits = AdminConnectionLimits(headerTimeoutNanoseconds: 1_000, idleTimeoutNanoseconds: 5_000)

  @Test func aConnectionThatSendsNothingIsClosedAfterTheHeaderTimeout() {
    var deadline = AdminDeadline()
    deadline.start(.request(started: false), now: 100, limits: Self.limits)

    #expect(deadline.check(now: 1_099, acknowledged: 0, limits: Self.limits) == nil)
    #expect(deadline.check(now: 1_100, acknowledged: 0, limits: Self.limits) == .close)
    // Acted on once: the caller starts the next wait.
    #expect(deadline.check(now: 9_999, acknowledged: 0, limits: Self.limits) == nil)
  }

  @Test func theFirstRequestKeepsTheTimeoutThatStartedAtAccept() {
    var deadline = AdminDeadline()
    deadline.start(.request(started: false), now: 100, limits: Self.limits)
    deadline.requestBytesArrived(now: 900, limits: Self.limits)

    #expect(deadline.wait == .request(started: true))
    #expect(deadline.due == 1_100)
    #expect(deadline.check(now: 1_100, acknowledged: 0, limits: Self.limits) == .requestTimedOut)
  }

  @Test func aLaterRequestGetsTheHeaderTimeoutFromItsFirstByte() {
    var deadline = AdminDeadline()
    deadline.start(.nextRequest, now: 100, limits: Self.limits)
    #expect(deadline.due == 5_100)
    deadline.requestBytesArrived(now: 4_000, limits: Self.limits)
    // More bytes of the same request do not move it.
    deadline.requestBytesArrived(now: 4_500, limits: Self.limits)

    #expect(deadline.check(now: 4_999, acknowledged: 0, limits: Self.limits) == nil)
    #expect(deadline.check(now: 5_000, acknowledged: 0, limits: Self.limits) == .requestTimedOut)
  }

  @Test func anIdleConnectionIsClosedAfterTheIdleTimeout() {
    var deadline = AdminDeadline()
    deadline.start(.nextRequest, now: 0, limits: Self.limits)

    #expect(deadline.check(now: 4_999, acknowledged: 0, limits: Self.limits) == nil)
    #expect(deadline.check(now: 5_000, acknowledged: 0, limits: Self.limits) == .close)
  }

  @Test func anAnswerInTheWorksHasNoDeadline() {
    var deadline = AdminDeadline()
    deadline.start(.answer, now: 0, limits: Self.limits)
    deadline.requestBytesArrived(now: 10, limits: Self.limits)

    #expect(deadline.wait == .answer)
    #expect(deadline.check(now: .max, acknowledged: 1_000_000, limits: Self.limits) == nil)
  }

  @Test func aClientThatTakesNothingIsResetAfterTheIdleTimeout() {
    var deadline = AdminDeadline()
    deadline.start(.output, now: 0, limits: Self.limits, acknowledged: 0)

    #expect(deadline.check(now: 4_999, acknowledged: 0, limits: Self.limits) == nil)
    #expect(deadline.check(now: 5_000, acknowledged: 0, limits: Self.limits) == .abort)
  }

  /// A slow reader of a big answer is not cut while it keeps taking bytes (nginx's
  /// `send_timeout` is between two successful writes, not for the whole answer).
  @Test func anyProgressRestartsTheSendTimeout() {
    var deadline = AdminDeadline()
    deadline.start(.output, now: 0, limits: Self.limits, acknowledged: 0)

    #expect(deadline.check(now: 4_000, acknowledged: 1_000, limits: Self.limits) == nil)
    #expect(deadline.due == 9_000)
    #expect(deadline.check(now: 8_000, acknowledged: 10_000, limits: Self.limits) == nil)
    #expect(deadline.check(now: 12_999, acknowledged: 10_000, limits: Self.limits) == nil)
    #expect(deadline.check(now: 13_000, acknowledged: 10_000, limits: Self.limits) == .abort)
  }

  @Test func timeoutsFollowTheLimitsInForceWhenAWaitStarts() {
    var deadline = AdminDeadline()
    deadline.start(.nextRequest, now: 0, limits: Self.limits)
    let reloaded = AdminConnectionLimits(headerTimeoutNanoseconds: 50, idleTimeoutNanoseconds: 200)
    deadline.requestBytesArrived(now: 100, limits: reloaded)

    #expect(deadline.due == 150)
  }

  @Test func throttleLetsOneLinePerIntervalAndCountsTheRest() {
    var throttle = LogThrottle(intervalNanoseconds: 1_000)

    #expect(throttle.admit(now: 10) == 0)
    #expect(throttle.admit(now: 20) == nil)
    #expect(throttle.admit(now: 1_009) == nil)
    #expect(throttle.admit(now: 1_010) == 2)
    #expect(throttle.admit(now: 5_000) == 0)
  }
}
