/// One request's life as a pure state machine: the phase it is in, the events that move it
/// on, and the actions its driver performs. It knows nothing of HTTP/1.1 framing
/// (chunking, `Connection`, pipelining) or of sockets: an HTTP/1.1 connection
/// (`ClientSession`), an HTTP/2 stream or a test can drive it alike. The deadline that
/// applies is derived from the phase (`deadline`), never kept beside it; the driver knows
/// the timeouts and the clock.
///
/// The phases:
/// - `admitted`: the head is parsed and its route known; nothing decided yet.
/// - `waiting`: for the store, a token, the breakers, a stub's delay, a collapsed leader,
///   the body's read-ahead, a connection, or a place in the upstream's queue.
/// - `forwarding`: the request is with the upstream (its body streaming or complete) and the
///   client's answer is not begun, streaming, or complete.
/// - `answeredLocally`: the gateway answered (the store, a stub, an error); the request's
///   body may still be arriving, to be read and dropped.
/// - `tunnel`: the upstream switched protocols on a WebSocket handshake; both connections
///   carry bytes both ways until one closes, the tunnel falls silent, or the gateway stops.
/// - `done`.
///
/// The driver feeds `handle` an event and performs the actions it returns, in order. An
/// action that leads to another event at once (a lease, a token at hand) is always the last
/// of its list, so the driver may feed that event next, in the same step.
///
/// Rules it holds (Docs/behaviour.md, Docs/envelope.md, Docs/clients-and-cache.md and Config/README.md): only idempotent requests whose body
/// can be sent again are retried once on a fresh connection, and only after a reused
/// connection failed before any of its answer arrived; a token the upstream rejects is
/// refreshed and the request sent again once, when its body can be; a failing upstream's
/// answer gives way to a stored answer the route allows, then to one from the shared tier
/// (asked once, `waiting(.sharedTier)`), then to the route's fallback stub, then to an error
/// answer; `100 Continue` goes out only when the body is wanted; a client
/// still waiting for `100 Continue` when the gateway answers gets the connection closed
/// after the answer; a body is read ahead (`limits.body_buffer_bytes`) before a connection
/// is leased, after the token and the breakers said yes; a WebSocket handshake goes on a
/// fresh connection that never returns to the pool (it may become a tunnel, or its answer
/// may have left it in the middle of the upgrade).
struct ExchangeMachine {
  // MARK: State

  private(set) var phase = Phase.admitted
  private(set) var facts = RequestFacts()
  private(set) var attempts = 0
  private(set) var continueSent = false
  private(set) var requestComplete = false
  /// Body bytes held for the upstream (read ahead, or while waiting); written with the head.
  private(set) var bodyBytesKept = 0
  /// Body bytes that arrived, all told.
  private(set) var bodyBytesSeen = 0
  private(set) var bodyStarted = false
  private(set) var tokenRetried = false
  private(set) var tokenInHand = false
  private(set) var breakersAdmitted = false
  private(set) var readAheadDone = false
  private(set) var connectionReused = false
  /// The lease being pursued is a retry's, on a fresh connection.
  private(set) var leaseFresh = false
  /// The shared tier was asked for this request's key already (by it, or by the leader it
  /// waited for): it is asked at most once.
  private(set) var sharedTierAsked = false
  /// The failure that answers if the shared tier has nothing.
  private(set) var failureBeforeSharedTier: LocalAnswer?

  var deadline: Deadline {
    switch phase {
    case .admitted, .done: return .none
    case .waiting(.stubDelay): return .stubDelay
    case .waiting(.collapsed): return .collapsedWait
    case .waiting(.queue): return .connectionQueue
    case .waiting(.bodyReadAhead): return .requestUpload
    // The store and the pool answer at once; a token wait is bounded by the token's refresh.
    // A wait for signing keys is bounded by the fetch's own timeouts, as a token's is.
    // The shared tier's connection fails each command after `shared.timeout_ms` on its own.
    // So is the count of a rate limit in the shared tier.
    case .waiting(.store), .waiting(.token), .waiting(.breakers), .waiting(.connection), .waiting(.signingKeys),
      .waiting(.sharedTier), .waiting(.rateLimit):
      return .none
    case .forwarding(request: .streaming, _): return .requestUpload
    case .forwarding(request: .complete, _): return .upstreamAnswer
    case .answeredLocally: return requestComplete ? .none : .drainBody
    case .tunnel: return .tunnelIdle
    }
  }

  /// Whether the client's answer has begun (its head staged or sent).
  var answerBegan: Bool {
    if case .forwarding(_, .streaming) = phase { return true }
    return false
  }

  /// The request's body is still to be read when the answer goes out: an answer to the
  /// upstream's head while the body streams means the connection cannot carry another.
  var bodyStillComing: Bool { !requestComplete }

  /// Whether the request can be sent again whole: it has no body, or its body is within
  /// what is kept for a replay (`limits.body_buffer_bytes` on routes that keep it).
  var bodyHeldForReplay: Bool {
    guard facts.hasBody else { return true }
    let limit = facts.route?.replayLimit ?? 0
    return limit > 0 && bodyBytesSeen <= limit
  }

  /// Whether a token rejection could be retried as far as the request goes: not retried
  /// yet, and its body (if any) within what is kept for a replay.
  var bodyAllowsTokenRetry: Bool {
    guard !tokenRetried else { return false }
    guard facts.hasBody else { return true }
    let limit = facts.route?.replayLimit ?? 0
    return limit > 0 && bodyBytesSeen <= limit
  }

  init() {}

  // MARK: Events

  mutating func handle(_ event: Event) -> ExchangeActions {
    switch event {
    case .started(let facts):
      return start(facts)
    case .signingKeysSettled(let refusal):
      guard phase == .waiting(.signingKeys) else { return ExchangeActions() }
      if let refusal { return answer(.answerLocally(.refused(refusal))) }
      return startRoute()
    case .rateLimitSettled(let limited):
      guard phase == .waiting(.rateLimit) else { return ExchangeActions() }
      if limited { return answer(.answerLocally(.refused(.rateLimited))) }
      return admit()
    case .storeLookedUp(let result):
      return storeLookedUp(result)
    case .tokenGranted:
      guard phase == .waiting(.token) else { return ExchangeActions() }
      tokenInHand = true
      return proceed(fresh: leaseFresh)
    case .tokenMissing:
      return ExchangeActions()
    case .tokenUnavailable(let staleAvailable):
      guard phase == .waiting(.token) else { return ExchangeActions() }
      return failOver(.tokenUnavailable, staleAvailable: staleAvailable)
    case .breakersAdmitted:
      guard phase == .waiting(.breakers) else { return ExchangeActions() }
      breakersAdmitted = true
      return proceed(fresh: leaseFresh)
    case .leased(let reused):
      return leased(reused: reused)
    case .noConnectionFree:
      guard phase == .waiting(.connection) else { return ExchangeActions() }
      phase = .waiting(.queue)
      return ExchangeActions(.queueForConnection)
    case .connectionFree:
      guard phase == .waiting(.queue) else { return ExchangeActions() }
      phase = .waiting(.connection)
      return ExchangeActions(.lease(fresh: leaseFresh || facts.upgrade))
    case .clientBody(let count):
      return clientBody(count)
    case .clientEnd:
      return clientEnd()
    case .answerBegan:
      guard case .forwarding(let request, .notBegun) = phase else { return ExchangeActions() }
      phase = .forwarding(request: request, answer: .streaming)
      return ExchangeActions()
    case .answerEnded(let reusable):
      return answerEnded(reusable: reusable)
    case .answerReplaced(let replacement, let reusable):
      return answerReplaced(replacement, reusable: reusable)
    case .tokenRejected(let retry, let reusable):
      return tokenRejected(retry: retry, reusable: reusable)
    case .upstreamFailed(let failure, let staleAvailable, let received, let answerOut):
      return upstreamFailed(failure, staleAvailable: staleAvailable, received: received, answerOut: answerOut)
    case .retryOnAnotherEndpoint:
      // Only before any of the answer: what began belongs to the failed try.
      guard case .forwarding(_, .notBegun) = phase else { return ExchangeActions() }
      return ExchangeActions(.discardUpstream) + proceed(fresh: false)
    case .droppedFromPipeline:
      guard case .forwarding(_, .notBegun) = phase else { return ExchangeActions() }
      attempts -= 1
      phase = .waiting(.connection)
      leaseFresh = false
      return ExchangeActions(.discardUpstream) + proceed(fresh: false)
    case .collapsedEnded(let end):
      return collapsedEnded(end)
    case .sharedTierLookedUp(let found):
      guard phase == .waiting(.sharedTier), let local = failureBeforeSharedTier else { return ExchangeActions() }
      failureBeforeSharedTier = nil
      return failOver(local, staleAvailable: found)
    case .deadlinePassed:
      return deadlinePassed()
    case .clientGone:
      return clientGone()
    case .upgraded:
      guard facts.upgrade, case .forwarding(.complete, .notBegun) = phase else { return ExchangeActions() }
      phase = .tunnel
      return ExchangeActions(.openTunnel)
    case .tunnelEnded:
      guard phase == .tunnel else { return ExchangeActions() }
      phase = .done
      return ExchangeActions(.finishTunnel)
    }
  }

  // MARK: Transitions

  private mutating func start(_ facts: RequestFacts) -> ExchangeActions {
    guard phase == .admitted else { return ExchangeActions() }
    self.facts = facts
    tokenInHand = facts.route?.tokenAtHand ?? false
    requestComplete = !facts.hasBody
    bodyStarted = facts.bodyFollowsHead
    // The rate limit comes first, as the local bucket does: a client over its limit hears
    // 429 whatever else is wrong with its request.
    if facts.awaitsRateLimit {
      phase = .waiting(.rateLimit)
      return ExchangeActions(.countRateLimit)
    }
    return admit()
  }

  /// The client checks' verdict, once the rate limit let the request through.
  private mutating func admit() -> ExchangeActions {
    if let refusal = facts.refusal { return answer(.answerLocally(.refused(refusal))) }
    if facts.awaitsSigningKeys {
      phase = .waiting(.signingKeys)
      return ExchangeActions(.awaitSigningKeys)
    }
    return startRoute()
  }

  /// What the route does with a request the client checks let through.
  private mutating func startRoute() -> ExchangeActions {
    guard let route = facts.route else { return answer(.answerLocally(.noRoute)) }
    switch route.stub {
    case .always(let delayed):
      guard delayed else { return answer(.serveStub) }
      phase = .waiting(.stubDelay)
      return ExchangeActions()
    case .off, .fallback:
      break
    }
    guard route.hasUpstream else { return answer(.answerLocally(.noUpstream)) }
    guard !route.badTarget else { return answer(.answerLocally(.badTarget)) }
    if route.usesStore {
      phase = .waiting(.store)
      return ExchangeActions(.lookUpStore)
    }
    return proceed(fresh: false)
  }

  private mutating func storeLookedUp(_ result: StoreResult) -> ExchangeActions {
    guard phase == .waiting(.store) else { return ExchangeActions() }
    switch result {
    case .fresh:
      return answer(.serveStored(.hit))
    case .staleWhileRevalidate:
      return answer(.serveStored(.stale), then: .revalidateInBackground)
    case .miss:
      return proceed(fresh: false)
    case .joinedCollapsed:
      phase = .waiting(.collapsed)
      return ExchangeActions()
    case .overloaded:
      return answer(.answerLocally(.overloaded))
    }
  }

  /// On towards the upstream: the token, the breakers, the body's read-ahead, a connection.
  private mutating func proceed(fresh: Bool) -> ExchangeActions {
    guard let route = facts.route else { return ExchangeActions() }
    leaseFresh = fresh
    if route.usesToken && !tokenInHand {
      phase = .waiting(.token)
      return ExchangeActions(.takeToken)
    }
    // A retry asks the breakers again (the failure being retried may have opened them); a
    // request that waited since they said yes does not, and so never takes a second trial.
    if !breakersAdmitted {
      phase = .waiting(.breakers)
      return ExchangeActions(.askBreakers(retry: fresh))
    }
    // A client that sends slowly holds no upstream connection: the body (or its first
    // `body_buffer_bytes`) is read before one is leased.
    var actions: ExchangeActions = ExchangeActions()
    if !fresh && attempts == 0 && !readAheadDone && !requestComplete && route.bodyReadAhead > 0 {
      guard bodyBytesKept >= route.bodyReadAhead else {
        phase = .waiting(.bodyReadAhead)
        return continueIfAsked()
      }
      readAheadDone = true
      actions.append(.pauseClientReading)
    }
    phase = .waiting(.connection)
    actions.append(.lease(fresh: fresh || facts.upgrade))
    return actions
  }

  private mutating func leased(reused: Bool) -> ExchangeActions {
    guard phase == .waiting(.connection) else { return ExchangeActions(.discardUpstream) }
    attempts += 1
    connectionReused = reused
    tokenInHand = false
    bodyBytesKept = 0
    phase = .forwarding(request: requestComplete ? .complete : .streaming, answer: .notBegun)
    var actions = continueIfAsked()
    actions.append(.writeUpstreamHead(asGET: facts.isHEAD && facts.route?.enveloped == true))
    if requestComplete && facts.hasBody { actions.append(.endUpstreamBody) }
    return actions
  }

  private mutating func clientBody(_ count: Int) -> ExchangeActions {
    bodyStarted = true
    bodyBytesSeen += count
    switch phase {
    case .waiting(.token):
      if tokenRetried && bodyBytesSeen > facts.route?.replayLimit ?? 0 {
        // Refused before the body was all here, and the body has outgrown the copy: its
        // start went to the upstream that refused it and cannot be sent again.
        return answer(.answerLocally(.tokenRejected), closing: true)
      }
      bodyBytesKept += count
      if bodyBytesKept > facts.route?.pendingLimit ?? Int.max {
        return answer(.answerLocally(.tokenUnavailable), closing: true)
      }
      return ExchangeActions(.keepBody)
    case .waiting(.signingKeys), .waiting(.rateLimit):
      // Kept for the upstream, within the bound a token wait has. (A rate-limit wait lasts
      // `shared.timeout_ms` at most, so it hardly meets the bound; if it does, 503.)
      bodyBytesKept += count
      if bodyBytesKept > facts.route?.pendingLimit ?? Int.max {
        let refusal: LocalAnswer =
          phase == .waiting(.rateLimit) ? .overloaded : .refused(.signingKeysUnavailable)
        return answer(.answerLocally(refusal), closing: true)
      }
      return ExchangeActions(.keepBody)
    case .waiting(.bodyReadAhead):
      bodyBytesKept += count
      guard bodyBytesKept >= facts.route?.bodyReadAhead ?? 0 else { return ExchangeActions(.keepBody) }
      return ExchangeActions(.keepBody) + proceed(fresh: false)
    case .waiting(.queue), .waiting(.connection), .waiting(.breakers):
      bodyBytesKept += count
      return ExchangeActions(.keepBody)
    case .forwarding(.streaming, _):
      return ExchangeActions(.forwardBody)
    case .admitted, .waiting(.store), .waiting(.stubDelay), .waiting(.collapsed), .waiting(.sharedTier),
      .forwarding(.complete, _), .answeredLocally, .tunnel, .done:
      return ExchangeActions(.dropBody)
    }
  }

  private mutating func clientEnd() -> ExchangeActions {
    guard !requestComplete else { return ExchangeActions() }
    requestComplete = true
    switch phase {
    case .waiting(.bodyReadAhead):
      return proceed(fresh: false)
    case .forwarding(.streaming, let answer):
      phase = .forwarding(request: .complete, answer: answer)
      return ExchangeActions(.endUpstreamBody)
    case .answeredLocally:
      return finish()
    case .admitted, .waiting, .forwarding(.complete, _), .tunnel, .done:
      return ExchangeActions()
    }
  }

  private mutating func answerEnded(reusable: Bool) -> ExchangeActions {
    guard case .forwarding(let request, _) = phase else { return ExchangeActions() }
    // An upstream that answered before the whole body was sent cannot take the rest: the
    // connection goes, and the client's ends after the answer (the rest of its body is
    // read and dropped meanwhile).
    guard request == .complete else {
      requestComplete = true
      phase = .done
      return ExchangeActions(.releaseUpstream(reusable: false), .closeAfterAnswer(drainInput: true), .finish)
    }
    // Every answered request ends here: its actions are built in place, without `+`.
    phase = .done
    return ExchangeActions(.releaseUpstream(reusable: reusable && !facts.upgrade), .finish)
  }

  private mutating func answerReplaced(_ replacement: Replacement, reusable: Bool?) -> ExchangeActions {
    guard case .forwarding = phase else { return ExchangeActions() }
    let upstream: Action =
      reusable.map { .releaseUpstream(reusable: $0 && requestComplete && !facts.upgrade) } ?? .discardUpstream
    switch replacement {
    case .stored:
      return ExchangeActions(upstream) + answer(.serveStored(.stale))
    case .revalidated:
      return ExchangeActions(upstream) + answer(.serveStored(.revalidated))
    case .overloaded:
      // The body still coming cannot be used: the connection ends after the answer.
      return ExchangeActions(upstream) + answer(.answerLocally(.overloaded), closing: !requestComplete)
    }
  }

  private mutating func tokenRejected(retry: Bool, reusable: Bool?) -> ExchangeActions {
    guard case .forwarding(let request, .notBegun) = phase, retry, bodyAllowsTokenRetry else {
      return ExchangeActions()
    }
    // Sent again with a new value, once; the rest of a body still arriving follows it.
    tokenRetried = true
    tokenInHand = false
    let upstream: Action =
      reusable.map { .releaseUpstream(reusable: $0 && request == .complete && !facts.upgrade) } ?? .discardUpstream
    phase = .waiting(.token)
    leaseFresh = false
    return ExchangeActions(upstream, .takeToken)
  }

  private mutating func upstreamFailed(
    _ failure: UpstreamFailure, staleAvailable: Bool, received: Bool, answerOut: Bool
  )
    -> ExchangeActions
  {
    switch phase {
    case .forwarding(_, let answer):
      if answer == .streaming && answerOut {
        // Part of the answer is out: cutting the connection is the only honest signal left.
        phase = .done
        return ExchangeActions(.discardUpstream, .abortClient) + finish()
      }
      if failure == .closed
        && UpstreamRetryPolicy.shouldRetry(
          idempotent: facts.idempotent, connectionWasReused: connectionReused, answerBytesReceived: received,
          bodyReplayable: !facts.hasBody, attempts: attempts)
      {
        breakersAdmitted = false
        return ExchangeActions(.discardUpstream) + proceed(fresh: true)
      }
      return ExchangeActions(.discardUpstream) + failOver(.upstream(failure), staleAvailable: staleAvailable)
    case .waiting(.queue):
      return ExchangeActions(.leaveQueue) + failOver(.upstream(failure), staleAvailable: staleAvailable)
    case .waiting(.connection), .waiting(.breakers), .waiting(.collapsed):
      return failOver(.upstream(failure), staleAvailable: staleAvailable)
    // A tunnel's upstream is the tunnel's: its close ends the tunnel, not an answer.
    case .admitted, .waiting, .answeredLocally, .tunnel, .done:
      return ExchangeActions()
    }
  }

  private mutating func collapsedEnded(_ end: CollapsedEnd) -> ExchangeActions {
    guard phase == .waiting(.collapsed) else { return ExchangeActions() }
    switch end {
    case .answered:
      return answer(.serveCollapsed)
    case .failed(let failure, let staleAvailable):
      // The leader asked the shared tier for this key before it let its waiters go, and
      // kept what it found here (`staleAvailable` says so): one lookup for them all.
      sharedTierAsked = true
      return failOver(.upstream(failure), staleAvailable: staleAvailable)
    case .retry:
      return proceed(fresh: false)
    }
  }

  private mutating func deadlinePassed() -> ExchangeActions {
    switch deadline {
    case .none:
      return ExchangeActions()
    case .stubDelay:
      return answer(.serveStub)
    case .requestUpload:
      // The client stopped sending its body: nothing sensible can follow on its connection.
      if answerBegan {
        phase = .done
        return ExchangeActions(.discardUpstream, .abortClient) + finish()
      }
      requestComplete = true
      var actions: ExchangeActions = ExchangeActions()
      if case .forwarding = phase { actions.append(.discardUpstream) }
      return actions + answer(.answerLocally(.requestTimedOut), closing: true)
    case .drainBody:
      requestComplete = true
      return ExchangeActions(.closeAfterAnswer(drainInput: true)) + finish()
    case .tunnelIdle:
      // Both sides close; the tunnel's end (`tunnelEnded`) finishes the exchange.
      return ExchangeActions(.closeTunnel)
    // Told apart by the driver, which reports them as failures.
    case .collapsedWait, .connectionQueue, .upstreamAnswer:
      return ExchangeActions()
    }
  }

  private mutating func clientGone() -> ExchangeActions {
    var actions: ExchangeActions = ExchangeActions()
    switch phase {
    case .forwarding: actions.append(.discardUpstream)
    case .waiting(.queue): actions.append(.leaveQueue)
    case .done: return ExchangeActions()
    // A tunnel's sides close together; its end is counted by `finishTunnel`.
    case .tunnel:
      phase = .done
      return ExchangeActions(.closeTunnel, .finishTunnel)
    case .admitted, .waiting, .answeredLocally: break
    }
    phase = .done
    return actions + ExchangeActions(.finish)
  }

  // MARK: Helpers

  private mutating func continueIfAsked() -> ExchangeActions {
    guard facts.expectsContinue && facts.hasBody && !continueSent && !requestComplete else { return ExchangeActions() }
    continueSent = true
    return ExchangeActions(.sendContinue)
  }

  /// The upstream is no help: a stored answer the route allows, else its fallback stub
  /// (not for a token the gateway could not get or keep: that is no upstream failure),
  /// else an error answer.
  /// An upstream failure with nothing stored here first asks the shared tier, once, where the
  /// route uses it: replicas pool their stored answers (Docs/shared-tier.md).
  private mutating func failOver(_ local: LocalAnswer, staleAvailable: Bool) -> ExchangeActions {
    if staleAvailable { return answer(.serveStored(.stale)) }
    if case .upstream = local, facts.route?.usesSharedTier == true, !sharedTierAsked {
      sharedTierAsked = true
      failureBeforeSharedTier = local
      phase = .waiting(.sharedTier)
      return ExchangeActions(.lookUpSharedTier)
    }
    if facts.route?.stub == .fallback, case .upstream = local { return answer(.serveStub) }
    return answer(.answerLocally(local))
  }

  /// The gateway answers. A client still waiting for `100 Continue` will not send its
  /// body, so its connection ends after the answer (RFC 9110 §10.1.1); `closing`: it ends
  /// after the answer anyway, the body read and dropped meanwhile.
  private mutating func answer(_ action: Action, then next: Action? = nil, closing: Bool = false) -> ExchangeActions {
    var actions: ExchangeActions = ExchangeActions()
    if facts.expectsContinue && facts.hasBody && !continueSent && !requestComplete && !bodyStarted {
      actions.append(.closeAfterAnswer(drainInput: true))
      requestComplete = true
    } else if closing {
      actions.append(.closeAfterAnswer(drainInput: false))
    }
    actions.append(action)
    if let next { actions.append(next) }
    phase = .answeredLocally
    if requestComplete { return actions + finish() }
    actions.append(.drainBody)
    return actions
  }

  private mutating func finish() -> ExchangeActions {
    phase = .done
    return ExchangeActions(.finish)
  }
}
