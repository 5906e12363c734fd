import Testing

@testable import GatehouseCore

@Suite struct UpstreamPoolStateTests {
  /// A pool whose first `count` leases each connected and are now leased.
  static func leasing(_ count: Int, maxIdle: Int) -> UpstreamPoolState<Int> {
    var pool = UpstreamPoolState<Int>(maxIdle: maxIdle)
    for _ in 0..<count {
      #expect(pool.lease() == .connect)
      pool.connectSucceeded()
    }
    return pool
  }

  @Test func firstLeaseConnectsThenReleasedConnectionIsReused() {
    var pool = UpstreamPoolState<Int>(maxIdle: 2)
    #expect(pool.lease() == .connect)
    pool.connectSucceeded()
    #expect(pool.openCount == 1)
    #expect(pool.release(1, reusable: true, now: 0) == .keepIdle)
    #expect(pool.idle == [1])
    #expect(pool.lease() == .reuse(1))
    #expect(pool.idle.isEmpty)
    #expect(pool.leased == 1)
  }

  @Test func connectionsBeyondTheIdleLimitStayUntilTheyHaveBeenIdleLongEnough() {
    let grace = UpstreamPoolState<Int>.surplusIdleNanoseconds
    var pool = Self.leasing(3, maxIdle: 1)
    // Released at 10, 20 and 30: all kept, the two beyond the limit as surplus.
    #expect(pool.release(1, reusable: true, now: 10) == .keepIdle)
    #expect(!pool.hasSurplus)
    #expect(pool.release(2, reusable: true, now: 20) == .keepIdle)
    #expect(pool.release(3, reusable: true, now: 30) == .keepIdle)
    #expect(pool.hasSurplus)
    #expect(pool.openCount == 3)
    // Nothing has been idle long enough yet.
    #expect(pool.trimSurplus(now: 10 + grace - 1) == [])
    // The coldest goes first, and only what has been idle for the whole grace.
    #expect(pool.trimSurplus(now: 20 + grace - 1) == [1])
    #expect(pool.idle == [2, 3])
    // Never below the limit, however long the rest have been idle.
    #expect(pool.trimSurplus(now: 30 + grace * 10) == [2])
    #expect(pool.idle == [3])
    #expect(!pool.hasSurplus)
    #expect(pool.trimSurplus(now: 30 + grace * 20) == [])
    #expect(pool.openCount == 1)
  }

  @Test func aSurplusConnectionReusedBeforeItsGraceEndsIsNotTrimmed() {
    let grace = UpstreamPoolState<Int>.surplusIdleNanoseconds
    var pool = Self.leasing(2, maxIdle: 1)
    _ = pool.release(1, reusable: true, now: 0)
    _ = pool.release(2, reusable: true, now: 0)
    // The warmest is reused and released again later: it went idle anew.
    #expect(pool.lease() == .reuse(2))
    #expect(pool.release(2, reusable: true, now: grace) == .keepIdle)
    #expect(pool.trimSurplus(now: grace + 1) == [1])
    #expect(pool.trimSurplus(now: grace * 3) == [])
    #expect(pool.idle == [2])
  }

  @Test func noIdleLimitMeansNoConnectionIsKept() {
    var pool = UpstreamPoolState<Int>(maxIdle: 0)
    _ = pool.lease()
    pool.connectSucceeded()
    #expect(pool.release(1, reusable: true, now: 0) == .close)
    #expect(pool.openCount == 0)
    #expect(!pool.hasSurplus)
  }

  @Test func theColdestIdleConnectionCanBeTakenToMakeRoom() {
    var pool = Self.leasing(3, maxIdle: 4)
    for id in [1, 2, 3] { _ = pool.release(id, reusable: true, now: UInt64(id)) }
    #expect(pool.takeColdest() == 1)
    #expect(pool.idle == [2, 3])
    #expect(pool.openCount == 2)
    pool.idleConnectionClosed(3)
    #expect(pool.takeColdest() == 2)
    #expect(pool.takeColdest() == nil)
    #expect(pool.openCount == 0)
  }

  @Test func unreusableConnectionsAreClosed() {
    var pool = UpstreamPoolState<Int>(maxIdle: 4)
    _ = pool.lease()
    pool.connectSucceeded()
    #expect(pool.release(9, reusable: false, now: 0) == .close)
    #expect(pool.openCount == 0)
  }

  @Test func reuseIsLastInFirstOut() {
    var pool = Self.leasing(3, maxIdle: 4)
    for id in [1, 2, 3] { _ = pool.release(id, reusable: true, now: 0) }
    #expect(pool.lease() == .reuse(3))
    #expect(pool.lease() == .reuse(2))
  }

  @Test func idleCloseAndFailuresKeepCountsRight() {
    var pool = UpstreamPoolState<Int>(maxIdle: 4)
    _ = pool.lease()
    pool.connectFailed()
    #expect(pool.openCount == 0)
    _ = pool.lease()
    pool.connectSucceeded()
    _ = pool.release(5, reusable: true, now: 0)
    pool.idleConnectionClosed(5)
    #expect(pool.openCount == 0)
    #expect(pool.lease() == .connect)
    pool.connectSucceeded()
    pool.leasedConnectionClosed()
    #expect(pool.openCount == 0)
  }

  @Test func leaseNewConnectsEvenWithIdleConnections() {
    var pool = UpstreamPoolState<Int>(maxIdle: 4)
    _ = pool.lease()
    pool.connectSucceeded()
    _ = pool.release(1, reusable: true, now: 0)
    #expect(pool.leaseNew() == .connect)
    pool.connectSucceeded()
    #expect(pool.idle == [1])
    #expect(pool.openCount == 2)
  }

  @Test func drainIdleEmptiesTheList() {
    var pool = Self.leasing(2, maxIdle: 4)
    _ = pool.release(1, reusable: true, now: 0)
    _ = pool.release(2, reusable: true, now: 0)
    #expect(pool.drainIdle() == [1, 2])
    #expect(pool.openCount == 0)
  }

  @Test func retryOnlyForIdempotentRequestsOnReusedConnectionsBeforeAnyAnswer() {
    #expect(
      UpstreamRetryPolicy.shouldRetry(
        idempotent: true, connectionWasReused: true, answerBytesReceived: false, bodyReplayable: true, attempts: 1))
    #expect(
      !UpstreamRetryPolicy.shouldRetry(
        idempotent: false, connectionWasReused: true, answerBytesReceived: false, bodyReplayable: true, attempts: 1))
    #expect(
      !UpstreamRetryPolicy.shouldRetry(
        idempotent: true, connectionWasReused: false, answerBytesReceived: false, bodyReplayable: true, attempts: 1))
    #expect(
      !UpstreamRetryPolicy.shouldRetry(
        idempotent: true, connectionWasReused: true, answerBytesReceived: true, bodyReplayable: true, attempts: 1))
    #expect(
      !UpstreamRetryPolicy.shouldRetry(
        idempotent: true, connectionWasReused: true, answerBytesReceived: false, bodyReplayable: false, attempts: 1))
    #expect(
      !UpstreamRetryPolicy.shouldRetry(
        idempotent: true, connectionWasReused: true, answerBytesReceived: false, bodyReplayable: true, attempts: 2))
  }
}

/// Which answers leave their connection in doubt: those with no body by rule whose head
/// announces one anyway.
@Suite struct UpstreamAnswerDoubtTests {
  @Test func bodilessAnswersThatAnnounceABodyLeaveDoubt() {
    // HEAD answers announcing the GET's length or chunking.
    #expect(
      UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: true, status: 200, announcedLength: 10, announcesChunked: false))
    #expect(
      UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: true, status: 200, announcedLength: nil, announcesChunked: true))
    // 204 and 304 with a length.
    #expect(
      UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: false, status: 204, announcedLength: 5, announcesChunked: false))
    #expect(
      UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: false, status: 304, announcedLength: 1, announcesChunked: false))
  }

  @Test func answersThatCarryWhatTheyAnnounceLeaveNone() {
    #expect(
      !UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: false, status: 200, announcedLength: 10, announcesChunked: false)
    )
    #expect(
      !UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: false, status: 200, announcedLength: nil, announcesChunked: true)
    )
    #expect(
      !UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: true, status: 200, announcedLength: 0, announcesChunked: false))
    #expect(
      !UpstreamAnswerDoubt.leavesDoubt(
        requestWasHEAD: false, status: 304, announcedLength: nil, announcesChunked: false))
    #expect(
      !UpstreamAnswerDoubt.leavesDoubt(requestWasHEAD: false, status: 204, announcedLength: 0, announcesChunked: false))
  }
}
