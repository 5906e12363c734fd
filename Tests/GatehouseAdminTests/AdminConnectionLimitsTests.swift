import GatehouseNet
import Testing

@testable import GatehouseAdmin
@testable import GatehouseLogging

/// The throttle of the refused-connection log line (`LogThrottle`) and the
/// failed-authentication one (`AdminAuthFailures`), without sockets. (The connection's
/// deadlines are `HTTP1ServerConnection`'s, tested in GatehouseHTTPServerTests.)
@Suite struct AdminConnectionLimitsTests {

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
