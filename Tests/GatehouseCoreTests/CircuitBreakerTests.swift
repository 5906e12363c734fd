import Testing

@testable import GatehouseCore

@Suite struct CircuitBreakerTests {
  @Test func opensAfterConsecutiveFailuresAndRefusesUntilTheOpenTimeIsOver() {
    var breaker = CircuitBreaker(threshold: 3, openNanoseconds: 1000)
    for _ in 0..<2 {
      #expect(breaker.decide(now: 0) == .attempt)
      breaker.recordFailure(now: 0)
    }
    #expect(!breaker.isOpen(now: 0))
    breaker.recordFailure(now: 10)
    #expect(breaker.isOpen(now: 10))
    #expect(breaker.decide(now: 500) == .reject)
    #expect(breaker.decide(now: 1009) == .reject)
    #expect(breaker.decide(now: 1010) == .attemptAsTrial)
    #expect(breaker.decide(now: 1011) == .reject)
  }

  @Test func successfulTrialClosesAndFailedTrialReopens() {
    var breaker = CircuitBreaker(threshold: 1, openNanoseconds: 100)
    breaker.recordFailure(now: 0)
    #expect(breaker.decide(now: 100) == .attemptAsTrial)
    breaker.recordFailure(now: 100)
    #expect(breaker.decide(now: 150) == .reject)
    #expect(breaker.decide(now: 200) == .attemptAsTrial)
    breaker.recordSuccess()
    #expect(breaker.decide(now: 201) == .attempt)
    #expect(!breaker.isOpen(now: 201))
  }

  @Test func successResetsTheFailureCount() {
    var breaker = CircuitBreaker(threshold: 2, openNanoseconds: 100)
    breaker.recordFailure(now: 0)
    breaker.recordSuccess()
    breaker.recordFailure(now: 0)
    #expect(breaker.decide(now: 1) == .attempt)
  }

  @Test func thresholdZeroNeverOpens() {
    var breaker = CircuitBreaker(threshold: 0, openNanoseconds: 100)
    for _ in 0..<10 { breaker.recordFailure(now: 0) }
    #expect(breaker.decide(now: 0) == .attempt)
  }
}
