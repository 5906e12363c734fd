import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// What one `gatehouse admin ...` run printed and how it exited.
struct AdminRun {
  let status: Int32
  let stdout: String
  let stderr: String

  var stdoutLines: [String] { stdout.split(separator: "\n").map(String.init) }

  /// The stdout parsed as one JSON object (for `--json`).
  func json() throws -> [String: Any] {
    guard let object = try JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any] else {
      throw TestSocketError.malformed("not a JSON object: \(stdout)")
    }
    return object
  }
}

/// A gateway with an admin token, a cache route in front of a test backend, and a static
/// token, for the `gatehouse admin` tests.
final class AdminFixture {
  static let adminToken = "admin-secret-7f3a"
  let backend: TestBackend
  let gateway: GatewayProcess
  let adminPort: UInt16

  /// `basePath` is the upstream URL's path, which every stored upstream path starts with.
  init(basePath: String = "") throws {
    let backend = try TestBackend { request in
      .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json")], body: .bytes(Array(#"{"path":"\#(request.path)"}"#.utf8))))
    }
    var config = TestConfig.make(
      routes: [
        TestConfig.route("items", match: "/items/*", extra: ["cache": ["stale_if_error_s": 3600]]),
        TestConfig.route(
          "hello", match: "/hello", upstream: nil,
          extra: ["stub": ["mode": "always", "status": 200, "body": ["hello": "world"]]]),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port, basePath: basePath)])
    config["admin"] = ["listen": "127.0.0.1:0", "token": Self.adminToken]
    config["tokens"] = ["api": ["type": "static", "value": "backend-token-1"]]
    let gateway = try GatewayProcess(config: config)
    var found: UInt16 = 0
    waitUntil(timeout: 10) {
      let line = gateway.logLines().first { $0["msg"] as? String == "admin listening" }
      guard let address = line?["address"] as? String, let colon = address.lastIndex(of: ":") else { return false }
      found = UInt16(address[address.index(after: colon)...]) ?? 0
      return found != 0
    }
    guard found != 0 else { throw GatewayStartError(description: "no admin listening line: \(gateway.stdoutText)") }
    self.backend = backend
    self.gateway = gateway
    adminPort = found
  }

  deinit { backend.stop() }

  var url: String { "http://127.0.0.1:\(adminPort)" }

  /// Runs `gatehouse admin --url <this gateway> --token <admin token> <arguments>`.
  func admin(_ arguments: [String], token: String? = AdminFixture.adminToken) throws -> AdminRun {
    var all = ["--url", url]
    if let token { all += ["--token", token] }
    return try runAdmin(all + arguments)
  }

  /// Sends `GET path` through the gateway.
  func get(_ path: String) throws -> ReceivedAnswer {
    try send("GET", path, to: gateway.port)
  }

  /// Polls `cache stats --json` until it shows `entries` (writes to the store are
  /// asynchronous); false if it never does.
  func waitForEntries(_ entries: Int) -> Bool {
    waitUntil(timeout: 10, interval: .milliseconds(50)) {
      (try? admin(["--json", "cache", "stats"]).json()["entries"] as? Int) == entries
    }
  }
}

/// Runs the built `gatehouse admin ...` with `environment` added (and
/// GATEHOUSE_ADMIN_TOKEN removed unless given), bounded to 60 s. Output goes to files, so a
/// large answer can never block the child on a full pipe.
func runAdmin(_ arguments: [String], environment: [String: String] = [:], command: String = "admin") throws -> AdminRun
{
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-admin-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  defer { try? FileManager.default.removeItem(at: directory) }
  let outURL = directory.appendingPathComponent("stdout")
  let errURL = directory.appendingPathComponent("stderr")
  _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
  _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
  let out = try FileHandle(forWritingTo: outURL)
  let err = try FileHandle(forWritingTo: errURL)
  defer {
    try? out.close()
    try? err.close()
  }
  let process = Process()
  process.executableURL = gatehouseExecutable()
  process.arguments = [command] + arguments
  var env = ProcessInfo.processInfo.environment
  env["GATEHOUSE_ADMIN_TOKEN"] = nil
  for (key, value) in environment { env[key] = value }
  process.environment = env
  process.standardInput = FileHandle.nullDevice
  process.standardOutput = out
  process.standardError = err
  try DescriptorCreation.lock.withLock { _ in try process.run() }
  guard waitUntil(timeout: 60, interval: .milliseconds(20), { !process.isRunning }) else {
    process.terminate()
    throw GatewayStartError(description: "gatehouse \(command) \(arguments) did not exit within 60 s")
  }
  process.waitUntilExit()
  return AdminRun(
    status: process.terminationStatus,
    stdout: try String(contentsOf: outURL, encoding: .utf8),
    stderr: try String(contentsOf: errURL, encoding: .utf8))
}

@Suite struct AdminCommandTests {
  @Test func statusUpstreamsAndReload() throws {
    let fixture = try AdminFixture()
    let status = try fixture.admin(["status"])
    #expect(status.status == 0, "\(status.stderr)")
    #expect(status.stdoutLines.contains { $0.hasPrefix("version ") })
    #expect(status.stdoutLines.contains { $0.hasPrefix("connections.client ") })

    let json = try fixture.admin(["--json", "status"]).json()
    #expect(json["version"] is String)
    #expect(json["workers"] as? Int == 1)

    let upstreams = try fixture.admin(["upstreams"])
    #expect(upstreams.status == 0)
    #expect(upstreams.stdoutLines.first?.hasPrefix("NAME") == true)
    #expect(upstreams.stdoutLines.contains { $0.hasPrefix("api ") && $0.contains("127.0.0.1:\(fixture.backend.port)") })

    let reload = try fixture.admin(["reload"])
    #expect(reload.status == 0, "\(reload.stderr)")
    #expect(reload.stdout == "reloaded\n")
  }

  /// The CLI finds its gateway without `--url` and `--token`: from the gateway's own config
  /// file (a wildcard admin address asked on loopback, the token's `${VAR}` filled in from
  /// the environment), or from GATEHOUSE_ADMIN_URL and GATEHOUSE_ADMIN_TOKEN.
  @Test func theGatewaysConfigOrTheEnvironmentSaysWhereItsAdminAPIIs() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let adminPort = try TestSocket.unusedPort()
    var config = TestConfig.make(
      routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: backend.port)])
    config["admin"] = ["listen": "0.0.0.0:\(adminPort)", "token": "${CLI_TEST_ADMIN_TOKEN}"]
    let token = "cli-test-admin-token-0123456789"
    let gateway = try GatewayProcess(config: config, environment: ["CLI_TEST_ADMIN_TOKEN": token])
    defer { gateway.stopExpectingCleanExit() }

    let fromConfig = try runAdmin(
      ["--config", gateway.configURL.path, "status"], environment: ["CLI_TEST_ADMIN_TOKEN": token])
    #expect(fromConfig.status == 0, "\(fromConfig.stderr)")
    #expect(fromConfig.stdoutLines.contains { $0.hasPrefix("version ") })
    // The config is read as the gateway reads it: a variable it names must be set.
    let withoutToken = try runAdmin(["--config", gateway.configURL.path, "status"])
    #expect(withoutToken.status == 2 && withoutToken.stderr.contains("CLI_TEST_ADMIN_TOKEN"), "\(withoutToken.stderr)")

    let fromEnvironment = try runAdmin(
      ["upstreams"],
      environment: ["GATEHOUSE_ADMIN_URL": "http://127.0.0.1:\(adminPort)", "GATEHOUSE_ADMIN_TOKEN": token])
    #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
    #expect(fromEnvironment.stdoutLines.first?.hasPrefix("NAME") == true)
    // --url still wins over the environment.
    let wrongURL = try runAdmin(
      ["--url", "http://127.0.0.1:\(try TestSocket.unusedPort())", "status"],
      environment: ["GATEHOUSE_ADMIN_URL": "http://127.0.0.1:\(adminPort)", "GATEHOUSE_ADMIN_TOKEN": token])
    #expect(wrongURL.status == 1)

    let usage = try runAdmin(["--help"])
    #expect(usage.stdout.contains("jwt list") && usage.stdout.contains("jwt refresh NAME"))
    #expect(usage.stdout.contains("GATEHOUSE_ADMIN_URL") && usage.stdout.contains("--config FILE"))
  }

  @Test func reloadRefusedPrintsTheConfigErrors() throws {
    let fixture = try AdminFixture()
    let configURL = fixture.gateway.directory.appendingPathComponent("gatehouse-test.json")
    try Data(#"{"listen": [{"address": "127.0.0.1:0"}], "routez": []}"#.utf8).write(to: configURL)
    let reload = try fixture.admin(["reload"])
    #expect(reload.status == 1)
    #expect(reload.stderr.contains("HTTP 400"))
    #expect(reload.stderr.contains("routez"), "the check errors are listed: \(reload.stderr)")
  }

  @Test func cacheStatsListAndPurge() throws {
    let fixture = try AdminFixture()
    for path in ["/items/a", "/items/b", "/items/c?x=1"] { #expect(try fixture.get(path).status == 200) }
    #expect(fixture.waitForEntries(3))

    let stats = try fixture.admin(["cache", "stats"])
    #expect(stats.status == 0)
    #expect(
      stats.stdoutLines.contains { $0.split(separator: " ", omittingEmptySubsequences: true) == ["entries", "3"] })

    let list = try fixture.admin(["cache", "list"])
    #expect(list.status == 0, "\(list.stderr)")
    #expect(list.stdoutLines.first?.hasPrefix("ID ") == true)
    #expect(list.stdoutLines.last == "3 entries")
    let listed = try fixture.admin(["--json", "cache", "list"]).json()["entries"] as? [[String: Any]] ?? []
    #expect(Set(listed.compactMap { $0["path"] as? String }) == ["/items/a", "/items/b", "/items/c"])

    let filtered = try fixture.admin(["cache", "list", "--prefix", "/items/b"])
    #expect(filtered.stdoutLines.last == "1 entries")
    #expect(filtered.stdout.contains("/items/b") && !filtered.stdout.contains("/items/a"))

    let idOfA = try #require(listed.first { $0["path"] as? String == "/items/a" }?["id"] as? String)
    let byKey = try fixture.admin(["cache", "purge", "--key", idOfA])
    #expect(byKey.status == 0, "\(byKey.stderr)")
    #expect(byKey.stdout == "purged 1\n")
    let again = try fixture.admin(["cache", "purge", "--key", idOfA])
    #expect(again.status == 1)
    #expect(again.stderr.contains("HTTP 404") && again.stderr.contains("no cache entry"))

    let byPrefix = try fixture.admin(["cache", "purge", "--prefix", "/items/b"])
    #expect(byPrefix.stdout == "purged 1\n")
    let all = try fixture.admin(["--json", "cache", "purge", "--all"]).json()
    #expect(all["purged"] as? Int == 1)
    #expect(try fixture.admin(["--json", "cache", "stats"]).json()["entries"] as? Int == 0)
  }

  /// The token verbs print the token's public state and never a value.
  @Test func tokenVerbs() throws {
    let fixture = try AdminFixture()
    let list = try fixture.admin(["tokens", "list"])
    #expect(list.status == 0, "\(list.stderr)")
    #expect(list.stdoutLines.first?.hasPrefix("NAME") == true)
    #expect(list.stdoutLines.contains { $0.hasPrefix("api ") && $0.contains("static") })
    #expect(!list.stdout.contains("backend-token-1"))

    let set = try fixture.admin(["tokens", "set", "api", "--value", "new-value-42", "--expires-in", "600"])
    #expect(set.status == 0, "\(set.stderr)")
    #expect(set.stdout.contains("valid"))
    #expect(!set.stdout.contains("new-value-42") && !set.stderr.contains("new-value-42"))
    let state = try fixture.admin(["--json", "tokens", "list"]).json()["tokens"] as? [[String: Any]]
    #expect(state?.first { $0["name"] as? String == "api" }?["expires_at"] is String)

    let invalidate = try fixture.admin(["tokens", "invalidate", "api"])
    #expect(invalidate.status == 0, "\(invalidate.stderr)")
    #expect(invalidate.stdout.contains("invalid"))

    // A static token has nothing to refresh from: a failure with the server's message.
    let refresh = try fixture.admin(["tokens", "refresh", "api"])
    #expect(refresh.status == 1)
    #expect(refresh.stderr.contains("HTTP 409"))

    let unknown = try fixture.admin(["tokens", "refresh", "nope"])
    #expect(unknown.status == 1)
    #expect(unknown.stderr.contains("HTTP 404"))
    let bad = try fixture.admin(["tokens", "set", "api", "--value", "a\nb"])
    #expect(bad.status == 1)
    #expect(bad.stderr.contains("HTTP 400"))
  }

  @Test func wrongOrMissingTokenFailsWithTheServersMessage() throws {
    let fixture = try AdminFixture()
    let wrong = try fixture.admin(["status"], token: "not-the-token")
    #expect(wrong.status == 1)
    #expect(wrong.stdout.isEmpty)
    #expect(wrong.stderr.contains("HTTP 401") && wrong.stderr.contains("unauthorized"))
    #expect(!wrong.stderr.contains("not-the-token"), "the token is never printed")

    let missing = try fixture.admin(["cache", "stats"], token: nil)
    #expect(missing.status == 1)
    #expect(missing.stderr.contains("unauthorized") && missing.stderr.contains("GATEHOUSE_ADMIN_TOKEN"))

    let fromEnvironment = try runAdmin(
      ["--url", fixture.url, "status"], environment: ["GATEHOUSE_ADMIN_TOKEN": AdminFixture.adminToken])
    #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
    #expect(!fromEnvironment.stdout.contains(AdminFixture.adminToken))
  }

  @Test func connectionFailureAndUsageErrors() throws {
    let port = try TestSocket.unusedPort()
    let refused = try runAdmin(["--url", "http://127.0.0.1:\(port)", "--token", "x", "status"])
    #expect(refused.status == 1)
    #expect(refused.stderr.contains("cannot connect to 127.0.0.1:\(port)"))

    for arguments in [
      ["cache", "purge"], ["cache", "purge", "--all", "--prefix", "/x"], ["tokens", "set", "api"],
      ["cache", "stats", "--prefix", "/x"], ["frobnicate"], ["status", "--bogus"], ["--url", "ftp://x", "status"],
      ["--url", "http://x", "--insecure", "status"], ["--url", "https://x", "--insecure", "--ca", "ca.pem", "status"],
    ] {
      let run = try runAdmin(arguments)
      #expect(run.status == 2, "\(arguments): \(run.stderr)")
      #expect(run.stderr.contains("usage:"))
    }
  }

  @Test func allReplicasSendsTheCallToEveryReplica() throws {
    let fixtures = try (0..<3).map { _ in try AdminFixture() }
    for (index, fixture) in fixtures.enumerated() {
      for item in 0...index { #expect(try fixture.get("/items/\(item)").status == 200) }
      #expect(fixture.waitForEntries(index + 1))
    }
    let replicas = fixtures.map { "127.0.0.1:\($0.adminPort)" }
    let purge = try runAdmin([
      "--token", AdminFixture.adminToken, "--all-replicas", "--replicas", replicas.joined(separator: ","), "cache",
      "purge", "--all",
    ])
    #expect(purge.status == 0, "\(purge.stderr)")
    #expect(purge.stdoutLines.sorted() == zip(replicas, 1...3).map { "[\($0)] purged \($1)" }.sorted())
    for fixture in fixtures {
      #expect(try fixture.admin(["--json", "cache", "stats"]).json()["entries"] as? Int == 0)
    }

    // One replica down: the others still answer, the run fails and names the missing one.
    let down = "127.0.0.1:\(try TestSocket.unusedPort())"
    let partial = try runAdmin([
      "--token", AdminFixture.adminToken, "--all-replicas", "--replicas", ([replicas[0], down]).joined(separator: ","),
      "--json", "cache", "stats",
    ])
    #expect(partial.status == 1)
    #expect(partial.stdoutLines.count == 1 && partial.stdoutLines[0].hasPrefix("[\(replicas[0])] {"))
    #expect(partial.stderr.contains("[\(down)] cannot connect"))
  }

  /// Without `--replicas`, the `--url` host's A records are the replicas: `localhost`
  /// resolves to 127.0.0.1 here.
  @Test func allReplicasResolvesTheURLHost() throws {
    let fixture = try AdminFixture()
    let run = try runAdmin([
      "--url", "http://localhost:\(fixture.adminPort)", "--token", AdminFixture.adminToken, "--all-replicas",
      "--json", "cache", "stats",
    ])
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stdoutLines.count == 1)
    #expect(run.stdoutLines.first?.hasPrefix("[127.0.0.1:\(fixture.adminPort)] {\"entries\":") == true)
  }
}
