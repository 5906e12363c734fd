import Testing

@testable import GatehouseCore

/// Rate limits counted in the shared tier (Docs/shared-tier.md): the machine's `waiting(.rateLimit)`
/// phase event by event, and the window rule (`SharedRateWindow`).
@Suite struct SharedRateLimitTests {
  typealias Machine = ExchangeMachine
  typealias Base = ExchangeMachineTests

  static func counted(_ facts: Machine.RequestFacts) -> Machine.RequestFacts {
    var facts = facts
    facts.awaitsRateLimit = true
    return facts
  }

  // MARK: The machine

  @Test func theCountComesFirstAndAllowedGoesOnAsUsual() {
    var machine = Machine()
    #expect(machine.handle(.started(Self.counted(Base.get(Base.cached())))) == [.countRateLimit])
    #expect(machine.phase == .waiting(.rateLimit))
    // Bounded by the connection's command timeout (`shared.timeout_ms`), not a deadline.
    #expect(machine.deadline == .none)
    #expect(machine.handle(.rateLimitSettled(limited: false)) == [.lookUpStore])
    #expect(machine.phase == .waiting(.store))
    // A late or repeated verdict changes nothing.
    #expect(machine.handle(.rateLimitSettled(limited: true)) == [])
  }

  @Test func limitedAnswers429() {
    var machine = Machine()
    _ = machine.handle(.started(Self.counted(Base.get())))
    #expect(machine.handle(.rateLimitSettled(limited: true)) == [.answerLocally(.refused(.rateLimited)), .finish])
    #expect(machine.phase == .done)
  }

  /// The other checks' verdicts (a bad bearer token, keys to wait for) apply only after the
  /// count let the request through, as with the local buckets, which come first.
  @Test func otherRefusalsAndWaitsFollowTheCount() {
    var refused = Self.counted(Base.get())
    refused.refusal = .bearerInvalid
    var machine = Machine()
    #expect(machine.handle(.started(refused)) == [.countRateLimit])
    #expect(machine.handle(.rateLimitSettled(limited: false)) == [.answerLocally(.refused(.bearerInvalid)), .finish])

    var overLimit = Machine()
    _ = overLimit.handle(.started(refused))
    #expect(
      overLimit.handle(.rateLimitSettled(limited: true)) == [.answerLocally(.refused(.rateLimited)), .finish])

    var keys = Self.counted(Base.get())
    keys.awaitsSigningKeys = true
    var waiting = Machine()
    _ = waiting.handle(.started(keys))
    #expect(waiting.handle(.rateLimitSettled(limited: false)) == [.awaitSigningKeys])
    #expect(waiting.phase == .waiting(.signingKeys))
  }

  @Test func aBodyIsKeptWhileWaitingAndForwardedAfter() {
    var machine = Machine()
    _ = machine.handle(.started(Self.counted(Base.post())))
    #expect(machine.handle(.clientBody(count: 10)) == [.keepBody])
    #expect(machine.handle(.clientEnd) == [])
    #expect(machine.handle(.rateLimitSettled(limited: false)) == [.askBreakers(retry: false)])
    #expect(machine.handle(.breakersAdmitted) == [.lease(fresh: false)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false), .endUpstreamBody])
  }

  @Test func aLimitedRequestWithItsBodyStillComingDrainsIt() {
    var machine = Machine()
    _ = machine.handle(.started(Self.counted(Base.post())))
    #expect(
      machine.handle(.rateLimitSettled(limited: true)) == [.answerLocally(.refused(.rateLimited)), .drainBody])
    #expect(machine.handle(.clientBody(count: 5)) == [.dropBody])
    #expect(machine.handle(.clientEnd) == [.finish])
  }

  @Test func theClientLeavingWhileWaiting() {
    var machine = Machine()
    _ = machine.handle(.started(Self.counted(Base.get())))
    #expect(machine.handle(.clientGone) == [.finish])
    #expect(machine.handle(.rateLimitSettled(limited: false)) == [])
  }

  // MARK: The window rule

  @Test func oneSecondWindowsAllowTheRateRoundedDown() {
    let window = SharedRateWindow(perSecond: 5)
    #expect(window.seconds == 1 && window.allowance == 5)
    #expect((1...5).allSatisfy { window.allows(count: $0) })
    #expect(!window.allows(count: 6))
    #expect(SharedRateWindow(perSecond: 2.5).allowance == 2)
    #expect(window.window(atUnixMs: 1_700_000_000_000) == (1_700_000_000, 1))
    #expect(window.window(atUnixMs: 1_700_000_000_999) == (1_700_000_000, 1))
    #expect(window.window(atUnixMs: 1_700_000_001_000) == (1_700_000_001, 1))
    #expect(window.expiryMs == 2000)
  }

  @Test func slowRatesGetLongerWindowsOfOne() {
    let half = SharedRateWindow(perSecond: 0.5)
    #expect(half.seconds == 2 && half.allowance == 1)
    #expect(half.window(atUnixMs: 10_000) == (5, 2))
    #expect(half.window(atUnixMs: 11_001) == (5, 1))
    #expect(half.expiryMs == 3000)
    let third = SharedRateWindow(perSecond: 0.3)
    #expect(third.seconds == 4)
    #expect(third.window(atUnixMs: 4_500) == (1, 4))
    // Bounded to an hour, however slow the rate.
    #expect(SharedRateWindow(perSecond: 0.000_001).seconds == 3600)
  }

  @Test func windowsBeforeTheEpochStillTile() {
    let window = SharedRateWindow(perSecond: 1)
    #expect(window.window(atUnixMs: -1) == (-1, 1))
    #expect(window.window(atUnixMs: -1000) == (-1, 1))
    #expect(window.window(atUnixMs: -1001) == (-2, 1))
  }
}
