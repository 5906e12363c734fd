import Testing

@testable import GatehouseCore

/// The words a cache result is shown with, made once rather than per answer, stay the
/// result's own: the metric label is its name in lowercase, the header line carries it.
@Suite struct CacheResultTests {
  @Test func labelsAndLinesFollowTheResult() {
    for result in [CacheResult.hit, .stale, .miss, .bypass, .revalidated] {
      #expect(result.metricLabel == result.rawValue.lowercased())
      #expect(StoreEntryRules.cacheLines(result) == Array("X-Gatehouse-Cache: \(result.rawValue)\r\n".utf8))
    }
    #expect(StoreEntryRules.cacheLines(nil).isEmpty)
  }
}

/// The per-result counters behind `gatehouse_cache_total`: one slot per result, read back by
/// its metric label, summed across loops.
@Suite struct CacheResultCountsTests {
  @Test func countsEachResultInItsOwnSlot() {
    var counts = CacheResultCounts()
    let results: [CacheResult] = [.hit, .hit, .stale, .miss, .bypass, .revalidated, .revalidated, .revalidated]
    for result in results { counts.count(result) }
    var other = CacheResultCounts()
    other.count(.miss)
    counts.add(other)
    for result in [CacheResult.hit, .stale, .miss, .bypass, .revalidated] {
      let expected = results.filter { $0 == result }.count + (result == .miss ? 1 : 0)
      #expect(counts[label: result.metricLabel] == UInt64(expected), "\(result)")
    }
    #expect(counts[label: "nonsense"] == 0)
  }
}
