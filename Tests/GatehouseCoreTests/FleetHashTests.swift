import Testing

@testable import GatehouseCore

#if canImport(Glibc)
  import Glibc
#endif

@Suite struct FleetHashTests {
  @Test func isFNV1aFinishedBySplitMix() {
    // Published FNV-1a 64 vectors: "" is the offset basis, "a" is 0xAF63DC4C8601EC8C.
    #expect(FleetHash.hash("") == FleetHash.mix(0xCBF2_9CE4_8422_2325))
    #expect(FleetHash.hash("a") == FleetHash.mix(0xAF63_DC4C_8601_EC8C))
    #expect(FleetHash.hash("foobar") == FleetHash.mix(0x8594_4171_F739_67E8))
    // The finalizer is SplitMix64's: its first output from seed 0 is the mix of the golden gamma.
    var random = SplitMix64(seed: 0)
    #expect(FleetHash.mix(0x9E37_79B9_7F4A_7C15) == random.next())
    #expect(FleetHash.hash(Array("10.0.0.1:8080".utf8)) == FleetHash.hash("10.0.0.1:8080"))
  }

  @Test func valuesArePinnedSoKeysKeepTheirEndpointAcrossVersions() {
    // A change here moves every hashed client to another endpoint at the next deploy.
    #expect(FleetHash.hash("10.0.0.1:8080") == 0xE6BE_330C_3D44_A2E2)
  }

  @Test func unitIntervalNeverReachesItsBounds() {
    #expect(FleetHash.unitInterval(0) > 0)
    #expect(FleetHash.unitInterval(.max) < 1)
    #expect(FleetHash.naturalLog(FleetHash.unitInterval(.max)) < 0)
    #expect(FleetHash.naturalLog(FleetHash.unitInterval(0)).isFinite)
  }

  @Test func naturalLogMatchesTheCLibrary() {
    var random = SplitMix64(seed: 7)
    var samples: [Double] = [
      1, 2, 0.5, 10, 1e-300, 1e300, 0x1p-53, 1 - 0x1p-53, 1 + 0x1p-52, 1.414_213_562_373_095, 1.414_213_562_373_096,
      0.707_106_781_186_547_5, Double.leastNonzeroMagnitude, Double.leastNormalMagnitude,
    ]
    for _ in 0..<10_000 { samples.append(FleetHash.unitInterval(random.next())) }
    for _ in 0..<1_000 { samples.append(Double(random.next() >> 11) + 1) }
    for x in samples {
      let expected = log(x)
      let got = FleetHash.naturalLog(x)
      #expect(abs(got - expected) <= max(abs(expected), 1) * 4 * Double.ulpOfOne, "ln(\(x)): \(got) vs \(expected)")
    }
  }

  @Test func rendezvousScoresFollowTheWeight() {
    // For one key, a heavier endpoint with the same hash scores higher in proportion.
    let light = FleetHash.rendezvousScore(key: 42, identity: 7, weight: 1)
    let heavy = FleetHash.rendezvousScore(key: 42, identity: 7, weight: 3)
    #expect(abs(heavy - 3 * light) <= heavy * 1e-12)
    #expect(light > 0)
  }
}
