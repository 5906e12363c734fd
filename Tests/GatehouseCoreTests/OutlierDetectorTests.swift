import Testing

@testable import GatehouseCore

@Suite struct OutlierDetectorTests {
  typealias F = FleetFixtures
  static let ms: UInt64 = 1_000_000

  /// Reports `count` failures of `id` at `now`; returns the events.
  static func fail(
    _ id: EndpointID, times count: Int = 1, _ detector: inout OutlierDetector, _ set: inout EndpointSet, now: UInt64,
    _ failure: AttemptFailure = .connect
  ) -> [OutlierEvent] {
    var events: [OutlierEvent] = []
    for _ in 0..<count { events += detector.record(.failure(failure), for: id, in: &set, now: now) }
    return events
  }

  @Test func defaultsAreFiveFailuresTenSecondsHalfTheFleet() {
    let detector = OutlierDetector()
    #expect(detector.failures == 5 && detector.ejectNanoseconds == 10_000 * Self.ms && detector.maxEjectedPercent == 50)
  }

  @Test func ejectsAfterConsecutiveFailuresForTheEjectTime() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 3, ejectMilliseconds: 100)
    let id = F.id(1)
    #expect(Self.fail(id, times: 2, &detector, &set, now: 1_000).isEmpty)
    #expect(set[id].outlier.consecutiveFailures == 2)
    #expect(
      Self.fail(id, times: 1, &detector, &set, now: 2_000, .status503) == [.ejected(id, until: 2_000 + 100 * Self.ms)])
    #expect(set[id].state(now: 2_000) == .ejected(until: 2_000 + 100 * Self.ms))
    #expect(set[id].outlier.consecutiveFailures == 0 && set[id].outlier.repeatCount == 1)
  }

  @Test func aSuccessResetsTheCount() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 3, ejectMilliseconds: 100)
    let id = F.id(0)
    _ = Self.fail(id, times: 2, &detector, &set, now: 0)
    #expect(detector.record(.success, for: id, in: &set, now: 0).isEmpty)
    #expect(set[id].outlier.consecutiveFailures == 0)
    #expect(Self.fail(id, times: 2, &detector, &set, now: 0).isEmpty)
    #expect(set[id].isAvailable(now: 0))
  }

  @Test func returnsWhenTheTimeIsOverAndSweepReportsIt() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 1, ejectMilliseconds: 100)
    let until = 100 * Self.ms
    _ = Self.fail(F.id(0), &detector, &set, now: 0)
    _ = Self.fail(F.id(2), &detector, &set, now: 50 * Self.ms)
    #expect(!set[F.id(0)].isAvailable(now: until - 1))
    #expect(detector.sweep(&set, now: until - 1).isEmpty)
    // Available from `until` on, whether or not a sweep ran.
    #expect(set[F.id(0)].isAvailable(now: until))
    #expect(detector.sweep(&set, now: until) == [.returned(F.id(0))])
    #expect(set[F.id(0)].outlier.ejectedUntil == nil && set[F.id(0)].outlier.calmSince == until)
    #expect(detector.sweep(&set, now: until + 1).isEmpty)
    // A record after the other's time reports its return on the way.
    let events = detector.record(.success, for: F.id(1), in: &set, now: 200 * Self.ms)
    #expect(events == [.returned(F.id(2))])
    #expect(set[F.id(2)].outlier.calmSince == 150 * Self.ms)
  }

  @Test func repeatedEjectionsDoubleUpToTenTimes() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 2, ejectMilliseconds: 100)
    let id = F.id(3)
    var now: UInt64 = 1
    var lengths: [UInt64] = []
    for _ in 0..<7 {
      let events = Self.fail(id, times: 2, &detector, &set, now: now)
      guard case .ejected(_, let until)? = events.last else {
        Issue.record("not ejected: \(events)")
        return
      }
      lengths.append((until - now) / Self.ms)
      // Back at `until`, failing again at once.
      now = until
    }
    #expect(lengths == [100, 200, 400, 800, 1_000, 1_000, 1_000])
    #expect(set[id].outlier.repeatCount == OutlierDetector.maximumRepeat)
    #expect(detector.ejectionNanoseconds(repeatCount: 0) == 100 * Self.ms)
    #expect(detector.ejectionNanoseconds(repeatCount: 100) == 1_000 * Self.ms)
  }

  @Test func theMultiplierDecaysOneStepPerEjectTimeSpentBack() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 1, ejectMilliseconds: 100)
    let id = F.id(0)
    var now: UInt64 = 0
    for _ in 0..<4 {
      guard case .ejected(_, let until)? = Self.fail(id, &detector, &set, now: now).last else {
        Issue.record("not ejected")
        return
      }
      now = until
    }
    // Four in a row: repeat count 4 (the last lasted 800 ms), back at `now`.
    #expect(set[id].outlier.repeatCount == 4)
    // 250 ms back: two full steps off (4 → 2), and this ejection is the third: 400 ms.
    let back = now
    #expect(
      Self.fail(id, &detector, &set, now: back + 250 * Self.ms)
        == [.returned(id), .ejected(id, until: back + 650 * Self.ms)])
    #expect(set[id].outlier.repeatCount == 3)
    // A long calm (at least as many steps as the count) starts over at the base time.
    let returned = back + 650 * Self.ms
    let later = returned + 300 * Self.ms
    #expect(Self.fail(id, &detector, &set, now: later) == [.returned(id), .ejected(id, until: later + 100 * Self.ms)])
    #expect(set[id].outlier.repeatCount == 1)
  }

  @Test func decayStepsCountFromTheReturnAndCarryTheRemainder() {
    let detector = OutlierDetector(failures: 1, ejectMilliseconds: 100)
    var state = OutlierState()
    state.repeatCount = 5
    state.calmSince = 1_000
    #expect(detector.decayed(state, now: 1_000 + 99 * Self.ms).repeatCount == 5)
    let once = detector.decayed(state, now: 1_000 + 150 * Self.ms)
    #expect(once.repeatCount == 4 && once.calmSince == 1_000 + 100 * Self.ms)
    #expect(detector.decayed(once, now: 1_000 + 200 * Self.ms).repeatCount == 3)
    #expect(detector.decayed(state, now: 1_000 + 10_000 * Self.ms).repeatCount == 0)
    // No decay while ejected.
    state.ejectedUntil = .max
    #expect(detector.decayed(state, now: .max - 1).repeatCount == 5)
  }

  @Test func maximumEjectedRoundsDownButAllowsOneFromTwoEndpoints() {
    let half = OutlierDetector(maxEjectedPercent: 50)
    #expect(half.maximumEjected(endpointCount: 0) == 0)
    #expect(half.maximumEjected(endpointCount: 1) == 0)
    #expect(half.maximumEjected(endpointCount: 2) == 1)
    #expect(half.maximumEjected(endpointCount: 3) == 1)
    #expect(half.maximumEjected(endpointCount: 5) == 2)
    #expect(half.maximumEjected(endpointCount: 10) == 5)
    let small = OutlierDetector(maxEjectedPercent: 20)
    #expect(small.maximumEjected(endpointCount: 3) == 1)
    #expect(small.maximumEjected(endpointCount: 12) == 2)
    #expect(OutlierDetector(maxEjectedPercent: 100).maximumEjected(endpointCount: 7) == 7)
    #expect(OutlierDetector(maxEjectedPercent: 250).maximumEjected(endpointCount: 7) == 7)
    #expect(OutlierDetector(maxEjectedPercent: 0).maximumEjected(endpointCount: 7) == 0)
    #expect(OutlierDetector(failures: 0).maximumEjected(endpointCount: 7) == 0)
  }

  @Test func neverEjectsMoreThanThePercentageAndEjectsWaitingOnesWhenThereIsRoom() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 2, ejectMilliseconds: 100, maxEjectedPercent: 50)
    #expect(Self.fail(F.id(0), times: 2, &detector, &set, now: 0).count == 1)
    #expect(Self.fail(F.id(1), times: 2, &detector, &set, now: 10 * Self.ms).count == 1)
    // Two of four are out: the third stays in, at its threshold.
    #expect(Self.fail(F.id(2), times: 5, &detector, &set, now: 20 * Self.ms).isEmpty)
    #expect(set[F.id(2)].isAvailable(now: 20 * Self.ms))
    #expect(set[F.id(2)].outlier.consecutiveFailures == 5)
    // Once the first is back, the next failure of the third ejects it.
    #expect(
      Self.fail(F.id(2), &detector, &set, now: 100 * Self.ms)
        == [.returned(F.id(0)), .ejected(F.id(2), until: 200 * Self.ms)])
  }

  @Test func twoEndpointsAtFiftyPercentEjectOneAndASingleEndpointNone() {
    var pair = F.set(count: 2)
    var detector = OutlierDetector(failures: 1)
    #expect(Self.fail(F.id(0), &detector, &pair, now: 0).count == 1)
    #expect(Self.fail(F.id(1), times: 3, &detector, &pair, now: 0).isEmpty)
    var single = F.set(count: 1)
    var other = OutlierDetector(failures: 1)
    #expect(Self.fail(F.id(0), times: 10, &other, &single, now: 0).isEmpty)
    #expect(single[F.id(0)].isAvailable(now: 0))
  }

  @Test func drainingEndpointsAreNeitherEjectedNorCounted() {
    var set = F.set(count: 3)
    var detector = OutlierDetector(failures: 1, maxEjectedPercent: 50)
    _ = set.update(to: [EndpointAddress(F.address(0)), EndpointAddress(F.address(1))])
    // Slot 2 drains: not ejected, and the percentage is of the two others (one may go).
    #expect(Self.fail(F.id(2), times: 3, &detector, &set, now: 0).isEmpty)
    #expect(Self.fail(F.id(0), &detector, &set, now: 0).count == 1)
    #expect(Self.fail(F.id(1), &detector, &set, now: 0).isEmpty)
  }

  @Test func failuresWhileEjectedNeitherExtendNorRenew() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 1, ejectMilliseconds: 100)
    let id = F.id(0)
    #expect(Self.fail(id, &detector, &set, now: 0) == [.ejected(id, until: 100 * Self.ms)])
    // Tries sent before the ejection (or in panic) end failing meanwhile.
    #expect(Self.fail(id, times: 3, &detector, &set, now: 50 * Self.ms).isEmpty)
    #expect(set[id].outlier.ejectedUntil == 100 * Self.ms && set[id].outlier.consecutiveFailures == 0)
    #expect(set[id].outlier.repeatCount == 1)
  }

  @Test func aNewDetectorReturnsEjectionsItDidNotMake() {
    var set = F.set(count: 3)
    var old = OutlierDetector(failures: 1, ejectMilliseconds: 100)
    _ = Self.fail(F.id(1), &old, &set, now: 0)
    // A reload made a new detector; the set with its ejection is kept.
    var detector = OutlierDetector(failures: 1, ejectMilliseconds: 500)
    #expect(detector.sweep(&set, now: 10).isEmpty)
    #expect(detector.sweep(&set, now: 100 * Self.ms) == [.returned(F.id(1))])
  }

  @Test func disabledWithZeroFailures() {
    var set = F.set(count: 4)
    var detector = OutlierDetector(failures: 0)
    #expect(Self.fail(F.id(0), times: 100, &detector, &set, now: 0).isEmpty)
    #expect(set[F.id(0)].outlier.consecutiveFailures == 0)
  }

  @Test func anEndpointGoneFromTheSetIsIgnored() {
    var set = F.set(count: 2)
    var detector = OutlierDetector(failures: 1)
    _ = set.update(to: [EndpointAddress(F.address(0))])
    set.remove(F.id(1))
    #expect(detector.record(.failure(.reset), for: F.id(1), in: &set, now: 0).isEmpty)
  }
}
