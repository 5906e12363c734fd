/// What `gatehouse check --config FILE` prints and how it exits, kept here (not in the
/// executable) so tests can call it.
public struct ConfigCheckResult: Sendable, Equatable {
  /// 0 for a valid config, 1 otherwise.
  public let exitCode: Int32
  /// Lines for standard output: `ok` for a valid config, then its warnings
  /// (`path: warning: problem`) and a summary of what it sets up.
  public let output: [String]
  /// Lines for standard error: one per problem.
  public let errors: [String]

  /// Validates the file at `path`. A JSON syntax error is printed compiler-style,
  /// `FILE:LINE:COLUMN: not valid JSON: reason`, so editors can jump to it.
  /// `moreChecks` looks further at a config that decoded cleanly (the files it names, see
  /// `ConfigFileCheck`), and `warnings` finds what works but is likely not meant (see
  /// `StartupWarnings.checkWarnings`); kept out of here so this stays free of anything but
  /// decoding. With `strict`, warnings are errors: printed to standard error as
  /// `path: error: problem`, exit 1.
  public static func checking(
    configPath path: String, environment: [String: String] = LocalFile.processEnvironment(),
    strict: Bool = false,
    moreChecks: (GatehouseConfig) -> [String] = { _ in [] },
    warnings findWarnings: (GatehouseConfig) -> [ConfigWarning] = { _ in [] }
  ) -> ConfigCheckResult {
    do {
      let config = try ConfigLoader.load(contentsOf: path, environment: environment)
      let problems = moreChecks(config)
      guard problems.isEmpty else { return ConfigCheckResult(exitCode: 1, output: [], errors: problems) }
      let warnings = findWarnings(config)
      if strict && !warnings.isEmpty {
        return ConfigCheckResult(exitCode: 1, output: [], errors: warnings.map(\.errorDescription))
      }
      return ConfigCheckResult(
        exitCode: 0, output: ["ok"] + warnings.map(\.description) + ConfigSummary.lines(for: config), errors: [])
    } catch .invalidJSON(let error) {
      return ConfigCheckResult(
        exitCode: 1, output: [],
        errors: ["\(path):\(error.line):\(error.column): not valid JSON: \(error.reason)"])
    } catch {
      return ConfigCheckResult(exitCode: 1, output: [], errors: error.lines)
    }
  }
}
