import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The process as an operator sees it: shutdown on SIGTERM, access log lines, `check`, and
/// `serve` without a config.
@Suite struct LifecycleTests {
  @Test func sigtermLetsTheInFlightRequestFinishStopsAcceptingAndExitsZero() throws {
    let gate = Gate()
    var backendAnswer = BackendAnswer.text("finished after drain began")
    backendAnswer.holdUntil = gate
    let backend = try TestBackend(always: .respond(backendAnswer))
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.kill() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/in-flight"))
    try #require(backend.waitForRequests(1))
    gateway.send(signal: SIGTERM)

    // Once draining began, new connections are refused (or closed without a byte) while the
    // request is still held by the backend.
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "draining" })
    let refusing = waitUntil(timeout: 10, interval: .milliseconds(20)) {
      guard let probe = try? RawClient(port: gateway.port) else { return true }
      defer { probe.close() }
      let outcome = probe.readUntilEnd(timeout: 2)
      return outcome.end != .stillOpen && outcome.bytes.isEmpty
    }
    #expect(refusing)
    #expect(gateway.isRunning)
    gate.open()
    let answer = try client.readAnswer()

    #expect(answer.status == 200)
    #expect(answer.text == "finished after drain began")
    #expect(gateway.waitForExit() == .success)
    #expect(backend.requests.count == 1)
  }

  @Test func sigtermClosesIdleKeepAliveConnectionsAndMarksTheLastAnswer() throws {
    let gate = Gate()
    let backend = try TestBackend { request in
      var answer = BackendAnswer.text("answer to \(request.target)")
      if request.target == "/held" { answer.holdUntil = gate }
      return .respond(answer)
    }
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.kill() }

    let idle = try RawClient(port: gateway.port)
    #expect(try idle.exchange(httpRequest("GET", "/warm-up")).status == 200)
    let busy = try RawClient(port: gateway.port)
    try busy.send(httpRequest("GET", "/held"))
    try #require(backend.waitForRequests(2))
    gateway.send(signal: SIGTERM)

    #expect(idle.waitForEnd() == .closed)
    gate.open()
    let last = try busy.readAnswer()
    #expect(last.text == "answer to /held")
    #expect(last.head.value("Connection")?.lowercased() == "close")
    #expect(busy.waitForEnd() == .closed)
    #expect(gateway.waitForExit() == .success)
  }

  @Test func drainTimeoutCutsWhatIsLeftAndStillExitsZero() throws {
    let gate = Gate()
    var answer = BackendAnswer.text("never sent")
    answer.holdUntil = gate
    let backend = try TestBackend(always: .respond(answer))
    defer {
      gate.open()
      backend.stop()
    }
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(to: backend.port, limits: ["drain_timeout_ms": 300]))
    defer { gateway.kill() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/held"))
    try #require(backend.waitForRequests(1))
    gateway.send(signal: SIGTERM)

    #expect(gateway.waitForExit() == .success)
    #expect(client.waitForEnd() != .stillOpen)
    // The request cut without an answer still has its access line: 444, nginx's
    // "Connection Closed Without Response".
    let line = gateway.logLines().first { $0["path"] as? String == "/held" }
    #expect(line?["status"] as? Int == 444, "\(String(describing: line))")
  }

  /// While draining, the admin API still answers: `/readyz` 503 (load balancers stop sending),
  /// `/healthz` 200; a reload is ignored (nothing new starts); a second stop signal ends the
  /// drain at once.
  @Test func theDrainIsVisibleOnTheAdminAPIAndASecondSignalEndsIt() throws {
    let gate = Gate()
    var answer = BackendAnswer.text("never sent")
    answer.holdUntil = gate
    let backend = try TestBackend(always: .respond(answer))
    defer {
      gate.open()
      backend.stop()
    }
    // A long drain: only the second signal can end it within the test.
    let config = TestConfig.withAdmin(TestConfig.passThrough(to: backend.port, limits: ["drain_timeout_ms": 60_000]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.kill() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    // Ready once the loops have their listeners, a moment after the `listening` line.
    #expect(try waitUntil { try admin.request("GET", "/readyz", credential: .none).status == 200 })

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/held"))
    try #require(backend.waitForRequests(1))
    gateway.send(signal: SIGTERM)
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "draining" })

    #expect(try admin.request("GET", "/readyz", credential: .none).status == 503)
    #expect(try admin.request("GET", "/healthz", credential: .none).status == 200)
    var second = config
    second["listen"] = [["address": "127.0.0.1:0"], ["address": "127.0.0.1:0"]]
    try gateway.rewriteConfig(second)
    gateway.send(signal: SIGHUP)
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "reload ignored: shutting down" })
    #expect(gateway.isRunning)
    gateway.send(signal: SIGTERM)

    #expect(gateway.waitForExit(timeout: 15) == .success)
    #expect(client.waitForEnd() != .stillOpen)
    #expect(gateway.logLines().filter { $0["msg"] as? String == "listening" }.count == 1)
    #expect(gateway.logLines().contains { $0["msg"] as? String == "second stop signal: ending the drain now" })
  }

  /// SO_REUSEPORT must not let a second gateway join a port another one serves: it would
  /// take part of the connections with its own config.
  @Test func aSecondGatewayCannotJoinTheFirstOnesPort() throws {
    let backend = try TestBackend(always: .respond(.text("first")))
    defer { backend.stop() }
    let first = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { first.stopExpectingCleanExit() }
    var config = TestConfig.passThrough(to: backend.port)
    config["listen"] = [["address": "127.0.0.1:\(first.port)"]]
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-join-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    try JSONSerialization.data(withJSONObject: config).write(to: directory.appendingPathComponent("join.json"))

    let second = try GatewayProcess(
      arguments: ["serve", "--config", "join.json"], directory: directory, startTimeout: nil)
    let outcome = second.waitForExit(timeout: 30)

    #expect(outcome == ExitOutcome(code: 1, bySignal: false))
    let error = second.logLines().first { $0["msg"] as? String == "cannot start" }?["error"] as? String
    #expect(error?.hasPrefix("listen 127.0.0.1:\(first.port): cannot bind") == true, "\(String(describing: error))")
    #expect(try send("GET", "/", to: first.port).text == "first")
  }

  @Test func sigintDrainsAndExitsZeroLikeSigterm() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.kill() }

    #expect(try send("GET", "/", to: gateway.port).status == 200)
    gateway.send(signal: SIGINT)

    #expect(gateway.waitForExit() == .success)
  }

  @Test func sigtermWithNoTrafficExitsZero() throws {
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: try TestSocket.unusedPort()))
    #expect(gateway.stop() == .success)
    #expect(gateway.nonJSONLines.isEmpty)
  }

  @Test func accessLogLinesCarryTheSpecFields() throws {
    let backend = try TestBackend(always: .respond(.text("hello", status: 201)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.kill() }

    let proxied = try send("POST", "/logged?q=1", to: gateway.port, body: Array("body".utf8))
    let requestID = try #require(proxied.head.value("X-Request-Id"))
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["request_id"] as? String == requestID })
    #expect(gateway.stop() == .success)

    let lines = gateway.accessLines()
    let line = try #require(lines.first { $0["request_id"] as? String == requestID })
    for field in [
      "ts", "level", "msg", "request_id", "method", "path", "route", "status", "upstream_status", "cache",
      "duration_ms", "bytes",
    ] {
      #expect(line.keys.contains(field), "access line lacks \(field): \(line)")
    }
    #expect(line["method"] as? String == "POST")
    #expect((line["path"] as? String)?.hasPrefix("/logged") == true)
    #expect(line["route"] as? String == "all")
    #expect(line["status"] as? Int == 201)
    #expect(line["upstream_status"] as? Int == 201)
    #expect((line["duration_ms"] as? NSNumber).map { $0.doubleValue >= 0 } == true)
    #expect((line["bytes"] as? Int).map { $0 > 0 } == true)
    #expect(gateway.nonJSONLines.isEmpty)
  }

  /// A backend that sends its head at once and its body 400 ms later: `upstream_ms` is the
  /// time to the head, `upstream_end_ms` to the end of the body, so the slow body shows as
  /// the backend's time.
  @Test func accessLogLineSaysWhenTheUpstreamsHeadAndBodyCame() throws {
    let gate = Gate()
    let backend = try TestBackend { _ in
      var answer = BackendAnswer(
        headers: [("Content-Type", "text/plain")], body: .chunked([Array("first ".utf8), Array("rest".utf8)]))
      answer.pauseAfterFirstPiece = gate
      return .respond(answer)
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    // The rest of the body 400 ms after the backend has the request (bounded waits).
    let opener = Thread {
      _ = waitUntil(timeout: 10) { backend.requests.count >= 1 }
      usleep(400_000)
      gate.open()
    }
    opener.start()
    let answer = try send("GET", "/slow-body", to: gateway.port)
    #expect(answer.text == "first rest")
    let requestID = try #require(answer.head.value("X-Request-Id"))
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["request_id"] as? String == requestID })
    let line = try #require(gateway.accessLines().first { $0["request_id"] as? String == requestID })
    let head = try #require((line["upstream_ms"] as? NSNumber)?.doubleValue)
    let end = try #require((line["upstream_end_ms"] as? NSNumber)?.doubleValue)
    #expect(head < 300, "upstream_ms \(head)")
    #expect(end >= 350, "upstream_end_ms \(end)")
    #expect(end >= head)
  }

  @Test func accessLogLineForAnUnroutedRequestHasNoRouteOrUpstreamStatus() throws {
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [TestConfig.route("only", match: "/only")],
        upstreams: ["api": TestConfig.upstream(port: try TestSocket.unusedPort())]))
    defer { gateway.kill() }

    let answer = try send("GET", "/elsewhere", to: gateway.port)
    #expect(answer.status == 404)
    #expect(gateway.stop() == .success)

    let line = try #require(gateway.accessLines().first)
    #expect(line["status"] as? Int == 404)
    #expect(line["route"] is NSNull)
    #expect(line["upstream_status"] is NSNull)
    #expect(line["request_id"] as? String == answer.head.value("X-Request-Id"))
  }

  @Test func accessLogOffWritesNoAccessLines() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, access: "off"))
    defer { gateway.kill() }

    for index in 0..<3 { #expect(try send("GET", "/quiet/\(index)", to: gateway.port).status == 200) }
    #expect(try send("GET", "/quiet", to: gateway.port, headers: [("Host", "x")]).status == 400)
    #expect(gateway.stop() == .success)

    #expect(gateway.logLines().contains { $0["msg"] as? String == "listening" })
    #expect(gateway.accessLines().isEmpty)
  }

  @Test func credentialsNeverAppearInTheLogs() throws {
    let backend = try TestBackend(
      always: .respond(.text("ok", headers: [("Set-Cookie", "backend-session=SETCOOKIE-SECRET-5")])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.kill() }

    let answer = try send(
      "GET", "/private", to: gateway.port,
      headers: [
        ("Authorization", "Bearer AUTH-SECRET-1"), ("Cookie", "session=COOKIE-SECRET-2"),
        ("X-Api-Key", "APIKEY-SECRET-3"), ("Proxy-Authorization", "Basic PROXY-SECRET-4"),
      ])
    #expect(answer.status == 200)
    #expect(gateway.stop() == .success)

    #expect(!gateway.accessLines().isEmpty)
    let output = gateway.stdoutText + gateway.stderrText
    for secret in ["AUTH-SECRET-1", "COOKIE-SECRET-2", "APIKEY-SECRET-3", "PROXY-SECRET-4", "SETCOOKIE-SECRET-5"] {
      #expect(!output.contains(secret), "\(secret) was logged")
    }
  }

  @Test func serveExitsNonZeroWhenItCannotListen() throws {
    let occupant = try TestSocket.listen()
    defer { occupant.close() }
    var config = TestConfig.passThrough(to: try TestSocket.unusedPort())
    config["listen"] = [["address": "127.0.0.1:\(occupant.localPort)"]]
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-busy-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    try JSONSerialization.data(withJSONObject: config).write(to: directory.appendingPathComponent("busy.json"))

    let gateway = try GatewayProcess(
      arguments: ["serve", "--config", "busy.json"], directory: directory, startTimeout: nil)
    let outcome = gateway.waitForExit(timeout: 30)

    #expect(outcome != nil && outcome != .success)
    // The error names the key and address that could not be bound.
    let error = gateway.logLines().first { $0["msg"] as? String == "cannot start" }?["error"] as? String
    #expect(
      error?.hasPrefix("listen 127.0.0.1:\(occupant.localPort): cannot bind") == true, "\(String(describing: error))")
    #expect(!gateway.logLines().contains { $0["msg"] as? String == "listening" })
  }

  @Test func serveExitsNonZeroOnAnInvalidConfig() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-bad-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    try Data(#"{ "listen": [{ "address": "127.0.0.1:0" }], "routes": [], "lisen": 1 }"#.utf8)
      .write(to: directory.appendingPathComponent("bad.json"))

    let gateway = try GatewayProcess(
      arguments: ["serve", "--config", "bad.json"], directory: directory, startTimeout: nil)
    let outcome = gateway.waitForExit(timeout: 30)

    #expect(outcome == ExitOutcome(code: 1, bySignal: false))
    #expect(gateway.stderrText.contains("lisen"))
    #expect(!gateway.logLines().contains { $0["msg"] as? String == "listening" })
  }

  // MARK: gatehouse check

  static func runCheck(_ arguments: [String], config: String? = nil) throws -> (status: Int32, out: String, err: String)
  {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "gatehouse-check-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    if let config { try Data(config.utf8).write(to: directory.appendingPathComponent("config.json")) }
    let process = try GatewayProcess(arguments: ["check"] + arguments, directory: directory, startTimeout: nil)
    let outcome = try #require(process.waitForExit(timeout: 30))
    return (outcome.bySignal ? -1 : outcome.code, process.stdoutText, process.stderrText)
  }

  @Test func checkAcceptsAValidConfig() throws {
    let config = try JSONSerialization.data(withJSONObject: TestConfig.passThrough(to: 3000))
    let result = try Self.runCheck(["--config", "config.json"], config: String(decoding: config, as: UTF8.self))
    #expect(result.status == 0)
    #expect(result.err.isEmpty)
  }

  @Test func checkRefusesAnUnknownKeyNamingItsPath() throws {
    let config = #"""
      { "listen": [{ "address": "127.0.0.1:0" }],
        "limits": { "max_conections": 5 },
        "routes": [{ "name": "s", "match": { "path": "/s" }, "stub": { "mode": "always" } }] }
      """#
    let result = try Self.runCheck(["--config", "config.json"], config: config)
    #expect(result.status == 1)
    let line = result.err.split(separator: "\n").first { $0.contains("max_conections") }
    #expect(line?.hasPrefix("limits.max_conections:") == true)
    #expect(line?.contains("max_connections") == true)
  }

  @Test func checkRefusesInvalidJSON() throws {
    let result = try Self.runCheck(["--config", "config.json"], config: #"{ "listen": [ }"#)
    #expect(result.status == 1)
    #expect(!result.err.isEmpty)
  }

  @Test func checkRefusesAMissingFile() throws {
    let result = try Self.runCheck(["--config", "does-not-exist.json"])
    #expect(result.status == 1)
    #expect(!result.err.isEmpty)
  }

  @Test func checkWithoutConfigIsAUsageError() throws {
    let result = try Self.runCheck([])
    #expect(result.status == 2)
    #expect(result.err.contains("usage"))
  }
}

/// `serve` without a config (Config/README.md, "No config file"). Both tests bind the fixed 127.0.0.1:8080 and :9901,
/// so they run one after the other.
@Suite(.serialized) struct EmbeddedConfigTests {
  /// The embedded config listens on the fixed 127.0.0.1:8080 (Config/README.md); skipped when
  /// something else already listens there, since the test could not tell the two apart.
  @Test(.enabled(if: !TestSocket.isListening(port: 8080), "127.0.0.1:8080 is busy on this machine"))
  func serveWithoutConfigAnswersTheEmbeddedStubRoutes() throws {
    let gateway = try GatewayProcess(arguments: ["serve"])
    defer { gateway.kill() }
    try #require(gateway.port == 8080)

    let list = try send("GET", "/users", to: 8080)
    let one = try send("GET", "/users/7", to: 8080)
    let missing = try send("GET", "/nothing", to: 8080)

    #expect(list.status == 200)
    #expect(list.head.value("Content-Type")?.hasPrefix("application/json") == true)
    let listObject = try list.jsonObject()
    #expect(Set(listObject.keys) == ["code", "datas", "message"])
    #expect(listObject["code"] as? Int == 0)
    #expect(listObject["message"] as? String == "")
    let users = try #require(listObject["datas"] as? [[String: Any]])
    #expect(!users.isEmpty)
    #expect(users.allSatisfy { $0["id"] != nil && $0["name"] != nil })
    let oneObject = try one.jsonObject()
    #expect(oneObject["code"] as? Int == 0)
    #expect((oneObject["datas"] as? [String: Any])?["id"] != nil)
    #expect(isErrorEnvelope(missing, status: 404, message: "no route for GET /nothing"))
    #expect(gateway.stop() == .success)
  }

  /// Without a config, `GATEHOUSE_ADMIN_TOKEN` (what `gatehouse admin` reads) is the admin
  /// token, and it is not printed.
  @Test(
    .enabled(
      if: !TestSocket.isListening(port: 8080) && !TestSocket.isListening(port: 9901),
      "127.0.0.1:8080 or :9901 is busy on this machine"))
  func serveWithoutConfigTakesTheAdminTokenFromTheEnvironment() throws {
    let token = "env-admin-token-CANARY-61ae"
    let gateway = try GatewayProcess(arguments: ["serve"], environment: ["GATEHOUSE_ADMIN_TOKEN": token])
    defer { gateway.kill() }
    try #require(gateway.port == 8080)

    let status = try AdminClient(port: 9901, token: token).request("GET", "/admin/status")
    let other = try AdminClient(port: 9901, token: "something-else").request("GET", "/admin/status")

    #expect(status.status == 200)
    #expect(other.status == 401)
    #expect(gateway.stop() == .success)
    #expect(!gateway.logLines().isEmpty)
    #expect(!gateway.logLines().contains { "\($0)".contains(token) })
  }
}
