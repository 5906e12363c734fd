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
      check --config FILE       validate a config file
      demo [--keep]             a guided tour with a sample backend, on loopback
      admin <verb> ...          call the admin API (gatehouse admin --help)
      version                   print the version
    """)
}

switch command {
case "version", "--version":
  print("gatehouse \(GatehouseVersion.string)")
case "serve":
  exit(ServeCommand.run(Array(arguments.dropFirst())))
case "demo":
  exit(DemoCommand.run(Array(arguments.dropFirst())))
case "check":
  exit(CheckCommand.run(Array(arguments.dropFirst())))
case "admin":
  exit(AdminCommand.run(Array(arguments.dropFirst())))
case "help", "--help", "-h":
  printUsage()
default:
  FileHandleStandardError.write("gatehouse: unknown command '\(command)'\n")
  printUsage()
  exit(2)
}
