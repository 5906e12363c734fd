import Testing

@testable import GatehouseCore

@Suite struct NameSuggestionTests {
  @Test func editDistanceCountsTranspositionsAsOne() {
    #expect(NameSuggestion.editDistance(Array("abc".utf8), Array("abc".utf8)) == 0)
    #expect(NameSuggestion.editDistance(Array("abc".utf8), Array("acb".utf8)) == 1)
    #expect(NameSuggestion.editDistance(Array("kitten".utf8), Array("sitting".utf8)) == 3)
    #expect(NameSuggestion.editDistance([], Array("ab".utf8)) == 2)
  }

  @Test func suggestsCloseNamesOnly() {
    let keys = ["max_connections", "max_header_bytes", "idle_timeout_ms"]
    #expect(NameSuggestion.closest(to: "max_conections", among: keys) == "max_connections")
    #expect(NameSuggestion.closest(to: "Max_Connections", among: keys) == "max_connections")
    #expect(NameSuggestion.closest(to: "colour", among: keys) == nil)
    #expect(NameSuggestion.closest(to: "apii", among: ["api", "web"]) == "api")
    #expect(NameSuggestion.closest(to: "xyz", among: ["api"]) == nil)
  }
}
