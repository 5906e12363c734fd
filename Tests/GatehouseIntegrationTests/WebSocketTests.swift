import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// WebSocket tunnels (Docs/websockets.md) through the real binary: the handshake as the upstream sees
/// it, frames both ways, big messages, slow readers on either side with the gateway's memory
/// bounded, the idle timeout, refusals, the token's refresh, drain, `max_websockets`, and
/// upgrades the gateway does not take.
@Suite(.serialized) struct WebSocketTests {
  static func config(
    backend: UInt16, limits: [String: Any]? = nil, route extra: [String: Any] = [:], tokens: [String: Any]? = nil
  ) -> [String: Any] {
    var members: [String: Any] = ["websocket": true, "headers": ["set": ["X-Route": "ws"]]]
    for (key, value) in extra { members[key] = value }
    var config = TestConfig.make(
      routes: [
        TestConfig.route("ws", match: "/ws/*", extra: members),
        TestConfig.route("plain", match: "/*", extra: ["envelope": ["enabled": true]]),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend)], limits: limits)
    config["admin"] = ["listen": "127.0.0.1:0", "token": TestConfig.adminToken]
    if let tokens { config["tokens"] = tokens }
    return config
  }

  /// Sends a handshake for `path` and reads the answer's head (a `101` has no body).
  static func handshake(
    _ port: UInt16, path: String = "/ws/chat", extra: [String] = []
  ) throws -> (client: RawClient, head: MessageHead, key: String) {
    let client = try RawClient(port: port)
    let key = WebSocketWire.makeKey()
    try client.send(WebSocketWire.handshake(path: path, key: key, extra: extra))
    let raw = try #require(try client.reader.readHead(deadline: Deadline(seconds: 10)))
    return (client, try MessageHead(raw: raw), key)
  }

  static func status(_ head: MessageHead) -> Int {
    Int(head.startLine.split(separator: " ").dropFirst().first ?? "") ?? 0
  }

  static func roundTrip(_ client: RawClient, _ opcode: WebSocketWire.Opcode, _ payload: [UInt8]) throws
    -> WebSocketWire.Frame?
  {
    try client.send(WebSocketWire.encode(opcode, payload, masked: true), timeout: 30)
    return try WebSocketWire.readFrame(client.reader, deadline: Deadline(seconds: 30))
  }

  static func tunnels(_ gateway: GatewayProcess) throws -> Double {
    let page = try MetricsPage(try gateway.admin().request("GET", "/metrics").text)
    return page.value("gatehouse_websockets", ["route": "ws"])
  }

  // MARK: The tunnel

  @Test func framesCrossBothWaysAndTheHandshakeCarriesTheRoutesHeadersNotTheClients() throws {
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(
        backend: backend.port, route: ["token": "api"],
        tokens: ["api": ["type": "static", "value": "route-token"]]))
    defer { gateway.stopExpectingCleanExit() }

    let (client, head, key) = try Self.handshake(
      gateway.port, extra: ["Authorization: Bearer client-secret", "Sec-WebSocket-Protocol: chat, superchat"])
    #expect(Self.status(head) == 101)
    #expect(head.value("Sec-WebSocket-Accept") == WebSocketWire.accept(for: key))
    #expect(head.value("Upgrade")?.lowercased() == "websocket")
    #expect(head.value("Sec-WebSocket-Protocol") == "chat")
    #expect(head.has("X-Request-Id"))
    #expect(!head.has("X-Powered-By"))

    let upstream = try #require(backend.heads.first)
    #expect(upstream.value("Authorization") == "Bearer route-token")
    #expect(upstream.value("X-Route") == "ws")
    #expect(upstream.value("Upgrade") == "websocket")
    #expect(upstream.value("Connection") == "Upgrade")
    #expect(upstream.value("Sec-WebSocket-Key") == key)
    #expect(upstream.value("Sec-WebSocket-Version") == "13")
    #expect(upstream.value("Sec-WebSocket-Protocol") == "chat, superchat")

    #expect(
      try Self.roundTrip(client, .text, Array("hello".utf8))
        == .init(fin: true, opcode: .text, payload: Array("hello".utf8)))
    let binary = (0..<300).map { UInt8($0 % 256) }
    #expect(try Self.roundTrip(client, .binary, binary) == .init(fin: true, opcode: .binary, payload: binary))
    #expect(try Self.tunnels(gateway) == 1)

    #expect(try Self.roundTrip(client, .close, [0x03, 0xE8])?.opcode == .close)
    // The backend shut its side after the close; the gateway passes that on, then closes.
    #expect(client.waitForEnd(timeout: 10) == .closed)
    client.close()
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["status"] as? Int == 101 })
    let line = try #require(gateway.accessLines().first { $0["status"] as? Int == 101 })
    #expect(line["route"] as? String == "ws")
    #expect((line["bytes_in"] as? Int ?? 0) > 300)
    #expect((line["bytes_out"] as? Int ?? 0) > 300)
    #expect(line["duration_ms"] != nil)
    #expect(waitUntil(timeout: 5) { (try? Self.tunnels(gateway)) == 0 })
  }

  @Test func aTenMegabyteMessageCrossesBothWays() throws {
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let (client, head, _) = try Self.handshake(gateway.port)
    #expect(Self.status(head) == 101)
    let message = (0..<(10 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    // Written from another thread: the echo comes back while it is still being sent.
    nonisolated(unsafe) let writer = client
    let sender = Thread { _ = try? writer.send(WebSocketWire.encode(.binary, message, masked: true), timeout: 60) }
    sender.start()
    let echoed = try WebSocketWire.readFrame(client.reader, deadline: Deadline(seconds: 60))
    #expect(echoed?.payload.count == message.count)
    #expect(echoed?.payload == message)
    client.close()
  }

  @Test func aHalfCloseIsPassedOnAndTheOtherWayStaysOpen() throws {
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let (client, _, _) = try Self.handshake(gateway.port)
    try client.send(WebSocketWire.encode(.text, Array("last".utf8), masked: true))
    client.socket.shutdownWrite()
    #expect(try WebSocketWire.readFrame(client.reader, deadline: Deadline(seconds: 10))?.payload == Array("last".utf8))
    #expect(waitUntil(timeout: 10) { backend.endsOfStream == 1 })
  }

  // MARK: Slow readers: the gateway holds a watermark per direction, not the stream

  @Test func aClientThatReadsNothingHoldsTheGatewaysMemoryBounded() throws {
    let total = 50 << 20
    let backend = try WebSocketBackend(always: .flood(bytes: total))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let before = try #require(gateway.residentBytes)
    let client = try RawClient(port: gateway.port, receiveBufferSize: 64 << 10)
    try client.send(WebSocketWire.handshake(path: "/ws/flood", key: WebSocketWire.makeKey()))
    Thread.sleep(forTimeInterval: 2)
    let held = try #require(gateway.residentBytes)
    #expect(held - before < 16 << 20, "resident grew \((held - before) >> 20) MiB while the client read nothing")
    _ = try #require(try client.reader.readHead(deadline: Deadline(seconds: 10)))
    var received = 0
    while let frame = try WebSocketWire.readFrame(client.reader, deadline: Deadline(seconds: 30)) {
      if frame.opcode == .close { break }
      received += frame.payload.count
    }
    #expect(received == total)
  }

  @Test func anUpstreamThatReadsNothingHoldsTheGatewaysMemoryBounded() throws {
    let gate = Gate()
    defer { gate.open() }
    let backend = try WebSocketBackend(always: .hold(gate))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let before = try #require(gateway.residentBytes)
    let (client, head, _) = try Self.handshake(gateway.port)
    #expect(Self.status(head) == 101)
    let frame = WebSocketWire.encode(.binary, [UInt8](repeating: 7, count: 1 << 20), masked: true)
    let sent = Atomic<Int>(0)
    // Only this thread writes; the test thread only reads figures meanwhile.
    nonisolated(unsafe) let writer = client
    let sender = Thread {
      for _ in 0..<50 {
        guard (try? writer.send(frame, timeout: 60)) != nil else { return }
        sent.add(frame.count, ordering: .relaxed)
      }
    }
    sender.start()
    Thread.sleep(forTimeInterval: 2)
    let held = try #require(gateway.residentBytes)
    #expect(sent.load(ordering: .relaxed) < 50 * frame.count, "the client was never held back")
    #expect(held - before < 16 << 20, "resident grew \((held - before) >> 20) MiB while the upstream read nothing")
    gate.open()
    #expect(waitUntil(timeout: 30) { sent.load(ordering: .relaxed) == 50 * frame.count })
    client.socket.shutdownWrite()
    #expect(waitUntil(timeout: 30) { backend.bytesAfterHandshake == 50 * frame.count })
  }

  // MARK: Lifecycle

  @Test func aSilentTunnelIsClosedAfterTheIdleTimeout() throws {
    let backend = try WebSocketBackend(always: .silent)
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(backend: backend.port, limits: ["websocket_idle_timeout_ms": 600]))
    defer { gateway.stopExpectingCleanExit() }
    let (client, head, _) = try Self.handshake(gateway.port)
    #expect(Self.status(head) == 101)
    let started = Date()
    #expect(client.waitForEnd(timeout: 10) != .stillOpen)
    #expect(Date().timeIntervalSince(started) >= 0.5)
    #expect(waitUntil(timeout: 5) { backend.endsOfStream == 1 })
    #expect(gateway.waitForLogLine { $0["status"] as? Int == 101 })
  }

  @Test func drainKeepsOpenTunnelsUntilTheDrainTimeoutThenClosesThem() throws {
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port, limits: ["drain_timeout_ms": 1500]))
    let (client, _, _) = try Self.handshake(gateway.port)
    gateway.send(signal: SIGTERM)
    Thread.sleep(forTimeInterval: 0.4)
    #expect(try Self.roundTrip(client, .text, Array("still here".utf8))?.payload == Array("still here".utf8))
    #expect(client.waitForEnd(timeout: 10) != .stillOpen)
    #expect(gateway.waitForExit(timeout: 15) == .success)
  }

  /// A reload closes only the tunnels whose route it changed, `drain_timeout_ms` after it.
  /// A reload keeps open tunnels working until `drain_timeout_ms`, then closes them (those
  /// of a route it did not touch too); a new handshake after it is served at once.
  @Test func aReloadClosesOpenTunnelsAfterTheDrainTimeout() throws {
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    var config = Self.config(backend: backend.port, limits: ["drain_timeout_ms": 800])
    var routes = config["routes"] as! [[String: Any]]
    routes.insert(TestConfig.route("kept", match: "/kept/*", extra: ["websocket": true]), at: 0)
    config["routes"] = routes
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let changed = try Self.handshake(gateway.port)
    let kept = try Self.handshake(gateway.port, path: "/kept/chat")
    #expect(Self.status(changed.head) == 101 && Self.status(kept.head) == 101)
    routes[1]["headers"] = ["set": ["X-Route": "ws-2"]]
    config["routes"] = routes
    try gateway.rewriteConfig(config)
    #expect(try gateway.admin().request("POST", "/admin/reload").status == 200)
    #expect(try Self.roundTrip(changed.client, .text, Array("soon".utf8))?.payload == Array("soon".utf8))
    #expect(try Self.roundTrip(kept.client, .text, Array("on".utf8))?.payload == Array("on".utf8))
    #expect(changed.client.waitForEnd(timeout: 10) != .stillOpen)
    #expect(kept.client.waitForEnd(timeout: 10) != .stillOpen)
    let after = try Self.handshake(gateway.port, path: "/kept/chat")
    #expect(Self.status(after.head) == 101)
    #expect(try Self.roundTrip(after.client, .text, Array("new".utf8))?.payload == Array("new".utf8))
    after.client.close()
  }

  @Test func pastMaxWebSocketsAHandshakeGetsA503() throws {
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port, limits: ["max_websockets": 2]))
    defer { gateway.stopExpectingCleanExit() }
    let first = try Self.handshake(gateway.port)
    let second = try Self.handshake(gateway.port)
    #expect(Self.status(first.head) == 101 && Self.status(second.head) == 101)
    let refused = try RawClient(port: gateway.port)
    let answer = try refused.exchange(Array(WebSocketWire.handshake(path: "/ws/x", key: WebSocketWire.makeKey()).utf8))
    #expect(isErrorEnvelope(answer, status: 503, message: "too many websockets"))
    first.client.close()
    let third = waitUntil(timeout: 10) {
      guard let attempt = try? Self.handshake(gateway.port) else { return false }
      return Self.status(attempt.head) == 101
    }
    #expect(third)
  }

  // MARK: Refusals

  @Test func anUpstreamsRefusalIsAnsweredAsAnyAnswerOfTheRoute() throws {
    let backend = try WebSocketBackend { head in
      head.startLine.contains("/ws/forbidden")
        ? .refuse(status: 403, body: #"{"message":"not yours"}"#)
        : head.startLine.contains("/ws/bad") ? .switchWithoutAccept : .refuse(status: 503, body: "{}")
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(backend: backend.port, route: ["envelope": ["enabled": true]]))
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port)
    let forbidden = try client.exchange(
      Array(WebSocketWire.handshake(path: "/ws/forbidden", key: WebSocketWire.makeKey()).utf8))
    #expect(isErrorEnvelope(forbidden, status: 403, message: "not yours"))
    let unavailable = try client.exchange(
      Array(WebSocketWire.handshake(path: "/ws/down", key: WebSocketWire.makeKey()).utf8))
    #expect(isErrorEnvelope(unavailable, status: 503))
    let bad = try RawClient(port: gateway.port).exchange(
      Array(WebSocketWire.handshake(path: "/ws/bad", key: WebSocketWire.makeKey()).utf8))
    #expect(isErrorEnvelope(bad, status: 502))
  }

  @Test func aHandshakeWhoseTokenIsRejectedIsSentAgainWithARefreshedOne() throws {
    let oauth = try OAuth2TestServer()
    let backend = try WebSocketBackend { head in
      head.value("Authorization") == "Bearer \(oauth.token(1))"
        ? .refuse(status: 401, body: #"{"message":"expired"}"#) : .accept(.echo)
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(backend: backend.port, route: ["token": "partner"], tokens: ["partner": oauth.tokenConfig()]))
    defer { gateway.stopExpectingCleanExit() }
    let (client, head, _) = try Self.handshake(gateway.port)
    #expect(Self.status(head) == 101)
    #expect(
      backend.heads.map { $0.value("Authorization") } == ["Bearer \(oauth.token(1))", "Bearer \(oauth.token(2))"])
    #expect(try Self.roundTrip(client, .text, Array("after refresh".utf8))?.payload == Array("after refresh".utf8))
    client.close()
  }

  /// A real client (Python `websockets`) over a TLS listener: the handshake and the tunnel
  /// run on TLS both ways, a message larger than TLS records and socket buffers included,
  /// and the upstream is told the client came over https.
  @Test func aTunnelWorksOverATLSListener() throws {
    let certificates = try TLSGatewayTests.Certificates()
    let backend = try WebSocketBackend(always: .echo)
    defer { backend.stop() }
    var config = Self.config(backend: backend.port)
    config["listen"] = certificates.tlsListen()
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let script = """
      import asyncio, ssl, sys, websockets
      async def main():
          context = ssl.create_default_context(cafile=sys.argv[2])
          uri = "wss://localhost:%s/ws/chat" % sys.argv[1]
          async with websockets.connect(uri, ssl=context, max_size=None, compression=None) as ws:
              await ws.send("hello over tls")
              text = await ws.recv()
              big = bytes(i % 251 for i in range(3 << 20))
              await ws.send(big)
              echoed = await ws.recv()
              print(text, len(echoed), echoed == big)
      asyncio.run(main())
      """
    let output = try ExternalTool.run(
      "/usr/bin/python3", ["-c", script, String(gateway.port), certificates.path + "/ca.pem"], input: [], timeout: 60)
    #expect(String(decoding: output, as: UTF8.self) == "hello over tls \(3 << 20) True\n")

    let upstream = try #require(backend.heads.first)
    #expect(upstream.value("X-Forwarded-Proto") == "https")
    #expect(upstream.value("X-Route") == "ws")
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["status"] as? Int == 101 })
    #expect(waitUntil(timeout: 5) { (try? Self.tunnels(gateway)) == 0 })
  }

  /// HTTP/2 clients use HTTP/1.1 for WebSockets: a stream that carries a handshake's
  /// fields (some forbidden in HTTP/2) is reset or served plainly, never tunnelled.
  @Test func anHTTP2StreamIsNeverTunnelled() throws {
    let backend = try WebSocketBackend { head in
      head.has("Upgrade") ? .accept(.echo) : .refuse(status: 200, body: #"{"plain":true}"#)
    }
    defer { backend.stop() }
    var config = Self.config(backend: backend.port)
    config["listen"] = [["address": "127.0.0.1:0", "h2c": true]]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let key = WebSocketWire.makeKey()
    let fields = [["sec-websocket-key", key], ["sec-websocket-version", "13"]]
    let report = try HTTP2Client.run(
      gateway.port, "requests",
      [
        "requests": [
          ["path": "/ws/a", "headers": fields],
          ["path": "/ws/b", "headers": fields + [["upgrade", "websocket"], ["connection", "upgrade"]]],
        ]
      ])
    let streams = HTTP2Client.streams(report)
    #expect(streams.first?["status"] as? Int == 200, "\(streams)")
    #expect(streams.allSatisfy { $0["status"] as? Int != 101 }, "\(streams)")
    #expect(backend.heads.allSatisfy { !$0.has("Upgrade") })
  }

  @Test func upgradesTheGatewayDoesNotTakeAreRefusedOrIgnored() throws {
    let backend = try TestBackend { request in
      if request.path == "/switch" {
        var answer = BackendAnswer()
        answer.rawReplacement = Array("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".utf8)
        return .respond(answer)
      }
      return .respond(.text("plain"))
    }
    defer { backend.stop() }
    var config = Self.config(backend: backend.port)
    config["upstreams"] = ["api": TestConfig.upstream(port: backend.port)]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port)
    let notEnabled = try client.exchange(
      Array(WebSocketWire.handshake(path: "/chat", key: WebSocketWire.makeKey()).utf8))
    #expect(isErrorEnvelope(notEnabled, status: 400, message: "websocket is not enabled on this route"))
    // h2c is never honoured: the request is served as a plain one, without its Upgrade.
    let h2c = try RawClient(port: gateway.port).exchange(
      Array(
        "GET /h2c HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
          .utf8))
    #expect(h2c.status == 200)
    #expect(backend.requests.last.map { !$0.head.has("Upgrade") && !$0.head.has("HTTP2-Settings") } == true)
    // A 101 nobody asked for is no answer.
    let unasked = try RawClient(port: gateway.port).exchange(Array("GET /switch HTTP/1.1\r\nHost: gw\r\n\r\n".utf8))
    #expect(isErrorEnvelope(unasked, status: 502))
    // A handshake that breaks RFC 6455 on a websocket route.
    let malformed = try RawClient(port: gateway.port).exchange(
      Array(
        "POST /ws/x HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n".utf8
      ))
    #expect(isErrorEnvelope(malformed, status: 400, message: "invalid websocket handshake"))
  }
}
