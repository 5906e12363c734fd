import Foundation
import Testing

/// Stub answers (Config/README.md `stub`): `always` answers without asking the backend, `fallback`
/// answers when the backend fails, `off` never answers.
@Suite struct StubTests {
  static func stubRoute(mode: String, envelope: Bool, status: Int = 200, delayMs: Int = 0) -> [String: Any] {
    TestConfig.route(
      "stubbed", match: "/stubbed/*",
      extra: [
        "stub": ["mode": mode, "status": status, "body": ["from": "stub", "n": 7], "delay_ms": delayMs],
        "envelope": ["enabled": envelope],
      ])
  }

  static func gateway(stub: [String: Any], upstreamPort: UInt16) throws -> GatewayProcess {
    try GatewayProcess(
      config: TestConfig.make(routes: [stub], upstreams: ["api": TestConfig.upstream(port: upstreamPort)]))
  }

  /// A stub stands in for the backend, so the route's `key_path` picks from its body as it
  /// would from the backend's; a body without it answers `null`, as the backend's would.
  @Test func keyPathPicksFromTheStubBodyAsFromTheBackends() throws {
    func datas(keyPath: String) throws -> Any? {
      let route = TestConfig.route(
        "stubbed", match: "/stubbed", upstream: nil,
        extra: [
          "stub": ["mode": "always", "body": ["data": ["users": [["id": 1]]], "meta": ["page": 1]]],
          "envelope": ["enabled": true, "key_path": keyPath],
        ])
      let gateway = try GatewayProcess(config: TestConfig.make(routes: [route]))
      defer { gateway.stopExpectingCleanExit() }
      let answer = try send("GET", "/stubbed", to: gateway.port)
      #expect(answer.status == 200)
      return try answer.jsonObject()["datas"]
    }
    let users = try #require(try datas(keyPath: "data.users") as? [[String: Any]])
    #expect(users.count == 1 && users.first?["id"] as? Int == 1)
    #expect(try datas(keyPath: "users") is NSNull)
  }

  @Test func alwaysAnswersAfterItsDelayWithoutCallingTheBackend() throws {
    let backend = try TestBackend(always: .respond(.text("backend")))
    defer { backend.stop() }
    let gateway = try Self.gateway(
      stub: Self.stubRoute(mode: "always", envelope: true, delayMs: 300), upstreamPort: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let started = ContinuousClock.now
    let answer = try send("GET", "/stubbed/x", to: gateway.port)
    let elapsed = ContinuousClock.now - started

    #expect(answer.status == 200)
    #expect(answer.head.value("Content-Type")?.hasPrefix("application/json") == true)
    let object = try answer.jsonObject()
    #expect(Set(object.keys) == ["code", "datas", "message"])
    #expect(object["code"] as? Int == 0)
    #expect(object["message"] as? String == "")
    let datas = try #require(object["datas"] as? [String: Any])
    #expect(datas["from"] as? String == "stub")
    #expect(datas["n"] as? Int == 7)
    #expect(elapsed >= .milliseconds(300))
    #expect(backend.requests.isEmpty)
    #expect(backend.connectionCount == 0)
  }

  @Test func alwaysAnswersHeadWithTheLengthAndNoBody() throws {
    let gateway = try Self.gateway(
      stub: Self.stubRoute(mode: "always", envelope: true), upstreamPort: try TestSocket.unusedPort())
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("HEAD", "/stubbed/x") + httpRequest("GET", "/stubbed/x"))
    let head = try client.readAnswer(requestWasHEAD: true)
    let get = try client.readAnswer()

    #expect(head.status == 200)
    #expect(head.head.contentLength == Int64(get.body.count))
    #expect(get.status == 200)
    #expect(try get.jsonObject()["code"] as? Int == 0)
  }

  @Test func pipelinedRequestsToADelayedStubAreAnsweredInOrder() throws {
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [
          Self.stubRoute(mode: "always", envelope: false, delayMs: 200),
          TestConfig.route(
            "instant", match: "/instant",
            extra: ["stub": ["mode": "always", "status": 200, "body": ["instant": true]]]),
        ],
        upstreams: ["api": TestConfig.upstream(port: try TestSocket.unusedPort())]))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(
      httpRequest("GET", "/stubbed/1") + httpRequest("GET", "/instant") + httpRequest("GET", "/stubbed/2"))
    let answers = try (0..<3).map { _ in try client.readAnswer().jsonObject() }

    #expect(answers[0]["from"] as? String == "stub")
    #expect(answers[1]["instant"] as? Bool == true)
    #expect(answers[2]["from"] as? String == "stub")
  }

  @Test func alwaysWithoutEnvelopeAnswersTheRawBody() throws {
    let backend = try TestBackend(always: .respond(.text("backend")))
    defer { backend.stop() }
    let gateway = try Self.gateway(stub: Self.stubRoute(mode: "always", envelope: false), upstreamPort: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/stubbed/x", to: gateway.port)

    #expect(answer.status == 200)
    let object = try answer.jsonObject()
    #expect(object["from"] as? String == "stub")
    #expect(object["n"] as? Int == 7)
    #expect(object["code"] == nil)
    #expect(backend.requests.isEmpty)
  }

  @Test func alwaysWithAnErrorStatusAnswersAnErrorEnvelope() throws {
    let gateway = try Self.gateway(
      stub: Self.stubRoute(mode: "always", envelope: true, status: 503), upstreamPort: try TestSocket.unusedPort())
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/stubbed/x", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 503))
  }

  @Test func fallbackPassesTheBackendsAnswerWhileItIsUp() throws {
    let backend = try TestBackend(always: .respond(.text(#"{"from":"backend"}"#)))
    defer { backend.stop() }
    let gateway = try Self.gateway(stub: Self.stubRoute(mode: "fallback", envelope: false), upstreamPort: backend.port)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/stubbed/x", to: gateway.port)

    #expect(answer.text == #"{"from":"backend"}"#)
    #expect(backend.requests.count == 1)
  }

  @Test func fallbackAnswersWhenTheBackendIsDown() throws {
    let gateway = try Self.gateway(
      stub: Self.stubRoute(mode: "fallback", envelope: true), upstreamPort: try TestSocket.unusedPort())
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/stubbed/x", to: gateway.port)

    #expect(answer.status == 200)
    let object = try answer.jsonObject()
    #expect(object["code"] as? Int == 0)
    #expect((object["datas"] as? [String: Any])?["from"] as? String == "stub")
  }

  @Test func fallbackAnswersWhenTheBackendTimesOut() throws {
    let gate = Gate()
    var backendAnswer = BackendAnswer.text("too late")
    backendAnswer.holdUntil = gate
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer {
      gate.open()
      backend.stop()
    }
    var route = Self.stubRoute(mode: "fallback", envelope: false)
    route["upstream"] = "slow"
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [route], upstreams: ["slow": TestConfig.upstream(port: backend.port, answerTimeoutMs: 300)]))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/stubbed/x", to: gateway.port)

    #expect(answer.status == 200)
    #expect(try answer.jsonObject()["from"] as? String == "stub")
  }

  @Test func offNeverAnswersFromTheStub() throws {
    let gateway = try Self.gateway(
      stub: Self.stubRoute(mode: "off", envelope: true), upstreamPort: try TestSocket.unusedPort())
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/stubbed/x", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
  }
}
