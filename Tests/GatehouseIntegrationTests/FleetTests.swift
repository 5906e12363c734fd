import Foundation
import Glibc
import Testing

/// Upstreams of several endpoints (`servers`, Docs/fleets.md) with real backend processes:
/// requests spread by weight, a stopped endpoint costs no failed request (the try goes again
/// to another), a reset after sending is retried for a GET and not for a POST, failing
/// endpoints are ejected and come back, the retry budget holds in a total outage, stored
/// answers still stand in when every endpoint is down, and `/admin/upstreams` and the
/// metrics show each endpoint. One worker: each loop keeps its own view of the endpoints.
@Suite struct FleetTests {
  /// A gateway in front of `backends` as one upstream `api` (`servers` in their order, with
  /// `weights`), with `fleet` merged into the upstream and `cache` on the route.
  static func gateway(
    _ backends: [ModalBackend], weights: [Int]? = nil, fleet: [String: Any] = [:], cache: [String: Any]? = nil
  ) throws -> GatewayProcess {
    try GatewayProcess(
      config: config(ports: backends.map(\.port), weights: weights, fleet: fleet, cache: cache))
  }

  static func config(
    ports: [UInt16], weights: [Int]? = nil, fleet: [String: Any] = [:], cache: [String: Any]? = nil
  ) -> [String: Any] {
    var upstream = TestConfig.upstream(port: ports[0], answerTimeoutMs: 5000)
    upstream["servers"] = ports.enumerated().map { index, port in
      ["address": "127.0.0.1:\(port)", "weight": weights?[index] ?? 1] as [String: Any]
    }
    for (key, value) in fleet { upstream[key] = value }
    var extra: [String: Any] = [:]
    if let cache { extra["cache"] = cache }
    return TestConfig.withAdmin(
      TestConfig.make(routes: [TestConfig.route("api", match: "/*", extra: extra)], upstreams: ["api": upstream]))
  }

  static func endpoints(_ admin: AdminClient) throws -> [[String: Any]] {
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    return upstreams.first { $0["name"] as? String == "api" }?["endpoints"] as? [[String: Any]] ?? []
  }

  /// Smooth weighted round robin gives each endpoint exactly its weight's share per cycle.
  @Test func requestsSpreadOverTheServersByWeight() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    let gateway = try Self.gateway(backends, weights: [1, 2, 1], fleet: ["balance": "round_robin"])
    defer { gateway.stopExpectingCleanExit() }
    for index in 0..<40 {
      #expect(try send("GET", "/spread/\(index)", to: gateway.port).status == 200)
    }
    #expect(backends.map(\.requests.count) == [10, 20, 10])

    let admin = try gateway.admin(token: TestConfig.adminToken)
    let listed = try Self.endpoints(admin)
    #expect(listed.map { $0["address"] as? String } == backends.map { "127.0.0.1:\($0.port)" })
    #expect(listed.map { $0["weight"] as? Int } == [1, 2, 1])
    #expect(listed.map { $0["state"] as? String } == ["healthy", "healthy", "healthy"])
    #expect(listed.map { $0["requests"] as? Int } == [10, 20, 10])
    #expect(listed.allSatisfy { $0["in_flight"] as? Int == 0 && $0["failures"] as? Int == 0 })
    // `gatehouse admin upstreams`: the upstream, then a line per endpoint.
    let port = try #require(gateway.adminPort())
    let printed = try runAdmin(["--url", "http://127.0.0.1:\(port)", "--token", TestConfig.adminToken, "upstreams"])
    #expect(printed.status == 0, "\(printed.stderr)")
    #expect(printed.stdoutLines.contains { $0.hasPrefix("UPSTREAM") && $0.contains("ENDPOINT") })
    for (index, backend) in backends.enumerated() {
      let weight = [1, 2, 1][index]
      let requests = [10, 20, 10][index]
      #expect(
        printed.stdoutLines.contains {
          $0.split(separator: " ").prefix(6).map(String.init) == [
            "api", "127.0.0.1:\(backend.port)", "\(weight)", "healthy", "0", "\(requests)",
          ]
        }, "\(printed.stdout)")
    }
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_endpoints", ["upstream": "api", "state": "healthy"]) == 3)
    #expect(metrics.value("gatehouse_upstream_endpoints", ["upstream": "api", "state": "ejected"]) == 0)
    #expect(
      metrics.value(
        "gatehouse_upstream_endpoint_requests_total",
        ["upstream": "api", "endpoint": "127.0.0.1:\(backends[1].port)", "outcome": "success"]) == 20)
  }

  /// `balance: hash` by a header: a key always goes to the same endpoint; keys spread over
  /// the endpoints; a request without the header is still answered (least request).
  @Test func hashBalancingSendsAKeyToOneEndpoint() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    let gateway = try Self.gateway(backends, fleet: ["balance": "hash", "hash_by": "header:X-Tenant"])
    defer { gateway.stopExpectingCleanExit() }
    var homes: Set<Int> = []
    for tenant in 0..<12 {
      let before = backends.map(\.requests.count)
      for _ in 0..<3 {
        #expect(try send("GET", "/t", to: gateway.port, headers: [("X-Tenant", "tenant-\(tenant)")]).status == 200)
      }
      let gained = zip(backends.map(\.requests.count), before).map { $0 - $1 }
      // All three of a tenant's requests went to one endpoint.
      #expect(gained.sorted() == [0, 0, 3], "tenant \(tenant): \(gained)")
      if let home = gained.firstIndex(of: 3) { homes.insert(home) }
    }
    #expect(homes.count >= 2, "twelve tenants all on one endpoint")
    #expect(try send("GET", "/t", to: gateway.port).status == 200)
  }

  /// A stopped endpoint refuses connections: each try that picks it goes again to another,
  /// so no request fails; after `outlier.failures` of them in a row it is ejected, and the
  /// upstream's circuit never opens (the upstream as a whole works).
  @Test func aStoppedServerCostsNoFailedRequestAndIsEjected() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    let gateway = try Self.gateway(backends, fleet: ["outlier": ["failures": 3, "eject_ms": 60_000]])
    defer { gateway.stopExpectingCleanExit() }
    // Stopped before any request, so that no kept connection to it is in play: every try
    // on it is a refused connect.
    backends[1].server.stop()
    let answers = try (0..<60).map { try send("GET", "/during/\($0)", to: gateway.port) }
    #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.map(\.status))")

    let admin = try gateway.admin(token: TestConfig.adminToken)
    let listed = try Self.endpoints(admin)
    #expect(listed.map { $0["state"] as? String } == ["healthy", "ejected", "healthy"])
    #expect(listed[1]["ejected_until"] as? String != nil)
    #expect((listed[1]["last_error"] as? String ?? "").contains("connect"))
    #expect(listed[1]["failures"] as? Int == 3)
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    #expect(upstreams.first?["circuit"] as? String == "closed")
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "connect"]) == 3)
    #expect(metrics.value("gatehouse_upstream_endpoints", ["upstream": "api", "state": "ejected"]) == 1)
    #expect(
      gateway.waitForLogLine {
        ($0["msg"] as? String ?? "").hasPrefix("upstream endpoint ejected")
          && $0["endpoint"] as? String == "127.0.0.1:\(backends[1].port)"
      })
  }

  /// A reset after the request went out: the endpoint may have acted on it, so only a
  /// replayable request (a GET) is tried again; a POST gets the error.
  @Test func aResetAfterSendingIsRetriedForAGetButNotForAPost() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[0].mode.value = .resetting
    // Smooth round robin by 100 : 1: the first try of each request goes to the resetting
    // endpoint, the retry (which avoids it) to the other.
    let gateway = try Self.gateway(
      backends, weights: [100, 1], fleet: ["balance": "round_robin", "outlier": ["max_ejected_percent": 0]])
    defer { gateway.stopExpectingCleanExit() }
    let get = try send("GET", "/read", to: gateway.port)
    #expect(get.status == 200)
    #expect(backends.map(\.requests.count) == [1, 1])
    let post = try send("POST", "/write", to: gateway.port, body: Array(#"{"a":1}"#.utf8))
    #expect(isErrorEnvelope(post, status: 502, message: "upstream unavailable"))
    #expect(backends.map(\.requests.count) == [2, 1])
    let metrics = try MetricsPage(try gateway.admin(token: TestConfig.adminToken).request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "reset"]) == 1)
  }

  /// An ejected endpoint takes requests again when its ejection ends, and the return is
  /// logged.
  @Test func anEjectedServerComesBack() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[1].mode.value = .resetting
    let gateway = try Self.gateway(
      backends, fleet: ["balance": "round_robin", "outlier": ["failures": 2, "eject_ms": 3000]])
    defer { gateway.stopExpectingCleanExit() }
    for index in 0..<6 { _ = try send("GET", "/x/\(index)", to: gateway.port) }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(try Self.endpoints(admin).map { $0["state"] as? String } == ["healthy", "ejected"])
    backends[1].mode.value = .healthy
    let before = backends[1].requests.count
    #expect(
      waitUntil(timeout: 15) {
        _ = try? send("GET", "/later", to: gateway.port)
        return backends[1].requests.count > before
      })
    #expect(gateway.waitForLogLine { ($0["msg"] as? String ?? "").hasPrefix("upstream endpoint back from ejection") })
    #expect(try Self.endpoints(admin).map { $0["state"] as? String } == ["healthy", "healthy"])
  }

  /// A reload that changes the upstream (here a weight) builds new pools, which keep what
  /// the old ones knew of each endpoint: an ejected one stays ejected and gets no requests.
  @Test func aReloadKeepsWhatTheLoopsKnowOfTheEndpoints() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[1].mode.value = .resetting
    let fleet: [String: Any] = ["balance": "round_robin", "outlier": ["failures": 2, "eject_ms": 60_000]]
    let gateway = try Self.gateway(backends, fleet: fleet)
    defer { gateway.stopExpectingCleanExit() }
    for index in 0..<6 { _ = try send("GET", "/x/\(index)", to: gateway.port) }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(try Self.endpoints(admin).map { $0["state"] as? String } == ["healthy", "ejected"])

    try gateway.rewriteConfig(Self.config(ports: backends.map(\.port), weights: [2, 1], fleet: fleet))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    let listed = try Self.endpoints(admin)
    #expect(listed.map { $0["state"] as? String } == ["healthy", "ejected"])
    #expect(listed.map { $0["weight"] as? Int } == [2, 1])
    #expect(listed[1]["failures"] as? Int == 2)
    let before = backends[1].requests.count
    for index in 0..<10 { #expect(try send("GET", "/y/\(index)", to: gateway.port).status == 200) }
    #expect(backends[1].requests.count == before)
  }

  /// A black-holed endpoint: a backend process stopped with SIGSTOP, whose kernel still
  /// accepts connections that nothing answers. With `timeout` in `retry.on`, each try on it
  /// goes again to the other after the answer timeout, and after two of them it is ejected.
  @Test func aBlackHoledServerCostsNoFailedRequest() throws {
    let healthy = try ModalBackend()
    let port = try TestSocket.unusedPort()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gh-bh-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let server = Process()
    server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    server.arguments = ["-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", directory.path]
    server.standardOutput = FileHandle.nullDevice
    server.standardError = FileHandle.nullDevice
    try DescriptorCreation.lock.withLock { _ in try server.run() }
    defer {
      kill(server.processIdentifier, SIGCONT)
      kill(server.processIdentifier, SIGKILL)
      server.waitUntilExit()
    }
    try #require(waitUntil(timeout: 20) { (try? TestSocket.connect(port: port))?.close() != nil })
    let gateway = try GatewayProcess(
      config: Self.config(
        ports: [healthy.port, port],
        fleet: [
          "balance": "round_robin", "response_timeout_ms": 500,
          "retry": ["on": ["connect", "reset", "timeout"]], "outlier": ["failures": 2, "eject_ms": 60_000],
        ]))
    defer { gateway.stopExpectingCleanExit() }
    // Both answer while the process runs.
    for _ in 0..<4 { #expect(try send("GET", "/", to: gateway.port).status == 200) }
    kill(server.processIdentifier, SIGSTOP)
    let answers = try (0..<10).map { _ in try send("GET", "/", to: gateway.port) }
    #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.map(\.status))")
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(try Self.endpoints(admin).map { $0["state"] as? String } == ["healthy", "ejected"])
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "timeout"]) == 2)
  }

  /// Active health checks ask every endpoint: one whose check fails gets no requests while
  /// the upstream stays healthy (another endpoint is); when it passes again it takes its
  /// share again.
  @Test func anEndpointWhoseHealthCheckFailsGetsNoRequests() throws {
    let backends = try (0..<2).map { _ in try ModalBackend() }
    backends[1].mode.value = .failing
    let gateway = try Self.gateway(
      backends,
      fleet: [
        "balance": "round_robin",
        "health": ["path": "/health", "interval_ms": 200, "unhealthy_after": 1, "healthy_after": 1],
      ])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    try #require(waitUntil { (try? Self.endpoints(admin).map { $0["state"] as? String }) == ["healthy", "unhealthy"] })
    func served(_ backend: ModalBackend) -> Int { backend.requests.filter { $0.target.hasPrefix("/work") }.count }
    for index in 0..<10 { #expect(try send("GET", "/work/\(index)", to: gateway.port).status == 200) }
    #expect(served(backends[0]) == 10 && served(backends[1]) == 0)
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    #expect(upstreams.first?["health"] as? String == "healthy")

    backends[1].mode.value = .healthy
    try #require(waitUntil { (try? Self.endpoints(admin).map { $0["state"] as? String }) == ["healthy", "healthy"] })
    for index in 10..<20 { #expect(try send("GET", "/work/\(index)", to: gateway.port).status == 200) }
    #expect(served(backends[1]) == 5)
  }

  /// Every endpoint down: tries fail over to the others within `attempts` and the retry
  /// budget, then the stored answer stands in.
  @Test func everyServerDownStillServesTheStoredAnswerWithinTheRetryBudget() throws {
    let backends = try (0..<3).map { _ in try ModalBackend() }
    // No circuit and no ejection: only the budget keeps the tries down.
    let gateway = try Self.gateway(
      backends, fleet: ["retry": ["attempts": 3], "outlier": ["max_ejected_percent": 0], "circuit": ["failures": 0]],
      cache: ["stale_if_error_s": 600])
    defer { gateway.stopExpectingCleanExit() }
    #expect(try send("GET", "/kept", to: gateway.port).status == 200)
    for backend in backends { backend.server.stop() }
    let answers = try (0..<100).map { _ in try send("GET", "/kept", to: gateway.port) }
    #expect(answers.allSatisfy { $0.status == 200 && $0.head.value("x-gatehouse-cache") == "STALE" })
    let metrics = try MetricsPage(try gateway.admin(token: TestConfig.adminToken).request("GET", "/metrics").text)
    let retries = metrics.value("gatehouse_upstream_retries_total", ["upstream": "api", "reason": "connect"])
    // Without a budget each request would have made two retries (200). The budget: 20 %
    // of the tries over 10 s, and at least 3 a second.
    #expect(retries >= 3)
    #expect(retries < 60, "\(retries) retries")
  }
}

/// Endpoints from DNS: a real `dnsmasq` started by the test answers the url's name from a
/// hosts directory it watches (a changed file is read again at once, TTL 1 s), and backends
/// listen on 127.0.0.2, .3 and .4 on one port. Addresses that join take requests without a
/// reload, addresses that leave get none, and with the DNS server gone the last addresses
/// stay.
@Suite(.serialized) struct FleetDNSTests {
  /// `dnsmasq` answering names under `.test` from the files of a directory. Started with
  /// `posix_spawn`, not Foundation's `Process`: dnsmasq closes the descriptors it inherits,
  /// among them the one `Process` watches for the child's exit, whose monitor then waits for
  /// dnsmasq and misses every other child's exit meanwhile.
  final class DNSServer {
    let directory: URL
    private(set) var port: UInt16 = 0
    private var pid: pid_t = 0

    init(hosts: String) throws {
      directory = FileManager.default.temporaryDirectory.appendingPathComponent("gh-dns-\(UUID().uuidString)")
      try FileManager.default.createDirectory(
        at: directory.appendingPathComponent("hosts"), withIntermediateDirectories: true)
      try hosts.write(to: directory.appendingPathComponent("hosts/api"), atomically: true, encoding: .utf8)
      let logPath = directory.appendingPathComponent("log").path
      var lastLog = ""
      // A port free for TCP a moment ago may be taken for UDP (or by then for TCP): a few tries.
      for _ in 0..<3 {
        port = try TestSocket.unusedPort()
        pid = try Self.spawn([
          "/usr/sbin/dnsmasq", "--no-daemon", "-C", "/dev/null", "--no-resolv", "--no-hosts",
          "--hostsdir=\(directory.path)/hosts", "--local-ttl=1", "--port=\(port)", "--listen-address=127.0.0.1",
          "--bind-interfaces", "--local=/test/", "--user=root", "--pid-file=", "--log-facility=\(logPath)",
          "--log-queries",
        ])
        let ready = waitUntil(timeout: 30) {
          !isRunning || ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").contains("read ")
        }
        if ready && isRunning { return }
        lastLog = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        stop()
      }
      throw TestSocketError.malformed("dnsmasq did not start: \(lastLog)")
    }

    private static func spawn(_ arguments: [String]) throws -> pid_t {
      var attributes = posix_spawnattr_t()
      posix_spawnattr_init(&attributes)
      defer { posix_spawnattr_destroy(&attributes) }
      // The test's thread may block SIGTERM and others; the child starts with none blocked.
      var noSignals = sigset_t()
      sigemptyset(&noSignals)
      posix_spawnattr_setsigmask(&attributes, &noSignals)
      posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
      var actions = posix_spawn_file_actions_t()
      posix_spawn_file_actions_init(&actions)
      defer { posix_spawn_file_actions_destroy(&actions) }
      for descriptor: Int32 in 0...2 {
        posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
      }
      let argv = arguments.map { strdup($0) } + [nil]
      defer { argv.forEach { free($0) } }
      var child: pid_t = 0
      let status = DescriptorCreation.lock.withLock { _ in
        posix_spawn(&child, arguments[0], &actions, &attributes, argv, environ)
      }
      guard status == 0 else { throw TestSocketError.system(call: "posix_spawn", errno: status) }
      return child
    }

    /// Whether dnsmasq has not exited (reaping it if it has).
    private var isRunning: Bool {
      guard pid > 0 else { return false }
      var status: Int32 = 0
      if waitpid(pid, &status, WNOHANG) == 0 { return true }
      pid = 0
      return false
    }

    /// Replaces the hosts file: written aside, then renamed in (dnsmasq reads it again).
    func replaceHosts(_ hosts: String) throws {
      let aside = directory.appendingPathComponent("api.new")
      try hosts.write(to: aside, atomically: false, encoding: .utf8)
      _ = rename(aside.path, directory.appendingPathComponent("hosts/api").path)
    }

    func stop() {
      guard pid > 0 else { return }
      kill(pid, SIGKILL)
      var status: Int32 = 0
      _ = waitpid(pid, &status, 0)
      pid = 0
    }

    deinit {
      stop()
      try? FileManager.default.removeItem(at: directory)
    }
  }

  @Test func addressesThatChangeInDNSAreFollowedWithoutAReload() throws {
    guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/dnsmasq") else {
      Issue.record("dnsmasq is not installed at /usr/sbin/dnsmasq: Scripts/install-deps.sh installs dnsmasq-base")
      return
    }
    let first = try ModalBackend(host: 2)
    let port = first.port
    let second = try ModalBackend(port: port, host: 3)
    let third = try ModalBackend(port: port, host: 4)
    let dns = try DNSServer(hosts: "127.0.0.2 api.test\n127.0.0.3 api.test\n")
    defer { dns.stop() }
    var upstream = TestConfig.upstream(port: port)
    upstream["url"] = "http://api.test:\(port)"
    upstream["balance"] = "round_robin"
    upstream["resolve_s"] = 1
    var config = TestConfig.withAdmin(
      TestConfig.make(routes: [TestConfig.route("api", match: "/*")], upstreams: ["api": upstream]))
    config["resolver"] = ["servers": ["127.0.0.1:\(dns.port)"], "timeout_ms": 300]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    // `gatehouse check` says what the name resolves to now, with the same resolver.
    let check = try runAdmin(["--config", gateway.configURL.path], command: "check")
    #expect(check.status == 0, "\(check.stderr)")
    #expect(check.stdout.contains("upstreams.api: api.test -> 127.0.0.2, 127.0.0.3"), "\(check.stdout)")

    for index in 0..<20 { #expect(try send("GET", "/a/\(index)", to: gateway.port).status == 200) }
    #expect(first.requests.count == 10 && second.requests.count == 10)
    let api = try #require((try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]])?.first)
    #expect(api["resolved_at"] as? String != nil && api["next_resolve_at"] as? String != nil)

    // .3 leaves and .4 joins: requests follow once the name is looked up again.
    try dns.replaceHosts("127.0.0.2 api.test\n127.0.0.4 api.test\n")
    #expect(
      waitUntil(timeout: 20) {
        _ = try? send("GET", "/probe", to: gateway.port)
        return third.requests.count > 0
      })
    let secondBefore = second.requests.count
    for index in 0..<20 { #expect(try send("GET", "/b/\(index)", to: gateway.port).status == 200) }
    #expect(second.requests.count == secondBefore)
    #expect(third.requests.count >= 10)
    #expect(
      try FleetTests.endpoints(admin).map { $0["address"] as? String } == [
        "127.0.0.2:\(port)", "127.0.0.4:\(port)",
      ])
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "upstream endpoints changed" })

    // DNS gone: lookups fail, the last addresses stay and keep answering.
    dns.stop()
    #expect(
      waitUntil(timeout: 20) {
        let page = try? MetricsPage(try admin.request("GET", "/metrics").text)
        return (page?.value("gatehouse_dns_resolutions_total", ["upstream": "api", "result": "failure"]) ?? 0) >= 1
      })
    for index in 0..<10 { #expect(try send("GET", "/c/\(index)", to: gateway.port).status == 200) }
    #expect(try FleetTests.endpoints(admin).count == 2)
    #expect(gateway.waitForLogLine { ($0["msg"] as? String ?? "").hasPrefix("upstream name lookup failed") })
  }
}
