import Testing

@testable import GatehouseConfig

/// `routes[].websocket` and the WebSocket limits (Docs/websockets.md).
@Suite struct WebSocketConfigTests {
  @Test func aRouteTakesWebSocketsOnlyWhenItSaysSo() throws {
    #expect(try loadConfig(configJSON()).routes[0].websocket == false)
    #expect(try loadConfig(configJSON(route: #""websocket": true"#)).routes[0].websocket == true)
  }

  @Test func theLimitsHaveTheirDefaultsAndTheirBounds() throws {
    let defaults = try loadConfig(configJSON()).limits
    #expect(defaults.websocketIdleTimeout == .milliseconds(300_000))
    #expect(defaults.maxWebSockets == 1000)
    let set = try loadConfig(
      configJSON(extra: #""limits": {"websocket_idle_timeout_ms": 1500, "max_websockets": 0}"#)
    ).limits
    #expect(set.websocketIdleTimeout == .milliseconds(1500))
    #expect(set.maxWebSockets == 0)
    #expect(issueLines(configJSON(extra: #""limits": {"websocket_idle_timeout_ms": 0}"#)) != ["loaded"])
    #expect(issueLines(configJSON(extra: #""limits": {"max_websockets": -1}"#)) != ["loaded"])
  }

  @Test func aWebSocketRouteThatAlwaysStubsIsAnError() {
    let json = #"{"routes": [{"name": "r", "match": {"path": "/"}, "stub": {"mode": "always"}, "websocket": true}]}"#
    let lines = issueLines(json)
    #expect(lines.contains { $0.contains("routes[0].websocket") && $0.contains("stub.mode") }, "\(lines)")
    #expect(
      issueLines(#"{"routes": [{"name": "r", "match": {"path": "/"}, "upstream": "x", "websocket": "yes"}]}"#) != [
        "loaded"
      ])
  }
}
