import GatehouseConfig
import GatehouseLogging
import GatehouseNet

/// Runs every configured token on the control loop: owns one `TokenLifecycle` per token, performs what they
/// ask (fetches, file reads, timers), persists changes, and publishes an immutable `TokenValues` snapshot
/// whenever a value, state or counter changes. Request loops read that snapshot without locks and come
/// here (through `loop.execute`) only to report a rejected token or wait for a refresh.
///
/// Confined to `loop`: create it anywhere, then call every method on the loop thread. Completions run on
/// the loop, after the snapshot that reflects the same change has been published.
public final class TokenManager {
  /// Refreshes by result, for `gatehouse_token_refresh_total{token,result}`. A file read counts as a refresh.
  public struct RefreshCounts: Sendable, Equatable {
    public var success = 0
    public var failure = 0
  }

  /// One token and everything the manager keeps for it.
  private final class Slot {
    let config: TokenConfig
    /// The position in the snapshot; changes only when a reload reorders the tokens.
    var index: Int
    /// Persisted records are only restored for the same source (see `PersistedToken.source`).
    let source: String
    var lifecycle: TokenLifecycle
    var waiters: [(TokenOutcome) -> Void] = []
    var timer: TimerHandle?
    var fileStamp: TokenFile.Stamp?
    var counts = RefreshCounts()
    /// Values this token had before its current one (a few), still redacted from error
    /// text: a replaced value may not have expired, and an endpoint may echo it.
    var previousValues: [SecretValue] = []

    func rememberCurrentValue() {
      guard let value = lifecycle.currentValue else { return }
      previousValues.append(value)
      if previousValues.count > 4 { previousValues.removeFirst() }
    }

    init(config: TokenConfig, index: Int) {
      self.config = config
      self.index = index
      source = TokenManager.sourceFingerprint(config.source)
      let kind: TokenLifecycle.Kind
      switch config.source {
      case .fixed(let value): kind = .fixed(value)
      case .file: kind = .file
      case .oauth2ClientCredentials(let oauth2): kind = .oauth2(refreshBefore: oauth2.refreshBefore)
      }
      lifecycle = TokenLifecycle(kind: kind)
    }

    var name: String { config.name }
  }

  public let loop: EventLoop
  private let clock: any TokenClock
  private let fetcher: any TokenFetcher
  private let persistence: (any TokenPersistence)?
  private let logger: Logger
  private let publish: (TokenValues) -> Void
  private let fileCheckInterval: Duration
  private var slots: [Slot] = []
  private var slotsByName: [String: Slot] = [:]
  private var fileTimer: TimerHandle?
  /// Nesting of public entry points; the snapshot is published and completions run when it returns to 0.
  private var eventDepth = 0
  private var needsPublish = false
  private var pendingCompletions: [() -> Void] = []
  private var started = false
  private var stopped = false

  /// The snapshot published last.
  public private(set) var values = TokenValues.empty

  /// - Parameters:
  ///   - fileCheckInterval: how often `file` tokens are checked for changes.
  ///   - publish: receives each new snapshot, on `loop`; hand it to the request loops.
  public init(
    tokens: [TokenConfig], loop: EventLoop, fetcher: any TokenFetcher = OAuth2ClientCredentialsFetcher(),
    persistence: (any TokenPersistence)? = nil, clock: any TokenClock = SystemTokenClock(), logger: Logger,
    fileCheckInterval: Duration = .seconds(1), publish: @escaping (TokenValues) -> Void
  ) {
    self.loop = loop
    self.fetcher = fetcher
    self.persistence = persistence
    self.clock = clock
    self.logger = logger
    self.fileCheckInterval = fileCheckInterval
    self.publish = publish
    for (index, config) in tokens.enumerated() {
      let slot = Slot(config: config, index: index)
      slots.append(slot)
      slotsByName[config.name] = slot
    }
  }

  // MARK: Lifecycle

  /// Restores persisted tokens, reads files, starts fetches, and publishes the first snapshot.
  public func start() {
    loop.assertInEventLoop()
    guard !started else { return }
    started = true
    withEvent {
      let persisted = persistence?.load() ?? []
      let now = clock.now
      for slot in slots {
        let record = persisted.first { $0.name == slot.name && $0.source == slot.source }
        perform(slot.lifecycle.start(restoring: record, now: now), on: slot)
      }
      needsPublish = true
      scheduleFileCheck()
    }
  }

  /// Cancels timers and fails every waiting request; completions of fetches still running are ignored.
  public func stop() {
    loop.assertInEventLoop()
    guard !stopped else { return }
    withEvent {
      let now = clock.now
      for slot in slots {
        perform(slot.lifecycle.abandonRefresh(reason: "gateway is stopping", now: now), on: slot)
        failWaiters(of: slot, reason: "gateway is stopping")
        if let timer = slot.timer { loop.cancelTimer(timer) }
        slot.timer = nil
      }
      if let fileTimer { loop.cancelTimer(fileTimer) }
      fileTimer = nil
      stopped = true
    }
  }

  /// Applies the tokens of a reloaded config. Static and file tokens are read again (Docs/behaviour.md), which also
  /// ends an `invalid` state. An oauth2 token whose configuration is unchanged keeps its value, state and
  /// any refresh in flight; a changed one starts afresh (still reusing its persisted value when endpoint,
  /// client and scope are unchanged). Requests waiting on a replaced token wait on its successor; removed
  /// tokens fail their waiters. Refresh counters carry over by name. Snapshot indices follow the new order.
  public func apply(tokens: [TokenConfig]) {
    loop.assertInEventLoop()
    guard !stopped else { return }
    withEvent {
      var next: [Slot] = []
      var fresh: [Slot] = []
      for (index, config) in tokens.enumerated() {
        let existing = slotsByName[config.name]
        if let existing, existing.config == config, case .oauth2ClientCredentials = config.source {
          existing.index = index
          next.append(existing)
        } else {
          let slot = Slot(config: config, index: index)
          slot.counts = existing?.counts ?? RefreshCounts()
          next.append(slot)
          fresh.append(slot)
        }
      }
      var movedWaiters: [String: [(TokenOutcome) -> Void]] = [:]
      for old in slots where !next.contains(where: { $0 === old }) {
        // A fetch still running for `old` finds it gone from `slotsByName` and is dropped.
        if let timer = old.timer { loop.cancelTimer(timer) }
        old.timer = nil
        if tokens.contains(where: { $0.name == old.name }) {
          movedWaiters[old.name] = old.waiters
          old.waiters.removeAll()
        } else {
          failWaiters(of: old, reason: "token was removed from the config")
        }
      }
      slots = next
      slotsByName = Dictionary(uniqueKeysWithValues: next.map { ($0.name, $0) })
      needsPublish = true
      guard started else { return }
      let persisted = persistence?.load() ?? []
      let now = clock.now
      for slot in fresh {
        let record = persisted.first { $0.name == slot.name && $0.source == slot.source }
        perform(slot.lifecycle.start(restoring: record, now: now), on: slot)
        for waiter in movedWaiters[slot.name] ?? [] { request(slot, completion: waiter) }
      }
      scheduleFileCheck()
    }
  }

  // MARK: Request path

  /// Completes with a usable value now, or after the refresh this call starts or joins, or with the reason
  /// the token cannot be had (the caller answers 401). Call it after `reportRejected`, or when the
  /// snapshot has no value for a token a route needs.
  public func waitForRefresh(token name: String, completion: @escaping (TokenOutcome) -> Void) {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name], !stopped else {
      completion(
        .unavailable(TokenUnavailable(state: .missing, reason: stopped ? "gateway is stopping" : "no such token")))
      return
    }
    withEvent { request(slot, completion: completion) }
  }

  private func request(_ slot: Slot, completion: @escaping (TokenOutcome) -> Void) {
    let (decision, actions) = slot.lifecycle.requestValue(now: clock.now)
    switch decision {
    case .use(let grant): pendingCompletions.append { completion(.available(grant)) }
    case .wait: slot.waiters.append(completion)
    case .unavailable(let reason): pendingCompletions.append { completion(.unavailable(reason)) }
    }
    perform(actions, on: slot)
  }

  /// A backend rejected the token value with `serial` (from the snapshot entry or grant the request used;
  /// nil means whatever the current value is) at `endpoint` (`RejectingEndpoints.key`). An oauth2 token
  /// starts one refresh and keeps sending the value until the new one is in hand.
  public func reportRejected(token name: String, serial: UInt64? = nil, endpoint: String? = nil) {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name], !stopped else { return }
    withEvent {
      let before = noteState(slot)
      perform(slot.lifecycle.reportRejected(serial: serial, endpoint: endpoint, now: clock.now), on: slot)
      logRejection(slot, before: before, endpoint: endpoint)
    }
  }

  /// A backend rejected the value with `serial` at `endpoint` and the request wants to go again: completes
  /// with a new value once it is fetched, or with the value to send again when the rejection asks for no
  /// new one (the endpoint's answer to it is then the client's), or with why no value can be had.
  public func retryAfterRejection(
    token name: String, serial: UInt64, endpoint: String?, completion: @escaping (TokenOutcome) -> Void
  ) {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name], !stopped else {
      completion(
        .unavailable(TokenUnavailable(state: .missing, reason: stopped ? "gateway is stopping" : "no such token")))
      return
    }
    withEvent {
      let before = noteState(slot)
      let (decision, actions) = slot.lifecycle.retryAfterRejection(serial: serial, endpoint: endpoint, now: clock.now)
      switch decision {
      case .use(let grant): pendingCompletions.append { completion(.available(grant)) }
      case .wait: slot.waiters.append(completion)
      case .unavailable(let reason): pendingCompletions.append { completion(.unavailable(reason)) }
      }
      perform(actions, on: slot)
      logRejection(slot, before: before, endpoint: endpoint)
    }
  }

  /// `endpoint` accepted the token's value with `serial` (nil: some value): if its rejections were its own
  /// answers, they count again; if it asked for that value, the refresh helped.
  public func reportAccepted(token name: String, endpoint: String, serial: UInt64? = nil) {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name], !stopped else { return }
    withEvent {
      let before = slot.lifecycle.ownAnswerEndpoints.count
      perform(slot.lifecycle.reportAccepted(endpoint: endpoint, serial: serial, now: clock.now), on: slot)
      if slot.lifecycle.ownAnswerEndpoints.count < before {
        logger.info("endpoint accepts the token again", ["token": .string(name), "endpoint": .string(endpoint)])
      }
    }
  }

  private func noteState(_ slot: Slot) -> (rejected: Bool, ownAnswers: Int) {
    (slot.lifecycle.isRejected, slot.lifecycle.ownAnswerEndpoints.count)
  }

  private func logRejection(_ slot: Slot, before: (rejected: Bool, ownAnswers: Int), endpoint: String?) {
    if !before.rejected && slot.lifecycle.isRejected {
      logger.info(
        "token rejected by backend",
        ["token": .string(slot.name), "serial": .int(Int(slot.lifecycle.currentSerial))])
    }
    if let endpoint, slot.lifecycle.ownAnswerEndpoints.count > before.ownAnswers {
      logger.info(
        "endpoint rejects fresh tokens too: its rejections no longer cause refreshes",
        ["token": .string(slot.name), "endpoint": .string(endpoint)])
    }
  }

  // MARK: Operations (admin API)

  /// Every token's public state, in config order.
  public func tokenStates() -> [TokenPublicState] {
    loop.assertInEventLoop()
    return slots.map(publicState)
  }

  public func tokenState(named name: String) -> TokenPublicState? {
    loop.assertInEventLoop()
    return slotsByName[name].map(publicState)
  }

  /// Sets a value (admin `PUT`). `expiresIn` nil: it does not expire.
  public func setToken(named name: String, value: String, expiresIn: Duration?) -> Result<
    TokenPublicState, TokenOperationError
  > {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name] else { return .failure(.unknownToken(name)) }
    guard !stopped else { return .failure(.stopped) }
    return withEvent {
      do throws(TokenValueProblem) {
        let previous = slot.lifecycle.currentValue
        let actions = try slot.lifecycle.set(value: SecretValue(value), expiresIn: expiresIn, now: clock.now)
        if let previous {
          slot.previousValues.append(previous)
          if slot.previousValues.count > 4 { slot.previousValues.removeFirst() }
        }
        perform(actions, on: slot)
        return .success(publicState(slot))
      } catch {
        return .failure(.invalidValue(error))
      }
    }
  }

  /// Refreshes now (admin `refresh`): fetches (oauth2) or re-reads (file), ignoring the failure backoff.
  /// Completes with the new public state, or the error (`last_error`).
  public func refreshToken(
    named name: String, completion: @escaping (Result<TokenPublicState, TokenOperationError>) -> Void
  ) {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name] else { return completion(.failure(.unknownToken(name))) }
    guard !stopped else { return completion(.failure(.stopped)) }
    withEvent {
      let (decision, actions) = slot.lifecycle.refreshNow(now: clock.now)
      switch decision {
      case .notRefreshable:
        pendingCompletions.append { completion(.failure(.notRefreshable(name))) }
      case .started, .joined:
        slot.waiters.append { [unowned self] outcome in
          switch outcome {
          case .available: completion(.success(publicState(slot)))
          case .unavailable(let reason): completion(.failure(.refreshFailed(reason.reason)))
          }
        }
      }
      perform(actions, on: slot)
    }
  }

  /// Marks the token `invalid` (admin `invalidate`). An oauth2 token refreshes on next use; a static or
  /// file token stays invalid until it is set, the config is reloaded or (file) the file changes.
  public func invalidateToken(named name: String) -> Result<TokenPublicState, TokenOperationError> {
    loop.assertInEventLoop()
    guard let slot = slotsByName[name] else { return .failure(.unknownToken(name)) }
    guard !stopped else { return .failure(.stopped) }
    return withEvent {
      perform(slot.lifecycle.invalidate(now: clock.now), on: slot)
      return .success(publicState(slot))
    }
  }

  /// Refresh counts per token name.
  public func refreshCounts() -> [String: RefreshCounts] {
    loop.assertInEventLoop()
    var counts: [String: RefreshCounts] = [:]
    for slot in slots { counts[slot.name] = slot.counts }
    return counts
  }

  // MARK: Time

  /// Runs every lifecycle's time-driven work as of the clock's now. The timers call this per token; tests
  /// with a manual clock call it after moving the clock.
  func wakeUpAll() {
    withEvent {
      let now = clock.now
      for slot in slots { perform(slot.lifecycle.wakeUp(now: now), on: slot) }
    }
  }

  /// Checks every file token for a change now (the timer does this every `fileCheckInterval`).
  func checkFiles() {
    withEvent {
      for slot in slots {
        guard case .file(let path) = slot.config.source else { continue }
        let stamp = TokenFile.stamp(path: path)
        guard stamp != slot.fileStamp else { continue }
        logger.info("token file changed", ["token": .string(slot.name), "path": .string(path)])
        perform(slot.lifecycle.sourceChanged(now: clock.now), on: slot)
      }
    }
  }

  /// Starts the periodic file check unless it runs already or there is no file token.
  private func scheduleFileCheck() {
    guard fileTimer == nil, !stopped,
      slots.contains(where: { if case .file = $0.config.source { true } else { false } })
    else { return }
    fileTimer = loop.scheduleTimer(after: fileCheckInterval) { [weak self] in
      guard let self, !stopped else { return }
      fileTimer = nil
      checkFiles()
      scheduleFileCheck()
    }
  }

  // MARK: Performing actions

  /// Runs `body` as one event: the snapshot is published once at the end, then completions run.
  private func withEvent<T>(_ body: () -> T) -> T {
    eventDepth += 1
    let result = body()
    eventDepth -= 1
    guard eventDepth == 0 else { return result }
    if needsPublish, !stopped {
      needsPublish = false
      values = makeValues()
      publish(values)
    }
    while !pendingCompletions.isEmpty {
      let batch = pendingCompletions
      pendingCompletions.removeAll()
      for completion in batch { completion() }
    }
    return result
  }

  private func perform(_ actions: [TokenLifecycle.Action], on slot: Slot) {
    for action in actions {
      switch action {
      case .publish:
        needsPublish = true
        persistence?.save(slot.lifecycle.persisted(name: slot.name, source: slot.source, now: clock.now))
      case .releaseWaiters(let outcome):
        let waiters = slot.waiters
        slot.waiters.removeAll()
        for waiter in waiters { pendingCompletions.append { waiter(outcome) } }
      case .scheduleWakeUp(let instant):
        scheduleWakeUp(slot, at: instant)
      case .startRefresh(let ticket):
        startRefresh(slot, ticket: ticket)
      }
    }
  }

  private func scheduleWakeUp(_ slot: Slot, at instant: TokenInstant?) {
    if let timer = slot.timer { loop.cancelTimer(timer) }
    slot.timer = nil
    guard let instant, !stopped else { return }
    let delay = max(.zero, clock.now.duration(to: instant))
    slot.timer = loop.scheduleTimer(after: delay) { [weak self, weak slot] in
      guard let self, let slot, !stopped else { return }
      slot.timer = nil
      withEvent { perform(slot.lifecycle.wakeUp(now: clock.now), on: slot) }
    }
  }

  private func startRefresh(_ slot: Slot, ticket: TokenLifecycle.RefreshTicket) {
    switch slot.config.source {
    case .fixed:
      assertionFailure("a static token never starts a refresh")
    case .file(let path):
      // Stamp before reading: a change during the read shows up as a new stamp at the next check.
      slot.fileStamp = TokenFile.stamp(path: path)
      let result = TokenFile.read(path: path)
      completeRefresh(
        slot, ticket: ticket, result: result.map { FetchedToken(accessToken: $0, expiresIn: nil, tokenType: nil) })
    case .oauth2ClientCredentials(let config):
      logger.debug("token refresh started", ["token": .string(slot.name)])
      fetcher.fetch(config, on: loop) { [weak self, weak slot] result in
        guard let self, let slot, !stopped, slotsByName[slot.name] === slot else { return }
        withEvent { completeRefresh(slot, ticket: ticket, result: result) }
      }
    }
  }

  private func completeRefresh(
    _ slot: Slot, ticket: TokenLifecycle.RefreshTicket, result: Result<FetchedToken, TokenFetchError>
  ) {
    let now = clock.now
    needsPublish = true  // the counters are part of the snapshot
    switch result {
    case .success(let token):
      let problem = TokenValueProblem.check(token.accessToken.value)
      slot.rememberCurrentValue()
      var isFile = false
      if case .file = slot.config.source { isFile = true }
      let actions = slot.lifecycle.refreshSucceeded(
        ticket, value: token.accessToken, expiresIn: token.expiresIn, now: now)
      if problem == nil || (problem == .empty && isFile) {
        slot.counts.success += 1
        logger.info(
          "token refreshed",
          [
            "token": .string(slot.name),
            "fingerprint": slot.lifecycle.currentValue.map { .string(TokenFingerprint.of($0)) } ?? .null,
            "expires_in_s": token.expiresIn.map { .int(Int($0.components.seconds)) } ?? .null,
          ])
      } else {
        // The lifecycle refused the value (it would break the header): that is a failed refresh.
        slot.counts.failure += 1
        logger.warn(
          "token refresh failed",
          ["token": .string(slot.name), "error": .string("the new value was refused: \(problem!)")])
      }
      perform(actions, on: slot)
    case .failure(let error):
      slot.counts.failure += 1
      let message = redactor().redact(error.message)
      logger.warn("token refresh failed", ["token": .string(slot.name), "error": .string(message)])
      perform(slot.lifecycle.refreshFailed(ticket, error: message, now: now), on: slot)
    }
  }

  /// Every secret the manager knows: client secrets and current token values, so an endpoint that echoes
  /// one of them (or another token's value) in an error cannot get it into `last_error` or a log line.
  private func redactor() -> SecretRedactor {
    var redactor = SecretRedactor()
    for slot in slots {
      if case .oauth2ClientCredentials(let config) = slot.config.source { redactor.add(config.clientSecret.value) }
      if let value = slot.lifecycle.currentValue { redactor.add(value.value) }
      for value in slot.previousValues { redactor.add(value.value) }
    }
    return redactor
  }

  private func failWaiters(of slot: Slot, reason: String) {
    let waiters = slot.waiters
    slot.waiters.removeAll()
    let outcome = TokenOutcome.unavailable(TokenUnavailable(state: slot.lifecycle.state(at: clock.now), reason: reason))
    for waiter in waiters { pendingCompletions.append { waiter(outcome) } }
  }

  // MARK: Views

  private func makeValues() -> TokenValues {
    let now = clock.now
    return TokenValues(
      entries: slots.map { slot in
        let grant = slot.lifecycle.usableGrant(at: now)
        return TokenValues.Entry(
          name: slot.name, index: slot.index, value: grant?.bytes, serial: slot.lifecycle.currentSerial,
          state: slot.lifecycle.state(at: now), expiresAt: grant == nil ? nil : slot.lifecycle.expiresAt,
          refreshable: slot.lifecycle.isRefreshable, rejectionsIgnoredUntil: slot.lifecycle.rejectionsIgnoredUntil,
          refreshSuccesses: slot.counts.success, refreshFailures: slot.counts.failure,
          ownAnswerEndpoints: slot.lifecycle.ownAnswerEndpoints, spellings: grant?.spellings)
      })
  }

  private func publicState(_ slot: Slot) -> TokenPublicState {
    let lifecycle = slot.lifecycle
    return TokenPublicState(
      name: slot.name, type: slot.config.source.typeName, state: lifecycle.state(at: clock.now),
      fingerprint: lifecycle.currentValue.map(TokenFingerprint.of), expiresAt: lifecycle.expiresAt?.rfc3339,
      refreshedAt: lifecycle.refreshedAt?.rfc3339, lastError: lifecycle.lastError)
  }

  /// Identifies what a token is configured to be, without its secret: a persisted oauth2 token is reused
  /// only by the same endpoint, client and scope.
  static func sourceFingerprint(_ source: TokenSource) -> String {
    let description: String
    switch source {
    case .fixed: description = "static"
    case .file(let path): description = "file\n\(path)"
    case .oauth2ClientCredentials(let config):
      description = "oauth2\n\(config.tokenURL)\n\(config.clientID)\n\(config.scope ?? "")"
    }
    return String(TokenFingerprint.sha256Hex(Array(description.utf8)).prefix(16))
  }
}
