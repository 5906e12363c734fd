import Testing

@testable import GatehouseCore

/// The hot path of a fleet allocates nothing: a pick over 8 endpoints with every policy,
/// a try's start and finish, the outlier record of a success or a failure, and the retry
/// budget. Measured only when the test process runs with the allocation-counting shim
/// preloaded, and alone, as the shim counts every thread:
///
///     swift build --product GatehouseAllocationCounter
///     GATEHOUSE_ALLOCATION_COUNTER=/tmp/allocations \
///       LD_PRELOAD=$PWD/.build/debug/libGatehouseAllocationCounter.so \
///       swift test --skip-build --filter FleetAllocationTests
@Suite(.serialized, .enabled(if: FleetAllocationCounter.isAvailable, "needs the allocation counter preloaded"))
struct FleetAllocationTests {
  typealias F = FleetFixtures

  @Test(arguments: [BalancePolicy.leastRequest, .roundRobin, .hash])
  func aTryAllocatesNothing(policy: BalancePolicy) throws {
    var set = F.set(weights: [1, 2, 3, 4, 5, 6, 7, 8])
    set.setHealthy(F.id(3), false)
    var balancer = EndpointBalancer(policy: policy)
    var detector = OutlierDetector(failures: 1_000_000)
    var budget = RetryBudget()
    var random = SplitMix64(seed: 11)
    let rule = RetryRule()
    var failures = 0
    // One round first: the balancer's per-slot state and the detector's first sweep.
    func round(_ index: Int) {
      budget.noteRequest(now: UInt64(index) * 1_000_000)
      var tried = TriedEndpoints()
      let first = balancer.pick(from: set, excluding: tried, hashKey: UInt64(index), now: 0, using: &random)!
      set.attemptStarted(first.endpoint)
      tried.insert(first.endpoint)
      let decision = rule.decide(
        after: .connect, tryNumber: 1, method: .get, hasIdempotencyKey: false, bodyHeld: true, budget: &budget,
        now: UInt64(index) * 1_000_000)
      _ = set.attemptFinished(first.endpoint, outcome: .failure(.connect))
      failures += detector.record(.failure(.connect), for: first.endpoint, in: &set, now: 0).count
      if decision == .retry {
        let second = balancer.pick(from: set, excluding: tried, hashKey: UInt64(index), now: 0, using: &random)!
        set.attemptStarted(second.endpoint)
        _ = set.attemptFinished(second.endpoint, outcome: .success)
        failures += detector.record(.success, for: second.endpoint, in: &set, now: 0).count
      }
    }
    round(0)
    _ = FleetAllocationCounter.read()
    // The fewest of three runs: the test library's own threads (reporting the previous
    // test, say) allocate now and then, but an allocation of the path shows in every run.
    var fewest = UInt64.max
    for run in 0..<3 {
      let before = FleetAllocationCounter.read()
      for index in 1...10_000 { round(run * 10_000 + index) }
      let after = FleetAllocationCounter.read()
      fewest = min(fewest, try #require(after) - (try #require(before)))
    }
    #expect(fewest == 0, "\(fewest) allocations in 10000 tries")
    #expect(failures == 0)
  }
}
