import Foundation
import Testing

/// Requests of each method, with bodies framed by length or chunked, go through to the
/// backend intact, and the backend's answer comes back: by length, chunked, or until close,
/// streamed rather than gathered first.
@Suite struct ProxyMethodTests {
  /// A body with every byte value, so any byte mangling shows.
  static let binaryBody: [UInt8] = (0..<1024).map { UInt8($0 % 256) }

  @Test func getIsProxiedWithItsAnswer() throws {
    let backend = try TestBackend(always: .respond(.text("hello from backend", headers: [("X-Backend", "yes")])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/items/1?x=1", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.text == "hello from backend")
    #expect(answer.head.value("X-Backend") == "yes")
    #expect(answer.head.contentLength == Int64("hello from backend".utf8.count))
    let request = try #require(backend.requests.first)
    #expect(request.method == "GET")
    #expect(request.path == "/items/1")
    #expect(request.query == "x=1")
    #expect(request.bodyLength == 0)
    #expect(!request.head.has("Content-Length") && !request.head.has("Transfer-Encoding"))
  }

  @Test(arguments: ["POST", "PUT", "DELETE", "PATCH"])
  func bodyWithContentLengthArrivesIntact(method: String) throws {
    let backend = try TestBackend(always: .respond(BackendAnswer(status: 201, reason: "Created", body: .echo)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send(method, "/things", to: gateway.port, body: Self.binaryBody)

    let request = try #require(backend.requests.first)
    #expect(request.method == method)
    #expect(request.body == Self.binaryBody)
    #expect(request.head.contentLength == Int64(Self.binaryBody.count))
    #expect(!request.bodyWasChunked)
    #expect(answer.status == 201)
    #expect(answer.body == Self.binaryBody)
  }

  @Test(arguments: ["POST", "PUT", "DELETE"])
  func chunkedBodyArrivesIntact(method: String) throws {
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .echo)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let chunks: [[UInt8]] = [Array("first chunk, ".utf8), Self.binaryBody, Array(", last".utf8)]

    let client = try RawClient(port: gateway.port)
    let answer = try client.exchange(
      httpRequest(method, "/upload", headers: [("Transfer-Encoding", "chunked")]) + chunkedBody(chunks))

    let request = try #require(backend.requests.first)
    let expected = chunks.flatMap { $0 }
    #expect(request.method == method)
    #expect(request.body == expected)
    // Either framing is valid towards the backend, but exactly one of them.
    #expect(request.bodyWasChunked != request.head.has("Content-Length"))
    #expect(answer.status == 200)
    #expect(answer.body == expected)
  }

  @Test func contentLengthAnswerIsPassedThroughWithItsLength() throws {
    let length: Int64 = 1 << 20
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .generated(length: length, chunked: false))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    var verifier = BodyPattern.Verifier()
    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/big"))
    let answer = try client.readAnswer { verifier.check($0) }

    #expect(answer.status == 200)
    #expect(answer.head.contentLength == length)
    #expect(!answer.head.isChunked)
    #expect(verifier.count == length)
    #expect(verifier.firstMismatch == nil)
  }

  @Test func chunkedAnswerReachesTheClientChunked() throws {
    let chunks: [[UInt8]] = [Array("alpha".utf8), Array(repeating: 0x62, count: 70_000), Array("gamma".utf8)]
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .chunked(chunks))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/chunked", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.head.isChunked)
    #expect(!answer.head.has("Content-Length"))
    #expect(answer.body == chunks.flatMap { $0 })
  }

  @Test func answerDelimitedByCloseIsChunkedToTheClientWhoKeepsTheConnection() throws {
    let backend = try TestBackend { request in
      .respond(BackendAnswer(body: .untilClose(Array("until close: \(request.target)".utf8))))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let first = try client.exchange(httpRequest("GET", "/a"))
    let second = try client.exchange(httpRequest("GET", "/b"))

    #expect(first.status == 200)
    #expect(first.head.isChunked)
    #expect(first.text == "until close: /a")
    #expect(second.text == "until close: /b")
    #expect(backend.connectionCount == 2)
  }

  @Test func lengthDelimitedAnswerIsStreamedBeforeTheBackendFinishes() throws {
    let gate = Gate()
    var answer = BackendAnswer(body: .generated(length: 4 * Int64(BodyPattern.blockSize), chunked: false))
    answer.pauseAfterFirstPiece = gate
    let backend = try TestBackend(always: .respond(answer))
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/stream"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 10))))
    var firstPiece = BodyPattern.Verifier()
    // The backend holds the rest until the gate opens, so this can only come from streaming.
    try client.reader.readBody(length: Int64(BodyPattern.blockSize), deadline: Deadline(seconds: 10)) {
      firstPiece.check($0)
    }
    #expect(!gate.opened)
    gate.open()
    var rest = BodyPattern.Verifier()
    try client.reader.readBody(length: 3 * Int64(BodyPattern.blockSize), deadline: Deadline(seconds: 10)) {
      rest.check($0)
    }

    #expect(head.contentLength == 4 * Int64(BodyPattern.blockSize))
    #expect(firstPiece.firstMismatch == nil)
    #expect(rest.count == 3 * Int64(BodyPattern.blockSize))
  }

  @Test func chunkedAnswerIsStreamedBeforeTheBackendFinishes() throws {
    let gate = Gate()
    var answer = BackendAnswer(body: .chunked([Array("first".utf8), Array("second".utf8)]))
    answer.pauseAfterFirstPiece = gate
    let backend = try TestBackend(always: .respond(answer))
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/stream"))
    let deadline = Deadline(seconds: 10)
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: deadline)))
    let sizeLine = String(decoding: try client.reader.readLine(deadline: deadline), as: UTF8.self)
    var first: [UInt8] = []
    try client.reader.readBody(length: Int64(sizeLine, radix: 16) ?? 0, deadline: deadline) {
      first.append(contentsOf: $0)
    }
    #expect(!gate.opened)
    gate.open()
    _ = try client.reader.readLine(deadline: deadline)
    var rest: [UInt8] = []
    _ = try client.reader.readChunkedBody(deadline: deadline) { rest.append(contentsOf: $0) }

    #expect(head.isChunked)
    #expect(String(decoding: first, as: UTF8.self) == "first")
    #expect(String(decoding: rest, as: UTF8.self) == "second")
  }

  @Test func headAnswersWithTheLengthOfGetAndNoBody() throws {
    let body = Array(repeating: UInt8(ascii: "h"), count: 1234)
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .bytes(body))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    // HEAD and GET in one write: a stray body byte after the HEAD answer would corrupt the GET's.
    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("HEAD", "/doc") + httpRequest("GET", "/doc"))
    let head = try client.readAnswer(requestWasHEAD: true)
    let get = try client.readAnswer()

    #expect(head.status == 200)
    #expect(head.head.contentLength == 1234)
    #expect(head.bodyLength == 0)
    #expect(get.status == 200)
    #expect(get.body == body)
    #expect(backend.requests.map(\.method) == ["HEAD", "GET"])
  }
}
