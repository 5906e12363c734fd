import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Config reloads (SIGHUP and `POST /admin/reload`, Docs/behaviour.md): a changed route set takes
/// effect, a bad file is refused and the old config keeps serving, 50 reloads under load
/// lose no request, and listen addresses come and go without cutting established connections.
@Suite struct ReloadTests {
  /// A config with the admin API and the given routes to the backend on `port`.
  static func config(
    port: UInt16, routes: [[String: Any]], listen: [String] = ["127.0.0.1:0"]
  ) -> [String: Any] {
    var config = TestConfig.withAdmin(
      TestConfig.make(routes: routes, upstreams: ["api": TestConfig.upstream(port: port)]))
    config["listen"] = listen.map { ["address": $0] }
    return config
  }

  /// With TCP_NODELAY: reloads keep upstream connections, and on a kept connection an answer
  /// written as head then body would wait for the gateway's delayed ACK.
  static func echoBackend() throws -> TestBackend {
    try TestBackend(options: TestBackend.Options(noDelay: true)) { request in
      .respond(.text("backend saw \(request.target)"))
    }
  }

  static func routeNames(_ admin: AdminClient) throws -> [String] {
    (try admin.json("/admin/routes")["routes"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
  }

  @Test func adminReloadSwapsTheRouteSet() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [TestConfig.route("old", match: "/old")]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let before = try send("GET", "/old", to: gateway.port)
    try gateway.rewriteConfig(
      Self.config(
        port: backend.port,
        routes: [
          TestConfig.route("new", match: "/new"), TestConfig.route("renamed", match: "/v2/*", rewrite: "/v1/*"),
        ]))
    let reload = try admin.request("POST", "/admin/reload")
    let new = try send("GET", "/new", to: gateway.port)
    let rewritten = try send("GET", "/v2/a/b", to: gateway.port)
    let old = try send("GET", "/old", to: gateway.port)

    #expect(before.text == "backend saw /old")
    #expect(reload.status == 200)
    #expect(reload.text == #"{"reloaded":true}"#)
    #expect(new.text == "backend saw /new")
    #expect(rewritten.text == "backend saw /v1/a/b")
    #expect(isErrorEnvelope(old, status: 404, message: "no route for GET /old"))
    #expect(try Self.routeNames(admin) == ["new", "renamed"])
    #expect(gateway.logLines().contains { $0["msg"] as? String == "config reloaded" })
  }

  /// A reload that leaves an upstream's settings alone keeps its idle connections: the
  /// next request goes out on the connection the last one used.
  @Test func aReloadKeepsIdleConnectionsToAnUnchangedUpstream() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [TestConfig.route("old", match: "/old")]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    #expect(try send("GET", "/old", to: gateway.port).status == 200)
    try gateway.rewriteConfig(Self.config(port: backend.port, routes: [TestConfig.route("new", match: "/new")]))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    #expect(try send("GET", "/new", to: gateway.port).status == 200)

    #expect(backend.requests.map(\.target) == ["/old", "/new"])
    #expect(backend.connectionCount == 1)
  }

  /// A reload does not make a down upstream healthy: the health check's verdict stays.
  @Test func aReloadKeepsWhatTheHealthCheckSaw() throws {
    let refusing = try TestSocket.refusingPort()
    defer { refusing.close() }
    var upstream = TestConfig.upstream(port: refusing.localPort)
    upstream["health"] = ["path": "/health", "interval_ms": 1000, "unhealthy_after": 1, "healthy_after": 1]
    let config = TestConfig.withAdmin(
      TestConfig.make(routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": upstream]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    func health() -> String? {
      let upstreams = (try? admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]]) ?? []
      return upstreams.first?["health"] as? String
    }
    try #require(waitUntil(timeout: 15) { health() == "unhealthy" })

    #expect(try admin.request("POST", "/admin/reload").status == 200)
    #expect(health() == "unhealthy")
    #expect(!gateway.logLines().contains { $0["msg"] as? String == "upstream healthy" })
  }

  /// `log.level` applies at once: lowered to `error`, the reload's own info line is not
  /// written; raised again, it is.
  @Test func theLogLevelFollowsReloads() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    var config = Self.config(port: backend.port, routes: [TestConfig.route("all", match: "/*")])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    func reloadedLines() -> Int { gateway.logLines().filter { $0["msg"] as? String == "config reloaded" }.count }

    config["log"] = ["level": "error", "access": "stdout", "format": "json"]
    try gateway.rewriteConfig(config)
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    config["log"] = ["level": "info", "access": "stdout", "format": "json"]
    try gateway.rewriteConfig(config)
    #expect(try admin.request("POST", "/admin/reload").status == 200)

    #expect(waitUntil { reloadedLines() >= 1 })
    #expect(reloadedLines() == 1)
    #expect(!gateway.logLines().contains { $0["msg"] as? String == "changed settings take effect at the next start" })
  }

  @Test func sighupReloadsTheConfigFile() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [TestConfig.route("first", match: "/first")]))
    defer { gateway.stopExpectingCleanExit() }

    #expect(try send("GET", "/first", to: gateway.port).status == 200)
    try gateway.rewriteConfig(Self.config(port: backend.port, routes: [TestConfig.route("second", match: "/second")]))
    gateway.send(signal: SIGHUP)

    #expect(gateway.waitForLogLine { $0["msg"] as? String == "config reloaded" })
    #expect(try send("GET", "/second", to: gateway.port).text == "backend saw /second")
    #expect(isErrorEnvelope(try send("GET", "/first", to: gateway.port), status: 404))
    #expect(gateway.isRunning)
  }

  @Test func badFileIsRefusedWithErrorsAndTheOldRoutesKeepWorking() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let good = Self.config(port: backend.port, routes: [TestConfig.route("kept", match: "/kept")])
    let gateway = try GatewayProcess(config: good)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    var unknownKey = Self.config(port: backend.port, routes: [TestConfig.route("gone", match: "/gone")])
    unknownKey["routez"] = []
    var unknownUpstream = Self.config(
      port: backend.port, routes: [TestConfig.route("gone", match: "/gone", upstream: "nowhere")])
    unknownUpstream["workers"] = 1
    let badFiles: [String] = [
      "{ this is not json",
      String(decoding: try JSONSerialization.data(withJSONObject: unknownKey), as: UTF8.self),
      String(decoding: try JSONSerialization.data(withJSONObject: unknownUpstream), as: UTF8.self),
    ]
    for text in badFiles {
      try gateway.rewriteConfig(text: text)
      let refused = try admin.request("POST", "/admin/reload")
      #expect(refused.status == 400, "\(refused.text)")
      let object = try refused.jsonObject()
      let errors = object["errors"] as? [String] ?? []
      #expect(!errors.isEmpty && errors.allSatisfy { !$0.isEmpty }, "\(object)")
      #expect(try send("GET", "/kept", to: gateway.port).text == "backend saw /kept")
      #expect(isErrorEnvelope(try send("GET", "/gone", to: gateway.port), status: 404))
      #expect(try Self.routeNames(admin) == ["kept"])
    }
    // After the refusals a good file still reloads.
    try gateway.rewriteConfig(Self.config(port: backend.port, routes: [TestConfig.route("gone", match: "/gone")]))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    #expect(try send("GET", "/gone", to: gateway.port).status == 200)
    // Both outcomes are counted.
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_config_reloads_total", ["result": "refused"]) == Double(badFiles.count))
    #expect(metrics.value("gatehouse_config_reloads_total", ["result": "applied"]) == 1)
  }

  @Test func badFileBySighupIsLoggedAndTheOldConfigStays() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [TestConfig.route("kept", match: "/kept")]))
    defer { gateway.stopExpectingCleanExit() }

    try gateway.rewriteConfig(text: #"{"routes": [{"name": "broken"}]}"#)
    gateway.send(signal: SIGHUP)

    #expect(
      gateway.waitForLogLine {
        $0["level"] as? String == "error" && ($0["msg"] as? String)?.contains("reload refused") == true
      })
    #expect(gateway.isRunning)
    #expect(try send("GET", "/kept", to: gateway.port).text == "backend saw /kept")
  }

  /// The admin token follows reloads (SIGHUP and `POST /admin/reload`): after each one the
  /// new token is accepted and the old one gets 401. No token reaches the log.
  @Test func theAdminTokenFollowsReloads() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let routes = [TestConfig.route("all", match: "/*")]
    let second = "admin-token-CANARY-second-41d2"
    let third = "admin-token-CANARY-third-9e07"
    func config(token: String) -> [String: Any] {
      var config = Self.config(port: backend.port, routes: routes)
      config["admin"] = ["listen": "127.0.0.1:0", "token": token]
      return config
    }
    let gateway = try GatewayProcess(config: config(token: TestConfig.adminToken))
    defer { gateway.stopExpectingCleanExit() }
    let first = try gateway.admin(token: TestConfig.adminToken)
    let port = first.port
    func status(_ token: String) throws -> Int {
      try AdminClient(port: port, token: token).request("GET", "/admin/status").status
    }

    try gateway.rewriteConfig(config(token: second))
    let reload = try first.request("POST", "/admin/reload")
    let afterAdminReload = try [TestConfig.adminToken, second].map(status)

    try gateway.rewriteConfig(config(token: third))
    gateway.send(signal: SIGHUP)
    let reloadedTwice = waitUntil {
      gateway.logLines().filter { $0["msg"] as? String == "config reloaded" }.count == 2
    }
    let afterSighup = try [TestConfig.adminToken, second, third].map(status)

    #expect(reload.status == 200, "\(reload.text)")
    #expect(afterAdminReload == [401, 200])
    #expect(reloadedTwice)
    #expect(afterSighup == [401, 401, 200])
    #expect(!gateway.stdoutText.contains("CANARY"))
    #expect(!gateway.stderrText.contains("CANARY"))
  }

  /// A reload that removes the admin token succeeds, closes the protected endpoints (never
  /// opens them) and says so once; a later reload that keeps no token does not repeat it.
  @Test func aReloadThatRemovesTheAdminTokenWarnsOnce() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    var config = Self.config(port: backend.port, routes: [TestConfig.route("all", match: "/*")])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    func isWarning(_ line: [String: Any]) -> Bool {
      line["level"] as? String == "warn"
        && line["msg"] as? String == "the admin API's protected endpoints are unusable until admin.token is set"
    }
    let warnedAtStart = gateway.logLines().contains(where: isWarning)

    config["admin"] = ["listen": "127.0.0.1:0"]
    try gateway.rewriteConfig(config)
    let reload = try admin.request("POST", "/admin/reload")
    let warned = gateway.waitForLogLine(isWarning)
    let refused = try admin.request("GET", "/admin/status")
    let anonymous = try admin.request("GET", "/admin/status", credential: .none)
    gateway.send(signal: SIGHUP)
    let reloadedAgain = waitUntil {
      gateway.logLines().filter { $0["msg"] as? String == "config reloaded" }.count == 2
    }

    #expect(!warnedAtStart)
    #expect(reload.status == 200, "\(reload.text)")
    #expect(warned)
    #expect(refused.status == 401)
    #expect(anonymous.status == 401)
    #expect(reloadedAgain)
    #expect(gateway.logLines().filter(isWarning).count == 1)
    #expect(try send("GET", "/still", to: gateway.port).text == "backend saw /still")
  }

  /// A changed `admin.listen` does not move the running admin listener: the reload succeeds,
  /// the old address keeps answering, and one warning names it with the other settings that
  /// wait for a restart.
  @Test func aChangedAdminListenWaitsForARestart() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let routes = [TestConfig.route("all", match: "/*")]
    var config = Self.config(port: backend.port, routes: routes)
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let newPort = try TestSocket.unusedPort()

    config["admin"] = ["listen": "127.0.0.1:\(newPort)", "token": TestConfig.adminToken]
    config["store"] = ["path": "var/elsewhere.sqlite"]
    try gateway.rewriteConfig(config)
    let reload = try admin.request("POST", "/admin/reload")
    let stillServed = try admin.request("GET", "/admin/status")

    #expect(reload.status == 200, "\(reload.text)")
    #expect(stillServed.status == 200)
    #expect(!TestSocket.isListening(port: newPort))
    func isRestartWarning(_ line: [String: Any]) -> Bool {
      line["level"] as? String == "warn" && line["msg"] as? String == "changed settings take effect at the next start"
    }
    #expect(gateway.waitForLogLine(isRestartWarning))
    let warnings = gateway.logLines().filter(isRestartWarning)
    #expect(warnings.count == 1)
    #expect(warnings.first?["keys"] as? String == "admin.listen, store.path", "\(warnings)")
  }

  /// Requests in a loop on a thread, alternating a keep-alive connection and new ones,
  /// until stopped or its time is up; records every failure.
  final class LoadLoop: Sendable {
    let failures = Shared<[String]>([])
    let successes = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let ended = Atomic<Bool>(false)

    init(port: UInt16, seconds: Double) {
      let thread = Thread { [self] in run(port: port, deadline: Deadline(seconds: seconds)) }
      thread.name = "ReloadTests.load"
      thread.start()
    }

    private func run(port: UInt16, deadline: Deadline) {
      defer { ended.store(true, ordering: .relaxed) }
      var keepAlive: RawClient?
      var index = 0
      while !stopped.load(ordering: .relaxed) && !deadline.hasPassed {
        index += 1
        let useKeepAlive = index % 2 == 0
        do {
          let answer: ReceivedAnswer
          if useKeepAlive {
            if keepAlive == nil { keepAlive = try RawClient(port: port) }
            answer = try keepAlive!.exchange(httpRequest("GET", "/load/\(index)"))
            if answer.head.values("Connection").contains(where: { $0.lowercased() == "close" }) { keepAlive = nil }
          } else {
            answer = try send("GET", "/load/\(index)", to: port)
          }
          if answer.status == 200 && answer.text.hasPrefix("backend saw /load/\(index)") {
            successes.add(1, ordering: .relaxed)
          } else {
            record("request \(index): \(answer.status) \(answer.text)")
          }
        } catch {
          record("request \(index) (\(useKeepAlive ? "keep-alive" : "new connection")): \(error)")
          keepAlive = nil
        }
      }
    }

    private func record(_ failure: String) {
      failures.update { $0.append(failure) }
    }

    /// Stops the loop and waits (bounded) for it to end; whether it ended.
    func finish() -> Bool {
      stopped.store(true, ordering: .relaxed)
      return waitUntil(timeout: 15) { ended.load(ordering: .relaxed) }
    }
  }

  @Test func fiftyReloadsUnderLoadLoseNoRequest() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let variants = [
      Self.config(port: backend.port, routes: [TestConfig.route("load", match: "/load/*")]),
      Self.config(
        port: backend.port,
        routes: [
          TestConfig.route("extra", match: "/extra"),
          TestConfig.route("load", match: "/load/*", extra: ["headers": ["set": ["X-Variant": "b"]]]),
        ]),
    ]
    let gateway = try GatewayProcess(config: variants[0])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let load = LoadLoop(port: gateway.port, seconds: 90)
    #expect(waitUntil(timeout: 10) { load.successes.load(ordering: .relaxed) >= 5 })
    var reloadStatuses: [Int] = []
    for index in 1...50 {
      try gateway.rewriteConfig(variants[index % 2])
      reloadStatuses.append(try admin.request("POST", "/admin/reload").status)
      sleep(for: .milliseconds(20))  // let some requests run on each config
    }
    let before = load.successes.load(ordering: .relaxed)
    #expect(waitUntil(timeout: 10) { load.successes.load(ordering: .relaxed) >= before + 5 })
    let ended = load.finish()

    #expect(ended)
    #expect(reloadStatuses == Array(repeating: 200, count: 50))
    #expect(load.failures.value.isEmpty, "\(load.failures.value.prefix(5))")
    #expect(load.successes.load(ordering: .relaxed) > 50)
    #expect(gateway.logLines().filter { $0["msg"] as? String == "config reloaded" }.count == 50)
    // The second variant really takes effect (checked with one request once it is loaded,
    // not left to the load loop's timing).
    try gateway.rewriteConfig(variants[1])
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    #expect(try send("GET", "/load/last", to: gateway.port).status == 200)
    #expect(backend.requests.last { $0.path.hasPrefix("/load/last") }?.head.value("X-Variant") == "b")
  }

  @Test func listenAddressesAreAddedAndRemovedByReload() throws {
    let backend = try Self.echoBackend()
    defer { backend.stop() }
    let routes = [TestConfig.route("all", match: "/*")]
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, routes: routes))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let extraPort = try TestSocket.unusedPort()

    #expect(!TestSocket.isListening(port: extraPort))
    try gateway.rewriteConfig(
      Self.config(port: backend.port, routes: routes, listen: ["127.0.0.1:0", "127.0.0.1:\(extraPort)"]))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    let established = try RawClient(port: extraPort)
    let onAdded = try established.exchange(httpRequest("GET", "/added"))

    try gateway.rewriteConfig(Self.config(port: backend.port, routes: routes))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    // New connections to the removed address are refused (or closed without an answer).
    let refusesNew = waitUntil(timeout: 10, interval: .milliseconds(50)) {
      guard let probe = try? RawClient(port: extraPort) else { return true }
      defer { probe.close() }
      guard (try? probe.send(httpRequest("GET", "/probe"))) != nil else { return true }
      let outcome = probe.readUntilEnd(timeout: 2)
      return outcome.end != .stillOpen && outcome.bytes.isEmpty
    }
    let onEstablished = try established.exchange(httpRequest("GET", "/still-open"))
    let onOriginal = try send("GET", "/original", to: gateway.port)

    #expect(onAdded.text == "backend saw /added")
    #expect(refusesNew)
    #expect(onEstablished.status == 200)
    #expect(onEstablished.text == "backend saw /still-open")
    #expect(onOriginal.text == "backend saw /original")
    #expect(!backend.requests.contains { $0.target == "/probe" })
    #expect(gateway.logLines().contains { $0["msg"] as? String == "stopped listening" })
  }
}
