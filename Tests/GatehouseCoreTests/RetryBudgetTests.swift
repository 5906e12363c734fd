import Testing

@testable import GatehouseCore

@Suite struct RetryBudgetTests {
  static let second: UInt64 = 1_000_000_000
  /// An origin far from 0, so window arithmetic is not helped by the clock starting at 0.
  static let t0: UInt64 = 1_000_000 * second

  /// Retries granted at `now` until the first refusal.
  static func drain(_ budget: inout RetryBudget, now: UInt64) -> Int {
    var granted = 0
    while budget.mayRetry(now: now) { granted += 1 }
    return granted
  }

  @Test func aNewBudgetAllowsThreeRetriesInItsFirstSecond() {
    var budget = RetryBudget()
    #expect(budget.percent == 20)
    #expect(Self.drain(&budget, now: Self.t0) == 3)
    #expect(Self.drain(&budget, now: Self.t0 + Self.second - 1) == 0)
    // Each second covered adds three more to the window's minimum.
    #expect(Self.drain(&budget, now: Self.t0 + Self.second) == 3)
    #expect(budget.secondsCovered == 2 && budget.retriesInWindow == 6)
  }

  @Test func theMinimumIsThirtyOnceTheWindowIsFull() {
    var budget = RetryBudget()
    budget.noteRequest(now: Self.t0)
    // At 9.5 s the window covers ten seconds and nothing was retried yet.
    let now = Self.t0 + 9 * Self.second + Self.second / 2
    #expect(Self.drain(&budget, now: now) == 30)
    #expect(budget.secondsCovered == 10 && budget.allowance == 30)
  }

  @Test func retriesAreAPercentageOfTheRequestsInTheWindow() {
    var budget = RetryBudget(percent: 20)
    for index in 0..<1_000 { budget.noteRequest(now: Self.t0 + UInt64(index) * (Self.second / 100)) }
    // 1000 requests over the full window: 200 retries, well above the minimum of 30.
    let now = Self.t0 + 9 * Self.second + Self.second / 2
    #expect(budget.requestsInWindow == 1_000)
    #expect(Self.drain(&budget, now: now) == 200)
  }

  @Test func thePercentageRoundsDown() {
    var budget = RetryBudget(percent: 20)
    for _ in 0..<199 { budget.noteRequest(now: Self.t0) }
    #expect(budget.allowance == 39)
    budget.noteRequest(now: Self.t0)
    #expect(budget.allowance == 40)
    var none = RetryBudget(percent: 0)
    for _ in 0..<1_000 { none.noteRequest(now: Self.t0) }
    #expect(none.allowance == 3)
  }

  @Test func requestsLeaveTheWindowTenSecondsAfterTheirSecond() {
    var budget = RetryBudget(percent: 50)
    for _ in 0..<100 { budget.noteRequest(now: Self.t0 + 1) }  // second 0
    for _ in 0..<40 { budget.noteRequest(now: Self.t0 + 3 * Self.second) }  // second 3
    // Last instant of second 9: both buckets still in; 70 allowed.
    #expect(Self.drain(&budget, now: Self.t0 + 10 * Self.second - 1) == 70)
    // Second 10: the second-0 requests leave (the retries made in second 9 stay).
    #expect(budget.mayRetry(now: Self.t0 + 10 * Self.second) == false)
    #expect(budget.requestsInWindow == 40 && budget.retriesInWindow == 70)
    // Second 13: the second-3 requests leave; the minimum of 30 is still below 70 retries.
    #expect(Self.drain(&budget, now: Self.t0 + 13 * Self.second) == 0)
    #expect(budget.requestsInWindow == 0)
    #expect(Self.drain(&budget, now: Self.t0 + 19 * Self.second - 1) == 0)
    // Second 19: the retries of second 9 leave too.
    #expect(Self.drain(&budget, now: Self.t0 + 19 * Self.second) == 30)
  }

  @Test func retriesLeaveTheWindowSecondBySecond() {
    var budget = RetryBudget(percent: 0)
    // Fill the window's thirty with three retries in each of ten seconds.
    for second in 0..<10 {
      #expect(Self.drain(&budget, now: Self.t0 + UInt64(second) * Self.second) == 3)
    }
    #expect(budget.retriesInWindow == 30)
    for second in 10..<15 {
      // Each new second frees the three of the second that left.
      #expect(Self.drain(&budget, now: Self.t0 + UInt64(second) * Self.second) == 3)
    }
  }

  @Test func aLongSilenceClearsEveryBucket() {
    var budget = RetryBudget()
    for _ in 0..<500 { budget.noteRequest(now: Self.t0) }
    _ = Self.drain(&budget, now: Self.t0)
    #expect(budget.retriesInWindow == 100)
    #expect(Self.drain(&budget, now: Self.t0 + 3_600 * Self.second) == 30)
    #expect(budget.requestsInWindow == 0 && budget.retriesInWindow == 30)
  }

  @Test func aClockGoingBackCountsInTheNewestSecond() {
    var budget = RetryBudget()
    budget.noteRequest(now: Self.t0 + 5 * Self.second)
    budget.noteRequest(now: Self.t0)
    #expect(budget.requestsInWindow == 2)
    #expect(Self.drain(&budget, now: Self.t0) == 3)
  }
}
