import Foundation
import Testing

@testable import GatehouseConfig

/// `gatehouse check` output and exit codes, on real files.
@Suite struct ConfigCheckTests {
  private func withTemporaryFile(_ contents: String, _ body: (String) -> Void) throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-check-\(UUID()).json")
      .path
    try contents.write(toFile: path, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: path) }
    body(path)
  }

  @Test func validFilePrintsOkAndExitsZero() throws {
    try withTemporaryFile(minimalConfigJSON) { path in
      #expect(
        ConfigCheckResult.checking(configPath: path, environment: [:])
          == ConfigCheckResult(
            exitCode: 0, output: ["ok"] + ConfigSummary.lines(for: try! loadConfig(minimalConfigJSON)), errors: []))
    }
  }

  @Test func invalidConfigPrintsEveryProblemAndExitsOne() throws {
    try withTemporaryFile(#"{"workers": -1, "routes": []}"#) { path in
      #expect(
        ConfigCheckResult.checking(configPath: path, environment: [:])
          == ConfigCheckResult(
            exitCode: 1, output: [],
            errors: ["workers: must not be negative, got -1", "routes: must list at least one route"]))
    }
  }

  @Test func notJSONIsReportedCompilerStyle() throws {
    try withTemporaryFile("{\n  \"routes\": [}\n") { path in
      #expect(
        ConfigCheckResult.checking(configPath: path, environment: [:])
          == ConfigCheckResult(
            exitCode: 1, output: [],
            errors: ["\(path):2:14: not valid JSON: unexpected '}', expected a value"]))
    }
  }

  @Test func unreadableFileExitsOne() {
    let result = ConfigCheckResult.checking(configPath: "/nonexistent/x.json", environment: [:])
    #expect(
      result
        == ConfigCheckResult(
          exitCode: 1, output: [], errors: ["/nonexistent/x.json: cannot read the config file: no such file"])
    )
    let directory = ConfigCheckResult.checking(configPath: NSTemporaryDirectory(), environment: [:])
    #expect(directory.exitCode == 1)
    #expect(directory.errors.first?.hasSuffix("cannot read the config file: it is a directory") == true)
  }

  /// A warning is printed as `path: warning: problem` after `ok`; with `strict` the same
  /// warning is an error, `path: error: problem` on standard error, and nothing else is printed.
  @Test func strictPrintsWarningsAsErrors() throws {
    let warning = ConfigWarning(path: "store.secret_key", problem: "is short")
    #expect(warning.description == "store.secret_key: warning: is short")
    #expect(warning.errorDescription == "store.secret_key: error: is short")
    try withTemporaryFile(minimalConfigJSON) { path in
      let lenient = ConfigCheckResult.checking(configPath: path, environment: [:], warnings: { _ in [warning] })
      #expect(lenient.exitCode == 0 && lenient.errors.isEmpty)
      #expect(Array(lenient.output.prefix(2)) == ["ok", "store.secret_key: warning: is short"])
      #expect(
        ConfigCheckResult.checking(configPath: path, environment: [:], strict: true, warnings: { _ in [warning] })
          == ConfigCheckResult(exitCode: 1, output: [], errors: ["store.secret_key: error: is short"]))
      #expect(
        ConfigCheckResult.checking(configPath: path, environment: [:], strict: true).exitCode == 0,
        "strict without warnings passes")
    }
  }

  @Test func environmentComesFromTheCaller() throws {
    let json = minimalConfigJSON.replacingOccurrences(of: #""name": "r""#, with: #""name": "${ROUTE_NAME}""#)
    try withTemporaryFile(json) { path in
      #expect(ConfigCheckResult.checking(configPath: path, environment: ["ROUTE_NAME": "a"]).exitCode == 0)
      #expect(ConfigCheckResult.checking(configPath: path, environment: [:]).exitCode == 1)
    }
  }
}
