import GatehouseConfig
import GatehouseCore
import GatehouseHTTP
import GatehouseLogging
import GatehouseNet

#if canImport(Glibc)
  import Glibc
#endif

/// `gatehouse demo`: a sample backend and the gateway in one process on loopback, then a
/// walk through the product, printing each request and answer.
enum DemoCommand {
  static let usage = """
    usage: gatehouse demo [--keep]

    Starts a sample backend and the gateway on loopback, then walks through the product,
    printing each request and answer. --keep keeps both running afterwards.
    """

  static func run(_ arguments: [String]) -> Int32 {
    // A mistyped option must not start the demo as if it had not been given.
    for argument in arguments where argument != "--keep" {
      FileHandleStandardError.write(
        "gatehouse demo: unexpected argument '\(argument)'\(NameSuggestion.hint(for: argument, among: ["--keep"]))\n"
          + usage + "\n")
      return 2
    }
    let keep = arguments.contains("--keep")
    let backend: DemoBackend
    do {
      backend = try DemoBackend()
    } catch {
      FileHandleStandardError.write("gatehouse demo: cannot start the sample backend: \(error)\n")
      return 1
    }
    let adminToken = DefaultConfig.randomAdminToken()
    let directory: String
    do {
      directory = try DefaultConfig.makeTemporaryDirectory()
    } catch {
      FileHandleStandardError.write("gatehouse demo: \(error)\n")
      return 1
    }
    let configText = """
      {
        "listen": [{ "address": "127.0.0.1:0" }],
        "workers": 1,
        "admin": { "listen": "127.0.0.1:0", "token": "\(adminToken)" },
        "store": { "path": "\(directory)/gatehouse.sqlite" },
        "headers": { "set": { "Accept": "application/json" } },
        "upstreams": { "api": { "url": "http://127.0.0.1:\(backend.port)/api/v1", "connect_timeout_ms": 500 } },
        "tokens": {
          "api": {
            "type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:\(backend.port)/oauth/token",
            "client_id": "demo", "client_secret": "demo-secret"
          }
        },
        "routes": [
          {
            "name": "users", "match": { "path": "/users", "methods": ["GET"] }, "upstream": "api", "token": "api",
            "envelope": { "key_path": "data.users" }, "cache": { "stale_if_error_s": 3600 }
          }
        ],
        "log": { "level": "error", "access": "off" }
      }
      """
    let server: GatewayServer
    do {
      let config = try ConfigLoader.load(json: configText, environment: [:])
      server = try GatewayServer(config: config, configPath: nil, logger: Logger(level: .error))
    } catch {
      FileHandleStandardError.write("gatehouse demo: cannot start the gateway: \(error)\n")
      return 1
    }
    let running = server
    do {
      _ = try LoopThread.start(name: "gh-demo-gateway") { _ = running.run() }
    } catch {
      FileHandleStandardError.write("gatehouse demo: cannot start the gateway: \(error)\n")
      return 1
    }
    let gateway = DemoClient(address: server.boundAddresses[0])
    let admin = DemoClient(address: server.adminAddress ?? "", token: adminToken)
    let walkthrough = DemoWalkthrough(gateway: gateway, admin: admin, backend: backend)
    let ok = walkthrough.run()
    print(
      """

      == The dashboard
      Open http://\(server.adminAddress ?? "")/admin/ and paste the admin token:
        \(adminToken)
      \(keep ? "The demo keeps running; press Ctrl-C to stop it." : "Run `gatehouse demo --keep` to keep the demo running and look around.")
      """)
    if keep {
      while true { sleep(3600) }
    }
    backend.stop()
    return ok ? 0 : 1
  }
}

/// A blocking client for the walkthrough that prints what it sends and gets.
struct DemoClient {
  let host: String
  let port: UInt16
  let token: String?

  init(address: String, token: String? = nil) {
    let colon = address.lastIndex(of: ":") ?? address.endIndex
    host = String(address[..<colon])
    port = UInt16(address[address.index(after: colon)...]) ?? 0
    self.token = token
  }

  /// Sends one request and prints it with its answer. `clientAuthorization` is an
  /// `Authorization` the client itself sends (shown; the admin token never is).
  func call(_ method: HTTPMethod, _ target: String, clientAuthorization: String? = nil) -> AdminHTTPAnswer? {
    let client = AdminHTTPClient(host: host, port: port, hostHeader: "\(host):\(port)", timeoutSeconds: 10)
    print("$ \(method) http://\(host):\(port)\(target)")
    var headers = token.map { [("Authorization", "Bearer \($0)")] } ?? []
    if let clientAuthorization {
      print("  Authorization: \(clientAuthorization)")
      headers.append(("Authorization", clientAuthorization))
    }
    do {
      let answer = try client.send(method: method, target: target, headers: headers)
      var notes: [String] = []
      for name in ["X-Gatehouse-Cache", "Age", "Warning"] {
        if let value = answer.headers[name] { notes.append("\(name): \(value)") }
      }
      print("< \(answer.status) \(HTTPStatusPhrase.reason(for: answer.status))  \(notes.joined(separator: "  "))")
      print("  \(answer.bodyText)")
      return answer
    } catch {
      print("< failed: \(error)")
      return nil
    }
  }
}

/// The steps of the demo, in order; each prints what it shows.
struct DemoWalkthrough {
  let gateway: DemoClient
  let admin: DemoClient
  let backend: DemoBackend

  func section(_ title: String, _ text: String) {
    print("\n== \(title)\n\(text)")
  }

  func run() -> Bool {
    var ok = true
    section(
      "1. One envelope for every answer",
      "The backend answers {\"data\":{\"users\":[...]},\"meta\":{...}}; the route keeps data.users (key_path) and wraps it."
    )
    ok = gateway.call(.get, "/users")?.status == 200 && ok

    section(
      "2. The client holds no backend credential",
      "Whatever a client sends as Authorization is replaced by the token Gatehouse logged in for:")
    ok = gateway.call(.get, "/users", clientAuthorization: "Bearer what-the-app-sent")?.status == 200 && ok
    let seen = backend.record.withLock { $0.lastAuthorization } ?? "(nothing)"
    print("  backend saw Authorization: \(seen)")
    ok = seen.hasPrefix("Bearer demo-token-") && ok

    section(
      "3. An expired token is refreshed on its own",
      "The backend now rejects every token it issued. Gatehouse sees the 401, fetches a new token and retries once:")
    backend.expireTokens()
    ok = gateway.call(.get, "/users")?.status == 200 && ok
    let logins = backend.record.withLock { $0.logins }
    print(
      "  token endpoint logins so far: \(logins); backend saw \(backend.record.withLock { $0.lastAuthorization } ?? "-")"
    )
    _ = admin.call(.get, "/admin/tokens")

    section(
      "4. The backend goes down: users get the last good answer",
      "The backend's port is closed now. Gatehouse answers from its SQLite store, marked STALE:")
    backend.goDown()
    let stale = gateway.call(.get, "/users")
    ok = stale?.headers["X-Gatehouse-Cache"] == "STALE" && ok

    section(
      "5. The admin API", "Cache state, then a purge; with the store empty and the backend down, an error envelope:")
    _ = admin.call(.get, "/admin/cache")
    ok = admin.call(.delete, "/admin/cache")?.status == 200 && ok
    ok = gateway.call(.get, "/users")?.status == 502 && ok
    print(ok ? "\nEvery step behaved as described." : "\nSome step did not behave as described (see above).")
    return ok
  }
}
