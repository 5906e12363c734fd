import GatehouseConfig

/// The state machine of one named token (Docs/behaviour.md): which value requests may use, when to refresh, and what
/// to tell waiting requests. A pure value type: every event takes `now` and returns `Action`s that the owner
/// (`TokenManager`) performs — fetching, timers, publishing — so every rule is tested with a manual clock.
///
/// Rules:
/// - At most one refresh is in flight (`startRefresh` carries a ticket; a completion with any other ticket
///   is ignored). However many requests wait, they are all released by that refresh's one
///   `releaseWaiters` action.
/// - oauth2 tokens refresh in the background `refresh_before_s` before expiry (at most half the token's
///   lifetime before it, so short-lived tokens do not refresh in a loop), and on demand when a request
///   needs a value and none is usable.
/// - A failed refresh sets `error` with `lastError`; requests keep the last value that has not expired and
///   was not invalidated by an operator. oauth2 refreshes are retried with exponential backoff (1 s
///   doubling to 60 s); during the backoff requests that have no usable value fail at once instead of
///   piling onto a broken endpoint.
/// - `reportRejected` (a backend said no to an oauth2 value) starts a refresh, and the value is still
///   sent until a new one is in hand — while the refresh runs, and if it fails, until it expires: one
///   endpoint's 401 must not stop every route that uses the token. The request that was refused waits
///   for the new value (`retryAfterRejection`). Rejections are remembered per endpoint (route and path,
///   `RejectingEndpoints`): an endpoint that caused a refresh and rejects the fresh value too answers
///   on its own from then on, and causes no more refreshes; each such futile refresh lengthens
///   `rejectionHoldOff` for the next fresh value (`maximumRejectionHoldOff`). Static and file values
///   cannot be refreshed: a backend's rejection changes nothing about them (the request path counts it
///   per route).
/// - `invalidate` (an operator) makes the value unusable; an oauth2 token then refreshes on next use.
///   Static and file tokens stay `invalid` until `set`, a config reload (the owner starts a new
///   lifecycle), or (file) the file changing.
/// - Static values with CR, LF or NUL (or other control characters) are `error` and never sent; an empty
///   static value is `missing`.
public struct TokenLifecycle: Sendable {
  /// Where values come from, which decides whether and how the token can be refreshed.
  public enum Kind: Sendable, Equatable {
    /// A value from the config: never refreshes.
    case fixed(SecretValue)
    /// A file: a "refresh" is a read, started when the file changes (the owner polls it).
    case file
    /// Fetched from a token endpoint.
    case oauth2(refreshBefore: Duration)
  }

  /// Identifies one refresh; only its completion is accepted.
  public struct RefreshTicket: Sendable, Hashable, CustomStringConvertible {
    let id: UInt64
    public var description: String { "refresh#\(id)" }
  }

  /// What the owner must do after an event, in this order.
  public enum Action: Sendable, Equatable {
    /// The usable value, state, expiry or last error changed: publish a new snapshot and persist.
    case publish
    /// Complete every request waiting for the refresh that just ended.
    case releaseWaiters(TokenOutcome)
    /// Call `wakeUp(now:)` at this instant (nil: no timer needed). Replaces any earlier wake-up.
    case scheduleWakeUp(at: TokenInstant?)
    /// Fetch (oauth2) or read (file) a new value, then report `refreshSucceeded` or `refreshFailed`.
    case startRefresh(RefreshTicket)
  }

  /// The answer to a request that needs the token now.
  public enum Decision: Sendable, Equatable {
    case use(TokenGrant)
    /// A refresh is in flight (maybe just started): wait for `releaseWaiters`.
    case wait
    case unavailable(TokenUnavailable)
  }

  /// The answer to an operator's "refresh now".
  public enum RefreshNowDecision: Sendable, Equatable {
    /// A refresh started; its outcome comes with `releaseWaiters`.
    case started
    /// A refresh was already in flight; its outcome comes with `releaseWaiters`.
    case joined
    /// A static token: there is nothing to refresh from.
    case notRefreshable
  }

  /// The current value with its times.
  struct Credential: Sendable {
    var value: SecretValue
    /// The value's bytes and the forms answers echoing it are masked in: made once, here,
    /// when the value is set, rather than for every answer that masks it.
    var spellings: SecretSpellings
    var serial: UInt64
    var refreshedAt: TokenInstant
    var expiresAt: TokenInstant?
    /// When the background refresh starts (oauth2 with an expiry only).
    var refreshAt: TokenInstant?
    /// An operator said no: never handed out again.
    var rejected = false
    /// A backend rejected this oauth2 value: a new one is due, and this one is still sent until
    /// the new one is in hand (or it expires).
    var rejectedByBackend = false
    /// The value was fetched because the one before it was rejected.
    var fetchedAfterRejection = false
    /// The serial of the rejected value this one replaced (`fetchedAfterRejection` only).
    var replacedSerial: UInt64?
    /// False for values that come from the config or a file: those are the source of truth, so they are
    /// not copied into the store.
    var persistsValue: Bool
  }

  /// What a publish is about; a publish is due whenever this changes.
  private struct PublishedFacts: Equatable {
    var state: TokenState
    var serial: UInt64?
    var usable: Bool
    var expiresAt: TokenInstant?
    var lastError: String?
    var ownAnswers: Set<String>
    var rejectionsIgnoredUntil: TokenInstant?
  }

  /// How long the backoff after a failed refresh may grow.
  public static let maximumRetryDelay: Duration = .seconds(60)
  /// The earliest a new value is refreshed again, whatever its lifetime: a guard against endpoints that
  /// issue already-expired tokens.
  public static let minimumRefreshInterval: Duration = .seconds(1)
  /// How long a value fetched because of a rejection is kept although backends reject it too. Fetching
  /// yet another one would not help (the backend refuses what the token endpoint hands out, or uses the
  /// status for something else), and every rejected request would cost a token request.
  public static let rejectionHoldOff: Duration = .seconds(10)
  /// How long `rejectionHoldOff` may grow: each futile refresh in a row (an endpoint rejected the value
  /// fetched because it rejected the one before) doubles it, so that endpoints that answer 401 on their
  /// own, met one path after another, cannot make a refresh every 10 s either.
  public static let maximumRejectionHoldOff: Duration = .seconds(320)
  /// A run of futile refreshes is forgotten after this long without one: the hold-off is back to
  /// `rejectionHoldOff`, so a real revocation much later is acted on as fast as ever.
  public static let futileRefreshMemory: Duration = .seconds(600)

  public let kind: Kind
  private(set) var credential: Credential?
  /// The last refresh (or the configured value) failed; cleared by a success, `set` or `invalidate`.
  private(set) var failed = false
  /// Why the last refresh or read failed; cleared by a success or `set`. Never holds a token value.
  public private(set) var lastError: String?
  private(set) var inFlight: RefreshTicket?
  /// The refresh in flight replaces a rejected value: the serial of that value.
  private var inFlightReplacing: UInt64?
  /// Which endpoints rejected which values (oauth2 only).
  private(set) var endpoints = RejectingEndpoints()
  /// Futile refreshes in a row (see `maximumRejectionHoldOff`); reset by a refresh that helped (the
  /// endpoint that asked for it took the new value) or `futileRefreshMemory` without one.
  private var futileRefreshes = 0
  private var lastFutileAt: TokenInstant?
  /// The value whose refresh was last found futile: counted once however many endpoints say so.
  private var lastFutileSerial: UInt64?
  private(set) var consecutiveFailures = 0
  /// No automatic refresh before this instant (backoff after a failure).
  private(set) var retryAt: TokenInstant?
  /// Set by `invalidate` on an oauth2 token: refresh when a request next needs it, not before.
  private var refreshOnNextUseOnly = false
  private var lastTicket: UInt64 = 0
  private var lastSerial: UInt64 = 0
  private var published: PublishedFacts?
  private var scheduledWakeUp: TokenInstant?
  // Effects collected during one event and turned into actions by `finish`.
  private var pendingRelease: TokenOutcome?
  private var pendingStart: RefreshTicket?

  public init(kind: Kind) {
    self.kind = kind
  }

  // MARK: Reading

  /// True when a refresh is in flight.
  public var isRefreshing: Bool { inFlight != nil }
  /// When the current value expires; nil without a value or without an expiry.
  public var expiresAt: TokenInstant? { credential?.expiresAt }
  /// When the current value was obtained.
  public var refreshedAt: TokenInstant? { credential?.refreshedAt }
  /// The current value even if unusable, for fingerprints. Never send it: use `usableGrant(at:)`.
  public var currentValue: SecretValue? { credential?.value }
  /// The serial of the current value (0 before the first value).
  public var currentSerial: UInt64 { credential?.serial ?? 0 }
  /// Whether the current value was rejected (by a backend or an operator).
  public var isRejected: Bool { credential.map { $0.rejected || $0.rejectedByBackend } ?? false }
  /// Endpoints (`RejectingEndpoints.key`) whose rejections are their own answers: the request
  /// path neither retries nor reports them.
  public var ownAnswerEndpoints: Set<String> { endpoints.ownAnswers }
  /// Whether a rejection can lead to a new value (oauth2 tokens).
  public var isRefreshable: Bool {
    if case .oauth2 = kind { return true }
    return false
  }
  /// Until then, a backend's rejection of the current value is not acted on (`rejectionHoldOff`, doubled
  /// for each futile refresh in a row up to `maximumRejectionHoldOff`).
  public var rejectionsIgnoredUntil: TokenInstant? {
    guard let credential, credential.fetchedAfterRejection else { return nil }
    let holdOff = min(Self.rejectionHoldOff * (1 << min(futileRefreshes, 16)), Self.maximumRejectionHoldOff)
    return credential.refreshedAt + holdOff
  }

  /// The value a request may send now: present, not invalidated by an operator, not expired. A value a
  /// backend rejected is still sent until a new one is in hand.
  public func usableGrant(at now: TokenInstant) -> TokenGrant? {
    guard let credential, !credential.rejected else { return nil }
    if let expiresAt = credential.expiresAt, now >= expiresAt { return nil }
    return TokenGrant(bytes: credential.spellings.value, serial: credential.serial, spellings: credential.spellings)
  }

  /// The public state at `now`. A refresh in flight wins, then a failure, then the value's own condition.
  public func state(at now: TokenInstant) -> TokenState {
    if inFlight != nil { return .refreshing }
    if failed { return .error }
    guard let credential else { return .missing }
    if credential.rejected || credential.rejectedByBackend { return .invalid }
    if let expiresAt = credential.expiresAt {
      if now >= expiresAt { return .expired }
      if case .oauth2(let refreshBefore) = kind, now >= expiresAt - refreshBefore { return .expiring }
    }
    return .valid
  }

  /// The instant of the next time-driven change (a due refresh, entering `expiring`, expiry), or nil.
  public func nextWakeUp(after now: TokenInstant) -> TokenInstant? {
    var earliest = pendingRefreshTime()
    func consider(_ instant: TokenInstant?) {
      guard let instant, instant > now else { return }
      earliest = earliest.map { min($0, instant) } ?? instant
    }
    // A rejected value's expiry changes nothing anyone sees: it is unusable either way.
    if let credential, !credential.rejected, let expiresAt = credential.expiresAt {
      consider(expiresAt)
      if case .oauth2(let refreshBefore) = kind { consider(expiresAt - refreshBefore) }
    }
    return earliest
  }

  /// The record to persist for this token. Values from the config or a file are left out.
  public func persisted(name: String, source: String, now: TokenInstant) -> PersistedToken {
    PersistedToken(
      name: name, source: source,
      value: credential.flatMap { $0.persistsValue && !$0.rejected ? $0.value : nil },
      expiresAt: credential?.expiresAt, refreshedAt: credential?.refreshedAt,
      state: state(at: now), lastError: lastError)
  }

  // MARK: Events

  /// Starts the token: takes the configured value, or a restored one (same name and source, checked by the
  /// caller) when it is still usable, or starts the first fetch or read.
  public mutating func start(restoring persisted: PersistedToken?, now: TokenInstant) -> [Action] {
    switch kind {
    case .fixed(let configured):
      if configured.value.isEmpty {
        // An empty config value means "set through the admin API"; a value set that way survives restarts.
        // A value stored as `invalid` was refused by a backend in an earlier version and still
        // sent (the store holds no value for one an operator invalidated): it is `valid` now.
        if let restored = Self.restorable(persisted, now: now, keepingRefused: true) { adopt(restored, now: now) }
      } else if let problem = TokenValueProblem.check(configured.value) {
        failed = true
        lastError = "configured value refused: \(problem)"
      } else {
        replaceCredential(value: configured, expiresAt: nil, now: now, persistsValue: false)
      }
    case .file:
      beginRefresh()
    case .oauth2:
      // Reusing an unexpired token avoids a login at every restart; with none, `finish` starts a fetch.
      if let restored = Self.restorable(persisted, now: now) { adopt(restored, now: now) }
    }
    return finish(now: now)
  }

  /// A timer set by `scheduleWakeUp` fired (early or late does no harm).
  public mutating func wakeUp(now: TokenInstant) -> [Action] {
    finish(now: now)
  }

  /// A request needs the value now.
  public mutating func requestValue(now: TokenInstant) -> (Decision, [Action]) {
    startRefreshIfDue(now: now)
    if let grant = usableGrant(at: now) { return (.use(grant), finish(now: now)) }
    switch kind {
    case .fixed, .file:
      return (.unavailable(unavailability(at: now)), finish(now: now))
    case .oauth2:
      if inFlight != nil { return (.wait, finish(now: now)) }
      if let retryAt, now < retryAt { return (.unavailable(unavailability(at: now)), finish(now: now)) }
      beginRefresh()
      return (.wait, finish(now: now))
    }
  }

  /// The refresh `ticket` produced a value. `expiresIn` nil means the value does not expire.
  public mutating func refreshSucceeded(
    _ ticket: RefreshTicket, value: SecretValue, expiresIn: Duration?, now: TokenInstant
  ) -> [Action] {
    guard inFlight == ticket else { return finish(now: now) }
    inFlight = nil
    switch TokenValueProblem.check(value.value) {
    case .empty?:
      if case .file = kind {
        // An empty file is "no token yet", like an empty static value.
        credential = nil
        failed = false
        lastError = nil
        pendingRelease = .unavailable(unavailability(at: now))
        return finish(now: now)
      }
      return recordFailure("the new value is empty", now: now)
    case let problem?:
      return recordFailure("the new value was refused: \(problem)", now: now)
    case nil:
      break
    }
    let persists: Bool
    switch kind {
    case .fixed, .file: persists = false
    case .oauth2: persists = true
    }
    replaceCredential(value: value, expiresAt: expiresIn.map { now + $0 }, now: now, persistsValue: persists)
    credential?.fetchedAfterRejection = inFlightReplacing != nil
    credential?.replacedSerial = inFlightReplacing
    failed = false
    lastError = nil
    consecutiveFailures = 0
    retryAt = nil
    pendingRelease = usableGrant(at: now).map { .available($0) } ?? .unavailable(unavailability(at: now))
    return finish(now: now)
  }

  /// The refresh `ticket` failed; `error` must not contain a secret (the fetcher redacts).
  public mutating func refreshFailed(_ ticket: RefreshTicket, error: String, now: TokenInstant) -> [Action] {
    guard inFlight == ticket else { return finish(now: now) }
    inFlight = nil
    return recordFailure(error, now: now)
  }

  /// A backend rejected the value with this serial (nil: whatever the current value is) at `endpoint`
  /// (`RejectingEndpoints.key`; nil when not known). A report about an older value is ignored: that value
  /// was already replaced. So is one inside `rejectionHoldOff`, and one from an endpoint that answers on
  /// its own. Static and file values are not changed by it.
  public mutating func reportRejected(serial: UInt64?, endpoint: String? = nil, now: TokenInstant) -> [Action] {
    _ = noteRejection(serial: serial, endpoint: endpoint, now: now)
    return finish(now: now)
  }

  /// A backend rejected the value with `serial` at `endpoint`, and the request wants to go again: with a
  /// new value (`wait` while it is fetched), or — when the rejection asks for none (an endpoint that
  /// answers on its own, `rejectionHoldOff`, a static value) — with whatever `requestValue` gives, so
  /// the endpoint's answer to it is the client's. During a failure backoff no new value can be had:
  /// `unavailable`.
  public mutating func retryAfterRejection(serial: UInt64, endpoint: String?, now: TokenInstant) -> (
    Decision, [Action]
  ) {
    let wanted = noteRejection(serial: serial, endpoint: endpoint, now: now)
    startRefreshIfDue(now: now)
    if wanted, currentSerial == serial {
      if inFlight != nil { return (.wait, finish(now: now)) }
      return (.unavailable(unavailability(at: now)), finish(now: now))
    }
    return requestValue(now: now)
  }

  /// `endpoint` accepted the value with `serial` (nil: some value): if its rejections were its own answers,
  /// they count again. If it asked for that very value, the refresh helped: a run of futile ones ends.
  public mutating func reportAccepted(endpoint: String, serial: UInt64? = nil, now: TokenInstant) -> [Action] {
    if let serial, let current = credential, current.serial == serial, let replaced = current.replacedSerial,
      endpoints.causedRefresh(of: replaced, endpoint)
    {
      futileRefreshes = 0
      lastFutileAt = nil
    }
    endpoints.noteAccepted(endpoint)
    return finish(now: now)
  }

  /// Records a backend's rejection; true when it asks for a new value (a refresh started, runs, or
  /// follows the backoff).
  private mutating func noteRejection(serial: UInt64?, endpoint: String?, now: TokenInstant) -> Bool {
    guard case .oauth2 = kind, var current = credential, !current.rejected, serial == nil || serial == current.serial
    else { return false }
    if let last = lastFutileAt, now >= last + Self.futileRefreshMemory {
      futileRefreshes = 0
      lastFutileAt = nil
    }
    if let endpoint {
      if endpoints.isOwnAnswer(endpoint) { return false }
      // It asked for this very value and refuses it too: a new one would not help.
      if let replaced = current.replacedSerial, endpoints.causedRefresh(of: replaced, endpoint) {
        endpoints.noteOwnAnswer(endpoint)
        if lastFutileSerial != current.serial {
          lastFutileSerial = current.serial
          futileRefreshes += 1
        }
        lastFutileAt = now
        return false
      }
    }
    if let until = rejectionsIgnoredUntil, now < until { return false }
    if let endpoint { endpoints.noteCausedRefresh(of: current.serial, endpoint) }
    if !current.rejectedByBackend {
      current.rejectedByBackend = true
      credential = current
      failed = false
    }
    // Within a backoff the retry timer refreshes; otherwise at once, so waiting requests get a new value.
    if inFlight == nil, retryAt.map({ now >= $0 }) ?? true { beginRefresh() }
    return true
  }

  /// An operator marked the token invalid (admin `invalidate`).
  public mutating func invalidate(now: TokenInstant) -> [Action] {
    if var current = credential {
      current.rejected = true
      credential = current
    }
    failed = false
    switch kind {
    case .fixed, .file:
      break
    case .oauth2:
      refreshOnNextUseOnly = true
      retryAt = nil
    }
    return finish(now: now)
  }

  /// An operator set the value (admin `PUT`); it replaces a refresh in flight, whose waiters get this value.
  public mutating func set(value: SecretValue, expiresIn: Duration?, now: TokenInstant) throws(TokenValueProblem)
    -> [Action]
  {
    if let problem = TokenValueProblem.check(value.value) { throw problem }
    replaceCredential(value: value, expiresAt: expiresIn.map { now + $0 }, now: now, persistsValue: true)
    failed = false
    lastError = nil
    consecutiveFailures = 0
    retryAt = nil
    refreshOnNextUseOnly = false
    if inFlight != nil {
      inFlight = nil
      pendingRelease = usableGrant(at: now).map { .available($0) } ?? .unavailable(unavailability(at: now))
    }
    return finish(now: now)
  }

  /// An operator asked for a refresh now (admin `refresh`). Ignores the failure backoff.
  public mutating func refreshNow(now: TokenInstant) -> (RefreshNowDecision, [Action]) {
    switch kind {
    case .fixed:
      return (.notRefreshable, finish(now: now))
    case .file, .oauth2:
      if inFlight != nil { return (.joined, finish(now: now)) }
      beginRefresh()
      return (.started, finish(now: now))
    }
  }

  /// A file token's file changed (or appeared, or vanished): read it again.
  public mutating func sourceChanged(now: TokenInstant) -> [Action] {
    if inFlight == nil { beginRefresh() }
    return finish(now: now)
  }

  /// The owner is stopping: the refresh in flight will not be completed; its waiters are failed.
  public mutating func abandonRefresh(reason: String, now: TokenInstant) -> [Action] {
    if inFlight != nil {
      inFlight = nil
      pendingRelease = .unavailable(TokenUnavailable(state: state(at: now), reason: reason))
    }
    return finish(now: now)
  }

  // MARK: Internals

  /// A stored value worth adopting at start. `invalid` ones are not, except (with
  /// `keepingRefused`) for a fixed token: there an `invalid` value is one a backend refused
  /// and that was still sent, and the store is its only source.
  private static func restorable(
    _ persisted: PersistedToken?, now: TokenInstant, keepingRefused: Bool = false
  ) -> PersistedToken? {
    guard let persisted, let value = persisted.value, TokenValueProblem.check(value.value) == nil else {
      return nil
    }
    switch persisted.state {
    case .invalid: if !keepingRefused { return nil }
    case .valid, .expiring, .expired, .refreshing, .missing, .error: break
    }
    if let expiresAt = persisted.expiresAt, now >= expiresAt { return nil }
    return persisted
  }

  private mutating func adopt(_ restored: PersistedToken, now: TokenInstant) {
    guard let value = restored.value else { return }
    replaceCredential(
      value: value, expiresAt: restored.expiresAt, now: restored.refreshedAt ?? now, persistsValue: true)
  }

  private mutating func replaceCredential(
    value: SecretValue, expiresAt: TokenInstant?, now: TokenInstant, persistsValue: Bool
  ) {
    lastSerial += 1
    var refreshAt: TokenInstant?
    if case .oauth2(let refreshBefore) = kind, let expiresAt {
      // Refresh `refreshBefore` ahead, but never more than half the lifetime ahead: a 30 s token with a 60 s
      // margin would otherwise be due for refresh the moment it arrives.
      let lifetime = now.duration(to: expiresAt)
      let margin = min(refreshBefore, lifetime / 2)
      refreshAt = max(expiresAt - margin, now + Self.minimumRefreshInterval)
    }
    credential = Credential(
      value: value, spellings: SecretSpellings(Array(value.value.utf8)), serial: lastSerial, refreshedAt: now,
      expiresAt: expiresAt, refreshAt: refreshAt,
      persistsValue: persistsValue)
  }

  private mutating func recordFailure(_ message: String, now: TokenInstant) -> [Action] {
    failed = true
    lastError = message
    consecutiveFailures += 1
    switch kind {
    case .fixed, .file:
      break  // files are re-read when they change; nothing to retry on a timer
    case .oauth2:
      retryAt = now + Self.retryDelay(afterFailures: consecutiveFailures)
    }
    // Waiters needed a fresh value: the old one, if any, is either unusable or was not what they waited for.
    pendingRelease = .unavailable(TokenUnavailable(state: .error, reason: message))
    return finish(now: now)
  }

  /// 1 s, 2 s, 4 s … up to `maximumRetryDelay`.
  public static func retryDelay(afterFailures failures: Int) -> Duration {
    let exponent = min(max(failures - 1, 0), 16)
    return min(.seconds(1 << exponent), maximumRetryDelay)
  }

  private mutating func beginRefresh() {
    lastTicket += 1
    let ticket = RefreshTicket(id: lastTicket)
    inFlight = ticket
    inFlightReplacing = credential.flatMap { $0.rejected || $0.rejectedByBackend ? $0.serial : nil }
    refreshOnNextUseOnly = false
    pendingStart = ticket
  }

  /// When an automatic refresh should start, or nil when none is wanted. Both `nextWakeUp` and
  /// `startRefreshIfDue` use this, so a wake-up at that time always starts the refresh (no timer spins).
  private func pendingRefreshTime() -> TokenInstant? {
    guard case .oauth2 = kind, inFlight == nil, !refreshOnNextUseOnly else { return nil }
    let neededAt: TokenInstant?
    if let credential, !credential.rejected, !credential.rejectedByBackend {
      neededAt = credential.refreshAt  // nil for a token without expiry: nothing to do until rejected
    } else {
      neededAt = .epoch  // missing or rejected: as soon as the backoff allows
    }
    guard let neededAt else { return nil }
    return retryAt.map { max($0, neededAt) } ?? neededAt
  }

  private mutating func startRefreshIfDue(now: TokenInstant) {
    if let due = pendingRefreshTime(), due <= now { beginRefresh() }
  }

  private func unavailability(at now: TokenInstant) -> TokenUnavailable {
    let state = state(at: now)
    if failed, let lastError { return TokenUnavailable(state: state, reason: "refresh failed: \(lastError)") }
    let reason: String
    switch state {
    case .valid, .expiring: reason = "token is usable"
    case .expired: reason = "token expired at \(credential?.expiresAt?.rfc3339 ?? "?")"
    case .invalid:
      switch kind {
      case .fixed: reason = "token was rejected; set a new value"
      case .file: reason = "token was rejected; replace the file or set a new value"
      case .oauth2: reason = "token was rejected and no new one could be fetched yet"
      }
    case .refreshing: reason = "token is being refreshed"
    case .missing: reason = "token has no value"
    case .error: reason = lastError ?? "token is in error"
    }
    return TokenUnavailable(state: state, reason: reason)
  }

  /// Ends an event: starts a due refresh, then turns the collected effects into actions.
  private mutating func finish(now: TokenInstant) -> [Action] {
    startRefreshIfDue(now: now)
    var actions: [Action] = []
    let facts = PublishedFacts(
      state: state(at: now), serial: credential?.serial, usable: usableGrant(at: now) != nil,
      expiresAt: credential?.expiresAt, lastError: lastError, ownAnswers: endpoints.ownAnswers,
      rejectionsIgnoredUntil: rejectionsIgnoredUntil)
    if facts != published {
      published = facts
      actions.append(.publish)
    }
    if let release = pendingRelease {
      pendingRelease = nil
      actions.append(.releaseWaiters(release))
    }
    let wakeUp = nextWakeUp(after: now)
    if wakeUp != scheduledWakeUp {
      scheduledWakeUp = wakeUp
      actions.append(.scheduleWakeUp(at: wakeUp))
    }
    if let start = pendingStart {
      pendingStart = nil
      actions.append(.startRefresh(start))
    }
    return actions
  }
}
