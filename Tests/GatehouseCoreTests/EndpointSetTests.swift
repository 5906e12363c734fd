import Testing

@testable import GatehouseCore

@Suite struct EndpointSetTests {
  typealias F = FleetFixtures

  @Test func startsWithEveryAddressHealthyInListOrder() {
    let set = EndpointSet([
      EndpointAddress("a:80", weight: 3), EndpointAddress("b:80"), EndpointAddress("a:80", weight: 9),
    ])
    #expect(set.count == 2)
    #expect(set.ids == [F.id(0), F.id(1)])
    #expect(set[F.id(0)].address == "a:80" && set[F.id(0)].weight == 3)
    #expect(set[F.id(1)].weight == 1)
    #expect(set[F.id(0)].identity == FleetHash.hash("a:80"))
    #expect(set[F.id(0)].state(now: 0) == .available)
    #expect(set[F.id(0)].counters == EndpointCounters())
    #expect(set.id(forAddress: "b:80") == F.id(1))
    #expect(set.id(forAddress: "c:80") == nil)
  }

  @Test func weightsAreClampedToOneToAHundred() {
    #expect(EndpointAddress("a:80", weight: 0).weight == 1)
    #expect(EndpointAddress("a:80", weight: 101).weight == 100)
    #expect(EndpointAddress("a:80", weight: 50).weight == 50)
  }

  @Test func anUpdateTellsJoinedLeftAndKeptAndKeepsTheirState() {
    var set = F.set(count: 3)
    set.attemptStarted(F.id(1))
    _ = set.attemptFinished(F.id(1), outcome: .failure(.reset), error: "connection reset by peer")
    set[outlier: F.id(1)].ejectedUntil = 5_000
    set.setHealthy(F.id(2), false)
    set.attemptStarted(F.id(0))
    let revision = set.revision

    let change = set.update(to: [
      EndpointAddress("10.0.0.9:8080"), EndpointAddress(F.address(2), weight: 4), EndpointAddress(F.address(1)),
    ])
    #expect(change.joined == [F.id(3)])
    #expect(change.left == [F.id(0)])
    #expect(change.kept == [F.id(2), F.id(1)])
    #expect(change.rejoined.isEmpty && !change.ignoredEmptyList)
    #expect(set.revision != revision)
    // Kept endpoints keep their slot, counters, ejection and health, and take the new weight.
    #expect(set[F.id(1)].counters.failures == 1 && set[F.id(1)].counters.lastError == "connection reset by peer")
    #expect(set[F.id(1)].state(now: 0) == .ejected(until: 5_000))
    #expect(set[F.id(2)].state(now: 0) == .unhealthy && set[F.id(2)].weight == 4)
    // The one that left drains with its try still in flight.
    #expect(set[F.id(0)].state(now: 0) == .draining)
    #expect(set.drainedEndpoints.isEmpty)
    let drained = set.attemptFinished(F.id(0), outcome: .success)
    #expect(drained)
    #expect(set.drainedEndpoints == [F.id(0)])
    let removed = set.remove(F.id(0))
    #expect(removed.address == F.address(0) && removed.counters.requests == 1)
    #expect(set.count == 3 && !set.contains(F.id(0)) && set.id(forAddress: F.address(0)) == nil)
    // The freed slot goes to the next newcomer.
    let next = set.update(to: [
      EndpointAddress("10.0.0.9:8080"), EndpointAddress(F.address(2)), EndpointAddress(F.address(1)),
      EndpointAddress("10.0.0.10:8080"),
    ])
    #expect(next.joined == [F.id(0)] && set[F.id(0)].address == "10.0.0.10:8080")
    #expect(set[F.id(0)].counters == EndpointCounters() && set[F.id(0)].outlier == OutlierState())
  }

  @Test func theSameListChangesNothing() {
    var set = F.set(count: 3)
    let revision = set.revision
    let change = set.update(to: (0..<3).reversed().map { EndpointAddress(F.address($0)) })
    #expect(change.isEmpty && change.kept.count == 3)
    #expect(set.revision == revision)
  }

  @Test func aDrainingEndpointListedAgainComesBackWithItsState() {
    var set = F.set(count: 2)
    set.attemptStarted(F.id(1))
    _ = set.update(to: [EndpointAddress(F.address(0))])
    #expect(set[F.id(1)].draining)
    let change = set.update(to: [EndpointAddress(F.address(1), weight: 7), EndpointAddress(F.address(0))])
    #expect(change.rejoined == [F.id(1)] && change.kept == [F.id(0)] && change.joined.isEmpty)
    #expect(set[F.id(1)].state(now: 0) == .available && set[F.id(1)].weight == 7)
    #expect(set[F.id(1)].counters.inFlight == 1)
    // No longer draining: its last try finishing does not make it removable.
    let drained = set.attemptFinished(F.id(1), outcome: .success)
    #expect(!drained)
    #expect(set.drainedEndpoints.isEmpty)
  }

  @Test func anEmptyListIsNotApplied() {
    var set = F.set(count: 2)
    let revision = set.revision
    let change = set.update(to: [])
    #expect(change.ignoredEmptyList && change.isEmpty)
    #expect(set.count == 2 && set.drainedEndpoints.isEmpty && set.revision == revision)
  }

  @Test func anEndpointThatLeavesIdleIsDrainedAtOnceAndTrailingSlotsAreDropped() {
    var set = F.set(count: 3)
    let change = set.update(to: [EndpointAddress(F.address(0))])
    #expect(change.left == [F.id(1), F.id(2)])
    #expect(set.drainedEndpoints == [F.id(1), F.id(2)])
    set.remove(F.id(1))
    #expect(set.slots.count == 3)
    set.remove(F.id(2))
    #expect(set.slots.count == 1 && set.ids == [F.id(0)])
  }

  @Test func countersFollowTheTries() {
    var set = F.set(count: 1)
    let id = F.id(0)
    set.attemptStarted(id)
    set.attemptStarted(id)
    #expect(set[id].counters.inFlight == 2 && set[id].counters.requests == 2)
    let drainedAfterFailure = set.attemptFinished(id, outcome: .failure(.status503))
    #expect(!drainedAfterFailure)
    #expect(set[id].counters.failures == 1 && set[id].counters.lastError == "503")
    let drainedAfterNothing = set.attemptFinished(id, outcome: nil)
    #expect(!drainedAfterNothing)
    set.attemptStarted(id)
    _ = set.attemptFinished(id, outcome: .success)
    #expect(set[id].counters == EndpointCounters(inFlight: 0, requests: 3, failures: 1, lastError: "503"))
  }

  @Test func stateShowsDrainingOverEjectionOverHealth() {
    var endpoint = FleetEndpoint(EndpointAddress("a:80"))
    endpoint.healthy = false
    #expect(endpoint.state(now: 0) == .unhealthy && !endpoint.isAvailable(now: 0))
    endpoint.outlier.ejectedUntil = 10
    #expect(endpoint.state(now: 9) == .ejected(until: 10) && endpoint.ejectedUntil(now: 9) == 10)
    #expect(endpoint.state(now: 10) == .unhealthy && endpoint.ejectedUntil(now: 10) == nil)
    endpoint.draining = true
    #expect(endpoint.state(now: 0) == .draining)
  }

  @Test func attemptOutcomesFromStatuses() {
    #expect(AttemptOutcome(status: 200) == .success)
    #expect(AttemptOutcome(status: 500) == .success)
    #expect(AttemptOutcome(status: 502) == .failure(.status502))
    #expect(AttemptOutcome(status: 503) == .failure(.status503))
    #expect(AttemptOutcome(status: 504) == .failure(.status504))
    #expect(AttemptOutcome.failure(.timeout).failure == .timeout && AttemptOutcome.success.failure == nil)
    for failure in AttemptFailure.allCases {
      #expect(AttemptFailure(configValue: failure.configValue) == failure)
      #expect(failure.requestWasSent == (failure != .connect))
    }
    #expect(AttemptFailure(configValue: "500") == nil)
  }
}
