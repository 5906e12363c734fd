import Testing

@testable import GatehouseCore
@testable import GatehouseHTTP

/// The handshake's HTTP side (Docs/websockets.md, RFC 6455 §4): which heads are handshakes, the
/// upstream's `101`, the `101` the client gets, and the upstream request's fields.
@Suite struct WebSocketHandshakeTests {
  static let key = "dGhlIHNhbXBsZSBub25jZQ=="

  func request(_ text: String) throws -> HTTPRequestHead {
    var parser = HTTPRequestParser()
    for event in try parser.parseAll(Array(text.utf8)) {
      if case .head(let head) = event { return head }
    }
    throw HTTPParseError.unexpectedEOF
  }

  func handshake(method: String = "GET", extra: String = "", key: String = key, upgrade: String = "websocket")
    throws -> HTTPRequestHead
  {
    try request(
      "\(method) /chat HTTP/1.1\r\nHost: gw\r\nUpgrade: \(upgrade)\r\nConnection: keep-alive, Upgrade\r\n"
        + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\(extra)\r\n")
  }

  func answer(_ text: String, askedUpgrade: Bool = true) throws -> (HTTPResponseHead, consumed: Int) {
    var parser = HTTPResponseParser()
    parser.requestAskedUpgrade = askedUpgrade
    let bytes = Array(text.utf8)
    let (event, consumed) = try bytes.withUnsafeBytes { try parser.parse($0) }
    guard case .head(let head)? = event else { throw HTTPParseError.unexpectedEOF }
    return (head, consumed)
  }

  @Test func aWellFormedHandshakeIsOne() throws {
    #expect(WebSocketHandshake.classify(try handshake()) == .websocket)
    #expect(WebSocketHandshake.classify(try handshake(upgrade: "WebSocket")) == .websocket)
  }

  @Test func otherUpgradesAndPlainRequestsAreNone() throws {
    #expect(WebSocketHandshake.classify(try request("GET / HTTP/1.1\r\nHost: gw\r\n\r\n")) == .none)
    let h2c = try request(
      "GET / HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\n\r\n"
    )
    #expect(WebSocketHandshake.classify(h2c) == .none)
  }

  @Test func handshakesThatBreakTheRFCAreMalformed() throws {
    #expect(WebSocketHandshake.classify(try handshake(method: "POST")) == .malformed)
    #expect(WebSocketHandshake.classify(try handshake(key: "short")) == .malformed)
    #expect(WebSocketHandshake.classify(try handshake(key: "dGhlIHNhbXBsZSBub25jZQ!=")) == .malformed)
    #expect(WebSocketHandshake.classify(try handshake(extra: "Sec-WebSocket-Key: \(Self.key)\r\n")) == .malformed)
    #expect(WebSocketHandshake.classify(try handshake(extra: "Content-Length: 3\r\n")) == .malformed)
    let noConnection = try request(
      "GET / HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nSec-WebSocket-Key: \(Self.key)\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    #expect(WebSocketHandshake.classify(noConnection) == .malformed)
    let http10 = try request(
      "GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \(Self.key)\r\n"
        + "Sec-WebSocket-Version: 13\r\n\r\n")
    #expect(WebSocketHandshake.classify(http10) == .malformed)
  }

  @Test func a101EndsTheHTTPPartOnlyForARequestThatAskedForIt() throws {
    let text =
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      + "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\u{1}\u{2}hi"
    let (head, consumed) = try answer(text)
    #expect(head.status == 101)
    #expect(consumed == text.utf8.count - 4, "the frame behind the head is the tunnel's")
    #expect(WebSocketHandshake.upstreamSwitched(head))
    #expect(throws: HTTPParseError.self) { try answer(text, askedUpgrade: false) }
  }

  @Test func a101WithoutTheUpgradeOrTheAcceptIsNoSwitch() throws {
    let noAccept = try answer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n").0
    #expect(!WebSocketHandshake.upstreamSwitched(noAccept))
    let otherProtocol = try answer(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nSec-WebSocket-Accept: x\r\n\r\n"
    ).0
    #expect(!WebSocketHandshake.upstreamSwitched(otherProtocol))
  }

  @Test func theClientsSwitchCarriesTheUpstreamsEndToEndFieldsOnly() throws {
    let head = try answer(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nServer: backend/1.0\r\n"
        + "X-Powered-By: x\r\nSec-WebSocket-Accept: abc=\r\nSec-WebSocket-Protocol: chat\r\nKeep-Alive: 5\r\n\r\n"
    ).0
    var out: [UInt8] = []
    WebSocketHandshake.writeSwitchingHead(head, requestID: Array("rid".utf8), into: &out)
    #expect(
      String(decoding: out, as: UTF8.self)
        == "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: abc=\r\nSec-WebSocket-Protocol: chat\r\n"
        + "Upgrade: websocket\r\nConnection: Upgrade\r\nX-Request-Id: rid\r\n\r\n")
  }

  @Test func theUpstreamHandshakeAsksForTheUpgradeItselfAndKeepsTheWebSocketFields() throws {
    let head = try handshake(extra: "Sec-WebSocket-Protocol: chat\r\nSec-WebSocket-Extensions: permessage-deflate\r\n")
    var out: [UInt8] = []
    UpstreamRequestWriter.write(
      head: head, target: Array("/chat".utf8)[...], hostHeader: Array("backend".utf8), plan: HeaderPlan(layers: []),
      clientAddress: Array("10.0.0.1".utf8), forwardedProto: "http", requestID: Array("rid".utf8), framing: .none,
      upgrade: true, into: &out)
    let text = String(decoding: out, as: UTF8.self)
    #expect(text.contains("Sec-WebSocket-Key: \(Self.key)\r\nSec-WebSocket-Version: 13\r\n"))
    #expect(text.contains("Sec-WebSocket-Protocol: chat\r\nSec-WebSocket-Extensions: permessage-deflate\r\n"))
    #expect(text.hasSuffix("X-Request-Id: rid\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"))
    #expect(!text.contains("keep-alive"))
  }

  @Test func listTokensAreMatchedWholeIgnoringCaseAndSpaces() {
    func contains(_ value: String, _ token: StaticString) -> Bool {
      Array(value.utf8).withUnsafeBufferPointer { WebSocketHandshake.listContains($0, token) }
    }
    #expect(contains("keep-alive,  Upgrade ", "upgrade"))
    #expect(contains("WebSocket", "websocket"))
    #expect(!contains("websocketx", "websocket"))
    #expect(!contains("", "websocket"))
  }
}
