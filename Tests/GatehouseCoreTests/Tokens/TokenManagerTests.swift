import Dispatch
import GatehouseNet
import Synchronization
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

#if canImport(Glibc)
  import Glibc
#endif

/// A `TokenManager` on its own loop, with a manual clock, a fake fetcher and in-memory persistence. The
/// manager is only touched on its loop, through `run`.
final class TokenManagerHarness: @unchecked Sendable {
  let group: EventLoopGroup
  let clock: ManualTokenClock
  let fetcher: FakeTokenFetcher
  let persistence: InMemoryTokenPersistence
  let pipeLogger = PipeLogger()
  private var manager: TokenManager!
  private let published = Mutex<[TokenValues]>([])

  var loop: EventLoop { group.loops[0] }

  init(
    tokens: [TokenConfig], persistence: InMemoryTokenPersistence = InMemoryTokenPersistence(),
    clock: ManualTokenClock = ManualTokenClock(), fetcher: FakeTokenFetcher = FakeTokenFetcher(),
    fileCheckInterval: Duration = .seconds(3600)
  ) throws {
    group = try EventLoopGroup(loopCount: 1)
    self.clock = clock
    self.fetcher = fetcher
    self.persistence = persistence
    let loop = group.loops[0]
    try runOnLoop(loop) { [self] in
      manager = TokenManager(
        tokens: tokens, loop: loop, fetcher: fetcher, persistence: persistence, clock: clock,
        logger: pipeLogger.logger, fileCheckInterval: fileCheckInterval
      ) { [self] values in published.withLock { $0.append(values) } }
      manager.start()
    }
  }

  func run<T>(_ body: @escaping (TokenManager) throws -> T) throws -> T {
    try runOnLoop(loop) { [self] in try body(manager) }
  }

  /// The snapshot published last.
  var latest: TokenValues { published.withLock { $0.last ?? .empty } }
  var publishCount: Int { published.withLock { $0.count } }

  func latestValue(_ name: String) -> String? {
    latest[name]?.value.map { String(decoding: $0, as: UTF8.self) }
  }

  func shutdown() {
    _ = try? run { $0.stop() }
    group.shutdown()
  }
}

/// Outcomes collected from completions that run on the loop.
final class OutcomeLog<Value: Sendable>: Sendable {
  private let values = Mutex<[Value]>([])
  func append(_ value: Value) { values.withLock { $0.append(value) } }
  var all: [Value] { values.withLock { $0 } }
  var count: Int { values.withLock { $0.count } }
}

func grantText(_ outcome: TokenOutcome) -> String? {
  if case .available(let grant) = outcome { return String(decoding: grant.bytes, as: UTF8.self) }
  return nil
}

func oauth2Token(_ name: String = "partner", clientID: String = "gw", refreshBefore: Duration = .seconds(60)) throws
  -> TokenConfig
{
  TokenConfig(
    name: name,
    source: .oauth2ClientCredentials(try oauth2Config(port: 9, clientID: clientID, refreshBefore: refreshBefore)))
}

@Suite(.serialized) struct TokenManagerTests {
  @Test func twoHundredConcurrentWaitersAcrossAnExpiryCauseExactlyOneFetch() throws {
    let harness = try TokenManagerHarness(tokens: [try oauth2Token()])
    defer { harness.shutdown() }
    #expect(harness.fetcher.fetchCount == 1)
    try harness.run { _ in harness.fetcher.succeed("A", expiresIn: .seconds(3600)) }
    #expect(harness.latestValue("partner") == "A")

    // Past the expiry, before any timer noticed (the timers run on the real clock).
    harness.clock.advance(by: .seconds(3601))
    let outcomes = OutcomeLog<TokenOutcome>()
    let submitted = OutcomeLog<Int>()
    // 200 requests from many threads at once, each hopping onto the manager's loop.
    DispatchQueue.concurrentPerform(iterations: 200) { _ in
      try? harness.run { manager in
        manager.waitForRefresh(token: "partner") { outcomes.append($0) }
      }
      submitted.append(1)
    }
    try #require(waitFor { submitted.count == 200 })
    #expect(harness.fetcher.fetchCount == 2)
    #expect(outcomes.count == 0)
    #expect(harness.latest["partner"]?.state == .refreshing)
    #expect(harness.latest["partner"]?.value == nil)

    try harness.run { _ in harness.fetcher.succeed("B", expiresIn: .seconds(3600)) }
    try #require(waitFor { outcomes.count == 200 })
    #expect(outcomes.all.allSatisfy { $0 == .available(TokenGrant(bytes: Array("B".utf8), serial: 2)) })
    #expect(harness.fetcher.fetchCount == 2)
    #expect(harness.latestValue("partner") == "B")
    #expect(harness.latest["partner"]?.refreshSuccesses == 2)
  }

  @Test func waitersReleasedAfterTheSnapshotIsPublished() throws {
    let harness = try TokenManagerHarness(tokens: [try oauth2Token()])
    defer { harness.shutdown() }
    let seenInSnapshot = OutcomeLog<String?>()
    try harness.run { manager in
      manager.waitForRefresh(token: "partner") { _ in
        seenInSnapshot.append(manager.values["partner"]?.value.map { String(decoding: $0, as: UTF8.self) })
      }
      harness.fetcher.succeed("A")
    }
    #expect(seenInSnapshot.all == ["A"])
  }

  @Test func failedRefreshServesTheLastTokenUntilExpiryThenFails() throws {
    let harness = try TokenManagerHarness(tokens: [try oauth2Token()])
    defer { harness.shutdown() }
    try harness.run { _ in harness.fetcher.succeed("A", expiresIn: .seconds(3600)) }

    harness.clock.advance(by: .seconds(3540))
    try harness.run { $0.wakeUpAll() }
    #expect(harness.fetcher.fetchCount == 2)
    try harness.run { _ in harness.fetcher.fail("token endpoint x: answered 503 Service Unavailable") }
    let entry = try #require(harness.latest["partner"])
    #expect(entry.state == .error)
    #expect(entry.value.map { String(decoding: $0, as: UTF8.self) } == "A")
    #expect(entry.refreshFailures == 1)
    let state = try #require(try harness.run { $0.tokenState(named: "partner") })
    #expect(state.lastError == "token endpoint x: answered 503 Service Unavailable")

    let early = OutcomeLog<TokenOutcome>()
    try harness.run { $0.waitForRefresh(token: "partner") { early.append($0) } }
    #expect(early.all.map(grantText) == ["A"])

    // After the expiry the retry is due; it fails too, and the waiting request gets the failure.
    harness.clock.advance(by: .seconds(61))
    try harness.run { $0.wakeUpAll() }
    #expect(harness.latest["partner"]?.value == nil)
    let late = OutcomeLog<TokenOutcome>()
    try harness.run { $0.waitForRefresh(token: "partner") { late.append($0) } }
    #expect(harness.fetcher.fetchCount == 3)
    try harness.run { _ in harness.fetcher.fail("still down") }
    guard case .unavailable(let reason)? = late.all.first else {
      Issue.record("expected a failure, got \(late.all)")
      return
    }
    #expect(reason.state == .error)
    #expect(reason.reason == "still down")
    #expect(try harness.run { $0.refreshCounts()["partner"] } == TokenManager.RefreshCounts(success: 1, failure: 2))
  }

  @Test func rejectionStartsOneRefreshAndLateReportsOfTheOldValueAreIgnored() throws {
    let harness = try TokenManagerHarness(tokens: [try oauth2Token()])
    defer { harness.shutdown() }
    try harness.run { _ in harness.fetcher.succeed("A") }
    let serial = try #require(harness.latest["partner"]?.serial)
    let outcomes = OutcomeLog<TokenOutcome>()
    let others = OutcomeLog<TokenOutcome>()
    try harness.run { manager in
      for _ in 0..<5 { manager.reportRejected(token: "partner", serial: serial) }
      for index in 0..<3 {
        manager.retryAfterRejection(token: "partner", serial: serial, endpoint: "r /\(index)") { outcomes.append($0) }
      }
      // Other requests keep the rejected value until the new one is in hand.
      manager.waitForRefresh(token: "partner") { others.append($0) }
    }
    #expect(harness.fetcher.fetchCount == 2)
    #expect(harness.latest["partner"]?.state == .refreshing)
    #expect(harness.latestValue("partner") == "A")
    #expect(others.all.map(grantText) == ["A"])
    try harness.run { _ in harness.fetcher.succeed("B") }
    #expect(outcomes.all.map(grantText) == ["B", "B", "B"])
    try harness.run { $0.reportRejected(token: "partner", serial: serial) }
    #expect(harness.fetcher.fetchCount == 2)
    #expect(harness.latestValue("partner") == "B")
  }

  @Test func adminOperations() throws {
    let harness = try TokenManagerHarness(tokens: [
      try oauth2Token(), TokenConfig(name: "api", source: .fixed(SecretValue("static-value"))),
    ])
    defer { harness.shutdown() }
    try harness.run { _ in harness.fetcher.succeed("A", expiresIn: .seconds(600)) }
    let now = harness.clock.now

    let listed = try harness.run { $0.tokenStates() }
    #expect(listed.map(\.name) == ["partner", "api"])
    #expect(listed.map(\.type) == ["oauth2_client_credentials", "static"])
    #expect(listed[0].fingerprint == TokenFingerprint.of(SecretValue("A")))
    #expect(listed[0].expiresAt == (now + .seconds(600)).rfc3339)
    #expect(listed[0].refreshedAt == now.rfc3339)
    #expect(listed[1].state == .valid && listed[1].expiresAt == nil && listed[1].lastError == nil)
    #expect(listed[0].json["state"] == .string("valid"))
    #expect(listed[1].json["expires_at"] == .null)

    // Set: bad values are a 400 and change nothing.
    let refused = try harness.run { $0.setToken(named: "api", value: "a\r\nX-Evil: 1", expiresIn: nil) }
    #expect(refused == .failure(.invalidValue(.lineBreakOrNUL)))
    #expect((try? refused.get()) == nil && TokenOperationError.invalidValue(.lineBreakOrNUL).httpStatus == 400)
    let set = try harness.run { $0.setToken(named: "api", value: "new-value", expiresIn: .seconds(30)) }.get()
    #expect(set.state == .valid && set.fingerprint == TokenFingerprint.of(SecretValue("new-value")))
    #expect(set.expiresAt == (now + .seconds(30)).rfc3339)
    #expect(harness.latestValue("api") == "new-value")
    #expect(
      try harness.run { $0.setToken(named: "nope", value: "x", expiresIn: nil) } == .failure(.unknownToken("nope")))

    // Refresh now.
    let refreshes = OutcomeLog<Result<TokenPublicState, TokenOperationError>>()
    try harness.run { $0.refreshToken(named: "api") { refreshes.append($0) } }
    #expect(refreshes.all.first == .failure(.notRefreshable("api")))
    try harness.run { manager in
      manager.refreshToken(named: "partner") { refreshes.append($0) }
      manager.refreshToken(named: "partner") { refreshes.append($0) }  // joins the same refresh
    }
    #expect(harness.fetcher.fetchCount == 2)
    try harness.run { _ in harness.fetcher.succeed("B") }
    #expect(refreshes.count == 3)
    #expect((try? refreshes.all[1].get())?.fingerprint == TokenFingerprint.of(SecretValue("B")))
    try harness.run { $0.refreshToken(named: "partner") { refreshes.append($0) } }
    try harness.run { _ in harness.fetcher.fail("endpoint down") }
    #expect(refreshes.all.last == .failure(.refreshFailed("endpoint down")))
    #expect(TokenOperationError.refreshFailed("x").httpStatus == 502)

    // Invalidate: the oauth2 token refreshes on next use, not before.
    let invalid = try harness.run { $0.invalidateToken(named: "partner") }.get()
    #expect(invalid.state == .invalid)
    #expect(harness.latest["partner"]?.value == nil)
    #expect(harness.fetcher.fetchCount == 3)
    try harness.run { $0.waitForRefresh(token: "partner") { _ in } }
    #expect(harness.fetcher.fetchCount == 4)
    #expect(try harness.run { $0.invalidateToken(named: "api") }.get().state == .invalid)
  }

  @Test func restartReusesAnUnexpiredTokenWithoutANewLogin() throws {
    let persistence = InMemoryTokenPersistence()
    let clock = ManualTokenClock()
    do {
      let first = try TokenManagerHarness(tokens: [try oauth2Token()], persistence: persistence, clock: clock)
      defer { first.shutdown() }
      try first.run { _ in first.fetcher.succeed("A", expiresIn: .seconds(3600)) }
      #expect(persistence.record(named: "partner")?.value == SecretValue("A"))
    }
    clock.advance(by: .seconds(100))
    do {
      let second = try TokenManagerHarness(tokens: [try oauth2Token()], persistence: persistence, clock: clock)
      defer { second.shutdown() }
      #expect(second.fetcher.fetchCount == 0)
      #expect(second.latestValue("partner") == "A")
      #expect(try second.run { $0.tokenState(named: "partner") }?.refreshedAt == (clock.now - .seconds(100)).rfc3339)
    }
    do {
      // A different client is a different login: the stored token is not reused.
      let other = try TokenManagerHarness(
        tokens: [try oauth2Token(clientID: "other")], persistence: persistence, clock: clock)
      defer { other.shutdown() }
      #expect(other.fetcher.fetchCount == 1)
    }
    clock.advance(by: .seconds(3600))
    do {
      let expired = try TokenManagerHarness(tokens: [try oauth2Token()], persistence: persistence, clock: clock)
      defer { expired.shutdown() }
      #expect(expired.fetcher.fetchCount == 1)
      #expect(expired.latestValue("partner") == nil)
    }
  }

  @Test func restartRestoresAnOperatorSetValueForAnEmptyStaticToken() throws {
    let persistence = InMemoryTokenPersistence()
    let tokens = [TokenConfig(name: "api", source: .fixed(SecretValue("")))]
    do {
      let first = try TokenManagerHarness(tokens: tokens, persistence: persistence)
      defer { first.shutdown() }
      #expect(first.latest["api"]?.state == .missing)
      _ = try first.run { $0.setToken(named: "api", value: "set-by-operator", expiresIn: nil) }
    }
    let second = try TokenManagerHarness(tokens: tokens, persistence: persistence)
    defer { second.shutdown() }
    #expect(second.latestValue("api") == "set-by-operator")
  }

  @Test func fileTokensAreReadTrimmedAndReReadWhenTheFileChanges() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path + "/token"
    try directory.write("file-token-1\n", to: "token")
    let harness = try TokenManagerHarness(tokens: [TokenConfig(name: "legacy", source: .file(path: path))])
    defer { harness.shutdown() }
    #expect(harness.latestValue("legacy") == "file-token-1")

    try directory.write("file-token-two\r\n", to: "token")
    try harness.run { $0.checkFiles() }
    #expect(harness.latestValue("legacy") == "file-token-two")

    // No change, no read.
    let counts = try harness.run { $0.refreshCounts()["legacy"] }
    try harness.run { $0.checkFiles() }
    #expect(try harness.run { $0.refreshCounts()["legacy"] } == counts)

    // Gone: error, and the last value stays in use.
    unlink(path)
    try harness.run { $0.checkFiles() }
    #expect(harness.latest["legacy"]?.state == .error)
    #expect(harness.latestValue("legacy") == "file-token-two")
    #expect(try harness.run { $0.tokenState(named: "legacy") }?.lastError == "cannot open \(path): no such file")

    try directory.write("two\nlines", to: "token")
    try harness.run { $0.checkFiles() }
    #expect(harness.latest["legacy"]?.state == .error)

    try directory.write("", to: "token")
    try harness.run { $0.checkFiles() }
    #expect(harness.latest["legacy"]?.state == .missing)
    #expect(harness.latestValue("legacy") == nil)

    // Invalidated file tokens come back when the file changes.
    try directory.write("file-token-3", to: "token")
    try harness.run { $0.checkFiles() }
    _ = try harness.run { $0.invalidateToken(named: "legacy") }
    #expect(harness.latest["legacy"]?.state == .invalid)
    try directory.write("file-token-four", to: "token")
    try harness.run { $0.checkFiles() }
    #expect(harness.latestValue("legacy") == "file-token-four")
  }

  @Test func fileChangesArePickedUpByThePollTimer() throws {
    let directory = try TemporaryDirectory()
    try directory.write("first", to: "token")
    let harness = try TokenManagerHarness(
      tokens: [TokenConfig(name: "legacy", source: .file(path: directory.path + "/token"))],
      fileCheckInterval: .milliseconds(20))
    defer { harness.shutdown() }
    #expect(harness.latestValue("legacy") == "first")
    try directory.write("second-value", to: "token")
    #expect(waitFor { harness.latestValue("legacy") == "second-value" })
  }

  @Test func reloadKeepsUnchangedTokensAndRestartsChangedOnes() throws {
    let harness = try TokenManagerHarness(tokens: [
      try oauth2Token(), TokenConfig(name: "api", source: .fixed(SecretValue("one"))),
      TokenConfig(name: "gone", source: .fixed(SecretValue("x"))), try oauth2Token("moving", clientID: "c1"),
    ])
    defer { harness.shutdown() }
    try harness.run { _ in harness.fetcher.succeed("A") }
    #expect(harness.fetcher.fetchCount == 2)
    let outcomes = OutcomeLog<TokenOutcome>()
    try harness.run { manager in
      _ = manager.invalidateToken(named: "moving")
      manager.waitForRefresh(token: "moving") { outcomes.append($0) }
    }
    #expect(harness.fetcher.fetchCount == 3)

    try harness.run { manager in
      manager.apply(tokens: [
        try oauth2Token("moving", clientID: "c2"), TokenConfig(name: "api", source: .fixed(SecretValue("two"))),
        try oauth2Token(),
      ])
    }
    // Only the changed oauth2 token fetches again; the request waiting on it now waits on the new one.
    #expect(harness.fetcher.fetchCount == 4)
    #expect(outcomes.count == 0)
    #expect(harness.latest.entries.map(\.name) == ["moving", "api", "partner"])
    #expect(harness.latest.index(of: "partner") == 2)
    #expect(harness.latest["gone"] == nil)
    #expect(harness.latestValue("api") == "two")
    #expect(harness.latestValue("partner") == "A")
    try harness.run { _ in harness.fetcher.succeed("B") }
    #expect(outcomes.all.map(grantText) == ["B"])
    #expect(harness.latestValue("moving") == "B")
    #expect(harness.latestValue("partner") == "A")
    #expect(harness.latest["moving"]?.refreshSuccesses == 2)  // carried over from the replaced token

    // An invalidated static token comes back with a reload, even with the same value.
    _ = try harness.run { $0.invalidateToken(named: "api") }
    #expect(harness.latestValue("api") == nil)
    try harness.run { manager in
      manager.apply(tokens: [
        try oauth2Token("moving", clientID: "c2"), TokenConfig(name: "api", source: .fixed(SecretValue("two"))),
        try oauth2Token(),
      ])
    }
    #expect(harness.latestValue("api") == "two")
    #expect(harness.fetcher.fetchCount == 4)
  }

  @Test func stopFailsWaitingRequests() throws {
    let harness = try TokenManagerHarness(tokens: [try oauth2Token()])
    let outcomes = OutcomeLog<TokenOutcome>()
    try harness.run { $0.waitForRefresh(token: "partner") { outcomes.append($0) } }
    harness.shutdown()
    guard case .unavailable(let reason)? = outcomes.all.first else {
      Issue.record("expected a failure")
      return
    }
    #expect(reason.reason == "gateway is stopping")
  }

  @Test func unknownTokensFailAtOnce() throws {
    let harness = try TokenManagerHarness(tokens: [])
    defer { harness.shutdown() }
    let outcomes = OutcomeLog<TokenOutcome>()
    try harness.run { $0.waitForRefresh(token: "nope") { outcomes.append($0) } }
    #expect(outcomes.all == [.unavailable(TokenUnavailable(state: .missing, reason: "no such token"))])
    #expect(harness.latest.entries.isEmpty)
  }

  @Test func backgroundRefreshAgainstARealEndpointWithShortLivedTokens() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .issue(expiresIn: 2)
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.loops[0]
    let values = OutcomeLog<String?>()
    let config = TokenConfig(
      name: "partner",
      source: .oauth2ClientCredentials(try oauth2Config(port: server.port, refreshBefore: .seconds(1))))
    let manager = UncheckedBox<TokenManager?>(nil)
    // Kept until the manager has stopped: it owns the descriptor the manager logs to.
    let pipeLogger = PipeLogger()
    defer { withExtendedLifetime(pipeLogger) {} }
    try runOnLoop(loop) {
      manager.value = TokenManager(tokens: [config], loop: loop, logger: pipeLogger.logger) { snapshot in
        values.append(snapshot["partner"]?.value.map { String(decoding: $0, as: UTF8.self) })
      }
      manager.value?.start()
    }
    defer { _ = try? runOnLoop(loop) { manager.value?.stop() } }
    // Tokens live 2 s and refresh 1 s before expiry: three tokens within a few seconds, none missed.
    #expect(waitFor(timeout: .seconds(15)) { server.issuedTokens.count >= 3 })
    #expect(waitFor { values.all.contains("tok-3") })
    let seen = values.all.compactMap { $0 }
    #expect(seen.starts(with: ["tok-1"]))
    #expect(seen.contains("tok-2"))
  }
}

/// A directory under /tmp removed when the value goes away.
final class TemporaryDirectory {
  let path: String

  init() throws {
    var template = Array("/tmp/gatehouse-tokens-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw TokenTestFailure(description: "mkdtemp failed") }
    path = String(cString: made)
  }

  deinit {
    if let directory = opendir(path) {
      while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != "." && name != ".." { unlink(path + "/" + name) }
      }
      closedir(directory)
    }
    rmdir(path)
  }

  /// Replaces the file atomically (write a temporary, then rename), as deploy tools do.
  func write(_ text: String, to name: String) throws {
    let temporary = path + "/." + name + ".tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw TokenTestFailure(description: "open failed: \(errno)") }
    let bytes = Array(text.utf8)
    let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
    guard written == bytes.count, rename(temporary, path + "/" + name) == 0 else {
      throw TokenTestFailure(description: "write failed")
    }
  }
}
