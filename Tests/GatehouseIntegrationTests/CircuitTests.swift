import Foundation
import Testing

/// The circuit breaker (`upstreams.X.circuit`, Config/README.md): after `failures` consecutive
/// failures the upstream is not even connected to for `open_ms`, then one trial decides.
/// One worker, as the breaker is kept per loop.
@Suite struct CircuitTests {
  static func config(port: UInt16, failures: Int, openMs: Int, cache: [String: Any]? = nil) -> [String: Any] {
    var extra: [String: Any] = [:]
    if let cache { extra["cache"] = cache }
    var upstream = TestConfig.upstream(port: port, answerTimeoutMs: 5000)
    upstream["circuit"] = ["failures": failures, "open_ms": openMs]
    return TestConfig.withAdmin(
      TestConfig.make(
        routes: [TestConfig.route("guarded", match: "/*", extra: extra)], upstreams: ["api": upstream], workers: 1))
  }

  @Test func opensAfterNFailuresAndThenNeverConnects() throws {
    let backend = try ModalBackend()
    backend.mode.value = .resetting
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, failures: 3, openMs: 60_000))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    #expect(try admin.circuitState(of: "api") == "closed")
    let failing = try (0..<3).map { _ in try send("GET", "/fail", to: gateway.port) }
    let connectionsWhenOpened = backend.server.connectionCount
    let requestsWhenOpened = backend.requests.count
    let refused = try (0..<5).map { _ in try send("GET", "/fail", to: gateway.port) }

    #expect(failing.allSatisfy { isErrorEnvelope($0, status: 502, message: "upstream unavailable") })
    #expect(requestsWhenOpened == 3)
    #expect(refused.allSatisfy { isErrorEnvelope($0, status: 502, message: "upstream unavailable") })
    #expect(backend.server.connectionCount == connectionsWhenOpened)
    #expect(backend.requests.count == 3)
    // Resets after the request went out are the route's failures: its own circuit opened.
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    let api = try #require(upstreams.first { $0["name"] as? String == "api" })
    #expect(api["open_routes"] as? [String] == ["guarded"])
    // Said in the CLI's table and in the log, not only in the JSON.
    let port = try #require(gateway.adminPort())
    let table = try runAdmin(["--url", "http://127.0.0.1:\(port)", "--token", TestConfig.adminToken, "upstreams"])
    #expect(
      table.stdoutLines.contains { $0.hasPrefix("api ") && $0.contains("closed, open routes: guarded") },
      "\(table.stdout)")
    #expect(
      gateway.waitForLogLine {
        $0["msg"] as? String == "route circuit opened" && $0["route"] as? String == "guarded"
          && $0["upstream"] as? String == "api"
      })
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "circuit_open"]) == 5)
    #expect(metrics.value("gatehouse_route_circuit_open", ["upstream": "api", "route": "guarded"]) == 1)
    // Each answer says why: the resets, then the open circuit.
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "guarded", "reason": "reset"]) == 3)
    #expect(metrics.value("gatehouse_local_answers_total", ["route": "guarded", "reason": "circuit_open"]) == 5)
    #expect(waitUntil { gateway.accessLines().count >= 8 })
    #expect(gateway.accessLines().suffix(5).allSatisfy { $0["reason"] as? String == "circuit_open" })
  }

  /// An upstream that refuses connections opens the upstream's own circuit: no route's
  /// request connects while it is open.
  @Test func refusedConnectsOpenTheUpstreamsCircuit() throws {
    let refusedPort = try TestSocket.unusedPort()
    let gateway = try GatewayProcess(config: Self.config(port: refusedPort, failures: 2, openMs: 60_000))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let answers = try ["/a", "/b", "/c", "/d"].map { try send("GET", $0, to: gateway.port) }

    #expect(answers.allSatisfy { isErrorEnvelope($0, status: 502, message: "upstream unavailable") })
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    let api = try #require(upstreams.first { $0["name"] as? String == "api" })
    #expect(api["circuit"] as? String == "open")
    #expect(api["circuit_open_loops"] as? Int == 1)
    #expect(
      gateway.waitForLogLine { $0["msg"] as? String == "upstream circuit opened" && $0["upstream"] as? String == "api" }
    )
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "unavailable"]) == 2)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "circuit_open"]) == 2)
    #expect(metrics.value("gatehouse_circuit_open", ["upstream": "api"]) == 1)
  }

  /// A refused connect is counted as `unavailable` (the upstream is down), a reset of an
  /// established exchange as `reset`: the metric tells the two apart, as `last_error` does.
  @Test func aRefusedConnectIsCountedAsUnavailableAndAResetAsReset() throws {
    let refusedPort = try TestSocket.unusedPort()
    let backend = try ModalBackend()
    backend.mode.value = .resetting
    var down = TestConfig.upstream(port: refusedPort, answerTimeoutMs: 5000)
    down["circuit"] = ["failures": 100, "open_ms": 1000]
    var resetting = TestConfig.upstream(port: backend.port, answerTimeoutMs: 5000)
    resetting["circuit"] = ["failures": 100, "open_ms": 1000]
    let gateway = try GatewayProcess(
      config: TestConfig.withAdmin(
        TestConfig.make(
          routes: [
            TestConfig.route("down", match: "/down/*", upstream: "down"),
            TestConfig.route("resetting", match: "/*", upstream: "resetting"),
          ], upstreams: ["down": down, "resetting": resetting], workers: 1)))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    #expect(isErrorEnvelope(try send("GET", "/down/x", to: gateway.port), status: 502))
    #expect(isErrorEnvelope(try send("GET", "/x", to: gateway.port), status: 502))
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "down", "outcome": "unavailable"]) == 1)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "down", "outcome": "reset"]) == 0)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "resetting", "outcome": "reset"]) >= 1)
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    let lastError = upstreams.first { $0["name"] as? String == "down" }?["last_error"] as? String
    #expect(lastError?.contains("cannot connect") == true)
  }

  /// A reset on a reused connection is retried on a fresh one, unless that failure opened
  /// the circuit: then the request is answered at once (here from the store).
  @Test func noRetryOnceTheFailureOpenedTheCircuit() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, failures: 1, openMs: 60_000, cache: ["stale_if_error_s": 3600]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try send("GET", "/kept", to: gateway.port)
    try #require(admin.waitForStoredEntries(1))
    backend.mode.value = .resetting
    let stale = try send("GET", "/kept", to: gateway.port)

    #expect(first.status == 200)
    StoreTests.expectStale(stale, body: first.text)
    // The one request went out on the kept connection; no retry followed the reset.
    #expect(backend.requests.count == 2)
    #expect(backend.server.connectionCount == 1)
    #expect(try admin.openRoutes(of: "api") == ["guarded"])
  }

  /// A backend that closes every kept connection at once (a shutdown or a restart) is
  /// checked by the next request; meanwhile a request with a stored answer gets it at once.
  @Test func droppedConnectionsPutTheUpstreamOnProbation() throws {
    let backend = try ModalBackend(options: TestBackend.Options(keepAliveTimeout: .milliseconds(500)))
    let first = Gate()
    backend.holdHealthy.value = first
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["collapse": false]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    // Two answers at once: two kept connections, idle from the same moment.
    let clients = try ["a", "b"].map { try CollapseTests.start("/p", id: $0, port: gateway.port) }
    #expect(backend.server.waitForRequests(2))
    first.open()
    let answers = try clients.map { try $0.readAnswer() }
    try #require(admin.waitForStoredEntries(1))
    // The backend's keep-alive timeout closes both together.
    #expect(waitUntil(timeout: 10) { backend.server.openConnectionCount == 0 })
    sleep(for: .milliseconds(300))
    let second = Gate()
    backend.holdHealthy.value = second
    let check = try CollapseTests.start("/p", id: "check", port: gateway.port)
    #expect(backend.server.waitForRequests(3))
    let other = try send("GET", "/p", to: gateway.port, timeout: 15)
    second.open()

    #expect(answers.allSatisfy { $0.status == 200 })
    StoreTests.expectStale(other, body: answers[0].text)
    #expect(try check.readAnswer().status == 200)
    #expect(backend.requests.count == 3)
  }

  @Test func successfulTrialAfterOpenTimeClosesTheCircuit() throws {
    let backend = try ModalBackend()
    backend.mode.value = .resetting
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, failures: 2, openMs: 1500))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    for _ in 0..<2 { _ = try send("GET", "/flaky", to: gateway.port) }
    #expect(try admin.openRoutes(of: "api") == ["guarded"])
    backend.mode.value = .healthy
    // Requests are refused without a connection until the open time is over; then one
    // trial goes through and succeeds.
    var last: ReceivedAnswer?
    let recovered = try waitUntil(timeout: 15, interval: .milliseconds(50)) {
      last = try send("GET", "/flaky", to: gateway.port)
      return last?.status == 200
    }

    #expect(recovered, "last answer: \(last?.text ?? "none")")
    #expect(backend.requests.count == 3, "two failures and exactly one trial")
    #expect(try admin.openRoutes(of: "api") == [])
    #expect(
      gateway.waitForLogLine { $0["msg"] as? String == "route circuit closed" && $0["route"] as? String == "guarded" })
    let after = try (0..<3).map { _ in try send("GET", "/flaky", to: gateway.port).status }
    #expect(after == [200, 200, 200])
    #expect(backend.requests.count == 6)
  }

  @Test func failedTrialOpensTheCircuitAgain() throws {
    let backend = try ModalBackend()
    backend.mode.value = .resetting
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, failures: 1, openMs: 2500))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    _ = try send("GET", "/down", to: gateway.port)
    // Poll until the trial reached the backend (and failed).
    let trialSeen = try waitUntil(timeout: 15, interval: .milliseconds(50)) {
      _ = try send("GET", "/down", to: gateway.port)
      return backend.requests.count >= 2
    }
    let refusedAfterTrial = try send("GET", "/down", to: gateway.port)

    #expect(trialSeen)
    #expect(isErrorEnvelope(refusedAfterTrial, status: 502))
    #expect(backend.requests.count == 2)
    #expect(try admin.openRoutes(of: "api") == ["guarded"])
  }

  @Test func openCircuitServesStaleAnswersWithoutConnecting() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, failures: 2, openMs: 60_000, cache: ["stale_if_error_s": 3600]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try StoreTests.prime("/cached", gateway: gateway, admin: admin)
    backend.mode.value = .resetting
    let whileFailing = try (0..<2).map { _ in try send("GET", "/cached", to: gateway.port) }
    let connections = backend.server.connectionCount
    let whileOpen = try (0..<3).map { _ in try send("GET", "/cached", to: gateway.port) }
    let uncached = try send("GET", "/never-stored", to: gateway.port)

    for answer in whileFailing + whileOpen { StoreTests.expectStale(answer, body: first.text) }
    #expect(backend.server.connectionCount == connections)
    #expect(isErrorEnvelope(uncached, status: 502, message: "upstream unavailable"))
    #expect(backend.server.connectionCount == connections)
    #expect(try admin.openRoutes(of: "api") == ["guarded"])
  }

  /// A trial that reaches the upstream closes its circuit, whatever its own route's answer:
  /// here the trial goes to an endpoint that times out, and another route is served at once
  /// instead of after the trial timeout.
  @Test func aTrialThatReachesTheUpstreamClosesItsCircuit() throws {
    let port = try TestSocket.unusedPort()
    var upstream = TestConfig.upstream(port: port, answerTimeoutMs: 500)
    upstream["circuit"] = ["failures": 2, "open_ms": 300]
    let gateway = try GatewayProcess(
      config: TestConfig.withAdmin(
        TestConfig.make(
          routes: [TestConfig.route("slow", match: "/slow/*"), TestConfig.route("other", match: "/*")],
          upstreams: ["api": upstream], workers: 1)))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    for _ in 0..<2 { _ = try send("GET", "/x", to: gateway.port) }
    #expect(try admin.circuitState(of: "api") == "open")

    let backend = try TestBackend(port: port) { request in
      if request.target.hasPrefix("/slow/") { Thread.sleep(forTimeInterval: 2) }
      return jsonAnswer(#"{"ok":true}"#)
    }
    defer { backend.stop() }
    sleep(for: .milliseconds(400))  // past open_ms: the next request is the trial
    let trial = try send("GET", "/slow/x", to: gateway.port)
    let other = try send("GET", "/other", to: gateway.port)

    #expect(isErrorEnvelope(trial, status: 504), "\(trial.text)")
    #expect(other.status == 200, "\(other.text)")
    #expect(try admin.circuitState(of: "api") == "closed")
  }

  /// With `count_5xx`, error statuses count against the route that got them.
  @Test func errorStatusesCountAsFailuresWhenAskedTo() throws {
    let backend = try ModalBackend()
    backend.mode.value = .failing
    var config = Self.config(port: backend.port, failures: 2, openMs: 60_000)
    var upstreams = config["upstreams"] as! [String: Any]
    var api = upstreams["api"] as! [String: Any]
    api["circuit"] = ["failures": 2, "open_ms": 60_000, "count_5xx": true]
    upstreams["api"] = api
    config["upstreams"] = upstreams
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let answers = try (0..<4).map { _ in try send("GET", "/five-hundred", to: gateway.port) }

    #expect(answers.map(\.status) == [503, 503, 502, 502])
    #expect(isErrorEnvelope(answers[3], status: 502, message: "upstream unavailable"))
    #expect(backend.requests.count == 2)
    let listed = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    #expect(listed.first?["open_routes"] as? [String] == ["guarded"])
    #expect((listed.first?["last_error"] as? String)?.contains("503") == true)
  }

  /// By default a well-formed 5xx is an answer, not a failure: any client can make an
  /// endpoint answer 500, and the breaker must not turn that into an outage.
  @Test func errorStatusesAreNoFailuresByDefault() throws {
    let backend = try ModalBackend()
    backend.mode.value = .failing
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, failures: 2, openMs: 60_000))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let answers = try (0..<5).map { _ in try send("GET", "/five-hundred", to: gateway.port) }

    #expect(answers.map(\.status) == [503, 503, 503, 503, 503])
    #expect(backend.requests.count == 5)
    #expect(try admin.circuitState(of: "api") == "closed")
  }

  /// A client that keeps finding endpoints that fail (500s, or resets when 5xx do not
  /// count; 500s with `count_5xx`) never takes the upstream from the other routes.
  @Test func oneRoutesFailuresLeaveTheOtherRoutesServed() throws {
    let backend = try TestBackend { request in
      if request.target.hasPrefix("/pub/reset") { return .reset }
      if request.target.hasPrefix("/pub/") {
        return jsonAnswer(#"{"error":"boom"}"#, status: 500, reason: "Internal Server Error")
      }
      return jsonAnswer(#"{"ok":true}"#)
    }
    defer { backend.stop() }
    for count5xx in [false, true] {
      var upstream = TestConfig.upstream(port: backend.port, answerTimeoutMs: 5000)
      // The default breaker (no `circuit` block), or the example config's with count_5xx.
      if count5xx { upstream["circuit"] = ["failures": 3, "open_ms": 1000, "count_5xx": true] }
      let gateway = try GatewayProcess(
        config: TestConfig.withAdmin(
          TestConfig.make(
            routes: [
              TestConfig.route("pub", match: "/pub/*"), TestConfig.route("legit", match: "/legit/*"),
            ], upstreams: ["api": upstream], workers: 1)))
      defer { gateway.stopExpectingCleanExit() }
      let admin = try gateway.admin(token: TestConfig.adminToken)

      var legit: [Int] = []
      for round in 0..<12 {
        // Three attacks, then the legitimate client, round after round.
        for attack in 0..<3 {
          _ = try send("GET", attack == 2 ? "/pub/reset-\(round)" : "/pub/x\(round)-\(attack)", to: gateway.port)
        }
        legit.append(try send("GET", "/legit/me", to: gateway.port).status)
      }

      #expect(legit == Array(repeating: 200, count: 12), "count_5xx \(count5xx): \(legit)")
      #expect(try admin.circuitState(of: "api") == "closed")
      let listed = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
      // 500s answered between the resets keep the route's count low unless they count.
      #expect(listed.first?["open_routes"] as? [String] == (count5xx ? ["pub"] : []), "count_5xx \(count5xx)")
    }
  }
}
