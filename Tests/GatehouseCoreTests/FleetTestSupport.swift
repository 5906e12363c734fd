@testable import GatehouseCore

#if canImport(Glibc)
  import Glibc
#endif

/// Fleets for the upstream-fleet unit tests.
enum FleetFixtures {
  static func address(_ index: Int) -> String { "10.0.0.\(index + 1):8080" }

  /// A set with one endpoint per weight, at `address(0)`, `address(1)`, … in slots 0, 1, ….
  static func set(weights: [Int]) -> EndpointSet {
    EndpointSet(weights.indices.map { EndpointAddress(address($0), weight: weights[$0]) })
  }

  static func set(count: Int) -> EndpointSet {
    set(weights: Array(repeating: 1, count: count))
  }

  static func id(_ slot: Int) -> EndpointID { EndpointID(slot: slot) }

  /// How many times each slot was picked in `picks` picks at rest (no try left in flight).
  static func spread(
    _ balancer: inout EndpointBalancer, _ set: EndpointSet, picks: Int, seed: UInt64 = 1,
    key: (Int) -> UInt64? = { _ in nil }
  ) -> [Int] {
    var random = SplitMix64(seed: seed)
    var counts = Array(repeating: 0, count: set.slots.count)
    for index in 0..<picks {
      guard let pick = balancer.pick(from: set, hashKey: key(index), now: 0, using: &random) else { continue }
      counts[pick.endpoint.slot] += 1
    }
    return counts
  }

  /// Whether each count is within `tolerance` (relative) of its share of the weights.
  static func matchesWeights(_ counts: [Int], _ weights: [Int], tolerance: Double) -> Bool {
    let total = Double(counts.reduce(0, +))
    let weightTotal = Double(weights.reduce(0, +))
    for (count, weight) in zip(counts, weights) {
      let expected = total * Double(weight) / weightTotal
      if abs(Double(count) - expected) > expected * tolerance { return false }
    }
    return true
  }
}

/// Reads the heap-allocation counter of the `GatehouseAllocationCounter` shim when this test
/// process was started with it preloaded (`LD_PRELOAD=…/libGatehouseAllocationCounter.so
/// GATEHOUSE_ALLOCATION_COUNTER=/tmp/count`); nil otherwise. The shim counts every thread's
/// allocations, so a measurement is only exact when the test runs alone (`--filter`).
enum FleetAllocationCounter {
  static var isAvailable: Bool { getenv("GATEHOUSE_ALLOCATION_COUNTER") != nil }

  /// The counter file, opened once for the process's life (opening it allocates, reading
  /// it does not).
  private static let descriptor: Int32 = {
    guard let path = getenv("GATEHOUSE_ALLOCATION_COUNTER") else { return -1 }
    return open(path, O_RDONLY)
  }()

  /// Allocations so far; read it outside `#expect` and `#require`, whose own work would
  /// be counted.
  static func read() -> UInt64? {
    guard descriptor >= 0 else { return nil }
    var value: UInt64 = 0
    guard pread(descriptor, &value, MemoryLayout<UInt64>.size, 0) == MemoryLayout<UInt64>.size else { return nil }
    return value
  }
}
