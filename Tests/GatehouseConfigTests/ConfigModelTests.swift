import GatehouseJSON
import Testing

@testable import GatehouseConfig
@testable import GatehouseLogging

/// Smaller behaviours of the model and its pieces that the larger suites do not reach.
@Suite struct ConfigModelTests {
  @Test func jsonValueMemberLookup() throws {
    let value = try JSONParser.parse(#"{"a": {"b": 1}}"#)
    #expect(value["a"]?["b"] == .number(JSONNumber(integer: 1)))
    #expect(value["missing"] == nil)
    #expect(JSONValue.array([])["a"] == nil)
  }

  @Test func logLevelsAreOrdered() {
    #expect(LogLevel.debug < .info && LogLevel.info < .warn && LogLevel.warn < .error)
    #expect(!(LogLevel.error < .debug))
  }

  @Test func byteOrderMarkDoesNotShiftColumns() {
    do {
      _ = try JSONParser.parse([0xEF, 0xBB, 0xBF] + Array("[x]".utf8))
      Issue.record("accepted invalid JSON")
    } catch {
      #expect(error.column == 2)
    }
  }

  @Test func duplicateClientKeyHashes() {
    let hash = String(repeating: "b", count: 64)
    #expect(
      issueLines(
        configJSON(
          extra:
            #""clients": {"keys": [{"id": "a", "sha256": "\#(hash)"}, {"id": "b", "sha256": "\#(hash)"}]}"#))
        == ["clients.keys[1].sha256: the same key hash is already used by clients.keys[0].sha256"])
  }

  @Test func upstreamSettingsAreChecked() {
    let withUpstream = { (settings: String) in
      issueLines(
        configJSON().replacingOccurrences(
          of: #""url": "http://127.0.0.1:3000/api/v1""#,
          with: #""url": "http://127.0.0.1:3000", \#(settings)"#))
    }
    #expect(
      withUpstream(#""health": {"path": "health"}"#) == ["upstreams.api.health.path: must start with '/'"])
    #expect(
      withUpstream(#""health": {"unhealthy_after": 0}"#) == [
        "upstreams.api.health.unhealthy_after: must be at least 1, got 0"
      ])
    #expect(
      withUpstream(#""circuit": {"open_ms": 0}"#) == [
        "upstreams.api.circuit.open_ms: must be at least 1, got 0"
      ])
    #expect(
      withUpstream(#""connect_timeout_ms": -1"#) == [
        "upstreams.api.connect_timeout_ms: must be at least 1, got -1"
      ])
  }

  @Test func defaultAdminAddressMayNotCollideWithAListener() {
    #expect(
      issueLines(configJSON(extra: #""listen": [{"address": "127.0.0.1:9901"}]"#)) == [
        "admin.listen: the default admin address 127.0.0.1:9901 is also a client listener; set admin.listen"
      ])
    #expect(
      issueLines(configJSON(extra: #""listen": [{"address": "127.0.0.1:9901"}], "admin": {"token": "t"}"#))
        == [
          "admin.listen: 127.0.0.1:9901 is also a client listener; the admin API needs its own address"
        ])
  }

  @Test func keysThatAreNotIdentifiersAreQuotedInPaths() {
    #expect(
      ConfigPath.root.appending(key: "upstreams").appending(key: "a.b").description == #"upstreams["a.b"]"#)
    #expect(
      ConfigPath.root.appending(key: "routes").appending(index: 2).appending(key: "x").description
        == "routes[2].x")
    #expect(ConfigPath.root.description == "(top level)")
  }
}
