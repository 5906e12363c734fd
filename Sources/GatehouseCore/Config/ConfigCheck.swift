/// What `gatehouse check --config FILE` prints and how it exits, kept here (not in the
/// executable) so tests can call it.
public struct ConfigCheckResult: Sendable, Equatable {
  /// 0 for a valid config, 1 otherwise.
  public let exitCode: Int32
  /// Lines for standard output: `ok` for a valid config.
  public let output: [String]
  /// Lines for standard error: one per problem.
  public let errors: [String]

  /// Validates the file at `path`. A JSON syntax error is printed compiler-style,
  /// `FILE:LINE:COLUMN: not valid JSON: reason`, so editors can jump to it.
  /// `moreChecks` looks further at a config that decoded cleanly (the files it names, see
  /// `ConfigFileCheck`); kept out of here so this stays free of anything but decoding.
  public static func checking(
    configPath path: String, environment: [String: String] = LocalFile.processEnvironment(),
    moreChecks: (GatehouseConfig) -> [String] = { _ in [] }
  ) -> ConfigCheckResult {
    do {
      let config = try ConfigLoader.load(contentsOf: path, environment: environment)
      let problems = moreChecks(config)
      guard problems.isEmpty else { return ConfigCheckResult(exitCode: 1, output: [], errors: problems) }
      return ConfigCheckResult(exitCode: 0, output: ["ok"], errors: [])
    } catch .invalidJSON(let error) {
      return ConfigCheckResult(
        exitCode: 1, output: [],
        errors: ["\(path):\(error.line):\(error.column): not valid JSON: \(error.reason)"])
    } catch {
      return ConfigCheckResult(exitCode: 1, output: [], errors: error.lines)
    }
  }
}
