import GatehouseConfig
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
    log, a summary and what each upstream name resolves to now, and exits 0; or prints every
    problem to standard error and exits 1 (2 for a usage error). --strict makes warnings
    problems.
    """

  static func run(_ arguments: [String]) -> Int32 {
    guard let parsed = ConfigArguments.parse(arguments, command: "check", flags: ["--strict"]) else { return 2 }
    let strict = parsed.flags.contains("--strict")
    guard let configPath = parsed.configPath else {
      FileHandleStandardError.write(usage + "\n")
      return 2
    }
    let result = ConfigCheckResult.checking(
      configPath: configPath, strict: strict, moreChecks: ConfigFileCheck.problems,
      warnings: StartupWarnings.checkWarnings)
    for line in result.output { print(line) }
    for line in result.errors { FileHandleStandardError.write(line + "\n") }
    // What the upstream names resolve to now: a name that does not is no error (DNS may
    // differ where the gateway runs), but worth seeing before a deploy.
    if result.exitCode == 0, let config = try? ConfigLoader.load(contentsOf: configPath) {
      for line in UpstreamNameReport.lines(for: config) { print(line) }
    }
    return result.exitCode
  }
}
