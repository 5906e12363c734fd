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
