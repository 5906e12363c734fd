import GatehouseConfig
import GatehouseCore
import GatehouseLogging

#if canImport(Glibc)
  import Glibc
#endif

/// `gatehouse serve [--config FILE]`: runs the gateway. Without `--config` it uses
/// `Config/gatehouse.json` when present, else the embedded default config (Config/README.md, "No config file"), whose
/// fresh admin token is printed once.
enum ServeCommand {
  static let conventionalPath = "Config/gatehouse.json"

  static let usage = """
    usage: gatehouse serve [--config FILE | -c FILE | FILE]
           gatehouse serve --listen HOST:PORT [--listen HOST:PORT ...]

    Runs the gateway. Without a config file it reads Config/gatehouse.json when present,
    else runs the embedded demo config and prints its fresh admin token once. --listen moves
    the embedded config's listener (8080 by default) elsewhere; a config file says its own.
    """

  static func run(_ arguments: [String]) -> Int32 {
    guard let parsed = ConfigArguments.parse(arguments, command: "serve", takesListen: true) else { return 2 }
    // Parsed first: a bad address is a usage error whatever else is on the line.
    var listeners: [ListenerConfig] = []
    for text in parsed.listen {
      switch ListenAddress.parse(text) {
      case .success(let address): listeners.append(ListenerConfig(address: address, tls: nil))
      case .failure(let error):
        FileHandleStandardError.write("gatehouse serve: --listen \(text): \(error)\n")
        return 2
      }
    }
    var configPath = parsed.configPath
    if !listeners.isEmpty && configPath != nil {
      // A reload reads the file again and would move the listeners back: one place decides.
      FileHandleStandardError.write(
        "gatehouse serve: --listen applies to the embedded config; set listen in \(configPath!) instead\n")
      return 2
    }
    if configPath == nil && listeners.isEmpty && access(conventionalPath, R_OK) == 0 { configPath = conventionalPath }
    // Kept absolute: `/admin/status` shows it, and it names the same file whoever reads it.
    configPath = configPath.map { LocalFile.absolutePath($0, workingDirectory: LocalFile.workingDirectory()) }

    let config: GatehouseConfig
    var embeddedAdminToken: String?
    var ignoredEnvironmentToken = false
    if let configPath {
      do {
        config = try ConfigLoader.load(contentsOf: configPath)
      } catch {
        for line in error.lines { FileHandleStandardError.write(line + "\n") }
        return 1
      }
    } else {
      do {
        var embedded: GatehouseConfig
        (embedded, embeddedAdminToken, ignoredEnvironmentToken) = try DefaultConfig.makeForServe(
          environmentToken: getenv("GATEHOUSE_ADMIN_TOKEN").map { String(cString: $0) })
        if !listeners.isEmpty { embedded.listen = listeners }
        config = embedded
      } catch {
        FileHandleStandardError.write("gatehouse serve: cannot prepare the embedded config: \(error)\n")
        return 1
      }
    }
    let logger = Logger(level: config.log.level)
    let server: GatewayServer
    do {
      server = try GatewayServer(config: config, configPath: configPath, logger: logger)
    } catch {
      logger.error("cannot start", ["error": .string("\(error)")])
      return 1
    }
    let tryIt = "curl http://\(server.boundAddresses[0])/users"
    if ignoredEnvironmentToken {
      logger.warn("GATEHOUSE_ADMIN_TOKEN is empty or has spaces or control characters; a random admin token is used")
    }
    if configPath == nil {
      // A generated token is shown once so a newcomer can open the admin API; never logged
      // again. One taken from GATEHOUSE_ADMIN_TOKEN is not shown.
      logger.info(
        "running on the embedded demo config",
        ["admin_token": .string(embeddedAdminToken ?? "from GATEHOUSE_ADMIN_TOKEN"), "try": .string(tryIt)])
    }
    return server.run()
  }
}
