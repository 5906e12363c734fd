import Testing

@testable import GatehouseConfig

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

/// A key with another name for the same setting gets the real one suggested.
@Suite struct KeySynonymTests {
  @Test func synonymsAreSuggestedForKeysOfTheSameMeaning() {
    let cache = ["stale_if_error_s", "fresh_s", "stale_while_revalidate_s", "vary", "collapse"]
    #expect(NameSuggestion.keyHint(for: "ttl_s", among: cache) == #" (did you mean "fresh_s"?)"#)
    #expect(NameSuggestion.keyHint(for: "max_age_s", among: cache) == #" (did you mean "fresh_s"?)"#)
    #expect(NameSuggestion.keyHint(for: "stale_s", among: cache) == #" (did you mean "stale_if_error_s"?)"#)
    let upstream = ["url", "connect_timeout_ms", "response_timeout_ms"]
    #expect(NameSuggestion.keyHint(for: "timeout_ms", among: upstream) == #" (did you mean "response_timeout_ms"?)"#)
    // A synonym is only offered where the object has the key it means.
    #expect(NameSuggestion.keyHint(for: "ttl_s", among: upstream) == "")
    // Names the user chose (upstreams, tokens) get typo hints only.
    #expect(NameSuggestion.hint(for: "rate", among: ["rate_per_s"]) == "")
  }

  @Test func unknownKeysInAConfigNameTheKeyTheyMean() {
    let json = configJSON(
      route: #""cache": {"ttl_s": 5}"#,
      extra: #""clients": {"keys": [{"id": "app", "sha256": "\#(String(repeating: "a", count: 64))", "rate": 5}]}"#)
    let lines = issueLines(json)
    #expect(lines.contains(#"routes[0].cache.ttl_s: unknown key (did you mean "fresh_s"?)"#), "\(lines)")
    #expect(lines.contains(#"clients.keys[0].rate: unknown key (did you mean "rate_per_s"?)"#), "\(lines)")
  }
}
