import GatehouseConfig
import GatehouseCore
import GatehouseHTTP

#if canImport(Glibc)
  import Glibc
#endif

/// The command line: `gatehouse <command> ...`. Each command lives in its own function so
/// the entry point reads as a table.
let arguments = Array(CommandLine.arguments.dropFirst())
let command = arguments.first ?? "help"

func printUsage() {
  print(
    """
    usage: gatehouse <command> [options]

      serve [--config FILE]     run the gateway
      check [--config] FILE     validate a config file
      demo [--keep]             a guided tour with a sample backend, on loopback
      admin <verb> ...          call the admin API (gatehouse admin --help)
      version                   print the version

    gatehouse <command> --help describes a command and runs nothing.
    """)
}

/// `--help` or `-h` anywhere after the command: the command's usage, and nothing is run.
let wantsHelp = arguments.dropFirst().contains { $0 == "--help" || $0 == "-h" }
let commands = ["serve", "check", "demo", "admin", "version", "help"]

switch command {
case "version", "--version":
  if wantsHelp {
    print("usage: gatehouse version\n\nPrints the version.")
  } else {
    print("gatehouse \(GatehouseVersion.string)")
  }
case "serve":
  if wantsHelp {
    print(ServeCommand.usage)
  } else {
    exit(ServeCommand.run(Array(arguments.dropFirst())))
  }
case "demo":
  if wantsHelp {
    print(DemoCommand.usage)
  } else {
    exit(DemoCommand.run(Array(arguments.dropFirst())))
  }
case "check":
  if wantsHelp {
    print(CheckCommand.usage)
  } else {
    exit(CheckCommand.run(Array(arguments.dropFirst())))
  }
case "admin":
  // `admin` reads `--help` after its own options and verb words itself.
  exit(AdminCommand.run(Array(arguments.dropFirst())))
case "help", "--help", "-h":
  printUsage()
default:
  FileHandleStandardError.write(
    "gatehouse: unknown command '\(command)'\(NameSuggestion.hint(for: command, among: commands))\n")
  printUsage()
  exit(2)
}
