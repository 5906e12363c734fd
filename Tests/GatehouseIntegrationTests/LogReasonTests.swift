import Foundation
import Testing

/// The access line and `gatehouse_local_answers_total` say why the gateway answered itself,
/// and who asked, with what, and how long the upstream took.
@Suite struct LogReasonTests {
  static func backend() throws -> TestBackend {
    try TestBackend { request in
      if request.path == "/up/chunked" {
        return .respond(BackendAnswer(body: .chunked([Array("ab".utf8), Array("cde".utf8)])))
      }
      if request.path == "/wrap/x" {
        // Longer than the route's `max_bytes`: wrapped as it streams.
        return .respond(
          BackendAnswer(
            headers: [("Content-Type", "application/json")], body: .bytes(Array(#"{"items":[1,2,3,4,5,6,7,8,9]}"#.utf8))
          ))
      }
      return .respond(.text("hello"))
    }
  }

  static func config(backend: UInt16, refused: UInt16, log: [String: Any] = [:]) -> [String: Any] {
    var config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [
          TestConfig.route(
            "stub", match: "/stub", upstream: nil,
            extra: ["stub": ["mode": "always", "status": 200, "body": ["id": 1]]]),
          TestConfig.route("down", match: "/down/*", upstream: "gone"),
          TestConfig.route("up", match: "/up/*"),
          TestConfig.route("wrap", match: "/wrap/*", extra: ["envelope": ["enabled": true, "max_bytes": 8]]),
        ],
        upstreams: [
          "api": TestConfig.upstream(port: backend), "gone": TestConfig.upstream(port: refused, connectTimeoutMs: 2000),
        ]))
    var logSettings: [String: Any] = ["level": "info", "access": "stdout", "format": "json"]
    for (key, value) in log { logSettings[key] = value }
    config["log"] = logSettings
    return config
  }

  @Test func everyLocalAnswerHasAReasonInItsLineAndItsCounter() throws {
    let backend = try Self.backend()
    defer { backend.stop() }
    let refusing = try TestSocket.refusingPort()
    defer { refusing.close() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port, refused: refusing.localPort))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let stub = try send("GET", "/stub", to: gateway.port)
    let down = try send("GET", "/down/x", to: gateway.port)
    let none = try send("GET", "/nowhere", to: gateway.port)
    let up = try send(
      "GET", "/up/x?page=2&token=SECRET-CANARY-1&Api_Key=SECRET-CANARY-2", to: gateway.port,
      headers: [("User-Agent", "probe/1.0 (\"quoted\")")])
    let bad = try RawClient(port: gateway.port)
    try bad.send("GET /a b c HTTP/1.1\r\nHost: x\r\n\r\n")
    _ = bad.readUntilEnd()
    bad.close()
    #expect(stub.status == 200)
    #expect(down.status == 502)
    #expect(none.status == 404)
    #expect(up.status == 200)
    #expect(waitUntil { gateway.accessLines().count >= 5 })
    let lines = gateway.accessLines()
    func line(_ path: String) throws -> [String: Any] { try #require(lines.first { $0["path"] as? String == path }) }

    let stubLine = try line("/stub")
    #expect(stubLine["reason"] as? String == "stub")
    #expect(stubLine["upstream"] is NSNull)
    #expect(stubLine["upstream_ms"] is NSNull)
    #expect(stubLine["body_bytes"] as? Int == stub.body.count)
    let downLine = try line("/down/x")
    #expect(downLine["reason"] as? String == "connect_refused")
    #expect(downLine["upstream"] as? String == "gone")
    #expect(downLine["upstream_status"] is NSNull)
    #expect(downLine["body_bytes"] as? Int == down.body.count)
    #expect(try line("/nowhere")["reason"] as? String == "no_route")
    #expect(try line("-")["reason"] as? String == "bad_request")
    let upLine = try line("/up/x")
    #expect(upLine["reason"] is NSNull)
    #expect(upLine["upstream"] as? String == "api")
    #expect(upLine["upstream_ms"] is Double || upLine["upstream_ms"] is Int)
    #expect(upLine["query"] as? String == "page=2&token=***&Api_Key=***")
    #expect(upLine["user_agent"] as? String == "probe/1.0 (\"quoted\")")
    #expect(upLine["client"] as? String == "127.0.0.1")
    #expect(upLine["body_bytes"] as? Int == 5)
    #expect(backend.requests.first?.query == "page=2&token=SECRET-CANARY-1&Api_Key=SECRET-CANARY-2")
    #expect(!gateway.stdoutText.contains("SECRET-CANARY"))

    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.types["gatehouse_local_answers_total"] == "counter")
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "stub", "reason": "stub"]) == 1)
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "down", "reason": "connect_refused"]) == 1)
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "", "reason": "no_route"]) == 1)
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "", "reason": "bad_request"]) == 1)
    #expect(metrics.samples("gatehouse_local_answers_total", ["route": "up"]).isEmpty)
  }

  /// `bytes` is everything the client was sent for the answer (head, body, chunk framing);
  /// `body_bytes` the body alone.
  @Test func bytesCountTheWireAndBodyBytesTheBody() throws {
    let backend = try Self.backend()
    defer { backend.stop() }
    let refusing = try TestSocket.refusingPort()
    defer { refusing.close() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend.port, refused: refusing.localPort))
    defer { gateway.stopExpectingCleanExit() }

    var received: [[UInt8]] = []
    for path in ["/up/chunked", "/up/plain", "/stub", "/down/x", "/wrap/x"] {
      let client = try RawClient(port: gateway.port)
      try client.send("GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      received.append(client.readUntilEnd().bytes)
      client.close()
    }
    #expect(waitUntil { gateway.accessLines().count >= 5 })
    let lines = gateway.accessLines()
    #expect(lines.map { $0["bytes"] as? Int } == received.map(\.count))
    #expect(lines.map { $0["body_bytes"] as? Int }.prefix(2) == [5, 5])
    #expect(String(decoding: received[0], as: UTF8.self).contains("Transfer-Encoding: chunked"))
    // A wrapped stream: the envelope's opening and closing are body bytes like the upstream's.
    let wrapped = String(decoding: received[4], as: UTF8.self)
    #expect(wrapped.contains("Transfer-Encoding: chunked"))
    #expect(wrapped.contains(#"{"code":0,"datas":"#))
    let wrappedBody = #"{"code":0,"datas":{"items":[1,2,3,4,5,6,7,8,9]},"message":""}"#
    #expect(lines[4]["body_bytes"] as? Int == wrappedBody.utf8.count)
  }

  /// Behind a trusted proxy the client is the first `X-Forwarded-For` hop; from anyone else
  /// the peer. `log.mask_query` replaces the masked names.
  @Test func theClientIsTheForwardedHopOnlyFromATrustedProxy() throws {
    let backend = try Self.backend()
    defer { backend.stop() }
    let refusing = try TestSocket.refusingPort()
    defer { refusing.close() }
    let forwarded = [("X-Forwarded-For", "203.0.113.7, 10.0.0.1")]

    let trusting = try GatewayProcess(
      config: Self.config(
        backend: backend.port, refused: refusing.localPort,
        log: ["trusted_proxies": ["10.0.0.0/8", "127.0.0.1"], "mask_query": ["session"]]))
    defer { trusting.stopExpectingCleanExit() }
    _ = try send("GET", "/up/a?session=s1&token=t1", to: trusting.port, headers: forwarded)
    #expect(waitUntil { trusting.accessLines().count >= 1 })
    #expect(trusting.accessLines().first?["client"] as? String == "203.0.113.7")
    #expect(trusting.accessLines().first?["query"] as? String == "session=***&token=t1")

    let other = try GatewayProcess(
      config: Self.config(backend: backend.port, refused: refusing.localPort, log: ["trusted_proxies": ["10.0.0.0/8"]]))
    defer { other.stopExpectingCleanExit() }
    _ = try send("GET", "/up/a", to: other.port, headers: forwarded)
    #expect(waitUntil { other.accessLines().count >= 1 })
    #expect(other.accessLines().first?["client"] as? String == "127.0.0.1")
  }
}
