import Foundation
import Testing

/// What a `gatehouse ...` run printed and how it exited, bounded to 60 s.
func runGatehouse(_ arguments: [String], in directory: URL? = nil) throws -> AdminRun {
  let process = try GatewayProcess(arguments: arguments, directory: directory, startTimeout: nil)
  guard let outcome = process.waitForExit(timeout: 60) else {
    process.kill()
    throw GatewayStartError(description: "gatehouse \(arguments) did not exit within 60 s")
  }
  return AdminRun(status: outcome.bySignal ? -1 : outcome.code, stdout: process.stdoutText, stderr: process.stderrText)
}

/// `--help` on every command and admin verb, the config file arguments, and "did you mean".
@Suite struct AdminCommandHelpTests {
  /// Help prints usage and exits 0, and runs nothing: `serve --help` would otherwise start a
  /// gateway (and never exit), `demo --help` the demo.
  @Test func helpOnEveryCommandPrintsUsageAndRunsNothing() throws {
    let cases: [([String], String)] = [
      (["serve", "--help"], "gatehouse serve"), (["serve", "-h"], "gatehouse serve"),
      (["check", "--help"], "gatehouse check"), (["check", "-h", "x.json"], "gatehouse check"),
      (["demo", "--help"], "gatehouse demo"), (["version", "--help"], "gatehouse version"),
      (["admin", "--help"], "gatehouse admin"), (["admin", "-h"], "gatehouse admin"),
      (["admin", "status", "--help"], "status"), (["admin", "cache", "--help"], "cache purge"),
      (["admin", "cache", "purge", "--all", "--help"], "--route NAME"),
      (["admin", "tokens", "set", "api", "-h"], "tokens set NAME"), (["--help"], "usage: gatehouse"),
    ]
    for (arguments, expected) in cases {
      let run = try runGatehouse(arguments)
      #expect(run.status == 0, "\(arguments): \(run.stderr)")
      #expect(run.stdout.contains("usage:") && run.stdout.contains(expected), "\(arguments): \(run.stdout)")
      #expect(!run.stdout.contains("== "), "\(arguments) ran the demo")
    }
  }

  /// `admin <verb> --help` answers without connecting: nothing listens on the URL, and a
  /// purge given with it purges nothing.
  @Test func adminVerbHelpNeverCalls() throws {
    let fixture = try AdminFixture()
    #expect(try fixture.get("/items/a").status == 200)
    #expect(fixture.waitForEntries(1))
    let help = try fixture.admin(["cache", "purge", "--all", "--help"])
    #expect(help.status == 0)
    #expect(try fixture.admin(["--json", "cache", "stats"]).json()["entries"] as? Int == 1)
  }

  @Test func checkAndServeTakeTheConfigFileInEveryForm() throws {
    let config = try JSONSerialization.data(withJSONObject: TestConfig.passThrough(to: 3000))
    // A fresh directory per run: a finished process removes its directory.
    func directoryWithConfig() throws -> URL {
      let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "gatehouse-cli-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      try config.write(to: directory.appendingPathComponent("config.json"))
      return directory
    }
    for form in [["config.json"], ["-c", "config.json"], ["--config", "config.json"], ["--config=config.json"]] {
      let run = try runGatehouse(["check"] + form, in: try directoryWithConfig())
      #expect(run.status == 0, "check \(form): \(run.stderr)")
      #expect(run.stderr.isEmpty, "check \(form): \(run.stderr)")
    }
    let missing = try runGatehouse(["check", "nope.json"], in: try directoryWithConfig())
    #expect(missing.status == 1, "\(missing.stderr)")
    let twoFiles = try runGatehouse(["check", "config.json", "other.json"], in: try directoryWithConfig())
    #expect(twoFiles.status == 2)

    for form in [["config.json"], ["-c", "config.json"], ["--config=config.json"]] {
      let gateway = try GatewayProcess(arguments: ["serve"] + form, directory: try directoryWithConfig())
      #expect(gateway.port != 0, "serve \(form) listens")
      gateway.stopExpectingCleanExit()
    }
  }

  /// `serve --listen` moves the embedded config's listener off 8080 (repeatable); a bad
  /// address, or one given with a config file, is a usage error.
  @Test func serveListenMovesTheEmbeddedListener() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "gatehouse-listen-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let port = try TestSocket.unusedPort()
    let gateway = try GatewayProcess(arguments: ["serve", "--listen", "127.0.0.1:\(port)"], directory: directory)
    #expect(gateway.port == port)
    #expect(
      gateway.logLines().contains {
        $0["msg"] as? String == "listening" && $0["address"] as? String == "127.0.0.1:\(port)"
      })
    #expect(try send("GET", "/nothing-here", to: port).status == 404)
    gateway.stopExpectingCleanExit()

    let bad = try runGatehouse(["serve", "--listen", "nowhere"])
    #expect(bad.status == 2 && bad.stderr.contains("--listen nowhere"), "\(bad.stderr)")
    let withFile = try runGatehouse(["serve", "--config", "gatehouse.json", "--listen", "127.0.0.1:\(port)"])
    #expect(withFile.status == 2 && withFile.stderr.contains("set listen in gatehouse.json"), "\(withFile.stderr)")
  }

  @Test func unknownCommandsAndVerbsGetASuggestion() throws {
    let cases: [([String], String)] = [
      (["serv"], #"did you mean "serve"?"#), (["chekc"], #"did you mean "check"?"#),
      (["admin", "stauts"], #"did you mean "status"?"#), (["admin", "cache", "lsit"], #"did you mean "cache list"?"#),
      (["admin", "tokens", "refrsh", "api"], #"did you mean "tokens refresh"?"#),
      (["admin", "upstream"], #"did you mean "upstreams"?"#), (["demo", "--kep"], #"did you mean "--keep"?"#),
    ]
    for (arguments, expected) in cases {
      let run = try runGatehouse(arguments)
      #expect(run.status == 2, "\(arguments): \(run.stderr)")
      #expect(run.stderr.contains(expected), "\(arguments): \(run.stderr)")
    }
  }

  /// `cache list` names each entry's route; `cache purge --route` purges exactly that
  /// route's entries; a prefix without the base path purges nothing and names the right one.
  @Test func routesInTheCacheListingPurgeAndHints() throws {
    let fixture = try AdminFixture(basePath: "/api/v1")
    for path in ["/items/a", "/items/b"] { #expect(try fixture.get(path).status == 200) }
    #expect(fixture.waitForEntries(2))

    let list = try fixture.admin(["cache", "list"])
    #expect(list.status == 0, "\(list.stderr)")
    let header = try #require(list.stdoutLines.first)
    #expect(header.hasPrefix("ID ") && header.contains(" ROUTE "), "\(header)")
    #expect(list.stdoutLines.dropFirst().prefix(2).allSatisfy { $0.contains(" items ") }, "\(list.stdout)")
    let listed = try fixture.admin(["--json", "cache", "list"]).json()["entries"] as? [[String: Any]] ?? []
    #expect(listed.allSatisfy { $0["route"] as? String == "items" })
    #expect(try fixture.admin(["cache", "list", "--route", "hello"]).stdoutLines.last == "0 entries")

    let miss = try fixture.admin(["cache", "purge", "--prefix", "/items/"])
    #expect(miss.status == 0, "\(miss.stderr)")
    #expect(miss.stdout == "purged 0\n")
    #expect(
      miss.stderr.contains("did you mean --prefix /api/v1/items/ (2 entries) or --route items?"), "\(miss.stderr)")
    let far = try fixture.admin(["cache", "purge", "--prefix", "/api/v2"])
    #expect(far.stderr.contains("nearest stored paths: /api/v1/items/"), "\(far.stderr)")

    let unknown = try fixture.admin(["cache", "purge", "--route", "itmes"])
    #expect(unknown.status == 1)
    #expect(
      unknown.stderr.contains("HTTP 404") && unknown.stderr.contains(#"did you mean "items"?"#), "\(unknown.stderr)")
    let stubOnly = try fixture.admin(["cache", "purge", "--route", "hello"])
    #expect(stubOnly.status == 1 && stubOnly.stderr.contains("no upstream"), "\(stubOnly.stderr)")

    let purged = try fixture.admin(["cache", "purge", "--route", "items"])
    #expect(purged.status == 0, "\(purged.stderr)")
    #expect(purged.stdout == "purged 2\n")
    #expect(try fixture.admin(["--json", "cache", "stats"]).json()["entries"] as? Int == 0)
  }
}
