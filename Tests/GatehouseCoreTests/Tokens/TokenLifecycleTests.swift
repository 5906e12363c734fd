import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// The token state machine alone, driven with explicit instants: no loop, no sockets, no sleeping.
@Suite struct TokenLifecycleTests {
  typealias Action = TokenLifecycle.Action

  static let t0 = TokenInstant(millisecondsSinceEpoch: 1_800_000_000_000)
  func at(_ seconds: Int) -> TokenInstant { Self.t0 + .seconds(seconds) }

  func ticket(_ actions: [Action]) -> TokenLifecycle.RefreshTicket? {
    for action in actions {
      if case .startRefresh(let ticket) = action { return ticket }
    }
    return nil
  }

  func released(_ actions: [Action]) -> TokenOutcome? {
    for action in actions {
      if case .releaseWaiters(let outcome) = action { return outcome }
    }
    return nil
  }

  func wakeUp(_ actions: [Action]) -> TokenInstant?? {
    for action in actions {
      if case .scheduleWakeUp(let instant) = action { return .some(instant) }
    }
    return .none
  }

  func value(_ lifecycle: TokenLifecycle, at now: TokenInstant) -> String? {
    lifecycle.usableGrant(at: now).map { String(decoding: $0.bytes, as: UTF8.self) }
  }

  /// An oauth2 lifecycle holding `value`, fetched at `at(0)` for `lifetime` seconds.
  func oauth2(value: String = "A", lifetime: Int = 3600, refreshBefore: Int = 60) -> TokenLifecycle {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(refreshBefore)))
    let start = lifecycle.start(restoring: nil, now: at(0))
    let ticket = ticket(start)!
    _ = lifecycle.refreshSucceeded(ticket, value: SecretValue(value), expiresIn: .seconds(lifetime), now: at(0))
    return lifecycle
  }

  // MARK: Static tokens

  @Test func staticTokenIsValidForeverAndNeverRefreshes() {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("abc")))
    let actions = lifecycle.start(restoring: nil, now: at(0))
    #expect(actions == [.publish])
    #expect(lifecycle.state(at: at(10_000_000)) == .valid)
    #expect(value(lifecycle, at: at(10_000_000)) == "abc")
    #expect(lifecycle.nextWakeUp(after: at(0)) == nil)
    let (decision, more) = lifecycle.requestValue(now: at(5))
    #expect(decision == .use(TokenGrant(bytes: Array("abc".utf8), serial: 1)))
    #expect(more.isEmpty)
    #expect(lifecycle.refreshNow(now: at(5)).0 == .notRefreshable)
  }

  @Test func emptyStaticTokenIsMissingAndRequestsFail() {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("")))
    _ = lifecycle.start(restoring: nil, now: at(0))
    #expect(lifecycle.state(at: at(0)) == .missing)
    let (decision, actions) = lifecycle.requestValue(now: at(0))
    guard case .unavailable(let reason) = decision else {
      Issue.record("expected unavailable, got \(decision)")
      return
    }
    #expect(reason.state == .missing)
    #expect(ticket(actions) == nil)
  }

  @Test(arguments: ["a\rb", "a\nb", "a\u{0}b", "line\r\n"])
  func staticValueWithLineBreakOrNULIsErrorAndNeverSent(_ bad: String) {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue(bad)))
    _ = lifecycle.start(restoring: nil, now: at(0))
    #expect(lifecycle.state(at: at(0)) == .error)
    #expect(lifecycle.usableGrant(at: at(0)) == nil)
    #expect(lifecycle.lastError == "configured value refused: token value must not contain CR, LF or NUL")
    #expect(!(lifecycle.lastError ?? "").contains(bad))
    if case .use = lifecycle.requestValue(now: at(0)).0 { Issue.record("a bad value was handed out") }
  }

  @Test func invalidatedStaticTokenStaysInvalidUntilSet() throws {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("abc")))
    _ = lifecycle.start(restoring: nil, now: at(0))
    let actions = lifecycle.invalidate(now: at(1))
    #expect(actions == [.publish])
    #expect(lifecycle.state(at: at(1)) == .invalid)
    let (decision, more) = lifecycle.requestValue(now: at(2))
    guard case .unavailable(let reason) = decision else {
      Issue.record("expected unavailable")
      return
    }
    #expect(reason.state == .invalid)
    #expect(ticket(more) == nil)
    #expect(lifecycle.state(at: at(3600)) == .invalid)
    _ = try lifecycle.set(value: SecretValue("def"), expiresIn: nil, now: at(10))
    #expect(lifecycle.state(at: at(10)) == .valid)
    #expect(value(lifecycle, at: at(10)) == "def")
  }

  /// One endpoint's 401 says nothing about the others: a static value a backend refused
  /// stays `valid` and is still sent (the request path counts the rejection per route).
  @Test func staticRejectionChangesNothing() {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("abc")))
    _ = lifecycle.start(restoring: nil, now: at(0))
    #expect(!lifecycle.isRefreshable)
    let actions = lifecycle.reportRejected(serial: 1, endpoint: "all /x", now: at(1))

    #expect(actions.isEmpty)
    #expect(lifecycle.state(at: at(1)) == .valid)
    #expect(value(lifecycle, at: at(1)) == "abc")
    #expect(lifecycle.ownAnswerEndpoints.isEmpty)
  }

  @Test func anOperatorsInvalidationOfAStaticValueStillStopsIt() {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("abc")))
    _ = lifecycle.start(restoring: nil, now: at(0))
    _ = lifecycle.invalidate(now: at(1))
    _ = lifecycle.reportAccepted(endpoint: "all /x", now: at(2))

    #expect(lifecycle.usableGrant(at: at(2)) == nil)
    #expect(lifecycle.state(at: at(2)) == .invalid)
  }

  /// A value fetched because of a rejection and rejected again at once is kept for
  /// `rejectionHoldOff`: one rejection episode costs one token request, not one per request.
  @Test func aValueFetchedAfterARejectionIsNotRefreshedAgainAtOnce() {
    var lifecycle = oauth2()
    #expect(lifecycle.rejectionsIgnoredUntil == nil)
    let refresh = try! #require(ticket(lifecycle.reportRejected(serial: 1, now: at(10))))
    _ = lifecycle.refreshSucceeded(refresh, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(11))
    let holdOff = Int(TokenLifecycle.rejectionHoldOff.components.seconds)
    #expect(lifecycle.rejectionsIgnoredUntil == at(11 + holdOff))

    let again = lifecycle.reportRejected(serial: 2, now: at(12))
    #expect(ticket(again) == nil)
    #expect(lifecycle.state(at: at(12)) == .valid)
    #expect(value(lifecycle, at: at(12)) == "B")

    // After the hold-off a rejection refreshes again.
    let later = lifecycle.reportRejected(serial: 2, now: at(11 + holdOff))
    #expect(ticket(later) != nil)
  }

  @Test func aValueFromAnOrdinaryRefreshIsRefreshedAtItsFirstRejection() {
    var lifecycle = oauth2()
    let refresh = ticket(lifecycle.refreshNow(now: at(5)).1)!
    _ = lifecycle.refreshSucceeded(refresh, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(5))

    #expect(lifecycle.rejectionsIgnoredUntil == nil)
    #expect(ticket(lifecycle.reportRejected(serial: 2, now: at(6))) != nil)
  }

  // MARK: oauth2: first fetch, background refresh

  @Test func oauth2StartsWithAFetchAndPublishesTheValue() {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    let start = lifecycle.start(restoring: nil, now: at(0))
    let first = try! #require(ticket(start))
    #expect(lifecycle.state(at: at(0)) == .refreshing)
    #expect(lifecycle.usableGrant(at: at(0)) == nil)
    let done = lifecycle.refreshSucceeded(first, value: SecretValue("A"), expiresIn: .seconds(3600), now: at(1))
    #expect(done.first == .publish)
    #expect(released(done) == .available(TokenGrant(bytes: Array("A".utf8), serial: 1)))
    #expect(wakeUp(done) == .some(at(1 + 3600 - 60)))
    #expect(ticket(done) == nil)
    #expect(lifecycle.state(at: at(1)) == .valid)
    #expect(lifecycle.refreshedAt == at(1))
    #expect(lifecycle.expiresAt == at(3601))
  }

  @Test func backgroundRefreshStartsRefreshBeforeExpiryAndKeepsServingTheOldValue() {
    var lifecycle = oauth2(lifetime: 3600, refreshBefore: 60)
    #expect(lifecycle.wakeUp(now: at(3539)).isEmpty)
    #expect(lifecycle.state(at: at(3539)) == .valid)
    let due = lifecycle.wakeUp(now: at(3540))
    let refresh = try! #require(ticket(due))
    #expect(lifecycle.state(at: at(3540)) == .refreshing)
    #expect(value(lifecycle, at: at(3550)) == "A")
    let (decision, more) = lifecycle.requestValue(now: at(3550))
    #expect(decision == .use(TokenGrant(bytes: Array("A".utf8), serial: 1)))
    #expect(ticket(more) == nil)
    let done = lifecycle.refreshSucceeded(refresh, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(3551))
    #expect(done.contains(.publish))
    #expect(value(lifecycle, at: at(3551)) == "B")
    #expect(lifecycle.currentSerial == 2)
  }

  @Test func expiringStateInsideTheRefreshWindowWhenNoRefreshRuns() {
    var lifecycle = oauth2(lifetime: 3600, refreshBefore: 60)
    let due = lifecycle.wakeUp(now: at(3540))
    let refresh = try! #require(ticket(due))
    _ = lifecycle.refreshFailed(refresh, error: "down", now: at(3541))
    // A failed refresh shows `error`; once the backoff retry succeeds and is then near its own expiry, it
    // is `expiring` until the next refresh starts.
    #expect(lifecycle.state(at: at(3541)) == .error)
    #expect(value(lifecycle, at: at(3541)) == "A")
    let retry = try! #require(ticket(lifecycle.wakeUp(now: at(3542))))
    _ = lifecycle.refreshSucceeded(retry, value: SecretValue("B"), expiresIn: .seconds(100), now: at(3542))
    #expect(lifecycle.state(at: at(3542)) == .valid)
    // Refresh at max(expiry - 60, ...) = 3582; between 3582 and the wake-up the state is expiring.
    #expect(lifecycle.state(at: at(3583)) == .expiring)
  }

  @Test func shortLivedTokensRefreshAtHalfTheirLifetimeNotInALoop() {
    var lifecycle = oauth2(lifetime: 30, refreshBefore: 60)
    // 60 s before a 30 s expiry would be "now": the refresh is moved to half the lifetime.
    #expect(lifecycle.nextWakeUp(after: at(0)) == at(15))
    #expect(lifecycle.wakeUp(now: at(14)).isEmpty)
    #expect(ticket(lifecycle.wakeUp(now: at(15))) != nil)
  }

  @Test func alreadyExpiredTokensFromTheEndpointWaitTheMinimumInterval() {
    let lifecycle = oauth2(lifetime: 0, refreshBefore: 60)
    #expect(lifecycle.nextWakeUp(after: at(0)) == at(1))
  }

  @Test func tokenWithoutExpiryNeverRefreshesOnATimer() {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    let first = ticket(lifecycle.start(restoring: nil, now: at(0)))!
    let done = lifecycle.refreshSucceeded(first, value: SecretValue("A"), expiresIn: nil, now: at(0))
    #expect(wakeUp(done) == .none)  // nothing was scheduled, and nothing needs to be
    #expect(lifecycle.nextWakeUp(after: at(0)) == nil)
    #expect(lifecycle.state(at: at(100_000_000)) == .valid)
  }

  // MARK: One refresh, many waiters

  @Test func twoHundredWaitersAcrossAnExpiryCauseExactlyOneFetch() {
    var lifecycle = oauth2(lifetime: 3600, refreshBefore: 60)
    // The background refresh timer has not fired (say the loop was busy): the first request after expiry
    // starts the refresh, and the other 199 join it.
    var starts: [TokenLifecycle.RefreshTicket] = []
    var waits = 0
    for index in 0..<200 {
      let (decision, actions) = lifecycle.requestValue(now: at(3600) + .milliseconds(Int64(index)))
      if let started = ticket(actions) { starts.append(started) }
      if decision == .wait { waits += 1 }
    }
    #expect(starts.count == 1)
    #expect(waits == 200)
    let done = lifecycle.refreshSucceeded(starts[0], value: SecretValue("B"), expiresIn: .seconds(3600), now: at(3601))
    #expect(done.filter { if case .releaseWaiters = $0 { true } else { false } }.count == 1)
    #expect(released(done) == .available(TokenGrant(bytes: Array("B".utf8), serial: 2)))
    for _ in 0..<10 {
      let (decision, actions) = lifecycle.requestValue(now: at(3602))
      #expect(decision == .use(TokenGrant(bytes: Array("B".utf8), serial: 2)))
      #expect(ticket(actions) == nil)
    }
  }

  @Test func aLateCompletionOfAnOlderRefreshIsIgnored() throws {
    var lifecycle = oauth2()
    let refresh = try #require(ticket(lifecycle.refreshNow(now: at(10)).1))
    _ = try lifecycle.set(value: SecretValue("operator"), expiresIn: nil, now: at(11))
    let late = lifecycle.refreshSucceeded(refresh, value: SecretValue("late"), expiresIn: .seconds(3600), now: at(12))
    #expect(released(late) == nil)
    #expect(value(lifecycle, at: at(12)) == "operator")
    let lateFailure = lifecycle.refreshFailed(refresh, error: "boom", now: at(12))
    #expect(released(lateFailure) == nil)
    #expect(lifecycle.state(at: at(12)) == .valid)
  }

  @Test func setDuringARefreshReleasesTheWaitersWithTheNewValue() throws {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    _ = lifecycle.start(restoring: nil, now: at(0))
    #expect(lifecycle.requestValue(now: at(0)).0 == .wait)
    let actions = try lifecycle.set(value: SecretValue("manual"), expiresIn: .seconds(600), now: at(1))
    #expect(released(actions) == .available(TokenGrant(bytes: Array("manual".utf8), serial: 1)))
    #expect(!lifecycle.isRefreshing)
    #expect(lifecycle.expiresAt == at(601))
  }

  // MARK: Failures

  @Test func failedRefreshKeepsTheLastUnexpiredValueThenFails() {
    var lifecycle = oauth2(lifetime: 3600, refreshBefore: 60)
    let refresh = ticket(lifecycle.wakeUp(now: at(3540)))!
    let failed = lifecycle.refreshFailed(
      refresh, error: "token endpoint x: answered 400: invalid_client", now: at(3541))
    #expect(failed.first == .publish)
    #expect(lifecycle.state(at: at(3541)) == .error)
    #expect(lifecycle.lastError == "token endpoint x: answered 400: invalid_client")
    #expect(value(lifecycle, at: at(3599)) == "A")
    #expect(lifecycle.usableGrant(at: at(3600)) == nil)
    #expect(lifecycle.state(at: at(3600)) == .error)
  }

  @Test func failuresBackOffAndRequestsFailFastDuringTheBackoff() {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    var refresh = ticket(lifecycle.start(restoring: nil, now: at(0)))!
    var now = at(0)
    for (failures, expectedDelay) in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 32), (7, 60), (8, 60)] {
      let failed = lifecycle.refreshFailed(refresh, error: "down \(failures)", now: now)
      #expect(released(failed) == .unavailable(TokenUnavailable(state: .error, reason: "down \(failures)")))
      #expect(wakeUp(failed) == .some(now + .seconds(expectedDelay)))
      // Inside the backoff: no new fetch, an immediate failure.
      let (decision, actions) = lifecycle.requestValue(now: now + .milliseconds(500))
      #expect(ticket(actions) == nil)
      guard case .unavailable(let reason) = decision else {
        Issue.record("expected a fast failure during the backoff")
        return
      }
      #expect(reason.state == .error)
      #expect(reason.reason == "refresh failed: down \(failures)")
      now = now + .seconds(expectedDelay)
      refresh = ticket(lifecycle.wakeUp(now: now))!
    }
    let done = lifecycle.refreshSucceeded(refresh, value: SecretValue("A"), expiresIn: .seconds(3600), now: now)
    #expect(released(done) != nil)
    #expect(lifecycle.lastError == nil)
    #expect(lifecycle.state(at: now) == .valid)
  }

  @Test func operatorRefreshIgnoresTheBackoff() {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    let first = ticket(lifecycle.start(restoring: nil, now: at(0)))!
    _ = lifecycle.refreshFailed(first, error: "down", now: at(0))
    let (decision, actions) = lifecycle.refreshNow(now: at(0))
    #expect(decision == .started)
    #expect(ticket(actions) != nil)
    #expect(lifecycle.refreshNow(now: at(0)).0 == .joined)
  }

  @Test func failedAdminRefreshOfAHealthyTokenDoesNotRetryBeforeItsRefreshTime() {
    var lifecycle = oauth2(lifetime: 3600, refreshBefore: 60)
    let refresh = ticket(lifecycle.refreshNow(now: at(100)).1)!
    let failed = lifecycle.refreshFailed(refresh, error: "down", now: at(100))
    #expect(wakeUp(failed) == .none)  // the wake-up at the refresh time stays as it was
    #expect(lifecycle.nextWakeUp(after: at(100)) == at(3540))
    #expect(value(lifecycle, at: at(200)) == "A")
  }

  @Test(arguments: ["", "bad\nvalue", "bad\u{0}"])
  func unusableValuesFromTheEndpointAreFailures(_ bad: String) {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    let first = ticket(lifecycle.start(restoring: nil, now: at(0)))!
    let actions = lifecycle.refreshSucceeded(first, value: SecretValue(bad), expiresIn: .seconds(60), now: at(0))
    #expect(lifecycle.state(at: at(0)) == .error)
    #expect(lifecycle.usableGrant(at: at(0)) == nil)
    guard case .unavailable? = released(actions) else {
      Issue.record("waiters must get the failure")
      return
    }
    if !bad.isEmpty { #expect(!(lifecycle.lastError ?? "").contains(bad)) }
  }

  // MARK: Rejection and invalidation

  /// A rejected value is still sent until a new one is in hand; the refused request waits
  /// for the new one.
  @Test func rejectionStartsOneRefreshAndKeepsSendingTheValue() {
    var lifecycle = oauth2()
    let rejected = lifecycle.reportRejected(serial: 1, now: at(10))
    let refresh = try! #require(ticket(rejected))
    #expect(value(lifecycle, at: at(10)) == "A")
    #expect(lifecycle.state(at: at(10)) == .refreshing)
    // More rejections of the same value join the refresh; other requests use the value.
    #expect(ticket(lifecycle.reportRejected(serial: 1, now: at(10))) == nil)
    #expect(lifecycle.requestValue(now: at(10)).0 == .use(TokenGrant(bytes: Array("A".utf8), serial: 1)))
    #expect(lifecycle.retryAfterRejection(serial: 1, endpoint: "r /a", now: at(10)).0 == .wait)
    let done = lifecycle.refreshSucceeded(refresh, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(11))
    #expect(released(done) == .available(TokenGrant(bytes: Array("B".utf8), serial: 2)))
  }

  /// With the token endpoint down, the rejected value is sent until it expires (Docs/behaviour.md:
  /// "requests get the last token that still has not expired"); the refused request itself
  /// cannot get a new one during the backoff.
  @Test func aRejectedValueIsStillSentWhenTheRefreshFails() {
    var lifecycle = oauth2(lifetime: 3600)
    let refresh = ticket(lifecycle.reportRejected(serial: 1, endpoint: "r /a", now: at(10)))!
    let failed = lifecycle.refreshFailed(refresh, error: "down", now: at(10))
    #expect(released(failed) == .unavailable(TokenUnavailable(state: .error, reason: "down")))
    #expect(lifecycle.state(at: at(10)) == .error)
    #expect(value(lifecycle, at: at(10)) == "A")
    #expect(lifecycle.requestValue(now: at(10)).0 == .use(TokenGrant(bytes: Array("A".utf8), serial: 1)))
    guard case .unavailable = lifecycle.retryAfterRejection(serial: 1, endpoint: "r /b", now: at(10)).0 else {
      Issue.record("a refused request got a value during the backoff")
      return
    }
    // Retried after the backoff, without a request asking; the value expires as it would.
    #expect(lifecycle.nextWakeUp(after: at(10)) == at(11))
    #expect(ticket(lifecycle.wakeUp(now: at(11))) != nil)
    #expect(lifecycle.usableGrant(at: at(3600)) == nil)
  }

  /// An endpoint that caused a refresh and rejects the fresh value too answers on its own:
  /// it causes no more refreshes (after the 10 s episode either), its refused requests go
  /// again with the value in hand, and it counts again once it accepts a value.
  @Test func anEndpointRejectingTheFreshValueTooCausesNoMoreRefreshes() {
    var lifecycle = oauth2()
    let first = ticket(lifecycle.retryAfterRejection(serial: 1, endpoint: "r /denied", now: at(10)).1)!
    _ = lifecycle.refreshSucceeded(first, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(11))
    let own = lifecycle.reportRejected(serial: 2, endpoint: "r /denied", now: at(11))
    #expect(own.contains(.publish))
    #expect(lifecycle.ownAnswerEndpoints == ["r /denied"])

    let later = lifecycle.retryAfterRejection(serial: 2, endpoint: "r /denied", now: at(100))
    #expect(later.0 == .use(TokenGrant(bytes: Array("B".utf8), serial: 2)))
    #expect(ticket(later.1) == nil)
    #expect(ticket(lifecycle.reportRejected(serial: 2, endpoint: "r /denied", now: at(200))) == nil)
    #expect(lifecycle.state(at: at(200)) == .valid)
    // Another endpoint's rejection (after the hold-off) is still acted on.
    #expect(ticket(lifecycle.reportRejected(serial: 2, endpoint: "r /other", now: at(300))) != nil)

    var accepted = oauth2()
    let refresh = ticket(accepted.reportRejected(serial: 1, endpoint: "r /denied", now: at(10)))!
    _ = accepted.refreshSucceeded(refresh, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(11))
    _ = accepted.reportRejected(serial: 2, endpoint: "r /denied", now: at(12))
    #expect(accepted.reportAccepted(endpoint: "r /denied", now: at(13)).contains(.publish))
    #expect(accepted.ownAnswerEndpoints.isEmpty)
    // After the hold-off (doubled by that futile refresh).
    #expect(ticket(accepted.reportRejected(serial: 2, endpoint: "r /denied", now: at(31))) != nil)
  }

  /// Drives one futile refresh at `at(start)`: `endpoint` rejects the current value (a
  /// refresh starts, the new value arrives a second later) and then the new value too.
  func futileRefresh(_ lifecycle: inout TokenLifecycle, endpoint: String, at start: Int) -> Bool {
    let serial = lifecycle.currentSerial
    guard let refresh = ticket(lifecycle.reportRejected(serial: serial, endpoint: endpoint, now: at(start))) else {
      return false
    }
    _ = lifecycle.refreshSucceeded(
      refresh, value: SecretValue("V\(start)"), expiresIn: .seconds(7200), now: at(start + 1))
    _ = lifecycle.reportRejected(serial: serial + 1, endpoint: endpoint, now: at(start + 1))
    return lifecycle.ownAnswerEndpoints.contains(endpoint)
  }

  /// Endpoints that answer on their own, met one path after another, cannot make a refresh
  /// every 10 s either: each futile refresh doubles the hold-off of the next fresh value (up
  /// to `maximumRejectionHoldOff`).
  @Test func futileRefreshesOneAfterAnotherLengthenTheHoldOff() {
    var lifecycle = oauth2()
    #expect(futileRefresh(&lifecycle, endpoint: "r /1", at: 10))
    #expect(lifecycle.rejectionsIgnoredUntil == at(11 + 20))
    #expect(ticket(lifecycle.reportRejected(serial: 2, endpoint: "r /2", now: at(25))) == nil)
    #expect(futileRefresh(&lifecycle, endpoint: "r /2", at: 31))
    #expect(lifecycle.rejectionsIgnoredUntil == at(32 + 40))
    #expect(ticket(lifecycle.reportRejected(serial: 3, endpoint: "r /3", now: at(60))) == nil)
    #expect(ticket(lifecycle.reportRejected(serial: 3, endpoint: "r /3", now: at(72))) != nil)

    var capped = oauth2()
    var start = 10
    for index in 0..<8 {
      #expect(futileRefresh(&capped, endpoint: "r /\(index)", at: start))
      // The next endpoint comes as soon as the hold-off allows.
      let holdOff = min(10 << (index + 1), Int(TokenLifecycle.maximumRejectionHoldOff.components.seconds))
      #expect(capped.rejectionsIgnoredUntil == at(start + 1 + holdOff))
      start += 1 + holdOff
    }
    #expect(TokenLifecycle.maximumRejectionHoldOff == .seconds(320))
  }

  /// A refresh that helped (the endpoint that asked for it takes the new value) ends the
  /// run of futile ones; so do `futileRefreshMemory` without one.
  @Test func aHelpfulRefreshOrAQuietSpellResetsTheHoldOff() {
    var helped = oauth2()
    #expect(futileRefresh(&helped, endpoint: "r /1", at: 10))
    #expect(futileRefresh(&helped, endpoint: "r /2", at: 40))
    let refresh = ticket(helped.reportRejected(serial: 3, endpoint: "r /revoked", now: at(200)))!
    _ = helped.refreshSucceeded(refresh, value: SecretValue("fresh"), expiresIn: .seconds(3600), now: at(201))
    #expect(helped.rejectionsIgnoredUntil == at(201 + 40))
    #expect(helped.reportAccepted(endpoint: "r /revoked", serial: 4, now: at(202)).contains(.publish))
    #expect(helped.rejectionsIgnoredUntil == at(201 + 10))
    // An endpoint that did not ask for the value taking it says nothing.
    var unrelated = oauth2()
    #expect(futileRefresh(&unrelated, endpoint: "r /1", at: 10))
    _ = unrelated.reportAccepted(endpoint: "r /other", serial: 2, now: at(12))
    #expect(unrelated.rejectionsIgnoredUntil == at(11 + 20))

    var quiet = oauth2()
    #expect(futileRefresh(&quiet, endpoint: "r /1", at: 10))
    #expect(futileRefresh(&quiet, endpoint: "r /2", at: 40))
    let memory = Int(TokenLifecycle.futileRefreshMemory.components.seconds)
    let later = ticket(quiet.reportRejected(serial: 3, endpoint: "r /3", now: at(41 + memory)))!
    _ = quiet.refreshSucceeded(later, value: SecretValue("late"), expiresIn: .seconds(3600), now: at(42 + memory))
    #expect(quiet.rejectionsIgnoredUntil == at(42 + memory + 10))
  }

  /// A refresh that an endpoint caused earlier, for an older value, does not make it an
  /// endpoint that answers on its own: only rejecting the value fetched for it does.
  @Test func anEndpointThatCausedAnOlderRefreshStillCausesOne() {
    var lifecycle = oauth2()
    let first = ticket(lifecycle.reportRejected(serial: 1, endpoint: "r /a", now: at(10)))!
    _ = lifecycle.refreshSucceeded(first, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(11))
    let second = ticket(lifecycle.reportRejected(serial: 2, endpoint: "r /b", now: at(30)))!
    _ = lifecycle.refreshSucceeded(second, value: SecretValue("C"), expiresIn: .seconds(3600), now: at(31))

    #expect(ticket(lifecycle.reportRejected(serial: 3, endpoint: "r /a", now: at(50))) != nil)
    #expect(lifecycle.ownAnswerEndpoints.isEmpty)
  }

  @Test func rejectionOfAnOlderValueIsIgnored() {
    var lifecycle = oauth2()
    let refresh = ticket(lifecycle.refreshNow(now: at(5)).1)!
    _ = lifecycle.refreshSucceeded(refresh, value: SecretValue("B"), expiresIn: .seconds(3600), now: at(5))
    let actions = lifecycle.reportRejected(serial: 1, now: at(6))
    #expect(ticket(actions) == nil)
    #expect(value(lifecycle, at: at(6)) == "B")
    #expect(lifecycle.state(at: at(6)) == .valid)
  }

  @Test func rejectionDuringABackoffWaitsForTheRetry() {
    var lifecycle = oauth2()
    let refresh = ticket(lifecycle.refreshNow(now: at(10)).1)!
    _ = lifecycle.refreshFailed(refresh, error: "down", now: at(10))
    let actions = lifecycle.reportRejected(serial: 1, now: at(10))
    #expect(ticket(actions) == nil)
    #expect(wakeUp(actions) == .some(at(11)))
    #expect(lifecycle.state(at: at(10)) == .invalid)
  }

  @Test func invalidatedOAuth2TokenRefreshesOnNextUseOnly() {
    var lifecycle = oauth2()
    let actions = lifecycle.invalidate(now: at(10))
    #expect(ticket(actions) == nil)
    #expect(lifecycle.state(at: at(10)) == .invalid)
    #expect(lifecycle.nextWakeUp(after: at(10)) == nil)
    #expect(lifecycle.wakeUp(now: at(500)).filter { if case .startRefresh = $0 { true } else { false } }.isEmpty)
    let (decision, next) = lifecycle.requestValue(now: at(600))
    #expect(decision == .wait)
    #expect(ticket(next) != nil)
  }

  // MARK: Files

  @Test func fileTokenReadsAtStartAndOnChange() {
    var lifecycle = TokenLifecycle(kind: .file)
    let read = ticket(lifecycle.start(restoring: nil, now: at(0)))!
    _ = lifecycle.refreshSucceeded(read, value: SecretValue("F1"), expiresIn: nil, now: at(0))
    #expect(value(lifecycle, at: at(0)) == "F1")
    let reread = ticket(lifecycle.sourceChanged(now: at(5)))!
    _ = lifecycle.refreshFailed(reread, error: "cannot open /x: permission denied", now: at(5))
    #expect(lifecycle.state(at: at(5)) == .error)
    #expect(value(lifecycle, at: at(5)) == "F1")
    #expect(lifecycle.nextWakeUp(after: at(5)) == nil)  // no timer retries: the file check does
    let third = ticket(lifecycle.sourceChanged(now: at(6)))!
    _ = lifecycle.refreshSucceeded(third, value: SecretValue(""), expiresIn: nil, now: at(6))
    #expect(lifecycle.state(at: at(6)) == .missing)
  }

  @Test func invalidatedFileTokenRecoversWhenTheFileChanges() {
    var lifecycle = TokenLifecycle(kind: .file)
    let read = ticket(lifecycle.start(restoring: nil, now: at(0)))!
    _ = lifecycle.refreshSucceeded(read, value: SecretValue("F1"), expiresIn: nil, now: at(0))
    _ = lifecycle.invalidate(now: at(1))
    #expect(lifecycle.requestValue(now: at(2)).0 != .wait)
    let reread = ticket(lifecycle.sourceChanged(now: at(3)))!
    _ = lifecycle.refreshSucceeded(reread, value: SecretValue("F2"), expiresIn: nil, now: at(3))
    #expect(lifecycle.state(at: at(3)) == .valid)
    #expect(value(lifecycle, at: at(3)) == "F2")
  }

  // MARK: Operator set

  @Test func setRefusesLineBreaksAndNUL() {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("abc")))
    _ = lifecycle.start(restoring: nil, now: at(0))
    for bad in ["x\ry", "x\ny", "x\u{0}y"] {
      #expect(throws: TokenValueProblem.lineBreakOrNUL) {
        _ = try lifecycle.set(value: SecretValue(bad), expiresIn: nil, now: at(1))
      }
    }
    #expect(throws: TokenValueProblem.empty) {
      _ = try lifecycle.set(value: SecretValue(""), expiresIn: nil, now: at(1))
    }
    #expect(value(lifecycle, at: at(1)) == "abc")
  }

  @Test func staticValueSetWithAnExpiryExpires() throws {
    var lifecycle = TokenLifecycle(kind: .fixed(SecretValue("")))
    _ = lifecycle.start(restoring: nil, now: at(0))
    let actions = try lifecycle.set(value: SecretValue("v"), expiresIn: .seconds(10), now: at(0))
    #expect(wakeUp(actions) == .some(at(10)))
    #expect(lifecycle.state(at: at(9)) == .valid)
    #expect(lifecycle.wakeUp(now: at(10)) == [.publish, .scheduleWakeUp(at: nil)])
    #expect(lifecycle.state(at: at(10)) == .expired)
    #expect(lifecycle.usableGrant(at: at(10)) == nil)
  }

  // MARK: Persistence

  @Test func restoresAnUnexpiredPersistedTokenWithoutFetching() {
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    let record = PersistedToken(
      name: "p", source: "s", value: SecretValue("saved"), expiresAt: at(1000), refreshedAt: at(-100), state: .valid,
      lastError: nil)
    let actions = lifecycle.start(restoring: record, now: at(0))
    #expect(ticket(actions) == nil)
    #expect(value(lifecycle, at: at(0)) == "saved")
    #expect(lifecycle.nextWakeUp(after: at(0)) == at(940))
  }

  @Test func doesNotRestoreExpiredOrInvalidTokens() {
    for record in [
      PersistedToken(
        name: "p", source: "s", value: SecretValue("old"), expiresAt: at(0), refreshedAt: at(-100), state: .valid,
        lastError: nil),
      PersistedToken(
        name: "p", source: "s", value: SecretValue("bad"), expiresAt: at(1000), refreshedAt: at(-100),
        state: .invalid, lastError: nil),
      PersistedToken(
        name: "p", source: "s", value: nil, expiresAt: nil, refreshedAt: nil, state: .missing, lastError: nil),
    ] {
      var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
      #expect(ticket(lifecycle.start(restoring: record, now: at(0))) != nil)
    }
  }

  /// Earlier versions stored an operator's value that a backend refused as `invalid` (it was
  /// still sent): it is restored, and `valid`.
  @Test func anOperatorsValueStoredAsRefusedIsRestoredAsValid() throws {
    let record = PersistedToken(
      name: "api", source: "s", value: SecretValue("operator"), expiresAt: nil, refreshedAt: at(1), state: .invalid,
      lastError: nil)
    var after = TokenLifecycle(kind: .fixed(SecretValue("")))
    _ = after.start(restoring: record, now: at(100))
    #expect(value(after, at: at(100)) == "operator")
    #expect(after.state(at: at(100)) == .valid)
  }

  @Test func anOperatorsInvalidatedValueIsNotRestored() throws {
    var before = TokenLifecycle(kind: .fixed(SecretValue("")))
    _ = before.start(restoring: nil, now: at(0))
    _ = try before.set(value: SecretValue("operator"), expiresIn: nil, now: at(1))
    _ = before.invalidate(now: at(2))
    let record = before.persisted(name: "api", source: "s", now: at(3))
    var after = TokenLifecycle(kind: .fixed(SecretValue("")))
    _ = after.start(restoring: record, now: at(100))
    #expect(after.usableGrant(at: at(100)) == nil)
  }

  @Test func persistedRecordsCarryOnlyValuesThatAreNotInTheConfig() throws {
    var fixed = TokenLifecycle(kind: .fixed(SecretValue("from-config")))
    _ = fixed.start(restoring: nil, now: at(0))
    #expect(fixed.persisted(name: "a", source: "s", now: at(0)).value == nil)
    _ = try fixed.set(value: SecretValue("from-operator"), expiresIn: nil, now: at(1))
    #expect(fixed.persisted(name: "a", source: "s", now: at(1)).value == SecretValue("from-operator"))
    let fetched = oauth2(value: "fetched")
    let record = fetched.persisted(name: "o", source: "s", now: at(0))
    #expect(record.value == SecretValue("fetched"))
    #expect(record.expiresAt == at(3600))
    #expect(record.state == .valid)
  }

  // MARK: Timers never spin

  @Test func scheduledWakeUpsAreAlwaysInTheFuture() throws {
    // A scripted run through every event; after each one the wake-up the owner would schedule must lie
    // after `now`, or the owner's timer would fire at once and find nothing to do, forever.
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    var now = at(0)
    var inFlight: TokenLifecycle.RefreshTicket?
    func check(_ actions: [Action]) {
      if let started = ticket(actions) { inFlight = started }
      if let next = lifecycle.nextWakeUp(after: now) { #expect(next > now, "wake-up at or before now") }
    }
    check(lifecycle.start(restoring: nil, now: now))
    for step in 0..<60 {
      now = now + .seconds(step % 7 == 0 ? 90 : 3)
      switch step % 6 {
      case 0: if let ticket = inFlight { check(lifecycle.refreshFailed(ticket, error: "e", now: now)) }
      case 1:
        if let ticket = inFlight {
          check(lifecycle.refreshSucceeded(ticket, value: SecretValue("v\(step)"), expiresIn: .seconds(20), now: now))
        }
      case 2: check(lifecycle.reportRejected(serial: nil, now: now))
      case 3: check(lifecycle.invalidate(now: now))
      case 4: check(lifecycle.requestValue(now: now).1)
      default: check(lifecycle.wakeUp(now: now))
      }
      if !lifecycle.isRefreshing { inFlight = nil }
    }
  }
}
