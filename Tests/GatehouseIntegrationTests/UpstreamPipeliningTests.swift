import Foundation
import Synchronization
import Testing

/// Pipelining to the upstream: bodiless GETs and HEADs parsed in the same loop turn share
/// one proven keep-alive connection, each client still gets its own answer, and requests
/// behind an answer that ends the connection (or behind one given up) are sent again.
///
/// To get several requests into one loop turn the gateway is stopped (SIGSTOP) while the
/// clients write, then continued: its next `epoll_wait` reports them all at once.
@Suite struct UpstreamPipeliningTests {
  /// Only an upstream that answers quickly gets pipelined requests.
  private let fast = TestBackend.Options(noDelay: true)

  /// Clients that each made one exchange, so the gateway holds a proven keep-alive
  /// upstream connection and has measured the upstream as fast.
  private func warmClients(_ count: Int, gateway: GatewayProcess) throws -> [RawClient] {
    let clients = try (0..<count).map { _ in try RawClient(port: gateway.port) }
    for round in 0..<5 {
      for (index, client) in clients.enumerated() {
        let answer = try client.exchange(httpRequest("GET", "/warm/\(round)/\(index)"))
        #expect(answer.status == 200)
      }
    }
    return clients
  }

  /// Writes `requests[i]` on `clients[i]` while the gateway is stopped.
  private func sendTogether(_ requests: [[UInt8]], on clients: [RawClient], gateway: GatewayProcess) throws {
    gateway.send(signal: SIGSTOP)
    defer { gateway.send(signal: SIGCONT) }
    #expect(waitUntil(timeout: 10) { Self.isStopped(pid: gateway.pid) })
    for (request, client) in zip(requests, clients) { try client.send(request) }
  }

  private static func isStopped(pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")")
    else { return false }
    return stat[stat.index(close, offsetBy: 2)] == "T"
  }

  /// Answers "answer for <target>", except that the first batch request (the first
  /// `/b/...` one to arrive, whichever place it has in the pipeline) waits for `release`.
  private func backendHoldingFirstBatchAnswer(until release: Gate) throws -> TestBackend {
    let heldOne = Atomic<Bool>(false)
    return try TestBackend(options: fast) { request in
      var answer = BackendResponse.text("answer for \(request.target)")
      if request.path.hasPrefix("/b/"), !heldOne.exchange(true, ordering: .relaxed) { answer.holdUntil = release }
      return .respond(answer)
    }
  }

  /// Sends `requests` together from warm clients and expects each answered with
  /// `answer(index)`, none of them written behind another.
  private func expectEachSentAlone(
    _ requests: [[UInt8]], gateway: GatewayProcess, backend: TestBackend, answer: (Int) -> String
  ) throws {
    let clients = try warmClients(requests.count, gateway: gateway)
    try sendTogether(requests, on: clients, gateway: gateway)
    for (index, client) in clients.enumerated() {
      #expect(try client.readResponse().text == answer(index))
    }
    let batch = batchRequests(backend)
    #expect(batch.count == requests.count)
    #expect(!batch.contains { $0.arrivedWithPrevious })
  }

  /// GETs `/b/0`… sent together from warm clients, once the backend has the first of them
  /// (the one `backendHoldingFirstBatchAnswer` holds).
  private func sendHeldBatch(of count: Int, gateway: GatewayProcess, backend: TestBackend) throws -> [RawClient] {
    let clients = try warmClients(count, gateway: gateway)
    try sendTogether((0..<count).map { httpRequest("GET", "/b/\($0)") }, on: clients, gateway: gateway)
    #expect(waitUntil(timeout: 10) { !batchRequests(backend).isEmpty })
    return clients
  }

  private func withAdminToken(_ config: [String: Any]) -> [String: Any] {
    var config = config
    config["admin"] = ["listen": "127.0.0.1:0", "token": TestConfig.adminToken]
    return config
  }

  /// `gatehouse_upstream_pipelined_total` and `gatehouse_upstream_pipeline_resent_total`.
  private func pipelineMetrics(_ gateway: GatewayProcess) throws -> (pipelined: Double, resent: Double) {
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let page = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(page.types["gatehouse_upstream_pipelined_total"] == "counter")
    return (page.value("gatehouse_upstream_pipelined_total"), page.value("gatehouse_upstream_pipeline_resent_total"))
  }

  private func batchRequests(_ backend: TestBackend) -> [ReceivedRequest] {
    backend.requests.filter { $0.path.hasPrefix("/b/") }
  }

  @Test func requestsParsedTogetherShareAConnectionAndEachGetsItsOwnAnswer() throws {
    let backend = try TestBackend(options: fast) { request in
      .respond(.text("answer for \(request.method) \(request.target)"))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: withAdminToken(TestConfig.passThrough(to: backend.port)))
    defer { gateway.stopExpectingCleanExit() }

    let clients = try warmClients(4, gateway: gateway)
    // A HEAD answer has no body: the GET behind it must still be read from the right byte.
    let methods = ["GET", "HEAD", "GET", "GET"]
    try sendTogether(
      methods.enumerated().map { httpRequest($0.element, "/b/\($0.offset)") }, on: clients, gateway: gateway)
    let answers = try clients.enumerated().map { index, client in
      try client.readResponse(requestWasHEAD: methods[index] == "HEAD")
    }

    for (index, answer) in answers.enumerated() {
      #expect(answer.status == 200)
      if methods[index] == "HEAD" {
        #expect(answer.body.isEmpty)
        #expect(answer.head.value("Content-Length") == "\("answer for HEAD /b/\(index)".utf8.count)")
      } else {
        #expect(answer.text == "answer for GET /b/\(index)")
      }
    }
    let batch = batchRequests(backend)
    #expect(batch.count == 4)
    #expect(Set(batch.map(\.connectionIndex)).count == 1)
    #expect(batch.contains { $0.arrivedWithPrevious })
    // One request started the batch, three were written behind it, none went again.
    let metrics = try pipelineMetrics(gateway)
    #expect(metrics.pipelined == 3)
    #expect(metrics.resent == 0)
  }

  @Test func requestsWithABodyAreNeverPipelined() throws {
    let backend = try TestBackend(options: fast) { request in .respond(.text("posted \(request.target)")) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    try expectEachSentAlone(
      (0..<4).map { httpRequest("POST", "/b/\($0)", body: Array("x".utf8)) }, gateway: gateway, backend: backend
    ) { "posted /b/\($0)" }
  }

  @Test func depthOneTurnsPipeliningOff() throws {
    let backend = try TestBackend(options: fast) { request in .respond(.text(request.target)) }
    defer { backend.stop() }
    var upstream = TestConfig.upstream(port: backend.port)
    upstream["pipeline_depth"] = 1
    let gateway = try GatewayProcess(
      config: TestConfig.make(routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": upstream]))
    defer { gateway.stopExpectingCleanExit() }

    try expectEachSentAlone((0..<4).map { httpRequest("GET", "/b/\($0)") }, gateway: gateway, backend: backend) {
      "/b/\($0)"
    }
  }

  @Test func requestsBehindAnAnswerThatClosesTheConnectionAreSentAgain() throws {
    let closedOne = Atomic<Bool>(false)
    let backend = try TestBackend(options: fast) { request in
      var answer = BackendResponse.text("answer for \(request.target)")
      // The first request of the batch is answered with Connection: close; whatever was
      // pipelined behind it on that connection is never answered there.
      if request.path.hasPrefix("/b/"), !closedOne.exchange(true, ordering: .relaxed) { answer.closeAfter = true }
      return .respond(answer)
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: withAdminToken(TestConfig.passThrough(to: backend.port)))
    defer { gateway.stopExpectingCleanExit() }

    let clients = try warmClients(4, gateway: gateway)
    try sendTogether((0..<4).map { httpRequest("GET", "/b/\($0)") }, on: clients, gateway: gateway)
    for (index, client) in clients.enumerated() {
      let answer = try client.readResponse()
      #expect(answer.status == 200)
      #expect(answer.text == "answer for /b/\(index)")
    }
    // Requests were waiting behind the closing answer, and still every one was answered:
    // those dropped with the connection came again on another one.
    #expect(backend.closedWithUnreadRequests == 1)
    let batch = batchRequests(backend)
    #expect(Set(batch.map(\.target)) == Set((0..<4).map { "/b/\($0)" }))
    #expect(Set(batch.map(\.connectionIndex)).count > 1)
    #expect(try pipelineMetrics(gateway).resent >= 1)
  }

  @Test func aClientLeavingWhileItsRequestWaitsDoesNotDisturbTheOthers() throws {
    let release = Gate()
    let backend = try backendHoldingFirstBatchAnswer(until: release)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let clients = try sendHeldBatch(of: 3, gateway: gateway, backend: backend)
    // The middle client leaves while the first answer is held: whichever place its request
    // had in the pipeline, the other two still get their own answers.
    clients[1].close()
    Thread.sleep(forTimeInterval: 0.3)
    release.open()
    for index in [0, 2] {
      let answer = try clients[index].readResponse()
      #expect(answer.status == 200)
      #expect(answer.text == "answer for /b/\(index)")
    }
    // The gateway is still in step with the upstream afterwards.
    #expect(try clients[0].exchange(httpRequest("GET", "/after")).text == "answer for /after")
  }

  @Test func requestsWaitingBehindAHungAnswerAreSentAgainAloneAndNotCountedAsFailures() throws {
    let release = Gate()
    defer { release.open() }
    let backend = try backendHoldingFirstBatchAnswer(until: release)
    defer { backend.stop() }
    var config = TestConfig.make(
      routes: [TestConfig.route("all", match: "/*")],
      upstreams: ["api": TestConfig.upstream(port: backend.port, responseTimeoutMs: 1500)])
    config["admin"] = ["listen": "127.0.0.1:0", "token": TestConfig.adminToken]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let clients = try warmClients(3, gateway: gateway)
    try sendTogether((0..<3).map { httpRequest("GET", "/b/\($0)") }, on: clients, gateway: gateway)
    let answers = try clients.map { try $0.readResponse(timeout: 20) }

    // The held request times out; the two behind it waited out their own timeout in the
    // queue, then went alone and were answered.
    let timedOut = answers.indices.filter { isErrorEnvelope(answers[$0], status: 504) }
    #expect(timedOut.count == 1)
    for index in answers.indices where !timedOut.contains(index) {
      #expect(answers[index].status == 200)
      #expect(answers[index].text == "answer for /b/\(index)")
    }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "timeout"]) == 1)
    #expect(try admin.circuitState(of: "api") == "closed")
  }

  @Test func aReloadLetsRequestsAlreadyWrittenGetTheirAnswers() throws {
    let release = Gate()
    defer { release.open() }
    let backend = try backendHoldingFirstBatchAnswer(until: release)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let clients = try sendHeldBatch(of: 3, gateway: gateway, backend: backend)
    // The reload retires the pool while the batch waits for its first answer.
    gateway.send(signal: SIGHUP)
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "config reloaded" })
    release.open()
    for (index, client) in clients.enumerated() {
      let answer = try client.readResponse()
      #expect(answer.status == 200)
      #expect(answer.text == "answer for /b/\(index)")
    }
    let batch = batchRequests(backend)
    #expect(batch.contains { $0.arrivedWithPrevious })
  }

  @Test func requestsBehindASlowAnswerGoAloneAfterTheQueuesPatience() throws {
    let release = Gate()
    defer { release.open() }
    let backend = try backendHoldingFirstBatchAnswer(until: release)
    defer { backend.stop() }
    // A response timeout far longer than the test: only the queue's patience can free the
    // requests waiting behind the held answer.
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, responseTimeoutMs: 120_000))
    defer { gateway.stopExpectingCleanExit() }

    let clients = try sendHeldBatch(of: 3, gateway: gateway, backend: backend)
    let held = try #require(batchRequests(backend).first).target
    let heldIndex = try #require(Int(held.dropFirst("/b/".count)))
    for index in clients.indices where index != heldIndex {
      let answer = try clients[index].readResponse(timeout: 20)
      #expect(answer.text == "answer for /b/\(index)")
    }
    #expect(!release.opened)
    release.open()
    #expect(try clients[heldIndex].readResponse().text == "answer for \(held)")
  }
}
