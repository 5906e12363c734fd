import Testing

@testable import GatehouseCore

/// The exchange machine's WebSocket phase (Docs/websockets.md), event by event: a handshake goes on a
/// fresh connection that never returns to the pool, a `101` makes a tunnel, the tunnel's
/// deadline and end, and the handshake's refusals.
@Suite struct ExchangeMachineTunnelTests {
  typealias Machine = ExchangeMachine

  static func handshake(_ route: Machine.RouteFacts = Machine.RouteFacts()) -> Machine.RequestFacts {
    var facts = Machine.RequestFacts(
      idempotent: true, isHEAD: false, hasBody: false, expectsContinue: false, route: route)
    facts.upgrade = true
    return facts
  }

  /// Walks a handshake to its head written upstream; returns the machine.
  static func sentHandshake(_ route: Machine.RouteFacts = Machine.RouteFacts()) -> Machine {
    var machine = Machine()
    var actions = machine.handle(.started(handshake(route)))
    if actions.contains(.takeToken) { actions = machine.handle(.tokenGranted) }
    #expect(actions == [.askBreakers(retry: false)])
    #expect(machine.handle(.breakersAdmitted) == [.lease(fresh: true)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false)])
    return machine
  }

  @Test func aHandshakeLeasesAFreshConnectionAndA101MakesATunnel() {
    var machine = Self.sentHandshake()
    #expect(machine.deadline == .upstreamAnswer)
    #expect(machine.handle(.upgraded) == [.openTunnel])
    #expect(machine.phase == .tunnel)
    #expect(machine.deadline == .tunnelIdle)
    #expect(machine.handle(.tunnelEnded) == [.finishTunnel])
    #expect(machine.phase == .done)
    #expect(machine.deadline == .none)
  }

  @Test func aHandshakeThatQueuedForAConnectionStillLeasesAFreshOne() {
    var machine = Machine()
    _ = machine.handle(.started(Self.handshake()))
    #expect(machine.handle(.breakersAdmitted) == [.lease(fresh: true)])
    #expect(machine.handle(.noConnectionFree) == [.queueForConnection])
    #expect(machine.handle(.connectionFree) == [.lease(fresh: true)])
  }

  @Test func anAnswerOtherThan101IsAnAnswerAndTheConnectionNeverGoesBackToThePool() {
    var machine = Self.sentHandshake()
    #expect(machine.handle(.answerBegan) == [])
    #expect(machine.handle(.answerEnded(reusable: true)) == [.releaseUpstream(reusable: false), .finish])
    #expect(machine.phase == .done)
  }

  @Test func aStoredAnswerStandingInForAFailingHandshakeDoesNotKeepItsConnection() {
    var machine = Self.sentHandshake()
    let actions = machine.handle(.answerReplaced(.stored, reusable: true))
    #expect(actions.contains(.releaseUpstream(reusable: false)))
    #expect(actions.contains(.serveStored(.stale)))
  }

  @Test func aRejectedTokenIsRefreshedAndTheHandshakeSentOnceMoreOnAFreshConnection() {
    var route = Machine.RouteFacts()
    route.usesToken = true
    var machine = Self.sentHandshake(route)
    #expect(
      machine.handle(.tokenRejected(retry: true, reusable: true)) == [.releaseUpstream(reusable: false), .takeToken])
    #expect(machine.handle(.tokenGranted) == [.lease(fresh: true)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false)])
    #expect(machine.handle(.upgraded) == [.openTunnel])
    // A second rejection is the client's answer.
    var again = Self.sentHandshake(route)
    _ = again.handle(.tokenRejected(retry: true, reusable: nil))
    _ = again.handle(.tokenGranted)
    _ = again.handle(.leased(reused: false))
    #expect(again.handle(.tokenRejected(retry: true, reusable: nil)) == [])
  }

  @Test func onlyAHandshakeWaitingForItsAnswerCanBeUpgraded() {
    var plain = ExchangeMachineTests.forwardedGET()
    #expect(plain.handle(.upgraded) == [])
    #expect(plain.phase == .forwarding(request: .complete, answer: .notBegun))
    var answered = Self.sentHandshake()
    _ = answered.handle(.answerBegan)
    #expect(answered.handle(.upgraded) == [])
    var waiting = Machine()
    _ = waiting.handle(.started(Self.handshake()))
    #expect(waiting.handle(.upgraded) == [])
    #expect(waiting.handle(.tunnelEnded) == [])
  }

  @Test func aSilentTunnelIsClosedAndEndsWhenBothSidesHaveClosed() {
    var machine = Self.sentHandshake()
    _ = machine.handle(.upgraded)
    #expect(machine.handle(.deadlinePassed) == [.closeTunnel])
    #expect(machine.phase == .tunnel)
    // A close that does not finish in its grace is asked again (the tunnel then resets).
    #expect(machine.handle(.deadlinePassed) == [.closeTunnel])
    #expect(machine.handle(.tunnelEnded) == [.finishTunnel])
    #expect(machine.handle(.tunnelEnded) == [])
  }

  @Test func aTunnelWhoseClientIsGoneClosesAndFinishesOnce() {
    var machine = Self.sentHandshake()
    _ = machine.handle(.upgraded)
    #expect(machine.handle(.clientGone) == [.closeTunnel, .finishTunnel])
    #expect(machine.phase == .done)
    #expect(machine.handle(.tunnelEnded) == [])
  }

  @Test func anUnreachableUpstreamAnswersTheHandshakeWithAnError() {
    var machine = Self.sentHandshake()
    let actions = machine.handle(
      .upstreamFailed(.unavailable, staleAvailable: false, received: false, answerOut: false))
    #expect(actions == [.discardUpstream, .answerLocally(.upstream(.unavailable)), .finish])
  }

  @Test func refusedHandshakesAreAnsweredLocally() {
    for refusal in [Machine.Refusal.webSocketNotEnabled, .webSocketMalformed, .webSocketsAtLimit] {
      var machine = Machine()
      var facts = Self.handshake()
      facts.upgrade = false
      facts.refusal = refusal
      #expect(machine.handle(.started(facts)) == [.answerLocally(.refused(refusal)), .finish])
    }
  }
}
