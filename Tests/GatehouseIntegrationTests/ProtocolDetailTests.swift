import Foundation
import Testing

/// HTTP/1.1 details of the proxy path: `Expect: 100-continue`, interim and bodiless
/// answers, HTTP/1.0 clients, half-closed clients, slow uploads, raw path bytes, and
/// backends that do not speak HTTP.
@Suite struct ProtocolDetailTests {
  @Test func expectContinueIsAnsweredByTheGatewayAndNotForwarded() throws {
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .echo)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let body = Array("sent after 100 Continue".utf8)

    let client = try RawClient(port: gateway.port)
    try client.send(
      httpRequest("POST", "/expect", headers: [("Expect", "100-continue"), ("Content-Length", "\(body.count)")]))
    let interim = try client.readAnswer()
    try client.send(body)
    let final = try client.readAnswer()

    #expect(interim.status == 100)
    #expect(final.status == 200)
    #expect(final.body == body)
    let request = try #require(backend.requests.first)
    #expect(!request.head.has("Expect"))
    #expect(request.body == body)
  }

  /// A gateway whose only route is `/api/*`: anything else it answers itself (404).
  static func gatewayRoutingOnlyAPI(to port: UInt16) throws -> GatewayProcess {
    try GatewayProcess(
      config: TestConfig.make(
        routes: [TestConfig.route("api", match: "/api/*")], upstreams: ["api": TestConfig.upstream(port: port)]))
  }

  /// A request the gateway answers itself gets no `100 Continue` (its body would only be
  /// dropped): the final answer comes first and the connection ends, since the client will
  /// not send the body it was never asked for.
  @Test func expectContinueIsNotAnsweredWhenTheGatewayAnswersItself() throws {
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .echo)))
    defer { backend.stop() }
    let gateway = try Self.gatewayRoutingOnlyAPI(to: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(
      httpRequest("POST", "/elsewhere", headers: [("Expect", "100-continue"), ("Content-Length", "1000000")]))
    let answer = try client.readAnswer()

    #expect(answer.status == 404)
    #expect(answer.head.value("Connection") == "close")
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.isEmpty)
  }

  /// A client that sent its body right behind the head (not waiting for 100) is answered as
  /// before: the body is read and dropped, and a request pipelined behind it is answered on
  /// the same connection (and reaches the backend once).
  @Test func aBodySentWithoutWaitingFor100IsDroppedAndTheNextRequestAnswered() throws {
    let backend = try TestBackend(always: .respond(.text("done")))
    defer { backend.stop() }
    let gateway = try Self.gatewayRoutingOnlyAPI(to: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(
      httpRequest("POST", "/elsewhere", headers: [("Expect", "100-continue"), ("Content-Length", "3")])
        + Array("abc".utf8) + httpRequest("DELETE", "/api/order-77"))
    let refused = try client.readAnswer()
    let deleted = try client.readAnswer()

    #expect(refused.status == 404)
    #expect(refused.head.value("Connection") == nil)
    #expect(deleted.status == 200)
    #expect(backend.requests.map(\.target) == ["/api/order-77"])
  }

  /// A GET with a body is never answered from the store (its body may change the answer):
  /// it goes to the upstream, with its 100 Continue.
  @Test func aGetWithABodyAndExpectIsNotAnsweredFromTheStore() throws {
    let backend = try TestBackend(always: .respond(.text("stored")))
    defer { backend.stop() }
    var config = TestConfig.make(
      routes: [TestConfig.route("api", match: "/*", extra: ["cache": ["fresh_s": 60]])],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    config["store"] = ["path": "var/store.sqlite"]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    #expect(try send("GET", "/doc", to: gateway.port).status == 200)

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/doc", headers: [("Expect", "100-continue"), ("Content-Length", "5")]))
    let interim = try client.readAnswer()
    try client.send("hello")
    let answer = try client.readAnswer()

    #expect(interim.status == 100)
    #expect(answer.status == 200)
    #expect(answer.head.value("X-Gatehouse-Cache") == "BYPASS")
    #expect(backend.requests.count == 2)
    #expect(backend.requests.last?.body == Array("hello".utf8))
  }

  @Test func interimAnswersFromTheBackendAreNotRelayedAsTheFinalOne() throws {
    var backendAnswer = BackendAnswer.text("final")
    backendAnswer.preamble = Array("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n".utf8)
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/hints"))
    var answer = try client.readAnswer()
    // Relaying the 103 is allowed; the final answer must follow it intact.
    if answer.status == 103 { answer = try client.readAnswer() }

    #expect(answer.status == 200)
    #expect(answer.text == "final")
  }

  @Test(arguments: [204, 304])
  func bodilessStatusLeavesTheConnectionReadyForTheNextRequest(status: Int) throws {
    let backend = try TestBackend { request in
      request.target == "/empty"
        ? .respond(BackendAnswer(status: status, reason: "No Body", headers: [("ETag", "\"v1\"")]))
        : .respond(.text("next"))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/empty") + httpRequest("GET", "/next"))
    let empty = try client.readAnswer()
    let next = try client.readAnswer()

    #expect(empty.status == status)
    #expect(empty.bodyLength == 0)
    #expect(!empty.head.isChunked)
    #expect(empty.head.value("ETag") == "\"v1\"")
    #expect(next.text == "next")
  }

  @Test func http10ClientGetsAChunkedAnswerDelimitedByClose() throws {
    let backend = try TestBackend(
      always: .respond(BackendAnswer(body: .chunked([Array("one,".utf8), Array("two".utf8)]))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send("GET /old HTTP/1.0\r\nHost: x\r\n\r\n")
    let answer = try client.readAnswer()

    #expect(answer.head.startLine.hasPrefix("HTTP/1."))
    #expect(answer.status == 200)
    #expect(!answer.head.isChunked)
    #expect(answer.text == "one,two")
    #expect(client.waitForEnd() == .closed)
  }

  @Test func http10ClientConnectionClosesAfterTheAnswer() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send("GET /old HTTP/1.0\r\nHost: x\r\n\r\n")
    let answer = try client.readAnswer()

    #expect(answer.text == "ok")
    #expect(client.waitForEnd() == .closed)
  }

  @Test func clientThatHalfClosesAfterItsRequestStillGetsTheAnswer() throws {
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .echo, delay: .milliseconds(100))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("POST", "/half", body: Array("last words".utf8)))
    client.socket.shutdownWrite()
    let answer = try client.readAnswer()

    #expect(answer.status == 200)
    #expect(answer.text == "last words")
    #expect(client.waitForEnd() == .closed)
  }

  @Test()
  func slowUploadLongerThanTheAnswerTimeoutGetsThrough() throws {
    // The backend cannot answer before it has the whole body, so the answer timeout
    // (1 s) must not run while the client is still sending (about 2.4 s in all).
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .echo)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, answerTimeoutMs: 1000))
    defer { gateway.stopExpectingCleanExit() }
    let pieces = (0..<12).map { Array("piece \($0);".utf8) }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("PUT", "/slow-upload", headers: [("Content-Length", "\(pieces.joined().count)")]))
    for piece in pieces {
      try client.send(piece)
      sleep(for: .milliseconds(200))
    }
    let answer = try client.readAnswer()

    #expect(answer.status == 200)
    #expect(answer.body == Array(pieces.joined()))
  }

  @Test func pathBytesAreForwardedAsSent() throws {
    let backend = try TestBackend { request in .respond(.text(request.target)) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    for target in ["/a%2Fb/%41", "/x//y", "/caf%C3%A9/~user/a;b=c", "/trailing/"] {
      let answer = try send("GET", target, to: gateway.port)
      #expect(answer.text == target)
    }
  }

  /// With a catch-all route, `OPTIONS *` once went upstream as `OPTIONS /api/v1*`, and
  /// `CONNECT example.com:443` as `CONNECT /api/v1example.com:443`. This is not a forward
  /// proxy: CONNECT is 501, and so is TRACE (the backend would echo the credentials the
  /// gateway injected); `OPTIONS *` has no route to go to and is 400. Each closes the
  /// connection like any refused request, and nothing reaches the backend.
  @Test(arguments: [
    ("OPTIONS", "*", 400), ("CONNECT", "example.com:443", 501), ("CONNECT", "/x", 501), ("TRACE", "/x", 501),
  ])
  func nonPathTargetsAndTunnelMethodsNeverReachTheBackend(method: String, target: String, status: Int) throws {
    let backend = try TestBackend { request in .respond(.text("\(request.method) \(request.target)")) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")],
        upstreams: ["api": TestConfig.upstream(port: backend.port, basePath: "/api/v1")]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let answer = try client.exchange(httpRequest(method, target))

    #expect(isErrorEnvelope(answer, status: status))
    #expect(answer.head.value("Connection")?.lowercased() == "close")
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.isEmpty)
    // OPTIONS with a path is an ordinary request.
    #expect(try send("OPTIONS", "/x", to: gateway.port).text == "OPTIONS /api/v1/x")
  }

  /// Bytes RFC 3986 does not allow in a path are refused there (nginx and HAProxy let the
  /// printable ones through; `\` is a separator to some backends, the rest only shows up in
  /// probes); the query, which the gateway does not read, keeps their rule.
  @Test func pathBytesOutsideRFC3986Are400ButTheQueryKeepsThem() throws {
    let backend = try TestBackend { request in .respond(.text(request.target)) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    for target in ["/a\"b", "/a\\b", "/a<b>", "/a^b", "/a`b", "/a{b}", "/a|b", "/a[0]", "/a%zz"] {
      let client = try RawClient(port: gateway.port)
      let answer = try client.exchange(httpRequest("GET", target))
      #expect(isErrorEnvelope(answer, status: 400, message: "bad request: invalid request target"), "\(target)")
    }
    #expect(backend.requests.isEmpty)
    let query = "/a?json={\"k\":[1,2]}&p=a|b&x=<y>^`\\"
    #expect(try send("GET", query, to: gateway.port).text == query)
  }

  /// An upstream that answers before the request body is all sent (a 413 after the head):
  /// the rest cannot reach it, so the answer says `Connection: close`, and the gateway
  /// reads and drops what the client still sends before closing with a FIN, not a reset
  /// that could destroy the answer.
  @Test func anAnswerBeforeTheWholeBodySaysCloseAndEndsWithoutAReset() throws {
    let listener = try TestSocket.listen()
    let backendDone = Gate()
    let backend = Thread {
      defer { backendDone.open() }
      guard let connection = try? listener.accept(deadline: Deadline(seconds: 20)) else { return }
      var buffer = [UInt8](repeating: 0, count: 65536)
      var seen: [UInt8] = []
      let blankLine = Array("\r\n\r\n".utf8)
      while !seen.indices.contains(where: { seen[$0...].starts(with: blankLine) }) {
        let count =
          (try? buffer.withUnsafeMutableBytes { try connection.receive(into: $0, deadline: Deadline(seconds: 10)) })
          ?? 0
        if count <= 0 { return }
        seen.append(contentsOf: buffer[0..<count])
      }
      let body = #"{"message":"too big"}"#
      let answer =
        "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
      try? connection.send(Array(answer.utf8), deadline: Deadline(seconds: 10))
      connection.close()
    }
    backend.start()
    defer { listener.close() }
    let gateway = try GatewayProcess(config: TestConfig.streamingBodies(TestConfig.passThrough(to: listener.localPort)))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let size = 256 * 1024
    try client.send(Array("POST /upload HTTP/1.1\r\nHost: g\r\nContent-Length: \(size)\r\n\r\n".utf8))
    let answer = try client.readAnswer(timeout: 20)
    // The client goes on sending the body it announced; the gateway drops it.
    var sendFailed = false
    for _ in 0..<(size / 16384) {
      do { try client.send([UInt8](repeating: 0x61, count: 16384)) } catch {
        sendFailed = true
        break
      }
    }

    #expect(answer.status == 413)
    #expect(answer.head.value("Connection")?.lowercased() == "close")
    #expect(answer.text == #"{"message":"too big"}"#)
    #expect(!sendFailed)
    #expect(client.waitForEnd(timeout: 20) == .closed)
    #expect(backendDone.wait(timeout: 20))
  }

  @Test func backendSpeakingSomethingElseIs502() throws {
    var backendAnswer = BackendAnswer()
    backendAnswer.rawReplacement = Array("SSH-2.0-OpenSSH_9.6\r\n\r\n".utf8)
    backendAnswer.closeAfter = true
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/not-http", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
    // The operator learns why, without the upstream's bytes.
    #expect(
      gateway.waitForLogLine {
        $0["msg"] as? String == "upstream sent an invalid answer" && $0["error"] as? String == "invalid HTTP version"
          && $0["upstream"] as? String == "api"
      }, "\(gateway.logLines().filter { $0["level"] as? String == "warn" })")
    #expect(!gateway.logLines().contains { "\($0)".contains("OpenSSH") })
  }

  @Test func backendHeadTooLargeIs502() throws {
    let backend = try TestBackend(
      always: .respond(.text("ok", headers: [("X-Huge", String(repeating: "h", count: 128 * 1024))])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/huge-head", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502))
  }

  @Test func backendStallingAfterItsHeadCutsTheClientConnectionAtTheAnswerTimeout() throws {
    let gate = Gate()
    var answer = BackendAnswer(body: .chunked([Array("started".utf8), Array("never".utf8)]))
    answer.pauseAfterFirstPiece = gate
    let backend = try TestBackend(always: .respond(answer))
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, answerTimeoutMs: 300))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/stall"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 10))))
    let rest = client.readUntilEnd(timeout: 10)

    #expect(head.startLine.hasPrefix("HTTP/1.1 200"))
    #expect(rest.end != .stillOpen)
    // The chunked body never got its last chunk: the client can tell it was cut.
    #expect(!String(decoding: rest.bytes, as: UTF8.self).hasSuffix("0\r\n\r\n"))
  }

  @Test func backendClosingItsConnectionIsNotReusedAndTheClientKeepsItsOwn() throws {
    var answer = BackendAnswer.text("bye")
    answer.closeAfter = true
    let backend = try TestBackend(always: .respond(answer))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let first = try client.exchange(httpRequest("GET", "/1"))
    let second = try client.exchange(httpRequest("GET", "/2"))

    #expect(first.text == "bye")
    #expect(second.text == "bye")
    #expect(first.head.value("Connection")?.lowercased() != "close")
    #expect(backend.connectionCount == 2)
  }
}
