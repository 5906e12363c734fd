/// The config-file arguments `serve` and `check` share: `FILE`, `-c FILE`, `--config FILE`
/// and `--config=FILE`, plus the flags a command adds (`--strict`).
struct ConfigArguments {
  var configPath: String?
  var flags: Set<String> = []
  /// `--listen ADDR`, in order (`serve` only).
  var listen: [String] = []

  /// Reads `arguments` for `command`; on a usage error, writes it and returns nil.
  /// `takesListen`: `--listen ADDR` (repeatable) is allowed.
  static func parse(
    _ arguments: [String], command: String, flags allowed: Set<String> = [], takesListen: Bool = false
  ) -> ConfigArguments? {
    var parsed = ConfigArguments()
    var index = 0
    while index < arguments.count {
      switch arguments[index] {
      case "--listen" where takesListen:
        guard index + 1 < arguments.count else {
          FileHandleStandardError.write("gatehouse \(command): --listen needs an address (host:port)\n")
          return nil
        }
        parsed.listen.append(arguments[index + 1])
        index += 2
      case let argument where takesListen && argument.hasPrefix("--listen="):
        parsed.listen.append(String(argument.dropFirst("--listen=".count)))
        index += 1
      case "--config", "-c":
        guard index + 1 < arguments.count else {
          FileHandleStandardError.write("gatehouse \(command): \(arguments[index]) needs a file name\n")
          return nil
        }
        parsed.configPath = arguments[index + 1]
        index += 2
      case let argument where allowed.contains(argument):
        parsed.flags.insert(argument)
        index += 1
      case let argument where argument.hasPrefix("--config="):
        parsed.configPath = String(argument.dropFirst("--config=".count))
        index += 1
      // The file may also be named alone, as most checkers take it: `gatehouse check FILE`.
      case let argument where !argument.hasPrefix("-") && parsed.configPath == nil:
        parsed.configPath = argument
        index += 1
      case let argument:
        FileHandleStandardError.write("gatehouse \(command): unexpected argument '\(argument)'\n")
        return nil
      }
    }
    return parsed
  }
}
