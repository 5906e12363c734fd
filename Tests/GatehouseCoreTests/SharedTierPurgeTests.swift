import GatehouseSharedTier
import Testing

@testable import GatehouseCore

/// The pure parts of purging the shared tier: the `SCAN` pattern and reading its replies.
@Suite struct SharedTierPurgeTests {
  @Test func thePatternEscapesTheGlobCharactersOfThePrefixAndSkipsCounters() {
    #expect(SharedTierPurge.answerPattern(prefix: Array("gatehouse:".utf8)) == Array("gatehouse:[0-9a-f]*".utf8))
    #expect(SharedTierPurge.answerPattern(prefix: Array(#"a*b?[c]\"#.utf8)) == Array(#"a\*b\?\[c\]\\[0-9a-f]*"#.utf8))
  }

  @Test func aScanReplyIsReadOrRefused() {
    let page = RedisReply.array([.bulk(Array("17".utf8)), .array([.bulk([0x61]), .bulk([0x62])])])
    let read = SharedTierPurge.scanPage(page)
    #expect(read?.cursor == Array("17".utf8) && read?.keys == [[0x61], [0x62]])
    #expect(SharedTierPurge.scanPage(.array([.bulk(Array("0".utf8)), .array([])]))?.keys == [])
    #expect(SharedTierPurge.scanPage(.error("ERR")) == nil)
    #expect(SharedTierPurge.scanPage(.failure(.timedOut)) == nil)
    #expect(SharedTierPurge.scanPage(.array([.bulk([0x30]), .array([.integer(1)])])) == nil)
  }
}
