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

  @Test func aTrialWithNoOutcomeStopsBlockingAfterItsTimeout() {
    var breaker = CircuitBreaker(threshold: 1, openNanoseconds: 100, trialTimeoutNanoseconds: 1000)
    breaker.recordFailure(now: 0)
    #expect(breaker.decide(now: 100) == .attemptAsTrial)
    #expect(breaker.decide(now: 1099) == .reject)
    // The trial's client left and nothing was recorded: another request tries.
    #expect(breaker.decide(now: 1100) == .attemptAsTrial)
  }

  @Test func droppedConnectionsPutAClosedCircuitOnProbation() {
    var breaker = CircuitBreaker(threshold: 5, openNanoseconds: 100, trialTimeoutNanoseconds: 1000)
    breaker.recordFailure(now: 0)
    breaker.recordConnectionsDropped()
    #expect(breaker.state == .probation(since: nil))
    #expect(!breaker.isSound)
    #expect(!breaker.isOpen(now: 0))
    // The next request checks the upstream; meanwhile only what cannot be answered otherwise goes.
    #expect(breaker.decide(now: 10) == .attemptAsTrial)
    #expect(breaker.decide(now: 20) == .attemptUnlessAnswerable)
    #expect(breaker.decide(now: 1010) == .attemptAsTrial)
    breaker.recordSuccess()
    #expect(breaker.decide(now: 1020) == .attempt)
    #expect(breaker.isSound)
  }

  @Test func aFailedProbationCheckOpensTheCircuit() {
    var breaker = CircuitBreaker(threshold: 5, openNanoseconds: 100)
    breaker.recordConnectionsDropped()
    #expect(breaker.decide(now: 0) == .attemptAsTrial)
    breaker.recordFailure(now: 50)
    #expect(breaker.state == .open(until: 150))
    #expect(breaker.decide(now: 100) == .reject)
  }

  @Test func droppedConnectionsLeaveAnOpenCircuitAndADisabledOneAlone() {
    var open = CircuitBreaker(threshold: 1, openNanoseconds: 100)
    open.recordFailure(now: 0)
    open.recordConnectionsDropped()
    #expect(open.state == .open(until: 100))
    var disabled = CircuitBreaker(threshold: 0, openNanoseconds: 100)
    disabled.recordConnectionsDropped()
    #expect(disabled.decide(now: 0) == .attempt)
  }

  @Test func onlyTheFirstFailureOfAStreakIsRetried() {
    var breaker = CircuitBreaker(threshold: 5, openNanoseconds: 100)
    breaker.recordFailure(now: 0)
    #expect(breaker.allowsRetry(now: 0))
    breaker.recordFailure(now: 0)
    #expect(!breaker.allowsRetry(now: 0))
    breaker.recordSuccess()
    breaker.recordFailure(now: 0)
    #expect(breaker.allowsRetry(now: 0))
    var tight = CircuitBreaker(threshold: 1, openNanoseconds: 100)
    tight.recordFailure(now: 0)
    #expect(!tight.allowsRetry(now: 0))
  }
}

@Suite struct ConnectionDropDetectorTests {
  @Test func allIdleConnectionsClosedTogetherIsADrop() {
    var detector = ConnectionDropDetector()
    #expect(detector.idleConnectionDropped(now: 1_000, idleLeft: 2) == false)
    #expect(detector.idleConnectionDropped(now: 2_000, idleLeft: 1) == false)
    #expect(detector.idleConnectionDropped(now: 3_000, idleLeft: 0) == true)
  }

  @Test func aLoneKeepAliveTimeoutIsNot() {
    var detector = ConnectionDropDetector()
    #expect(detector.idleConnectionDropped(now: 1_000, idleLeft: 0) == false)
    // Another one long after: a new window, still alone.
    let later = 1_000 + ConnectionDropDetector.windowNanoseconds + 1
    #expect(detector.idleConnectionDropped(now: later, idleLeft: 0) == false)
  }

  @Test func closesSpreadOverTimeAreNot() {
    var detector = ConnectionDropDetector()
    #expect(detector.idleConnectionDropped(now: 0, idleLeft: 1) == false)
    #expect(detector.idleConnectionDropped(now: ConnectionDropDetector.windowNanoseconds + 1, idleLeft: 0) == false)
  }
}

@Suite struct RouteCircuitsTests {
  static func circuits() -> RouteCircuits {
    RouteCircuits(threshold: 2, openNanoseconds: 1000, trialTimeoutNanoseconds: 10_000)
  }

  @Test func oneRoutesFailuresOpenOnlyItsOwnCircuit() {
    var circuits = Self.circuits()
    circuits.recordFailure(route: "pub", now: 0)
    #expect(!circuits.isSound(route: "pub"))
    #expect(circuits.isSound(route: "legit"))
    circuits.recordFailure(route: "pub", now: 0)
    #expect(circuits.decide(route: "pub", now: 10) == .reject)
    #expect(circuits.decide(route: "legit", now: 10) == .attempt)
    #expect(circuits.openRoutes(now: 10) == ["pub"])
    // Past the open time, one trial; its success closes the route and drops its entry.
    #expect(circuits.decide(route: "pub", now: 1000) == .attemptAsTrial)
    #expect(circuits.decide(route: "pub", now: 1001) == .reject)
    circuits.recordSuccess(route: "pub")
    #expect(circuits.breakers.isEmpty)
    #expect(circuits.decide(route: "pub", now: 1002) == .attempt)
  }

  @Test func anAnswerEndsTheRoutesStreak() {
    var circuits = Self.circuits()
    circuits.recordFailure(route: "pub", now: 0)
    #expect(circuits.allowsRetry(route: "pub", now: 0))
    circuits.recordSuccess(route: "pub")
    circuits.recordFailure(route: "pub", now: 0)
    #expect(circuits.decide(route: "pub", now: 0) == .attempt)
  }

  @Test func aTrialThatWasNotSentIsGrantedAgain() {
    var breaker = CircuitBreaker(threshold: 1, openNanoseconds: 100)
    breaker.recordFailure(now: 0)
    #expect(breaker.decide(now: 100) == .attemptAsTrial)
    breaker.trialNotSent(now: 101)
    #expect(breaker.decide(now: 102) == .attemptAsTrial)
    var circuits = Self.circuits()
    circuits.recordFailure(route: "r", now: 0)
    circuits.recordFailure(route: "r", now: 0)
    #expect(circuits.decide(route: "r", now: 1000) == .attemptAsTrial)
    circuits.trialNotSent(route: "r", now: 1001)
    #expect(circuits.decide(route: "r", now: 1002) == .attemptAsTrial)
  }

  @Test func theFailureScopeFollowsWhereTheExchangeFailed() {
    #expect(UpstreamFailure.unavailable.breakerScope == .upstream)
    #expect(UpstreamFailure.connectTimedOut.breakerScope == .upstream)
    #expect(UpstreamFailure.closed.breakerScope == .route)
    #expect(UpstreamFailure.timedOut.breakerScope == .route)
    #expect(UpstreamFailure.invalidAnswer.breakerScope == .route)
    #expect(UpstreamFailure.circuitOpen.breakerScope == .none)
  }
}
