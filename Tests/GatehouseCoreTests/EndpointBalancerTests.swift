import Testing

@testable import GatehouseCore

@Suite struct EndpointBalancerTests {
  typealias F = FleetFixtures

  // MARK: Config values

  @Test func readsTheConfigValues() {
    #expect(BalancePolicy(configValue: "least_request") == .leastRequest)
    #expect(BalancePolicy(configValue: "round_robin") == .roundRobin)
    #expect(BalancePolicy(configValue: "hash") == .hash)
    #expect(BalancePolicy(configValue: "random") == nil)
    #expect(BalancePolicy.default == .leastRequest)
    for policy in [BalancePolicy.leastRequest, .roundRobin, .hash] {
      #expect(BalancePolicy(configValue: policy.configValue) == policy)
    }
    #expect(HashKeySource(configValue: "client") == .client)
    #expect(HashKeySource(configValue: "ip") == .ip)
    #expect(HashKeySource(configValue: "path") == .path)
    #expect(HashKeySource(configValue: "header:X-Tenant") == .header("x-tenant"))
    #expect(HashKeySource(configValue: "header:") == nil)
    #expect(HashKeySource(configValue: "cookie:id") == nil)
    #expect(HashKeySource.header("x-tenant").configValue == "header:x-tenant")
  }

  // MARK: least_request

  @Test func leastRequestAtRestSpreadsByWeight() {
    let weights = [1, 2, 3, 4]
    var balancer = EndpointBalancer(policy: .leastRequest)
    let counts = F.spread(&balancer, F.set(weights: weights), picks: 100_000)
    #expect(F.matchesWeights(counts, weights, tolerance: 0.03), "\(counts)")
  }

  @Test func leastRequestAtRestSpreadsEvenlyOverEqualWeights() {
    var balancer = EndpointBalancer()
    let counts = F.spread(&balancer, F.set(count: 5), picks: 50_000, seed: 99)
    #expect(F.matchesWeights(counts, [1, 1, 1, 1, 1], tolerance: 0.03), "\(counts)")
  }

  @Test func leastRequestNeverPicksTheMostLoadedOfSeveral() {
    var set = F.set(count: 3)
    for _ in 0..<5 { set.attemptStarted(F.id(1)) }
    var balancer = EndpointBalancer()
    let counts = F.spread(&balancer, set, picks: 10_000)
    // Two distinct endpoints are compared, so the loaded one always meets a lighter one.
    #expect(counts[1] == 0)
    #expect(F.matchesWeights([counts[0], counts[2]], [1, 1], tolerance: 0.05), "\(counts)")
  }

  @Test func leastRequestComparesInFlightRelativeToWeight() {
    // 4 in flight on weight 4 (1 per unit) against 2 on weight 1 (2 per unit): the heavy one wins.
    var set = F.set(weights: [4, 1])
    for _ in 0..<4 { set.attemptStarted(F.id(0)) }
    for _ in 0..<2 { set.attemptStarted(F.id(1)) }
    var balancer = EndpointBalancer()
    #expect(F.spread(&balancer, set, picks: 1_000) == [1_000, 0])
    // 3 per unit against 2 per unit: the light one wins.
    for _ in 0..<8 { set.attemptStarted(F.id(0)) }
    #expect(F.spread(&balancer, set, picks: 1_000) == [0, 1_000])
  }

  @Test func leastRequestUnderLoadSendsLessToASlowEndpoint() {
    // A closed loop of 32 clients; tries on endpoint 0 take four times as long.
    var set = F.set(count: 4)
    var balancer = EndpointBalancer()
    var random = SplitMix64(seed: 5)
    var inFlight: [EndpointID] = []
    var picked = [0, 0, 0, 0]
    for _ in 0..<20_000 {
      while inFlight.count < 32 {
        let pick = balancer.pick(from: set, now: 0, using: &random)!
        set.attemptStarted(pick.endpoint)
        inFlight.append(pick.endpoint)
        picked[pick.endpoint.slot] += 1
      }
      let index = Int(random.next(upperBound: UInt64(inFlight.count)))
      let slow = inFlight[index].slot == 0
      if !slow || random.next(upperBound: 4 as UInt64) == 0 {
        _ = set.attemptFinished(inFlight.remove(at: index), outcome: .success)
      }
    }
    #expect(picked[0] * 2 < picked[1], "\(picked)")
    #expect(F.matchesWeights(Array(picked[1...]), [1, 1, 1], tolerance: 0.05), "\(picked)")
  }

  // MARK: round_robin

  @Test func smoothRoundRobinGivesNginxSequence() {
    var balancer = EndpointBalancer(policy: .roundRobin)
    let set = F.set(weights: [5, 1, 1])
    var random = SplitMix64(seed: 1)
    var sequence: [Int] = []
    for _ in 0..<14 { sequence.append(balancer.pick(from: set, now: 0, using: &random)!.endpoint.slot) }
    // a a b a c a a, twice.
    #expect(sequence == [0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0])
  }

  @Test func roundRobinSpreadsExactlyByWeightOverACycle() {
    let weights = [3, 1, 7, 2]
    var balancer = EndpointBalancer(policy: .roundRobin)
    let counts = F.spread(&balancer, F.set(weights: weights), picks: 13 * 100)
    #expect(counts == weights.map { $0 * 100 })
  }

  @Test func roundRobinSkipsUnavailableEndpointsAndStartsOverAfterAChange() {
    var set = F.set(weights: [1, 1, 1])
    set.setHealthy(F.id(1), false)
    var balancer = EndpointBalancer(policy: .roundRobin)
    var random = SplitMix64(seed: 1)
    var sequence: [Int] = []
    for _ in 0..<4 { sequence.append(balancer.pick(from: set, now: 0, using: &random)!.endpoint.slot) }
    #expect(sequence == [0, 2, 0, 2])
    _ = set.update(to: [EndpointAddress(F.address(0)), EndpointAddress(F.address(2)), EndpointAddress("10.9.9.9:80")])
    set.setHealthy(F.id(1), true)
    sequence = []
    for _ in 0..<6 { sequence.append(balancer.pick(from: set, now: 0, using: &random)!.endpoint.slot) }
    // Slot 1 is draining now; slot 3 joined; the cycle restarts from zero.
    #expect(sequence == [0, 2, 3, 0, 2, 3])
  }

  // MARK: hash

  static func key(_ index: Int) -> UInt64 { FleetHash.hash("client-\(index)") }

  static func owners(_ balancer: inout EndpointBalancer, _ set: EndpointSet, keys: Int) -> [String] {
    var random = SplitMix64(seed: 1)
    return (0..<keys).map { index in
      set[balancer.pick(from: set, hashKey: key(index), now: 0, using: &random)!.endpoint].address
    }
  }

  @Test func hashMovesOnlyTheKeysOfAnEndpointThatLeaves() {
    var set = F.set(count: 5)
    var balancer = EndpointBalancer(policy: .hash)
    let before = Self.owners(&balancer, set, keys: 10_000)
    let leaving = F.address(2)
    _ = set.update(to: [0, 1, 3, 4].map { EndpointAddress(F.address($0)) })
    let after = Self.owners(&balancer, set, keys: 10_000)
    var moved = 0
    var receivers: [String: Int] = [:]
    for (old, new) in zip(before, after) {
      if old == leaving {
        #expect(new != leaving)
        moved += 1
        receivers[new, default: 0] += 1
      } else {
        #expect(old == new)
      }
    }
    // The leaver held about a fifth, which spreads over the four others.
    #expect(abs(moved - 2_000) < 200, "\(moved)")
    #expect(receivers.count == 4 && receivers.values.allSatisfy { $0 > 350 }, "\(receivers)")
  }

  @Test func hashMovesOnlyTheNewcomersShareWhenAnEndpointJoins() {
    var set = F.set(count: 4)
    var balancer = EndpointBalancer(policy: .hash)
    let before = Self.owners(&balancer, set, keys: 10_000)
    _ = set.update(to: (0..<5).map { EndpointAddress(F.address($0)) })
    let after = Self.owners(&balancer, set, keys: 10_000)
    var moved = 0
    for (old, new) in zip(before, after) where old != new {
      #expect(new == F.address(4))
      moved += 1
    }
    #expect(abs(moved - 2_000) < 200, "\(moved)")
  }

  @Test func hashHonoursWeights() {
    let weights = [1, 2, 3, 4]
    var balancer = EndpointBalancer(policy: .hash)
    let counts = F.spread(&balancer, F.set(weights: weights), picks: 100_000, key: { Self.key($0) })
    #expect(F.matchesWeights(counts, weights, tolerance: 0.04), "\(counts)")
  }

  @Test func hashDependsOnAddressesNotOnTheirOrder() {
    let addresses = (0..<6).map { EndpointAddress(F.address($0), weight: $0 + 1) }
    var balancer = EndpointBalancer(policy: .hash)
    let forward = Self.owners(&balancer, EndpointSet(addresses), keys: 2_000)
    let backward = Self.owners(&balancer, EndpointSet(addresses.reversed()), keys: 2_000)
    #expect(forward == backward)
  }

  @Test func hashSendsAKeyToItsSecondChoiceWhileItsEndpointIsExcluded() {
    var set = F.set(count: 4)
    var balancer = EndpointBalancer(policy: .hash)
    var random = SplitMix64(seed: 1)
    for index in 0..<500 {
      let key = Self.key(index)
      let first = balancer.pick(from: set, hashKey: key, now: 0, using: &random)!.endpoint
      var tried = TriedEndpoints()
      tried.insert(first)
      let second = balancer.pick(from: set, excluding: tried, hashKey: key, now: 0, using: &random)!
      #expect(second.endpoint != first && !second.repeated)
      // Ejecting (or losing) the first choice sends the key to the same second choice.
      set.setHealthy(first, false)
      #expect(balancer.pick(from: set, hashKey: key, now: 0, using: &random)!.endpoint == second.endpoint)
      set.setHealthy(first, true)
    }
  }

  @Test func hashWithoutAKeyFallsBackToLeastRequest() {
    var balancer = EndpointBalancer(policy: .hash)
    let counts = F.spread(&balancer, F.set(count: 4), picks: 20_000)
    #expect(F.matchesWeights(counts, [1, 1, 1, 1], tolerance: 0.05), "\(counts)")
  }

  // MARK: Candidates

  @Test(arguments: [BalancePolicy.leastRequest, .roundRobin, .hash])
  func retriesGoToAnotherEndpoint(policy: BalancePolicy) {
    let set = F.set(weights: [5, 1, 1, 1])
    var balancer = EndpointBalancer(policy: policy)
    var random = SplitMix64(seed: 3)
    for index in 0..<2_000 {
      var tried = TriedEndpoints()
      for _ in 0..<4 {
        let pick = balancer.pick(from: set, excluding: tried, hashKey: Self.key(index), now: 0, using: &random)!
        #expect(!tried.contains(pick.endpoint) && !pick.repeated && !pick.panic)
        tried.insert(pick.endpoint)
      }
      // All four tried: a fifth try repeats one and says so.
      let again = balancer.pick(from: set, excluding: tried, hashKey: Self.key(index), now: 0, using: &random)!
      #expect(again.repeated)
    }
  }

  @Test func aOneEndpointFleetRetriesOnItsOnlyEndpoint() {
    let set = F.set(count: 1)
    var balancer = EndpointBalancer()
    var random = SplitMix64(seed: 1)
    var tried = TriedEndpoints()
    tried.insert(F.id(0))
    #expect(
      balancer.pick(from: set, excluding: tried, now: 0, using: &random)
        == EndpointPick(endpoint: F.id(0), panic: false, repeated: true))
  }

  @Test(arguments: [BalancePolicy.leastRequest, .roundRobin, .hash])
  func onlyAvailableEndpointsArePickedWhileThereAreAny(policy: BalancePolicy) {
    var set = F.set(count: 5)
    set.setHealthy(F.id(0), false)
    set[outlier: F.id(1)].ejectedUntil = 1_000
    _ = set.update(to: [0, 1, 2, 3].map { EndpointAddress(F.address($0)) })  // 4 drains
    var balancer = EndpointBalancer(policy: policy)
    var random = SplitMix64(seed: 4)
    var seen = Set<Int>()
    for index in 0..<2_000 {
      let pick = balancer.pick(from: set, hashKey: Self.key(index), now: 999, using: &random)!
      #expect(!pick.panic)
      seen.insert(pick.endpoint.slot)
    }
    #expect(seen == [2, 3])
    // At 1000 the ejection is over: slot 1 is available again, without any sweep.
    for index in 0..<2_000 {
      seen.insert(balancer.pick(from: set, hashKey: Self.key(index), now: 1_000, using: &random)!.endpoint.slot)
    }
    #expect(seen == [1, 2, 3])
  }

  @Test(arguments: [BalancePolicy.leastRequest, .roundRobin, .hash])
  func panicPicksAmongAllEndpointsNotDraining(policy: BalancePolicy) {
    var set = F.set(count: 4)
    set.setHealthy(F.id(0), false)
    set.setHealthy(F.id(1), false)
    set[outlier: F.id(2)].ejectedUntil = .max
    _ = set.update(to: [0, 1, 2].map { EndpointAddress(F.address($0)) })  // 3 drains
    var balancer = EndpointBalancer(policy: policy)
    var random = SplitMix64(seed: 8)
    var seen = Set<Int>()
    for index in 0..<3_000 {
      let pick = balancer.pick(from: set, hashKey: Self.key(index), now: 0, using: &random)!
      #expect(pick.panic && !pick.repeated)
      seen.insert(pick.endpoint.slot)
    }
    #expect(seen == [0, 1, 2])
    // In panic, retries still avoid what the request tried.
    var tried = TriedEndpoints()
    tried.insert(F.id(0))
    tried.insert(F.id(2))
    let pick = balancer.pick(from: set, excluding: tried, hashKey: 1, now: 0, using: &random)
    #expect(pick == EndpointPick(endpoint: F.id(1), panic: true, repeated: false))
  }

  @Test func nothingIsPickedFromAnEmptyOrWhollyDrainingSet() {
    var balancer = EndpointBalancer()
    var random = SplitMix64(seed: 1)
    #expect(balancer.pick(from: EndpointSet(), now: 0, using: &random) == nil)
    var set = F.set(count: 2)
    _ = set.update(to: [EndpointAddress("10.1.1.1:80")])
    set.setHealthy(F.id(2), false)
    // The newcomer is unhealthy, the others drain: panic with the newcomer only.
    #expect(
      balancer.pick(from: set, now: 0, using: &random) == EndpointPick(endpoint: F.id(2), panic: true, repeated: false))
  }

  @Test func triedEndpointsRemembersTheLastEightDistinctOnes() {
    var tried = TriedEndpoints()
    #expect(tried.isEmpty && !tried.contains(F.id(0)))
    tried.insert(F.id(3))
    tried.insert(F.id(3))
    #expect(tried.count == 1 && tried.contains(F.id(3)) && !tried.contains(F.id(0)))
    for slot in 10..<18 { tried.insert(F.id(slot)) }
    #expect(tried.count == TriedEndpoints.capacity)
    #expect(!tried.contains(F.id(3)))
    #expect((10..<18).allSatisfy { tried.contains(F.id($0)) })
    let fromAttempts = TriedEndpoints([
      UpstreamAttempt(endpoint: F.id(4), tryNumber: 1, outcome: .failure(.connect)),
      UpstreamAttempt(endpoint: F.id(6), tryNumber: 2),
    ])
    #expect(fromAttempts.count == 2 && fromAttempts.contains(F.id(4)) && fromAttempts.contains(F.id(6)))
  }
}
