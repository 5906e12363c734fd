import Foundation
import Testing

/// Failures and their answers (Docs/envelope.md): upstream failures as 502/504 envelopes, requests
/// the parser refuses (400/413/414/431/501/505, then the connection closes), and the
/// request-header timeout (408).
@Suite struct ErrorTests {
  /// The `reason` of the access line for `path` (Docs/logs.md), once it is written.
  static func loggedReason(_ gateway: GatewayProcess, path: String) -> String? {
    var reason: String?
    _ = waitUntil {
      guard let line = gateway.accessLines().first(where: { $0["path"] as? String == path }) else { return false }
      reason = line["reason"] as? String
      return true
    }
    return reason
  }

  // MARK: The upstream fails

  @Test func refusedUpstreamIs502() throws {
    let port = try TestSocket.unusedPort()
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/down", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
    #expect(answer.head.value("Content-Type")?.hasPrefix("application/json") == true)
  }

  @Test func upstreamResetIs502() throws {
    let backend = try TestBackend(always: .reset)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/reset", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
    #expect(backend.requests.count >= 1)
    #expect(Self.loggedReason(gateway, path: "/reset") == "reset")
  }

  @Test func upstreamClosingWithoutAnswerIs502() throws {
    let backend = try TestBackend(always: .close)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/silent", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
  }

  @Test func upstreamClosingMidHeadersIs502() throws {
    let backend = try TestBackend(always: .closeMidHeaders)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let answer = try client.exchange(httpRequest("GET", "/half-head"))

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
    #expect(Self.loggedReason(gateway, path: "/half-head") == "bad_response")
    // The client connection is still usable.
    #expect(try client.exchange(httpRequest("GET", "/again")).status == 502)
  }

  @Test func upstreamClosingMidBodyCutsTheClientConnection() throws {
    let backend = try TestBackend(always: .closeMidBody(declared: 10_000, sent: 4_000))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/half-body"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 10))))
    let rest = client.readUntilEnd()

    // The status was already out; the only honest signal left is a body cut short.
    #expect(head.startLine.hasPrefix("HTTP/1.1 200"))
    #expect(head.contentLength == 10_000)
    #expect(rest.end != .stillOpen)
    #expect(rest.bytes.count < 10_000)
  }

  /// On a pass-through route the head goes out with the first body bytes: an answer whose
  /// body breaks in the same read as its head has sent the client nothing yet, so it gets a
  /// 502 (as on an enveloped route) and keeps its connection; once the head has left, the
  /// only signal left is the cut connection.
  @Test func passThroughAnswerBrokenBeforeAnyByteLeftIs502() throws {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    let backend = try FaultBackend { request in
      if request.target.hasPrefix("/late") {
        return FaultAnswer([Array(head.utf8), Array("zz\r\n{}\r\n0\r\n\r\n".utf8)], pause: .milliseconds(300))
      }
      return FaultAnswer.raw(head + "zz\r\n{}\r\n0\r\n\r\n")
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    #expect(
      isErrorEnvelope(try client.exchange(httpRequest("GET", "/at-once")), status: 502, message: "upstream unavailable")
    )
    #expect(
      isErrorEnvelope(try client.exchange(httpRequest("GET", "/again")), status: 502, message: "upstream unavailable"))

    let late = try RawClient(port: gateway.port)
    try late.send(httpRequest("GET", "/late"))
    let lateHead = try MessageHead(raw: try #require(try late.reader.readHead(deadline: Deadline(seconds: 10))))
    #expect(lateHead.startLine.hasPrefix("HTTP/1.1 200"))
    #expect(late.readUntilEnd().end != .stillOpen)
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["path"] as? String == "/late" })
    let logged = gateway.logLines().filter { $0["msg"] as? String == "access" }.compactMap { $0["status"] as? Int }
    #expect(logged.sorted() == [200, 502, 502], "\(logged)")
  }

  @Test func upstreamSlowerThanResponseTimeoutIs504() throws {
    let gate = Gate()
    var backendAnswer = BackendAnswer.text("too late")
    backendAnswer.holdUntil = gate
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, answerTimeoutMs: 300))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/slow", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 504, message: "upstream timed out"))
    #expect(backend.requests.count == 1)
    #expect(Self.loggedReason(gateway, path: "/slow") == "response_timeout")
  }

  @Test func bodyTrickledWithGapsShorterThanTheAnswerTimeoutGetsThrough() throws {
    let body = Array("0123456789abcdef".utf8)
    var backendAnswer = BackendAnswer(body: .bytes(body))
    backendAnswer.bodyTrickle = (size: 2, interval: .milliseconds(100))
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, answerTimeoutMs: 2000))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/trickle", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.body == body)
  }

  @Test func headTrickledByteByByteGetsThrough() throws {
    var backendAnswer = BackendAnswer.text("slow head", headers: [("X-Slow", "1")])
    backendAnswer.headByteInterval = .milliseconds(2)
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/slow-head", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.head.value("X-Slow") == "1")
    #expect(answer.text == "slow head")
  }

  // MARK: The client's request is refused

  /// A request the parser must refuse, and the status for it.
  struct Malformed: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: String
    let status: Int
    var testDescription: String { "\(name) → \(status)" }
  }

  static let malformed: [Malformed] = [
    Malformed(name: "field without colon", bytes: "GET / HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", status: 400),
    Malformed(name: "space before colon", bytes: "GET / HTTP/1.1\r\nHost : x\r\n\r\n", status: 400),
    Malformed(name: "bare CR", bytes: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", status: 400),
    Malformed(name: "missing Host", bytes: "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", status: 400),
    Malformed(name: "two Hosts", bytes: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", status: 400),
    Malformed(
      name: "non-numeric Content-Length", bytes: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
      status: 400),
    Malformed(
      name: "Content-Length and chunked",
      bytes: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      status: 400),
    Malformed(name: "garbage start line", bytes: "HELLO\r\n\r\n", status: 400),
    Malformed(
      name: "too many fields",
      bytes: "GET / HTTP/1.1\r\nHost: x\r\n" + (0..<200).map { "X-F\($0): v\r\n" }.joined() + "\r\n", status: 431),
    Malformed(name: "HTTP/2.0", bytes: "GET / HTTP/2.0\r\nHost: x\r\n\r\n", status: 505),
    Malformed(
      name: "unknown transfer coding", bytes: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
      status: 501),
    Malformed(
      name: "request line too long", bytes: "GET /\(String(repeating: "a", count: 9000)) HTTP/1.1\r\nHost: x\r\n\r\n",
      status: 414),
  ]

  @Test(arguments: malformed)
  func malformedRequestGetsAnErrorEnvelopeAndTheConnectionCloses(_ request: Malformed) throws {
    let backend = try TestBackend(always: .respond(.text("should not be reached")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(request.bytes)
    let answer = try client.readAnswer()

    #expect(isErrorEnvelope(answer, status: request.status))
    #expect(answer.head.value("Connection")?.lowercased() == "close")
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.isEmpty)
  }

  @Test func badChunkSizeAfterAValidHeadIs400AndCloses() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
    let answer = try client.readAnswer()

    #expect(isErrorEnvelope(answer, status: 400))
    #expect(client.waitForEnd() != .stillOpen)
  }

  @Test func contentLengthOverMaxBodyBytesIs413() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, limits: ["max_body_bytes": 1024]))
    defer { gateway.stopExpectingCleanExit() }

    let accepted = try send("POST", "/fits", to: gateway.port, body: Array(repeating: 0x61, count: 1024))
    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("POST", "/too-big", body: Array(repeating: 0x61, count: 2048)))
    let refused = try client.readAnswer()

    #expect(accepted.status == 200)
    #expect(isErrorEnvelope(refused, status: 413))
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.map(\.target) == ["/fits"])
  }

  @Test func chunkedBodyOverMaxBodyBytesIs413() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, limits: ["max_body_bytes": 1024]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let chunks = Array(repeating: Array(repeating: UInt8(0x61), count: 512), count: 4)
    try client.send(httpRequest("POST", "/too-big", headers: [("Transfer-Encoding", "chunked")]) + chunkedBody(chunks))
    let refused = try client.readAnswer()

    #expect(isErrorEnvelope(refused, status: 413))
    #expect(client.waitForEnd() != .stillOpen)
    // Whatever reached the backend must not look like a complete request with the whole body.
    #expect(!backend.requests.contains { $0.bodyLength > 1024 })
  }

  @Test func headOverMaxHeaderBytesIs431() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(to: backend.port, limits: ["max_header_bytes": 2048]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/", headers: [("X-Big", String(repeating: "b", count: 4096))]))
    let answer = try client.readAnswer()

    #expect(isErrorEnvelope(answer, status: 431))
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.isEmpty)
  }

  @Test func slowRequestHeadIs408() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(to: backend.port, limits: ["header_timeout_ms": 300]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send("GET /slow HTTP/1.1\r\nHost: x\r\nX-Partial: never fin")
    let answer = try client.readAnswer()

    #expect(isErrorEnvelope(answer, status: 408))
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.isEmpty)
    #expect(Self.loggedReason(gateway, path: "-") == "request_timeout")
  }

  /// A TLS ClientHello sent to a plain port gets its 400 at once (the header timeout here is
  /// a minute, longer than the read waits), as nginx answers it.
  @Test func aTLSClientHelloOnAPlainPortIsRefusedAtOnce() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(to: backend.port, limits: ["header_timeout_ms": 60_000]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    // The start of a ClientHello: handshake record, TLS 1.0 record version, a length, then
    // the handshake type and more (no line end in sight).
    try client.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03])
    let answer = try client.readAnswer(timeout: 20)

    #expect(isErrorEnvelope(answer, status: 400))
    #expect(client.waitForEnd() != .stillOpen)
    #expect(backend.requests.isEmpty)
  }

  @Test func silentConnectionIsClosedAtTheHeaderTimeout() throws {
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(to: try TestSocket.unusedPort(), limits: ["header_timeout_ms": 300]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let outcome = client.readUntilEnd()

    #expect(outcome.end != .stillOpen)
    #expect(outcome.bytes.isEmpty)
  }
}
