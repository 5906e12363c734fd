import GatehouseNet
import Testing

@testable import GatehouseAdmin
@testable import GatehouseLogging

/// The deadline rules of an admin connection (`AdminDeadline`) and the throttle of the
/// refused-connection log line (`LogThrottle`) and the failed-authentication one
/// (`AdminAuthFailures`), without sockets.
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

  /// Held-back events are reported once a line may go out again, without a new event.
  @Test func throttleFlushesHeldEventsOnceTheIntervalIsOver() {
    var throttle = LogThrottle(intervalNanoseconds: 1_000)

    #expect(throttle.flush(now: 5) == nil)
    #expect(throttle.admit(now: 10) == 0)
    #expect(throttle.admit(now: 20) == nil)
    #expect(throttle.admit(now: 30) == nil)
    #expect(throttle.flush(now: 1_009) == nil)
    #expect(throttle.flush(now: 1_010) == 2)
    #expect(throttle.flush(now: 9_000) == nil)
    // The flush started a new interval.
    #expect(throttle.admit(now: 1_500) == nil)
    #expect(throttle.admit(now: 2_010) == 1)
  }

  /// One `admin authentication failed` line per 10 s: the first at once, then the count of
  /// the ones since (with the latest peer), from the sweep or from the next failure.
  @Test func authFailuresAreCountedBetweenLines() {
    var failures = AdminAuthFailures()
    let second: UInt64 = 1_000_000_000
    func line(_ fields: [LogField]?) -> [String]? { fields?.map { "\($0.key)=\($0.value)" } }

    #expect(
      line(failures.record(peer: "127.0.0.1:1000", now: 0))
        == line([("peer", .string("127.0.0.1:1000")), ("failures", .int(1))]))
    #expect(failures.record(peer: "127.0.0.1:1001", now: second) == nil)
    #expect(failures.record(peer: "127.0.0.1:1002", now: 2 * second) == nil)
    #expect(failures.flush(now: 9 * second) == nil)
    #expect(
      line(failures.flush(now: 10 * second)) == line([("peer", .string("127.0.0.1:1002")), ("failures", .int(2))]))
    #expect(failures.flush(now: 30 * second) == nil)
    #expect(failures.record(peer: "127.0.0.1:1003", now: 15 * second) == nil)
    #expect(line(failures.record(peer: nil, now: 20 * second)) == line([("peer", .null), ("failures", .int(2))]))
  }

  // MARK: Connection caps

  static func peer(_ host: String, port: UInt16) -> SocketAddress {
    try! SocketAddress(parsing: "\(host):\(port)")
  }

  @Test func oneAddressGetsAtMostItsShareWhateverPortsItUses() {
    var counts = AdminConnectionCounts()
    for port in 0..<UInt16(AdminConnectionLimits.maxConnectionsPerPeer) {
      #expect(counts.admit(Self.peer("10.0.0.7", port: 40_000 + port)) == .accept)
    }
    #expect(counts.admit(Self.peer("10.0.0.7", port: 50_000)) == .refusePeer)
    // Another address (a probe) still gets in.
    #expect(counts.admit(Self.peer("10.0.0.8", port: 40_000)) == .accept)
    // One of the first address's connections closes: it may open one more.
    counts.release(Self.peer("10.0.0.7", port: 40_003))
    #expect(counts.admit(Self.peer("10.0.0.7", port: 50_001)) == .accept)
    #expect(counts.count(from: Self.peer("10.0.0.7", port: 1)) == AdminConnectionLimits.maxConnectionsPerPeer)
    #expect(counts.total == AdminConnectionLimits.maxConnectionsPerPeer + 1)
  }

  @Test func theTotalCapHoldsAcrossAddresses() {
    var counts = AdminConnectionCounts()
    var admitted = 0
    for index in 0..<100 where counts.admit(Self.peer("10.0.1.\(index % 10)", port: UInt16(1000 + index))) == .accept {
      admitted += 1
    }
    #expect(admitted == AdminConnectionLimits.maxConnections)
    #expect(counts.admit(Self.peer("10.0.2.1", port: 1)) == .refuseTotal)
    counts.release(Self.peer("10.0.1.0", port: 9))
    #expect(counts.admit(Self.peer("10.0.2.1", port: 1)) == .accept)
  }

  @Test func releasingWhatWasNotCountedChangesNothing() {
    var counts = AdminConnectionCounts()
    #expect(counts.admit(nil) == .accept)
    counts.release(Self.peer("10.0.0.1", port: 1))
    #expect(counts.total == 1)
    counts.release(nil)
    counts.release(nil)
    #expect(counts.total == 0)
  }
}
