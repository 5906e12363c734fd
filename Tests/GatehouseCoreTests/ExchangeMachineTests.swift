import Testing

@testable import GatehouseCore

/// The exchange machine event by event, without sockets: every rule of one request's life.
@Suite struct ExchangeMachineTests {
  typealias Machine = ExchangeMachine

  static func get(_ route: Machine.RouteFacts = Machine.RouteFacts(), head: Bool = false) -> Machine.RequestFacts {
    Machine.RequestFacts(idempotent: true, isHEAD: head, hasBody: false, expectsContinue: false, route: route)
  }

  static func post(
    _ route: Machine.RouteFacts = Machine.RouteFacts(), expectsContinue: Bool = false, bodyFollowsHead: Bool = false
  ) -> Machine.RequestFacts {
    Machine.RequestFacts(
      idempotent: false, isHEAD: false, hasBody: true, expectsContinue: expectsContinue,
      bodyFollowsHead: bodyFollowsHead, route: route)
  }

  static func cached() -> Machine.RouteFacts {
    var route = Machine.RouteFacts()
    route.usesStore = true
    return route
  }

  static func withToken(replayLimit: Int = 0) -> Machine.RouteFacts {
    var route = Machine.RouteFacts()
    route.usesToken = true
    route.replayLimit = replayLimit
    return route
  }

  /// Starts `facts` and walks it to the point where its head goes upstream on a connection
  /// (reused or not); returns the actions of the lease.
  static func forward(_ machine: inout Machine, _ facts: Machine.RequestFacts, reused: Bool = false)
    -> ExchangeActions
  {
    var actions = machine.handle(.started(facts))
    if actions.contains(.lookUpStore) { actions = machine.handle(.storeLookedUp(.miss)) }
    if actions.contains(.takeToken) { actions = machine.handle(.tokenGranted) }
    #expect(actions == [.askBreakers(retry: false)])
    actions = machine.handle(.breakersAdmitted)
    #expect(actions.contains(.lease(fresh: false)))
    return machine.handle(.leased(reused: reused))
  }

  static func forwardedGET(_ route: Machine.RouteFacts = Machine.RouteFacts(), reused: Bool = false) -> Machine {
    var machine = Machine()
    #expect(forward(&machine, get(route), reused: reused) == [.writeUpstreamHead(asGET: false)])
    #expect(machine.phase == .forwarding(request: .complete, answer: .notBegun))
    return machine
  }

  static func failed(_ failure: UpstreamFailure, stale: Bool = false, received: Bool = false) -> Machine.Event {
    .upstreamFailed(failure, staleAvailable: stale, received: received, answerOut: false)
  }

  // MARK: The plain path

  /// Each event returns its actions inline: an action is a byte or two (no payload wider
  /// than a small enum), so the list of them stays a few words to build, return and walk.
  @Test func actionsStayAFewBytes() {
    #expect(MemoryLayout<Machine.Action>.size <= 2)
    #expect(MemoryLayout<ExchangeActions>.size <= 24)
  }

  @Test func aGetGoesUpstreamAndItsAnswerStreamsThrough() {
    var machine = Self.forwardedGET()
    #expect(machine.deadline == .upstreamAnswer)
    #expect(machine.handle(.answerBegan) == [])
    #expect(machine.answerBegan)
    #expect(machine.deadline == .upstreamAnswer)
    #expect(machine.handle(.answerEnded(reusable: true)) == [.releaseUpstream(reusable: true), .finish])
    #expect(machine.phase == .done)
    #expect(machine.deadline == .none)
  }

  @Test func aHeadOnAnEnvelopedRouteGoesUpstreamAsGetAndOnAPlainRouteAsHead() {
    var route = Machine.RouteFacts()
    route.enveloped = true
    var enveloped = Machine()
    #expect(Self.forward(&enveloped, Self.get(route, head: true)) == [.writeUpstreamHead(asGET: true)])
    var plain = Machine()
    #expect(Self.forward(&plain, Self.get(head: true)) == [.writeUpstreamHead(asGET: false)])
  }

  // MARK: Docs/envelope.md rows the gateway answers itself

  @Test func refusalsAndRoutesWithoutUpstreamAreAnsweredAtOnce() {
    let refusals: [Machine.Refusal] = [.clientKeyMissing, .clientKeyInvalid, .rateLimited]
    for refusal in refusals {
      var machine = Machine()
      var facts = Self.get()
      facts.refusal = refusal
      #expect(machine.handle(.started(facts)) == [.answerLocally(.refused(refusal)), .finish])
      #expect(machine.phase == .done)
    }
    var noRoute = Machine()
    #expect(noRoute.handle(.started(Machine.RequestFacts(route: nil))) == [.answerLocally(.noRoute), .finish])
    var route = Machine.RouteFacts()
    route.hasUpstream = false
    var noUpstream = Machine()
    #expect(noUpstream.handle(.started(Self.get(route))) == [.answerLocally(.noUpstream), .finish])
    route = Machine.RouteFacts()
    route.badTarget = true
    var badTarget = Machine()
    #expect(badTarget.handle(.started(Self.get(route))) == [.answerLocally(.badTarget), .finish])
  }

  @Test func everyUpstreamFailureHasItsErrorAnswer() {
    let failures: [UpstreamFailure] = [
      .unavailable, .closed, .timedOut, .invalidAnswer, .connectTimedOut, .busy, .circuitOpen, .unhealthy,
    ]
    for failure in failures {
      var machine = Self.forwardedGET()
      #expect(
        machine.handle(Self.failed(failure)) == [.discardUpstream, .answerLocally(.upstream(failure)), .finish],
        "\(failure)")
    }
    // The answers each failure stands for (Docs/envelope.md): 502, 504, 503.
    #expect(UpstreamFailure.closed.answer == .upstreamUnavailable)
    #expect(UpstreamFailure.timedOut.answer == .upstreamTimedOut)
    #expect(UpstreamFailure.connectTimedOut.answer == .upstreamTimedOut)
    #expect(UpstreamFailure.busy.answer == .upstreamBusy)
    #expect(UpstreamFailure.circuitOpen.answer == .upstreamUnavailable)
  }

  @Test func theBreakersRefusingAnswersWithoutALease() {
    var machine = Machine()
    #expect(machine.handle(.started(Self.get())) == [.askBreakers(retry: false)])
    #expect(machine.handle(Self.failed(.circuitOpen)) == [.answerLocally(.upstream(.circuitOpen)), .finish])
  }

  @Test func aFailureAfterPartOfTheAnswerCutsTheClient() {
    var machine = Self.forwardedGET()
    _ = machine.handle(.answerBegan)
    #expect(
      machine.handle(.upstreamFailed(.closed, staleAvailable: true, received: true, answerOut: true))
        == [.discardUpstream, .abortClient, .finish])
    #expect(machine.phase == .done)
  }

  @Test func anAnswerOnlyStagedGivesWayToTheErrorAnswer() {
    var machine = Self.forwardedGET()
    _ = machine.handle(.answerBegan)
    #expect(
      machine.handle(.upstreamFailed(.closed, staleAvailable: false, received: true, answerOut: false))
        == [.discardUpstream, .answerLocally(.upstream(.closed)), .finish])
  }

  // MARK: Retries

  @Test func onlyAnIdempotentRequestOnAReusedConnectionIsRetriedOnce() {
    // Reused, nothing received: retried on a fresh connection, asking the breakers as a retry.
    var machine = Self.forwardedGET(reused: true)
    #expect(machine.handle(Self.failed(.closed)) == [.discardUpstream, .askBreakers(retry: true)])
    #expect(machine.handle(.breakersAdmitted) == [.lease(fresh: true)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false)])
    #expect(machine.attempts == 2)
    // Twice: no more.
    #expect(machine.handle(Self.failed(.closed)) == [.discardUpstream, .answerLocally(.upstream(.closed)), .finish])

    // A fresh connection failing is the upstream's failure, not a stale connection's.
    var fresh = Self.forwardedGET(reused: false)
    #expect(fresh.handle(Self.failed(.closed)) == [.discardUpstream, .answerLocally(.upstream(.closed)), .finish])
    // Part of the answer arrived: the upstream saw the request.
    var received = Self.forwardedGET(reused: true)
    #expect(
      received.handle(Self.failed(.closed, received: true))
        == [.discardUpstream, .answerLocally(.upstream(.closed)), .finish])
    // A timeout is no stale connection.
    var timedOut = Self.forwardedGET(reused: true)
    #expect(
      timedOut.handle(Self.failed(.timedOut)) == [.discardUpstream, .answerLocally(.upstream(.timedOut)), .finish])
    // A POST may have had its effect.
    var post = Machine()
    _ = Self.forward(&post, Self.post(), reused: true)
    _ = post.handle(.clientBody(count: 3))
    _ = post.handle(.clientEnd)
    #expect(post.handle(Self.failed(.closed)) == [.discardUpstream, .answerLocally(.upstream(.closed)), .finish])
  }

  @Test func aRequestDroppedFromAPipelineGoesAgainAloneAndIsNoAttempt() {
    var machine = Self.forwardedGET()
    #expect(machine.handle(.droppedFromPipeline) == [.discardUpstream, .lease(fresh: false)])
    #expect(machine.handle(.leased(reused: true)) == [.writeUpstreamHead(asGET: false)])
    #expect(machine.attempts == 1)
  }

  // MARK: Tokens

  @Test func aRejectedTokenIsRefreshedAndTheRequestSentAgainOnce() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.get(Self.withToken()))
    #expect(machine.handle(.tokenRejected(retry: true, reusable: nil)) == [.discardUpstream, .takeToken])
    #expect(machine.phase == .waiting(.token))
    #expect(machine.deadline == .none)
    // The breakers said yes already: straight to a connection.
    #expect(machine.handle(.tokenGranted) == [.lease(fresh: false)])
    #expect(machine.handle(.leased(reused: true)) == [.writeUpstreamHead(asGET: false)])
    // Rejected again: the answer goes to the client as it is.
    #expect(!machine.bodyAllowsTokenRetry)
    #expect(machine.handle(.tokenRejected(retry: true, reusable: nil)) == [])
    #expect(machine.phase == .forwarding(request: .complete, answer: .notBegun))
  }

  @Test func aTokenAtHandWhenTheRequestCameNeedsNoTakingButARetryDoes() {
    var route = Self.withToken()
    route.tokenAtHand = true
    var machine = Machine()
    #expect(machine.handle(.started(Self.get(route))) == [.askBreakers(retry: false)])
    _ = machine.handle(.breakersAdmitted)
    _ = machine.handle(.leased(reused: true))
    // The value was used by the first send: a retry takes the one current then.
    #expect(machine.handle(Self.failed(.closed)) == [.discardUpstream, .takeToken])
  }

  @Test func aRejectionReadWholeHandsTheConnectionBack() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.get(Self.withToken()))
    #expect(
      machine.handle(.tokenRejected(retry: true, reusable: true)) == [.releaseUpstream(reusable: true), .takeToken])
  }

  @Test func aTokenThatCannotBeHadAnswers401OrStale() {
    var machine = Machine()
    #expect(machine.handle(.started(Self.get(Self.withToken()))) == [.takeToken])
    #expect(machine.handle(.tokenMissing) == [])
    #expect(machine.handle(.tokenUnavailable(staleAvailable: false)) == [.answerLocally(.tokenUnavailable), .finish])
    var stale = Machine()
    _ = stale.handle(.started(Self.get(Self.withToken())))
    #expect(stale.handle(.tokenUnavailable(staleAvailable: true)) == [.serveStored(.stale), .finish])
    // A fallback stub stands in for the upstream, not for a token the gateway lacks.
    var route = Self.withToken()
    route.stub = .fallback
    var stubbed = Machine()
    _ = stubbed.handle(.started(Self.get(route)))
    #expect(stubbed.handle(.tokenUnavailable(staleAvailable: false)) == [.answerLocally(.tokenUnavailable), .finish])
  }

  @Test func aRejectionBeforeTheBodyHasArrivedIsRetriedWithTheRestOfTheBody() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.post(Self.withToken(replayLimit: 100)))
    #expect(machine.handle(.clientBody(count: 10)) == [.forwardBody])
    #expect(machine.bodyAllowsTokenRetry)
    #expect(machine.handle(.tokenRejected(retry: true, reusable: nil)) == [.discardUpstream, .takeToken])
    // The rest arrives while the token is fetched: kept, and sent after the copy.
    #expect(machine.handle(.clientBody(count: 20)) == [.keepBody])
    #expect(machine.handle(.clientEnd) == [])
    #expect(machine.handle(.tokenGranted) == [.lease(fresh: false)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false), .endUpstreamBody])
    #expect(machine.deadline == .upstreamAnswer)
  }

  @Test func aBodyOutgrowingTheReplayCopyAfterARejectionGets401AndTheConnectionEnds() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.post(Self.withToken(replayLimit: 100)))
    _ = machine.handle(.clientBody(count: 60))
    _ = machine.handle(.tokenRejected(retry: true, reusable: nil))
    #expect(
      machine.handle(.clientBody(count: 60))
        == [.closeAfterAnswer(drainInput: false), .answerLocally(.tokenRejected), .drainBody])
    #expect(machine.deadline == .drainBody)
    #expect(machine.handle(.clientEnd) == [.finish])
  }

  @Test func aBodyTooLargeForTheReplayCopyIsNotRetried() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.post(Self.withToken(replayLimit: 100)))
    _ = machine.handle(.clientBody(count: 101))
    #expect(!machine.bodyAllowsTokenRetry)
    #expect(machine.handle(.tokenRejected(retry: true, reusable: nil)) == [])
  }

  @Test func aBodyPilingUpWhileATokenIsFetchedIsRefused() {
    var route = Self.withToken(replayLimit: 100)
    route.pendingLimit = 50
    var machine = Machine()
    #expect(machine.handle(.started(Self.post(route))) == [.takeToken])
    #expect(machine.handle(.clientBody(count: 40)) == [.keepBody])
    #expect(
      machine.handle(.clientBody(count: 40))
        == [.closeAfterAnswer(drainInput: false), .answerLocally(.tokenUnavailable), .drainBody])
  }

  // MARK: The store

  @Test func aStoredAnswerTooLargeForTheBudgetIsRefusedWithoutTheUpstream() {
    var machine = Machine()
    #expect(machine.handle(.started(Self.get(Self.cached()))) == [.lookUpStore])
    #expect(machine.handle(.storeLookedUp(.overloaded)) == [.answerLocally(.overloaded), .finish])
  }

  @Test func freshHitsAndStaleWhileRevalidate() {
    var fresh = Machine()
    #expect(fresh.handle(.started(Self.get(Self.cached()))) == [.lookUpStore])
    #expect(fresh.handle(.storeLookedUp(.fresh)) == [.serveStored(.hit), .finish])
    var stale = Machine()
    _ = stale.handle(.started(Self.get(Self.cached())))
    #expect(
      stale.handle(.storeLookedUp(.staleWhileRevalidate)) == [.serveStored(.stale), .revalidateInBackground, .finish])
    var miss = Machine()
    _ = miss.handle(.started(Self.get(Self.cached())))
    #expect(miss.handle(.storeLookedUp(.miss)) == [.askBreakers(retry: false)])
  }

  @Test func staleIfErrorStandsInForAFailureOrA5xx() {
    var failed = Self.forwardedGET(Self.cached())
    #expect(failed.handle(Self.failed(.timedOut, stale: true)) == [.discardUpstream, .serveStored(.stale), .finish])
    var errorStatus = Self.forwardedGET(Self.cached())
    #expect(
      errorStatus.handle(.answerReplaced(.stored, reusable: nil)) == [.discardUpstream, .serveStored(.stale), .finish])
    var unusable = Self.forwardedGET(Self.cached())
    #expect(
      unusable.handle(.answerReplaced(.stored, reusable: true))
        == [.releaseUpstream(reusable: true), .serveStored(.stale), .finish])
    // Before a fallback stub.
    var route = Self.cached()
    route.stub = .fallback
    var stubbed = Self.forwardedGET(route)
    #expect(stubbed.handle(Self.failed(.closed, stale: true)) == [.discardUpstream, .serveStored(.stale), .finish])
  }

  /// A `304` to the validators of a stored answer no longer fresh: the connection goes back
  /// (the 304 was read whole) and the stored answer is served, confirmed.
  @Test func aConfirmedStoredAnswerIsServedRevalidated() {
    var confirmed = Self.forwardedGET(Self.cached())
    #expect(
      confirmed.handle(.answerReplaced(.revalidated, reusable: true))
        == [.releaseUpstream(reusable: true), .serveStored(.revalidated), .finish])
    #expect(confirmed.phase == .done)
    var spoiled = Self.forwardedGET(Self.cached())
    #expect(
      spoiled.handle(.answerReplaced(.revalidated, reusable: false))
        == [.releaseUpstream(reusable: false), .serveStored(.revalidated), .finish])
  }

  @Test func collapsedWaitersTakeTheLeadersOutcome() {
    var answered = Machine()
    _ = answered.handle(.started(Self.get(Self.cached())))
    #expect(answered.handle(.storeLookedUp(.joinedCollapsed)) == [])
    #expect(answered.phase == .waiting(.collapsed))
    #expect(answered.deadline == .collapsedWait)
    #expect(answered.handle(.collapsedEnded(.answered)) == [.serveCollapsed, .finish])

    var failed = Machine()
    _ = failed.handle(.started(Self.get(Self.cached())))
    _ = failed.handle(.storeLookedUp(.joinedCollapsed))
    #expect(
      failed.handle(.collapsedEnded(.failed(.closed, staleAvailable: false)))
        == [.answerLocally(.upstream(.closed)), .finish])

    var retry = Machine()
    _ = retry.handle(.started(Self.get(Self.cached())))
    _ = retry.handle(.storeLookedUp(.joinedCollapsed))
    #expect(retry.handle(.collapsedEnded(.retry)) == [.askBreakers(retry: false)])

    // Waiting too long is a timeout, answered like one (a stored answer first).
    var patient = Machine()
    _ = patient.handle(.started(Self.get(Self.cached())))
    _ = patient.handle(.storeLookedUp(.joinedCollapsed))
    #expect(patient.handle(.deadlinePassed) == [])
    #expect(patient.handle(Self.failed(.timedOut, stale: true)) == [.serveStored(.stale), .finish])
  }

  // MARK: Stubs

  @Test func stubsAnswerAtOnceAfterTheirDelayOrWhenTheUpstreamFails() {
    var route = Machine.RouteFacts()
    route.stub = .always(delayed: false)
    var now = Machine()
    #expect(now.handle(.started(Self.get(route))) == [.serveStub, .finish])
    route.stub = .always(delayed: true)
    var later = Machine()
    #expect(later.handle(.started(Self.get(route))) == [])
    #expect(later.deadline == .stubDelay)
    #expect(later.handle(.deadlinePassed) == [.serveStub, .finish])
    route.stub = .fallback
    var fallback = Self.forwardedGET(route)
    #expect(fallback.handle(Self.failed(.closed)) == [.discardUpstream, .serveStub, .finish])
    // A stubbed route with no upstream still answers with the stub.
    route.stub = .always(delayed: false)
    route.hasUpstream = false
    var alone = Machine()
    #expect(alone.handle(.started(Self.get(route))) == [.serveStub, .finish])
  }

  // MARK: Bodies

  @Test func aBodyIsReadAheadBeforeAConnectionIsLeased() {
    var route = Machine.RouteFacts()
    route.bodyReadAhead = 100
    var machine = Machine()
    #expect(machine.handle(.started(Self.post(route))) == [.askBreakers(retry: false)])
    #expect(machine.handle(.breakersAdmitted) == [])
    #expect(machine.phase == .waiting(.bodyReadAhead))
    #expect(machine.deadline == .requestUpload)
    #expect(machine.handle(.clientBody(count: 60)) == [.keepBody])
    #expect(machine.handle(.clientBody(count: 60)) == [.keepBody, .pauseClientReading, .lease(fresh: false)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false)])
    #expect(machine.handle(.clientBody(count: 10)) == [.forwardBody])
    #expect(machine.handle(.clientEnd) == [.endUpstreamBody])
    #expect(machine.deadline == .upstreamAnswer)

    // A body shorter than the read-ahead: its end leases.
    var short = Machine()
    _ = short.handle(.started(Self.post(route)))
    _ = short.handle(.breakersAdmitted)
    _ = short.handle(.clientBody(count: 10))
    #expect(short.handle(.clientEnd) == [.lease(fresh: false)])
    #expect(short.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false), .endUpstreamBody])
  }

  @Test func continueGoesOutOnlyWhenTheBodyIsWanted() {
    // Forwarded: 100 Continue as the head goes upstream.
    var forwarded = Machine()
    #expect(
      Self.forward(&forwarded, Self.post(expectsContinue: true)) == [.sendContinue, .writeUpstreamHead(asGET: false)])
    #expect(forwarded.continueSent)
    // Read ahead: 100 Continue when the read-ahead starts.
    var route = Machine.RouteFacts()
    route.bodyReadAhead = 100
    var readAhead = Machine()
    _ = readAhead.handle(.started(Self.post(route, expectsContinue: true)))
    #expect(readAhead.handle(.breakersAdmitted) == [.sendContinue])
  }

  @Test func aClientWaitingFor100ContinueGetsTheConnectionClosedAfterALocalAnswer() {
    var machine = Machine()
    var facts = Self.post(expectsContinue: true)
    facts.route = nil
    #expect(
      machine.handle(.started(facts)) == [.closeAfterAnswer(drainInput: true), .answerLocally(.noRoute), .finish])
    // One that sent its body anyway keeps the connection: the body is read and dropped.
    var eager = Machine()
    var sent = Self.post(expectsContinue: true, bodyFollowsHead: true)
    sent.route = nil
    #expect(eager.handle(.started(sent)) == [.answerLocally(.noRoute), .drainBody])
    #expect(eager.handle(.clientBody(count: 5)) == [.dropBody])
    #expect(eager.handle(.clientEnd) == [.finish])
  }

  @Test func aBodyThatStopsComingEndsWithATimeout() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.post())
    #expect(machine.deadline == .requestUpload)
    #expect(
      machine.handle(.deadlinePassed)
        == [.discardUpstream, .closeAfterAnswer(drainInput: false), .answerLocally(.requestTimedOut), .finish])
    // Once the answer streams, the connection is cut instead.
    var streaming = Machine()
    _ = Self.forward(&streaming, Self.post())
    _ = streaming.handle(.answerBegan)
    #expect(streaming.handle(.deadlinePassed) == [.discardUpstream, .abortClient, .finish])
  }

  /// `answerBegan` only notes the fact: no action, and the deadline (which, while
  /// forwarding, follows the request) stays. Drivers feed it without a step of their own.
  @Test func anAnswerBeginningYieldsNothingAndKeepsTheDeadline() {
    var uploading = Machine()
    _ = Self.forward(&uploading, Self.post())
    var complete = Self.forwardedGET()
    for machine in [uploading, complete] {
      var begun = machine
      #expect(begun.handle(.answerBegan) == [])
      #expect(begun.answerBegan)
      #expect(begun.deadline == machine.deadline)
    }
    #expect(complete.handle(.answerBegan) == [])
  }

  @Test func anAnswerBeforeTheWholeBodyEndsBothConnections() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.post())
    _ = machine.handle(.answerBegan)
    #expect(
      machine.handle(.answerEnded(reusable: true))
        == [.releaseUpstream(reusable: false), .closeAfterAnswer(drainInput: true), .finish])
  }

  @Test func aLocalAnswerWithTheBodyStillComingDrainsItThenEnds() {
    var machine = Machine()
    var facts = Self.post()
    facts.refusal = .clientKeyMissing
    facts.bodyFollowsHead = true
    #expect(machine.handle(.started(facts)) == [.answerLocally(.refused(.clientKeyMissing)), .drainBody])
    #expect(machine.deadline == .drainBody)
    #expect(machine.handle(.clientBody(count: 3)) == [.dropBody])
    #expect(machine.handle(.deadlinePassed) == [.closeAfterAnswer(drainInput: true), .finish])
  }

  @Test func overloadedWhileGatheringAnAnswer() {
    var machine = Machine()
    _ = Self.forward(&machine, Self.post())
    #expect(
      machine.handle(.answerReplaced(.overloaded, reusable: nil))
        == [.discardUpstream, .closeAfterAnswer(drainInput: false), .answerLocally(.overloaded), .drainBody])
  }

  // MARK: Connections

  @Test func busyConnectionsQueueThenAnswerBusy() {
    var machine = Machine()
    _ = machine.handle(.started(Self.get()))
    _ = machine.handle(.breakersAdmitted)
    #expect(machine.handle(.noConnectionFree) == [.queueForConnection])
    #expect(machine.deadline == .connectionQueue)
    #expect(machine.handle(.deadlinePassed) == [])
    #expect(
      machine.handle(Self.failed(.busy)) == [.leaveQueue, .answerLocally(.upstream(.busy)), .finish])

    var served = Machine()
    _ = served.handle(.started(Self.get()))
    _ = served.handle(.breakersAdmitted)
    _ = served.handle(.noConnectionFree)
    #expect(served.handle(.connectionFree) == [.lease(fresh: false)])
    #expect(served.handle(.leased(reused: true)) == [.writeUpstreamHead(asGET: false)])
  }

  @Test func aClientGoneAtEachPhaseEndsTheExchange() {
    var admitted = Machine()
    #expect(admitted.handle(.clientGone) == [.finish])
    var token = Machine()
    _ = token.handle(.started(Self.get(Self.withToken())))
    #expect(token.handle(.clientGone) == [.finish])
    #expect(token.handle(.tokenGranted) == [])
    var queued = Machine()
    _ = queued.handle(.started(Self.get()))
    _ = queued.handle(.breakersAdmitted)
    _ = queued.handle(.noConnectionFree)
    #expect(queued.handle(.clientGone) == [.leaveQueue, .finish])
    var forwarding = Self.forwardedGET()
    #expect(forwarding.handle(.clientGone) == [.discardUpstream, .finish])
    var streaming = Self.forwardedGET()
    _ = streaming.handle(.answerBegan)
    #expect(streaming.handle(.clientGone) == [.discardUpstream, .finish])
    var collapsed = Machine()
    _ = collapsed.handle(.started(Self.get(Self.cached())))
    _ = collapsed.handle(.storeLookedUp(.joinedCollapsed))
    #expect(collapsed.handle(.clientGone) == [.finish])
    #expect(collapsed.handle(.collapsedEnded(.answered)) == [])
    var draining = Machine()
    var facts = Self.post(bodyFollowsHead: true)
    facts.route = nil
    _ = draining.handle(.started(facts))
    #expect(draining.handle(.clientGone) == [.finish])
    var done = Self.forwardedGET()
    _ = done.handle(.answerEnded(reusable: true))
    #expect(done.handle(.clientGone) == [])
    #expect(done.phase == .done)
  }

  @Test func actionListsHoldTheLongestTransition() {
    // A queued request on a route whose client waits for 100 Continue, failing over: the
    // longest list a transition returns fits the inline storage.
    var route = Machine.RouteFacts()
    route.stub = .fallback
    var machine = Machine()
    _ = machine.handle(.started(Self.post(route, expectsContinue: true)))
    _ = machine.handle(.breakersAdmitted)
    _ = machine.handle(.noConnectionFree)
    let actions = machine.handle(Self.failed(.busy))
    #expect(actions == [.leaveQueue, .closeAfterAnswer(drainInput: true), .serveStub, .finish])
    #expect(actions.count <= ExchangeActions.capacity)
  }

  // MARK: A driver that is not an HTTP/1.1 connection

  /// A whole exchange driven by something with no framing at all: a list of frames in, a
  /// list of frames out (the shape an HTTP/2 stream has).
  @Test func aNonHTTP1DriverRunsAWholeExchange() {
    struct FrameDriver {
      var machine = ExchangeMachine()
      var sentUpstream: [String] = []
      var sentToClient: [String] = []
      var finished = false

      mutating func feed(_ event: ExchangeMachine.Event) {
        for action in machine.handle(event) { perform(action) }
      }

      mutating func perform(_ action: ExchangeMachine.Action) {
        switch action {
        case .askBreakers: feed(.breakersAdmitted)
        case .lease: feed(.leased(reused: false))
        case .writeUpstreamHead(let asGET): sentUpstream.append(asGET ? "HEADERS(GET)" : "HEADERS")
        case .forwardBody: sentUpstream.append("DATA")
        case .endUpstreamBody: sentUpstream.append("END_STREAM")
        case .finish: finished = true
        case .releaseUpstream, .discardUpstream: break
        default: Issue.record("unexpected \(action)")
        }
      }

      /// The upstream's answer arrives: its head, its body, its end, as the stream's frames.
      mutating func answer() {
        feed(.answerBegan)
        sentToClient.append("HEADERS")
        sentToClient.append("DATA")
        sentToClient.append("END_STREAM")
        feed(.answerEnded(reusable: true))
      }
    }
    var driver = FrameDriver()
    var request = Self.post()
    request.idempotent = true
    driver.feed(.started(request))
    driver.feed(.clientBody(count: 5))
    driver.feed(.clientEnd)
    driver.answer()

    #expect(driver.sentUpstream == ["HEADERS", "DATA", "END_STREAM"])
    #expect(driver.sentToClient == ["HEADERS", "DATA", "END_STREAM"])
    #expect(driver.finished)
    #expect(driver.machine.phase == .done)
  }
}
