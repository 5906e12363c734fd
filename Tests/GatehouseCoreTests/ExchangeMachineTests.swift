import Testing

@testable import GatehouseCore

/// The exchange machine event by event, without sockets: every rule of one request's life.
@Suite struct ExchangeMachineTests {
  typealias Machine = ExchangeMachine

  static func get(_ route: Machine.RouteFacts = Machine.RouteFacts(), head: Bool = false) -> Machine.RequestFacts {
    Machine.RequestFacts(idempotent: true, isHEAD: head, hasBody: false, expectsContinue: false, route: route)
  }

  static func post(_ route: Machine.RouteFacts = Machine.RouteFacts(), expectsContinue: Bool = false)
    -> Machine.RequestFacts
  {
    Machine.RequestFacts(
      idempotent: false, isHEAD: false, hasBody: true, expectsContinue: expectsContinue, route: route)
  }

  /// A GET sent on a connection (reused or not), its answer head awaited.
  static func forwardedGET(_ route: Machine.RouteFacts = Machine.RouteFacts(), reused: Bool = false) -> Machine {
    var machine = Machine()
    #expect(machine.handle(.started(get(route), refusal: nil)) == [.lease(fresh: false)])
    #expect(machine.handle(.leased(reused: reused)) == [.writeUpstreamHead(asGET: false)])
    #expect(machine.phase == .forwarding(request: .complete, response: .awaitingHead))
    return machine
  }

  // MARK: The plain path

  @Test func aGetGoesUpstreamAndItsAnswerStreamsThrough() {
    var machine = Self.forwardedGET()
    #expect(machine.deadline == .upstreamResponse)
    #expect(
      machine.handle(.upstreamHead(status: 200, rejectsToken: false, staleAvailable: false)) == [.writeClientHead])
    #expect(machine.handle(.upstreamBody) == [.writeClientBody])
    #expect(machine.deadline == .upstreamResponse)
    #expect(
      machine.handle(.upstreamEnd(reusable: true)) == [.writeClientEnd, .releaseUpstream(reusable: true), .record])
    #expect(machine.phase == .done)
    #expect(machine.deadline == .none)
  }

  @Test func aHeadOnAnEnvelopedRouteGoesUpstreamAsGet() {
    var machine = Machine()
    var route = Machine.RouteFacts()
    route.enveloped = true
    _ = machine.handle(.started(Self.get(route, head: true), refusal: nil))
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: true)])
  }

  // MARK: SPEC §4 rows the gateway answers itself

  @Test func errorRows() {
    var noRoute = Machine()
    #expect(
      noRoute.handle(.started(Machine.RequestFacts(route: nil), refusal: nil)) == [.answerLocally(.noRoute), .record])
    var refused = Machine()
    #expect(
      refused.handle(.started(Self.get(), refusal: 429)) == [.answerLocally(.refused(status: 429)), .record])
    var noUpstream = Machine()
    var route = Machine.RouteFacts()
    route.hasUpstream = false
    #expect(
      noUpstream.handle(.started(Self.get(route), refusal: nil)) == [.answerLocally(.upstreamUnavailable), .record])
    let rows: [(Machine.Failure, Machine.LocalAnswer)] = [
      (.connectRefused, .upstreamUnavailable), (.connectTimedOut, .upstreamTimedOut), (.reset, .upstreamUnavailable),
      (.responseTimedOut, .upstreamTimedOut), (.badResponse, .upstreamUnavailable),
      (.refusedByBreaker, .upstreamUnavailable), (.busy, .upstreamBusy),
    ]
    for (failure, local) in rows {
      var machine = Self.forwardedGET()
      #expect(
        machine.handle(.upstreamFailed(failure, staleAvailable: false))
          == [.discardUpstream, .answerLocally(local), .record], "\(failure)")
    }
  }

  @Test func noAnswerInTimeIsATimeout() {
    var machine = Self.forwardedGET()
    #expect(machine.handle(.deadlinePassed) == [.discardUpstream, .answerLocally(.upstreamTimedOut), .record])
  }

  @Test func aFailureAfterPartOfTheAnswerCutsTheClient() {
    var machine = Self.forwardedGET()
    _ = machine.handle(.upstreamHead(status: 200, rejectsToken: false, staleAvailable: true))
    #expect(machine.handle(.upstreamFailed(.reset, staleAvailable: true)) == [.discardUpstream, .abortClient, .record])
    var silent = Self.forwardedGET()
    _ = silent.handle(.upstreamHead(status: 200, rejectsToken: false, staleAvailable: false))
    #expect(silent.handle(.deadlinePassed) == [.discardUpstream, .abortClient, .record])
  }

  // MARK: Retry on a fresh connection

  @Test func onlyAnIdempotentRequestOnAReusedConnectionIsRetriedOnce() {
    var machine = Self.forwardedGET(reused: true)
    #expect(machine.handle(.upstreamFailed(.reset, staleAvailable: false)) == [.discardUpstream, .lease(fresh: true)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false)])
    #expect(
      machine.handle(.upstreamFailed(.reset, staleAvailable: false))
        == [.discardUpstream, .answerLocally(.upstreamUnavailable), .record])

    var fresh = Self.forwardedGET(reused: false)
    #expect(fresh.handle(.upstreamFailed(.reset, staleAvailable: false)).contains(.lease(fresh: true)) == false)

    var timeout = Self.forwardedGET(reused: true)
    #expect(timeout.handle(.deadlinePassed).contains(.lease(fresh: true)) == false)

    var post = Machine()
    _ = post.handle(.started(Self.post(), refusal: nil))
    _ = post.handle(.clientEnd)
    _ = post.handle(.leased(reused: true))
    #expect(post.handle(.upstreamFailed(.reset, staleAvailable: false)).contains(.lease(fresh: true)) == false)
  }

  // MARK: Tokens

  @Test func aRejectedTokenIsRefreshedAndTheRequestSentAgainOnce() {
    var route = Machine.RouteFacts()
    route.usesToken = true
    var machine = Machine()
    #expect(machine.handle(.started(Self.get(route), refusal: nil)) == [.requestToken])
    #expect(machine.deadline == .none)
    #expect(machine.handle(.tokenGranted) == [.lease(fresh: false)])
    _ = machine.handle(.leased(reused: false))
    #expect(
      machine.handle(.upstreamHead(status: 401, rejectsToken: true, staleAvailable: false))
        == [.discardUpstream, .refreshTokenAndRetry])
    #expect(machine.phase == .waiting(.token))
    #expect(machine.handle(.tokenGranted) == [.lease(fresh: false)])
    _ = machine.handle(.leased(reused: false))
    // Refused again: that is the endpoint's answer, passed on.
    #expect(machine.handle(.upstreamHead(status: 401, rejectsToken: true, staleAvailable: false)) == [.writeClientHead])
  }

  @Test func aTokenThatCannotBeHadAnswers401OrStale() {
    var route = Machine.RouteFacts()
    route.usesToken = true
    var machine = Machine()
    _ = machine.handle(.started(Self.get(route), refusal: nil))
    #expect(machine.handle(.tokenUnavailable) == [.answerLocally(.tokenUnavailable), .record])
  }

  @Test func aRejectionBeforeTheBodyHasArrivedIsRetriedWithTheWholeBody() {
    var route = Machine.RouteFacts()
    route.usesToken = true
    route.replayLimit = 100
    var machine = Machine()
    _ = machine.handle(.started(Self.post(route), refusal: nil))
    _ = machine.handle(.tokenGranted)
    _ = machine.handle(.leased(reused: false))
    #expect(machine.handle(.clientBody(count: 40)) == [.forwardBody])
    #expect(
      machine.handle(.upstreamHead(status: 401, rejectsToken: true, staleAvailable: false))
        == [.discardUpstream, .refreshTokenAndRetry])
    // The rest of the body is kept while the new value is fetched, then follows the head.
    #expect(machine.handle(.clientBody(count: 40)) == [.keepBody])
    #expect(machine.handle(.clientEnd) == [])
    #expect(machine.handle(.tokenGranted) == [.lease(fresh: false)])
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false), .endUpstreamBody])
  }

  @Test func aBodyOutgrowingTheReplayCopyAfterARejectionGets401() {
    var route = Machine.RouteFacts()
    route.usesToken = true
    route.replayLimit = 100
    var machine = Machine()
    _ = machine.handle(.started(Self.post(route), refusal: nil))
    _ = machine.handle(.tokenGranted)
    _ = machine.handle(.leased(reused: false))
    _ = machine.handle(.clientBody(count: 60))
    _ = machine.handle(.upstreamHead(status: 401, rejectsToken: true, staleAvailable: false))
    #expect(
      machine.handle(.clientBody(count: 60)) == [.answerLocally(.tokenRejected), .closeAfterAnswer, .record])
    #expect(machine.phase == .done)
  }

  // MARK: The store

  @Test func freshHitsAndStaleWhileRevalidate() {
    var route = Machine.RouteFacts()
    route.usesStore = true
    var hit = Machine()
    #expect(hit.handle(.started(Self.get(route), refusal: nil)) == [.lookUpStore])
    #expect(hit.handle(.storeLookedUp(.fresh)) == [.serveStored(.hit), .record])
    var stale = Machine()
    _ = stale.handle(.started(Self.get(route), refusal: nil))
    #expect(
      stale.handle(.storeLookedUp(.staleWhileRevalidate)) == [.serveStored(.stale), .revalidateInBackground, .record])
  }

  @Test func staleIfErrorStandsInForAFailureOrA5xx() {
    var failed = Self.forwardedGET()
    #expect(
      failed.handle(.upstreamFailed(.connectRefused, staleAvailable: true))
        == [.discardUpstream, .serveStored(.stale), .record])
    var errorPage = Self.forwardedGET()
    #expect(
      errorPage.handle(.upstreamHead(status: 503, rejectsToken: false, staleAvailable: true))
        == [.discardUpstream, .serveStored(.stale), .record])
    var noStale = Self.forwardedGET()
    #expect(
      noStale.handle(.upstreamHead(status: 503, rejectsToken: false, staleAvailable: false)) == [.writeClientHead])
  }

  @Test func collapsedWaitersTakeTheLeadersOutcome() {
    var route = Machine.RouteFacts()
    route.usesStore = true
    func waiter() -> Machine {
      var machine = Machine()
      _ = machine.handle(.started(Self.get(route), refusal: nil))
      #expect(machine.handle(.storeLookedUp(.miss(canJoin: true))) == [.joinCollapsed])
      #expect(machine.deadline == .none)
      return machine
    }
    var answered = waiter()
    #expect(answered.handle(.collapsedAnswered) == [.serveStored(.hit), .record])
    var failed = waiter()
    #expect(failed.handle(.collapsedFailed(.reset, staleAvailable: true)) == [.serveStored(.stale), .record])
    var failedBare = waiter()
    #expect(
      failedBare.handle(.collapsedFailed(.responseTimedOut, staleAvailable: false))
        == [.answerLocally(.upstreamTimedOut), .record])
    var retried = waiter()
    #expect(retried.handle(.collapsedRetry) == [.lease(fresh: false)])
    // A leader: a miss nobody is fetching goes upstream itself.
    var leader = Machine()
    _ = leader.handle(.started(Self.get(route), refusal: nil))
    #expect(leader.handle(.storeLookedUp(.miss(canJoin: false))) == [.lease(fresh: false)])
  }

  // MARK: Stubs

  @Test func stubsAnswerAtOnceAfterTheirDelayOrWhenTheUpstreamFails() {
    var always = Machine()
    var route = Machine.RouteFacts()
    route.stub = .always(delayNanoseconds: 0)
    #expect(always.handle(.started(Self.get(route), refusal: nil)) == [.serveStub, .record])

    var delayed = Machine()
    route.stub = .always(delayNanoseconds: 5_000_000)
    #expect(delayed.handle(.started(Self.get(route), refusal: nil)) == [.armStubDelay])
    #expect(delayed.deadline == .stubDelay)
    #expect(delayed.handle(.deadlinePassed) == [.serveStub, .record])

    route.stub = .fallback
    var fallback = Self.forwardedGET(route)
    #expect(
      fallback.handle(.upstreamFailed(.connectRefused, staleAvailable: false)) == [
        .discardUpstream, .serveStub, .record,
      ])
  }

  // MARK: Bodies, 100-continue, slow clients

  @Test func aBodyIsReadAheadBeforeAConnectionIsLeased() {
    var route = Machine.RouteFacts()
    route.bodyReadAhead = 100
    var machine = Machine()
    #expect(machine.handle(.started(Self.post(route, expectsContinue: true), refusal: nil)) == [.sendContinue])
    #expect(machine.phase == .waiting(.bodyReadAhead))
    #expect(machine.deadline == .requestUpload)
    #expect(machine.handle(.clientBody(count: 60)) == [.keepBody])
    #expect(machine.handle(.clientEnd) == [.lease(fresh: false)])
    // The continue went out already; the whole body follows the head.
    #expect(machine.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false), .endUpstreamBody])

    var large = Machine()
    _ = large.handle(.started(Self.post(route), refusal: nil))
    #expect(large.handle(.clientBody(count: 150)) == [.keepBody, .lease(fresh: false)])
    #expect(large.handle(.leased(reused: false)) == [.writeUpstreamHead(asGET: false)])
    #expect(large.deadline == .requestUpload)
    #expect(large.handle(.clientBody(count: 10)) == [.forwardBody])
    #expect(large.handle(.clientEnd) == [.endUpstreamBody])
    #expect(large.deadline == .upstreamResponse)
  }

  @Test func aClientWaitingFor100ContinueGetsTheConnectionClosedAfterALocalAnswer() {
    var machine = Machine()
    #expect(
      machine.handle(.started(Self.post(expectsContinue: true), refusal: 401))
        == [.answerLocally(.refused(status: 401)), .closeAfterAnswer, .record])
    // Sent without waiting: the body is read and dropped, the connection stays.
    var eager = Machine()
    _ = eager.handle(.started(Self.post(), refusal: 401))
    #expect(eager.phase == .answeredLocally)
    #expect(eager.deadline == .drainBody)
    #expect(eager.handle(.clientBody(count: 10)) == [.dropBody])
    #expect(eager.handle(.clientEnd) == [.record])
  }

  @Test func aBodyThatStopsComingEndsWithATimeout() {
    var machine = Machine()
    _ = machine.handle(.started(Self.post(), refusal: nil))
    _ = machine.handle(.leased(reused: false))
    #expect(machine.deadline == .requestUpload)
    #expect(
      machine.handle(.deadlinePassed)
        == [.discardUpstream, .answerLocally(.requestTimedOut), .closeAfterAnswer, .record])
  }

  @Test func anAnswerBeforeTheWholeBodyEndsBothConnections() {
    var machine = Machine()
    _ = machine.handle(.started(Self.post(), refusal: nil))
    _ = machine.handle(.leased(reused: false))
    _ = machine.handle(.upstreamHead(status: 413, rejectsToken: false, staleAvailable: false))
    #expect(
      machine.handle(.upstreamEnd(reusable: true)) == [.writeClientEnd, .discardUpstream, .closeAfterAnswer, .record])
  }

  @Test func busyConnectionsQueueThenAnswerBusy() {
    var machine = Machine()
    _ = machine.handle(.started(Self.get(), refusal: nil))
    #expect(machine.handle(.noConnectionFree) == [.queueForConnection])
    #expect(machine.deadline == .connectionQueue)
    #expect(machine.handle(.deadlinePassed) == [.answerLocally(.upstreamBusy), .record])
  }

  // MARK: The client going away

  @Test func aClientGoneAtEachPhaseEndsTheExchange() {
    var route = Machine.RouteFacts()
    route.usesToken = true
    var waiting = Machine()
    _ = waiting.handle(.started(Self.get(route), refusal: nil))
    #expect(waiting.handle(.clientGone) == [.record])
    var forwarding = Self.forwardedGET()
    #expect(forwarding.handle(.clientGone) == [.discardUpstream, .record])
    var streaming = Self.forwardedGET()
    _ = streaming.handle(.upstreamHead(status: 200, rejectsToken: false, staleAvailable: false))
    #expect(streaming.handle(.clientGone) == [.discardUpstream, .record])
    #expect(streaming.handle(.clientGone) == [])
    var draining = Machine()
    _ = draining.handle(.started(Self.post(), refusal: 429))
    #expect(draining.handle(.clientGone) == [.record])
    // Events after the end change nothing.
    #expect(streaming.handle(.upstreamBody) == [])
    #expect(streaming.handle(.tokenGranted) == [])
  }

  // MARK: A driver that is not an HTTP/1.1 connection

  /// A whole exchange driven by something with no framing at all: a list of frames in, a
  /// list of frames out (the shape an HTTP/2 stream has).
  @Test func aNonHTTP1DriverRunsAWholeExchange() {
    struct FrameDriver {
      var machine = ExchangeMachine()
      var sentUpstream: [String] = []
      var sentToClient: [String] = []
      var recorded = false

      mutating func feed(_ event: ExchangeMachine.Event) {
        for action in machine.handle(event) { perform(action) }
      }

      mutating func perform(_ action: ExchangeMachine.Action) {
        switch action {
        case .lease: feed(.leased(reused: false))
        case .writeUpstreamHead(let asGET): sentUpstream.append(asGET ? "HEADERS(GET)" : "HEADERS")
        case .forwardBody: sentUpstream.append("DATA")
        case .endUpstreamBody: sentUpstream.append("END_STREAM")
        case .writeClientHead: sentToClient.append("HEADERS")
        case .writeClientBody: sentToClient.append("DATA")
        case .writeClientEnd: sentToClient.append("END_STREAM")
        case .record: recorded = true
        case .releaseUpstream, .discardUpstream: break
        case .lookUpStore, .requestToken, .joinCollapsed, .armStubDelay, .queueForConnection, .sendContinue, .keepBody,
          .dropBody, .serveStored, .revalidateInBackground, .serveStub, .answerLocally, .refreshTokenAndRetry,
          .abortClient, .closeAfterAnswer:
          Issue.record("unexpected \(action)")
        }
      }
    }
    var driver = FrameDriver()
    var request = Self.post()
    request.idempotent = true
    driver.feed(.started(request, refusal: nil))
    driver.feed(.clientBody(count: 5))
    driver.feed(.clientEnd)
    driver.feed(.upstreamHead(status: 200, rejectsToken: false, staleAvailable: false))
    driver.feed(.upstreamBody)
    driver.feed(.upstreamEnd(reusable: true))

    #expect(driver.sentUpstream == ["HEADERS", "DATA", "END_STREAM"])
    #expect(driver.sentToClient == ["HEADERS", "DATA", "END_STREAM"])
    #expect(driver.recorded)
    #expect(driver.machine.phase == .done)
  }
}
