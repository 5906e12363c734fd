import GatehouseCore

#if canImport(Glibc)
  import Glibc
#endif

/// `gatehouse check [--config] FILE [--strict]`: validates a config file. Prints `ok`, the
/// warnings `serve` would log and a summary, and exits 0; or prints every problem to standard
/// error and exits 1 (2 for a usage error). `--strict` makes warnings problems.
enum CheckCommand {
  static let usage = """
    usage: gatehouse check FILE [--strict]
           gatehouse check --config FILE [--strict]    (or -c FILE, --config=FILE)

    Validates a config file without starting anything: prints ok, the warnings serve would
    log and a summary, and exits 0; or prints every problem to standard error and exits 1
    (2 for a usage error). --strict makes warnings problems.
    """

  static func run(_ arguments: [String]) -> Int32 {
    var configPath: String?
    var strict = false
    var index = 0
    while index < arguments.count {
      switch arguments[index] {
      case "--config", "-c":
        guard index + 1 < arguments.count else {
          FileHandleStandardError.write("gatehouse check: \(arguments[index]) needs a file name\n")
          return 2
        }
        configPath = arguments[index + 1]
        index += 2
      case "--strict":
        strict = true
        index += 1
      case let argument where argument.hasPrefix("--config="):
        configPath = String(argument.dropFirst("--config=".count))
        index += 1
      // The file may also be named alone, as most checkers take it: `gatehouse check FILE`.
      case let argument where !argument.hasPrefix("-") && configPath == nil:
        configPath = argument
        index += 1
      case let argument:
        FileHandleStandardError.write("gatehouse check: unexpected argument '\(argument)'\n")
        return 2
      }
    }
    guard let configPath else {
      FileHandleStandardError.write(usage + "\n")
      return 2
    }
    let result = ConfigCheckResult.checking(
      configPath: configPath, strict: strict, moreChecks: ConfigFileCheck.problems,
      warnings: StartupWarnings.checkWarnings)
    for line in result.output { print(line) }
    for line in result.errors { FileHandleStandardError.write(line + "\n") }
    return result.exitCode
  }
}
