import GatehouseNet
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// Drives the whole token subsystem with canary values — fetches, failures from an endpoint that echoes
/// secrets, rejections, invalidations, operator commands — and looks for the canaries in everything an
/// operator or a log reader could see.
@Suite(.serialized) struct TokenSecretLeakTests {
  static let secretCanary = "CANARY-SECRET-7f3a"
  static let tokenCanary = "CANARY-TOKEN-91bc-"
  static let setCanary = "CANARY-SET-5d2e"

  @Test func canaryValuesNeverLeak() throws {
    let server = try TestOAuth2Server(tokenPrefix: Self.tokenCanary)
    defer { server.shutdown() }
    server.mode = .issue(expiresIn: 3600)
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.loops[0]
    let pipeLogger = PipeLogger(level: .debug)
    let persistence = InMemoryTokenPersistence()
    let snapshots = OutcomeLog<TokenValues>()
    let texts = OutcomeLog<String>()
    let config = TokenConfig(
      name: "partner",
      source: .oauth2ClientCredentials(
        try oauth2Config(port: server.port, clientID: "gw", secret: Self.secretCanary)))
    let tokens = [config, TokenConfig(name: "api", source: .fixed(SecretValue(Self.setCanary + "-static")))]
    let box = UncheckedBox<TokenManager?>(nil)
    func onManager<T>(_ body: @escaping (TokenManager) -> T) throws -> T {
      try runOnLoop(loop) { body(box.value!) }
    }
    func record(_ outcome: TokenOutcome) {
      texts.append(String(describing: outcome))
      texts.append(String(reflecting: outcome))
      if case .unavailable(let reason) = outcome { texts.append(reason.reason) }
    }
    func record(_ result: Result<TokenPublicState, TokenOperationError>) {
      texts.append(String(describing: result))
      switch result {
      case .success(let state): texts.append(state.json.serializedString())
      case .failure(let error): texts.append(error.description)
      }
    }

    try runOnLoop(loop) {
      box.value = TokenManager(
        tokens: tokens, loop: loop, persistence: persistence, logger: pipeLogger.logger
      ) { snapshots.append($0) }
      box.value!.start()
    }
    #expect(waitFor { server.issuedTokens.count == 1 && snapshots.all.last?["partner"]?.value != nil })
    let firstToken = try #require(server.issuedTokens.first)

    // Rejection, then a refresh that the endpoint answers with an error echoing the secret and the token.
    server.mode = .answer(
      status: 400,
      body: #"{"error":"invalid_client","error_description":"secret \#(Self.secretCanary) token \#(firstToken)"}"#)
    let waited = OutcomeLog<TokenOutcome>()
    try onManager { manager in
      // The refused request waits for the refresh its rejection started (which fails).
      let serial = manager.values["partner"]?.serial ?? 0
      manager.retryAfterRejection(token: "partner", serial: serial, endpoint: "r /x") { waited.append($0) }
    }
    #expect(waitFor { waited.count == 1 })
    waited.all.forEach(record)

    // An operator refresh against garbage, then against a good endpoint.
    server.mode = .garbage
    let refreshed = OutcomeLog<Result<TokenPublicState, TokenOperationError>>()
    try onManager { $0.refreshToken(named: "partner") { refreshed.append($0) } }
    #expect(waitFor { refreshed.count == 1 })
    server.mode = .issue(expiresIn: 3600)
    try onManager { $0.refreshToken(named: "partner") { refreshed.append($0) } }
    #expect(waitFor { refreshed.count == 2 })
    refreshed.all.forEach(record)

    // Operator commands, including a refused value that contains a canary.
    record(try onManager { $0.setToken(named: "api", value: Self.setCanary, expiresIn: .seconds(60)) })
    record(try onManager { $0.setToken(named: "api", value: Self.setCanary + "\r\nX: y", expiresIn: nil) })
    record(try onManager { $0.invalidateToken(named: "partner") })
    let used = OutcomeLog<TokenOutcome>()
    try onManager { $0.waitForRefresh(token: "partner") { used.append($0) } }
    #expect(waitFor { used.count == 1 })
    for outcome in used.all { texts.append(String(describing: outcome)) }
    for state in try onManager({ $0.tokenStates() }) {
      texts.append(state.json.serializedString())
      texts.append(String(describing: state))
      texts.append(String(reflecting: state))
    }
    try onManager { $0.stop() }

    // Everything the subsystem made visible.
    for snapshot in snapshots.all {
      texts.append(String(describing: snapshot))
      texts.append(String(reflecting: snapshot))
      var dumped = ""
      dump(snapshot, to: &dumped)
      texts.append(dumped)
      for entry in snapshot.entries {
        texts.append(String(describing: entry))
        if let grant = entry.grant {
          texts.append(String(describing: grant))
          texts.append(String(reflecting: grant))
          var dumpedGrant = ""
          dump(grant, to: &dumpedGrant)
          texts.append(dumpedGrant)
        }
      }
    }
    for record in persistence.load() {
      texts.append(String(describing: record))
      texts.append(String(reflecting: record))
      texts.append(record.lastError ?? "")
      var dumped = ""
      dump(record, to: &dumped)
      texts.append(dumped)
    }
    let fetched = FetchedToken(accessToken: SecretValue(firstToken), expiresIn: .seconds(1), tokenType: "Bearer")
    texts.append(String(describing: fetched))
    texts.append(String(reflecting: fetched))
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue(Self.setCanary)))
    _ = lifecycle.start(restoring: nil, now: .epoch)
    texts.append(String(describing: lifecycle))
    texts.append(String(reflecting: lifecycle))
    texts.append(String(describing: config))
    let logLines = pipeLogger.lines()

    // The test saw the real thing: tokens were issued, failures and states were recorded, lines logged.
    #expect(server.issuedTokens.count >= 3)
    #expect(logLines.contains { $0.contains("token refresh failed") && $0.contains("<redacted>") })
    #expect(logLines.contains { $0.contains("token refreshed") && $0.contains("fingerprint") })
    #expect(texts.all.contains { $0.contains("invalid_client") })

    let canaries = [Self.secretCanary, Self.tokenCanary, Self.setCanary] + server.issuedTokens
    for text in texts.all + logLines {
      for canary in canaries {
        // A Bool, so that a failure report does not print the canary itself.
        let leaked = text.contains(canary)
        #expect(!leaked, "a canary leaked into: \(text.replacing(canary, with: "<CANARY>"))")
      }
    }
  }
}
