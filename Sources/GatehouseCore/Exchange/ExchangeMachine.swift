/// One request's life as a pure state machine: the phase it is in, the events that move it
/// on, and the actions its driver performs. It knows nothing of HTTP/1.1 framing
/// (chunking, `Connection`, pipelining) or of sockets: an HTTP/1.1 connection, an HTTP/2
/// stream or a background refresh can drive it alike. Time comes in with `now` (monotonic
/// nanoseconds) and the deadline that applies is derived from the phase (`deadline`), never
/// kept beside it.
///
/// The phases:
/// - `admitted`: the head is parsed and its route known; nothing decided yet.
/// - `waiting`: for the store, a token, a stub's delay, a collapsed leader, the body's
///   read-ahead, or a free upstream connection.
/// - `forwarding`: the request is with the upstream (its body streaming or complete) and the
///   answer is awaited, streaming, or complete.
/// - `answeredLocally`: the gateway answered (the store, a stub, an error); the request's
///   body may still be arriving, to be read and dropped.
/// - `done`.
///
/// Rules it holds (SPEC §3–§5 and `Config/README.md`): only idempotent requests whose body
/// can be sent again are retried once on a fresh connection, and only after a reused
/// connection failed before any of its answer arrived; a token the upstream rejects is
/// refreshed and the request sent again once, when its body can be; a failing upstream's
/// answer gives way to a stored answer the route allows, then to the route's fallback stub,
/// then to an error answer; `100 Continue` goes out only when the body is wanted; a client
/// still waiting for `100 Continue` when the gateway answers gets the connection closed
/// after the answer.
///
/// Being adopted: `ClientSession` and `BackgroundRefresh` still run their own flow, whose
/// rules this machine mirrors; its tests pin those rules event by event until the drivers
/// move onto it.
struct ExchangeMachine {
  // MARK: What the driver knows

  /// What the route lets the request do, worked out once by the driver.
  struct RouteFacts: Equatable {
    enum Stub: Equatable {
      case off
      /// Always answered by the stub, after `delayNanoseconds`.
      case always(delayNanoseconds: UInt64)
      /// Answered by the stub when the upstream fails.
      case fallback
    }
    var stub: Stub = .off
    var hasUpstream = true
    var usesToken = false
    /// GET and HEAD may be answered from the store (the route has a `cache` block, the
    /// request has no body and carries no credentials of its own).
    var usesStore = false
    /// The answer is wrapped: a HEAD goes upstream as GET (the envelope needs the body).
    var enveloped = false
    /// `limits.body_buffer_bytes`: the body read before a connection is leased.
    var bodyReadAhead = 0
    /// The body kept for a retry after a token rejection (routes with a token).
    var replayLimit = 0
  }

  /// The request as the machine needs it.
  struct RequestFacts: Equatable {
    var idempotent = true
    var isHEAD = false
    var hasBody = false
    var expectsContinue = false
    /// Nil: no route matched.
    var route: RouteFacts?
  }

  // MARK: Phases

  enum Wait: Equatable {
    case store
    case token
    case stubDelay
    case collapsed
    case bodyReadAhead
    case connection
  }

  enum RequestProgress: Equatable {
    case streaming
    case complete
  }

  enum ResponseProgress: Equatable {
    case awaitingHead
    case streaming
    case complete
  }

  enum Phase: Equatable {
    case admitted
    case waiting(Wait)
    case forwarding(request: RequestProgress, response: ResponseProgress)
    case answeredLocally
    case done
  }

  // MARK: Events and actions

  /// What the store said for the request's key.
  enum StoreResult: Equatable {
    case fresh
    case staleWhileRevalidate
    /// Nothing usable; `canJoin`: an exchange for the same key is with the upstream and the
    /// request may wait for its answer.
    case miss(canJoin: Bool)
  }

  /// How an upstream exchange failed.
  enum Failure: Equatable {
    case connectRefused
    case connectTimedOut
    case reset
    case responseTimedOut
    case badResponse
    /// The breakers or the health checks refused the upstream.
    case refusedByBreaker
    /// No connection came free in time.
    case busy
  }

  /// Why the gateway answers itself.
  enum LocalAnswer: Equatable {
    case noRoute
    case upstreamUnavailable
    case upstreamTimedOut
    case upstreamBusy
    case tokenUnavailable
    case tokenRejected
    case requestTimedOut
    case refused(status: Int)
  }

  enum StoredResult: Equatable {
    case hit
    case stale
  }

  enum Event: Equatable {
    /// The head is parsed and the route matched (or not). `refusal`: the client checks (key,
    /// rate limit) already refused it with this status.
    case started(RequestFacts, refusal: Int?)
    case storeLookedUp(StoreResult)
    case tokenGranted
    case tokenUnavailable
    case stubDelayPassed
    /// A connection was leased (`reused`: it carried earlier exchanges); the request's head
    /// goes out on it.
    case leased(reused: Bool)
    /// Every connection the upstream allows is busy: the request queues.
    case noConnectionFree
    case clientBody(count: Int)
    case clientEnd
    /// The upstream's answer head. `rejectsToken`: its status (or, for small bodies, the
    /// field the route names) says the token was refused. `staleAvailable`: the store has an
    /// answer the route may serve instead of a 5xx.
    case upstreamHead(status: Int, rejectsToken: Bool, staleAvailable: Bool)
    case upstreamBody
    /// The answer is complete; `reusable`: the connection may carry another exchange.
    case upstreamEnd(reusable: Bool)
    /// `staleAvailable`: as for `upstreamHead`.
    case upstreamFailed(Failure, staleAvailable: Bool)
    /// The exchange a collapsed request waited for ended: with an answer it may take, a
    /// failure it answers as the leader did, or nothing for it (it asks the upstream).
    case collapsedAnswered
    case collapsedFailed(Failure, staleAvailable: Bool)
    case collapsedRetry
    case deadlinePassed
    case clientGone
  }

  enum Action: Equatable {
    case lookUpStore
    case requestToken
    case joinCollapsed
    case armStubDelay
    /// Lease a connection (`fresh`: never an idle one). The driver answers `leased`,
    /// `noConnectionFree` or `upstreamFailed(.refusedByBreaker/.connectRefused…)`.
    case lease(fresh: Bool)
    case queueForConnection
    case sendContinue
    /// Write the request head (as GET when `asGET`), then the body kept so far.
    case writeUpstreamHead(asGET: Bool)
    case forwardBody
    case endUpstreamBody
    case keepBody
    case dropBody
    case writeClientHead
    case writeClientBody
    case writeClientEnd
    case serveStored(StoredResult)
    case revalidateInBackground
    case serveStub
    case answerLocally(LocalAnswer)
    case releaseUpstream(reusable: Bool)
    case discardUpstream
    case refreshTokenAndRetry
    /// Cut the client connection: part of an answer is out and the rest cannot follow.
    case abortClient
    /// The client connection ends after this answer (the request's body will not follow).
    case closeAfterAnswer
    case record
  }

  // MARK: State

  private(set) var phase = Phase.admitted
  private(set) var facts = RequestFacts()
  private(set) var attempts = 0
  private(set) var continueSent = false
  private(set) var requestComplete = false
  /// Body bytes read ahead before a connection was leased.
  private(set) var bodyBytesKept = 0
  /// Body bytes that arrived, all told.
  private(set) var bodyBytesSeen = 0
  private(set) var tokenRetried = false
  private(set) var connectionReused = false
  private(set) var responseBytesReceived = false
  /// The request's body arrived in part or whole (a body kept for a retry cannot be longer
  /// than the read-ahead).
  private(set) var bodyStarted = false

  /// The deadline that applies in the current phase.
  enum Deadline: Equatable {
    case none
    case stubDelay
    case connectionQueue
    /// The body must keep coming (idle between reads, and `body_timeout_ms` in all).
    case requestUpload
    case upstreamResponse
    /// A local answer is out; the rest of the body has the idle timeout to arrive.
    case drainBody
  }

  var deadline: Deadline {
    switch phase {
    case .admitted, .done: return .none
    case .waiting(.stubDelay): return .stubDelay
    case .waiting(.connection): return .connectionQueue
    case .waiting(.bodyReadAhead): return .requestUpload
    // The store answers at once; a token wait and a collapsed wait are bounded by whoever
    // they wait for.
    case .waiting(.store), .waiting(.token), .waiting(.collapsed): return .none
    case .forwarding(request: .streaming, response: .awaitingHead): return .requestUpload
    case .forwarding(request: .complete, response: .awaitingHead), .forwarding(_, response: .streaming):
      return .upstreamResponse
    case .forwarding(_, response: .complete): return .none
    case .answeredLocally: return requestComplete ? .none : .drainBody
    }
  }

  // MARK: Events

  mutating func handle(_ event: Event) -> [Action] {
    switch event {
    case .started(let facts, let refusal):
      return start(facts, refusal: refusal)
    case .storeLookedUp(let result):
      return storeLookedUp(result)
    case .tokenGranted:
      guard phase == .waiting(.token) else { return [] }
      return proceedToUpstream(tokenReady: true)
    case .tokenUnavailable:
      guard phase == .waiting(.token) else { return [] }
      return failOver(answer: tokenRetried ? .tokenRejected : .tokenUnavailable, staleAvailable: false)
    case .stubDelayPassed:
      guard phase == .waiting(.stubDelay) else { return [] }
      return answer([.serveStub])
    case .leased(let reused):
      return leased(reused: reused)
    case .noConnectionFree:
      phase = .waiting(.connection)
      return [.queueForConnection]
    case .clientBody(let count):
      return clientBody(count)
    case .clientEnd:
      return clientEnd()
    case .upstreamHead(let status, let rejectsToken, let staleAvailable):
      return upstreamHead(status: status, rejectsToken: rejectsToken, staleAvailable: staleAvailable)
    case .upstreamBody:
      guard case .forwarding(_, .streaming) = phase else { return [] }
      return [.writeClientBody]
    case .upstreamEnd(let reusable):
      return upstreamEnd(reusable: reusable)
    case .upstreamFailed(let failure, let staleAvailable):
      return upstreamFailed(failure, staleAvailable: staleAvailable)
    case .collapsedAnswered:
      guard phase == .waiting(.collapsed) else { return [] }
      return answer([.serveStored(.hit)])
    case .collapsedFailed(let failure, let staleAvailable):
      guard phase == .waiting(.collapsed) else { return [] }
      return failOver(answer: Self.localAnswer(for: failure), staleAvailable: staleAvailable)
    case .collapsedRetry:
      guard phase == .waiting(.collapsed) else { return [] }
      return proceedToUpstream(tokenReady: false)
    case .deadlinePassed:
      return deadlinePassed()
    case .clientGone:
      return clientGone()
    }
  }

  private mutating func start(_ facts: RequestFacts, refusal: Int?) -> [Action] {
    self.facts = facts
    requestComplete = !facts.hasBody
    if let refusal { return answer([.answerLocally(.refused(status: refusal))]) }
    guard let route = facts.route else { return answer([.answerLocally(.noRoute)]) }
    switch route.stub {
    case .always(let delay):
      guard delay > 0 else { return answer([.serveStub]) }
      phase = .waiting(.stubDelay)
      return [.armStubDelay]
    case .off, .fallback:
      break
    }
    guard route.hasUpstream else { return answer([.answerLocally(.upstreamUnavailable)]) }
    if route.usesStore {
      phase = .waiting(.store)
      return [.lookUpStore]
    }
    return proceedToUpstream(tokenReady: false)
  }

  private mutating func storeLookedUp(_ result: StoreResult) -> [Action] {
    guard phase == .waiting(.store) else { return [] }
    switch result {
    case .fresh:
      return answer([.serveStored(.hit)])
    case .staleWhileRevalidate:
      return answer([.serveStored(.stale), .revalidateInBackground])
    case .miss(let canJoin):
      if canJoin {
        phase = .waiting(.collapsed)
        return [.joinCollapsed]
      }
      return proceedToUpstream(tokenReady: false)
    }
  }

  /// On towards the upstream: the token, then the body's read-ahead, then a connection.
  private mutating func proceedToUpstream(tokenReady: Bool) -> [Action] {
    guard let route = facts.route else { return [] }
    if route.usesToken && !tokenReady {
      phase = .waiting(.token)
      return [.requestToken]
    }
    if attempts == 0 && !requestComplete && route.bodyReadAhead > bodyBytesKept && phase != .waiting(.bodyReadAhead) {
      phase = .waiting(.bodyReadAhead)
      return continueIfAsked()
    }
    phase = .waiting(.connection)
    return [.lease(fresh: false)]
  }

  private mutating func leased(reused: Bool) -> [Action] {
    guard phase == .waiting(.connection) else { return [.discardUpstream] }
    attempts += 1
    connectionReused = reused
    responseBytesReceived = false
    phase = .forwarding(request: requestComplete ? .complete : .streaming, response: .awaitingHead)
    var actions = continueIfAsked()
    actions.append(.writeUpstreamHead(asGET: facts.isHEAD && facts.route?.enveloped == true))
    if requestComplete && facts.hasBody { actions.append(.endUpstreamBody) }
    return actions
  }

  private mutating func clientBody(_ count: Int) -> [Action] {
    bodyStarted = true
    bodyBytesSeen += count
    if phase == .waiting(.token) && tokenRetried && bodyBytesSeen > facts.route?.replayLimit ?? 0 {
      // Refused before the body was all here, and the body has outgrown the copy: its
      // start went to the upstream that refused it and cannot be sent again.
      requestComplete = true
      return answer([.answerLocally(.tokenRejected), .closeAfterAnswer])
    }
    switch phase {
    case .waiting(.bodyReadAhead):
      bodyBytesKept += count
      if bodyBytesKept >= facts.route?.bodyReadAhead ?? 0 {
        phase = .waiting(.connection)
        return [.keepBody, .lease(fresh: false)]
      }
      return [.keepBody]
    case .waiting(.token), .waiting(.connection), .waiting(.collapsed), .waiting(.store), .waiting(.stubDelay),
      .admitted:
      bodyBytesKept += count
      return [.keepBody]
    case .forwarding(.streaming, _):
      return [.forwardBody]
    case .forwarding(.complete, _), .answeredLocally, .done:
      return [.dropBody]
    }
  }

  private mutating func clientEnd() -> [Action] {
    requestComplete = true
    switch phase {
    case .waiting(.bodyReadAhead):
      phase = .waiting(.connection)
      return [.lease(fresh: false)]
    case .forwarding(.streaming, let response):
      phase = .forwarding(request: .complete, response: response)
      if response == .complete { return finish() }
      return [.endUpstreamBody]
    case .answeredLocally:
      return finish()
    case .admitted, .waiting, .forwarding(.complete, _), .done:
      return []
    }
  }

  private mutating func upstreamHead(status: Int, rejectsToken: Bool, staleAvailable: Bool) -> [Action] {
    guard case .forwarding(let request, .awaitingHead) = phase else { return [] }
    responseBytesReceived = true
    if rejectsToken && !tokenRetried && bodyBytesSeen <= facts.route?.replayLimit ?? 0 {
      // Sent again with a new value, once; the rest of a body still arriving follows it.
      tokenRetried = true
      phase = .waiting(.token)
      return [.discardUpstream, .refreshTokenAndRetry]
    }
    if status >= 500 && staleAvailable {
      return answer([.discardUpstream, .serveStored(.stale)])
    }
    phase = .forwarding(request: request, response: .streaming)
    return [.writeClientHead]
  }

  private mutating func upstreamEnd(reusable: Bool) -> [Action] {
    guard case .forwarding(let request, .streaming) = phase else { return [] }
    phase = .forwarding(request: request, response: .complete)
    // An upstream that answered before the whole body was sent cannot take the rest: the
    // connection goes, and so does the client's, which cannot carry another request.
    guard request == .complete else {
      return [.writeClientEnd, .discardUpstream, .closeAfterAnswer] + finish()
    }
    return [.writeClientEnd, .releaseUpstream(reusable: reusable)] + finish()
  }

  private mutating func upstreamFailed(_ failure: Failure, staleAvailable: Bool) -> [Action] {
    switch phase {
    case .forwarding(_, .streaming):
      // Part of the answer is out: cutting the connection is the only honest signal left.
      phase = .done
      return [.discardUpstream, .abortClient, .record]
    case .forwarding(_, .awaitingHead):
      if failure == .reset
        && UpstreamRetryPolicy.shouldRetry(
          idempotent: facts.idempotent, connectionWasReused: connectionReused,
          responseBytesReceived: responseBytesReceived, bodyReplayable: !facts.hasBody, attempts: attempts)
      {
        phase = .waiting(.connection)
        return [.discardUpstream, .lease(fresh: true)]
      }
      return [.discardUpstream] + failOver(answer: Self.localAnswer(for: failure), staleAvailable: staleAvailable)
    case .waiting(.connection):
      return failOver(answer: Self.localAnswer(for: failure), staleAvailable: staleAvailable)
    case .admitted, .waiting, .forwarding(_, .complete), .answeredLocally, .done:
      return []
    }
  }

  private mutating func deadlinePassed() -> [Action] {
    switch deadline {
    case .none:
      return []
    case .stubDelay:
      return answer([.serveStub])
    case .connectionQueue:
      return failOver(answer: .upstreamBusy, staleAvailable: false)
    case .requestUpload:
      // The client stopped sending its body: nothing sensible can follow on its connection.
      requestComplete = true
      var actions: [Action] = []
      if case .forwarding = phase { actions.append(.discardUpstream) }
      return actions + answer([.answerLocally(.requestTimedOut), .closeAfterAnswer])
    case .upstreamResponse:
      if case .forwarding(_, .streaming) = phase {
        phase = .done
        return [.discardUpstream, .abortClient, .record]
      }
      return upstreamFailed(.responseTimedOut, staleAvailable: false)
    case .drainBody:
      phase = .done
      return [.closeAfterAnswer, .record]
    }
  }

  private mutating func clientGone() -> [Action] {
    var actions: [Action] = []
    switch phase {
    case .forwarding: actions.append(.discardUpstream)
    case .done: return []
    case .admitted, .waiting, .answeredLocally: break
    }
    phase = .done
    return actions + [.record]
  }

  // MARK: Helpers

  private mutating func continueIfAsked() -> [Action] {
    guard facts.expectsContinue && facts.hasBody && !continueSent && !requestComplete else { return [] }
    continueSent = true
    return [.sendContinue]
  }

  /// The upstream is no help: a stored answer the route allows, else its fallback stub,
  /// else an error answer.
  private mutating func failOver(answer local: LocalAnswer, staleAvailable: Bool) -> [Action] {
    if staleAvailable { return answer([.serveStored(.stale)]) }
    if facts.route?.stub == .fallback, local != .tokenRejected, local != .tokenUnavailable {
      return answer([.serveStub])
    }
    return answer([.answerLocally(local)])
  }

  /// The gateway answers: a client still waiting for `100 Continue` will not send its body,
  /// so its connection ends after the answer.
  private mutating func answer(_ actions: [Action]) -> [Action] {
    var actions = actions
    if facts.expectsContinue && facts.hasBody && !continueSent && !requestComplete && !bodyStarted {
      actions.append(.closeAfterAnswer)
      requestComplete = true
    }
    phase = .answeredLocally
    if requestComplete { return actions + finish() }
    return actions
  }

  private mutating func finish() -> [Action] {
    phase = .done
    return [.record]
  }

  static func localAnswer(for failure: Failure) -> LocalAnswer {
    switch failure {
    case .connectTimedOut, .responseTimedOut: return .upstreamTimedOut
    case .busy: return .upstreamBusy
    case .connectRefused, .reset, .badResponse, .refusedByBreaker: return .upstreamUnavailable
    }
  }
}
