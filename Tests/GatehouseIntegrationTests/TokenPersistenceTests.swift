import Foundation
import Testing

/// Token states in the store (Docs/behaviour.md and Docs/clients-and-cache.md): a restart reuses an unexpired oauth2 token
/// without a new login; with `store.secret_key` no token value is readable in the store
/// file or its WAL; a wrong key makes stored tokens missing (fetched again), with a warning,
/// and leaves their rows for a start with the right key.
@Suite struct TokenPersistenceTests {
  /// A private directory holding one store across gateway runs.
  final class StoreDirectory {
    let url: URL
    var storePath: String { url.appendingPathComponent("store.sqlite").path }

    init() throws {
      url = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-token-store-\(UUID())")
      try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// The raw bytes of the store file and its companions (`-wal`, `-shm`), by file name.
    func rawFiles() throws -> [String: [UInt8]] {
      var files: [String: [UInt8]] = [:]
      for name in try FileManager.default.contentsOfDirectory(atPath: url.path) where name.hasPrefix("store.sqlite") {
        files[name] = Array(try Data(contentsOf: url.appendingPathComponent(name)))
      }
      return files
    }
  }

  static func config(
    backend: TestBackend, oauth: OAuth2TestServer, store: StoreDirectory, secretKey: String? = nil
  ) -> [String: Any] {
    var storeConfig: [String: Any] = ["path": store.storePath]
    if let secretKey { storeConfig["secret_key"] = secretKey }
    return TestConfig.withTokens(
      upstreamPort: backend.port,
      tokens: ["partner": oauth.tokenConfig(), "manual": ["type": "static", "value": ""]],
      routes: [
        TestConfig.tokenRoute("oauth", match: "/p/*", token: "partner"),
        TestConfig.tokenRoute("manual", match: "/m/*", token: "manual"),
      ], store: storeConfig)
  }

  /// Waits so queued store writes are committed, then stops the gateway cleanly.
  static func settleAndStop(_ gateway: GatewayProcess, sourceLocation: SourceLocation = #_sourceLocation) {
    sleep(for: .milliseconds(1500))
    gateway.stopExpectingCleanExit(sourceLocation: sourceLocation)
  }

  static func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
    let pattern = Array(needle.utf8)
    guard !pattern.isEmpty, haystack.count >= pattern.count else { return false }
    for start in 0...(haystack.count - pattern.count) where haystack[start] == pattern[0] {
      if Array(haystack[start..<(start + pattern.count)]) == pattern { return true }
    }
    return false
  }

  @Test func restartReusesTheStoredTokenWithoutANewLogin() throws {
    let store = try StoreDirectory()
    let oauth = try OAuth2TestServer(tokenPrefix: "persisted-token")
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }

    let first = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, store: store))
    #expect(try first.waitForValidTokens(["partner"]))
    #expect(try send("GET", "/p/one", to: first.port).status == 200)
    let fingerprint = try #require(try first.admin().token("partner")?["fingerprint"] as? String)
    Self.settleAndStop(first)
    #expect(oauth.requestCount == 1)

    let second = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, store: store))
    defer { second.stopExpectingCleanExit() }
    // Before the request: one arriving before the stored token is restored would log in.
    #expect(try second.waitForValidTokens(["partner"]))
    #expect(try send("GET", "/p/two", to: second.port).status == 200)
    let state = try #require(try second.admin().token("partner"))

    #expect(oauth.requestCount == 1, "the restart logged in again")
    #expect(state["fingerprint"] as? String == fingerprint)
    #expect(fingerprint == SHA256Digest.fingerprint(oauth.token(1)))
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(1)])
  }

  @Test func withoutSecretKeyTheStoredValueIsReadable() throws {
    // The control for the encrypted case: the same scan finds a value stored in the clear.
    let store = try StoreDirectory()
    let oauth = try OAuth2TestServer(tokenPrefix: "PLAINFETCHED0d4c")
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, store: store))
    #expect(try send("GET", "/p/one", to: gateway.port).status == 200)
    Self.settleAndStop(gateway)

    let files = try store.rawFiles()
    #expect(files.values.contains { Self.contains($0, oauth.token(1)) })
  }

  @Test func secretKeyKeepsValuesOutOfTheStoreAndAWrongKeyRefetches() throws {
    let store = try StoreDirectory()
    let putCanary = "CANARYPUTVALUEe83a"
    let oauth = try OAuth2TestServer(tokenPrefix: "CANARYFETCHED21fb")
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }

    let first = try GatewayProcess(
      config: Self.config(backend: backend, oauth: oauth, store: store, secretKey: "itest-store-key-right"))
    let admin = try first.admin()
    #expect(admin.waitForState("partner", "valid"))
    #expect(try admin.setToken("manual", value: putCanary, expiresIn: 3600).status == 200)
    #expect(try send("GET", "/m/one", to: first.port).status == 200)
    #expect(try send("GET", "/p/one", to: first.port).status == 200)
    #expect(backend.requests.compactMap(bearerToken) == [putCanary, oauth.token(1)])
    Self.settleAndStop(first)

    let files = try store.rawFiles()
    #expect(files.keys.contains("store.sqlite"))
    for (name, bytes) in files {
      #expect(!Self.contains(bytes, putCanary), "\(name) holds the value set through the admin API")
      #expect(!Self.contains(bytes, oauth.tokenPrefix), "\(name) holds the fetched token")
    }
    // The rows are there, only their values are sealed.
    #expect(files.values.contains { Self.contains($0, "partner") })

    let second = try GatewayProcess(
      config: Self.config(backend: backend, oauth: oauth, store: store, secretKey: "itest-store-key-wrong"))
    #expect(try send("GET", "/p/two", to: second.port).status == 200)
    let manual = try send("GET", "/m/two", to: second.port)

    #expect(oauth.requestCount == 2, "the token was not fetched again")
    #expect(backend.requests.last.flatMap(bearerToken) == oauth.token(2))
    #expect(isErrorEnvelope(manual, status: 401, message: "upstream token unavailable"), "\(manual.text)")
    #expect(try second.admin().token("manual")?["state"] as? String == "missing")
    let warned = second.logLines().contains { line in
      line["level"] as? String == "warn" && "\(line)".contains("could not be decrypted")
    }
    #expect(warned, "no warning about the undecryptable token: \(second.stdoutText)")
    Self.settleAndStop(second)

    // The start with the wrong key left the row it could not read alone: with the right key
    // again, the value set through the admin API is back.
    let third = try GatewayProcess(
      config: Self.config(backend: backend, oauth: oauth, store: store, secretKey: "itest-store-key-right"))
    defer { third.stopExpectingCleanExit() }
    #expect(try send("GET", "/m/three", to: third.port).status == 200)
    #expect(backend.requests.last.flatMap(bearerToken) == putCanary)
    #expect(try third.admin().token("manual")?["state"] as? String == "valid")
  }
}
