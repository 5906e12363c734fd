/// What goes in and out of the exchange machine: the facts it starts from, its phases, its
/// events and its actions (see `ExchangeMachine`).
extension ExchangeMachine {
  // MARK: What the driver knows

  /// What the route lets the request do, worked out once by the driver.
  struct RouteFacts: Equatable {
    enum Stub: Equatable {
      case off
      /// Always answered by the stub, after a delay (`delayed`) or at once.
      case always(delayed: Bool)
      /// Answered by the stub when the upstream fails.
      case fallback
    }
    var stub: Stub = .off
    var hasUpstream = true
    /// The rewritten path would carry an encoded delimiter the upstream could misread.
    var badTarget = false
    var usesToken = false
    /// A value of the route's token was at hand when the request came (the driver took it):
    /// the first send needs no `takeToken`.
    var tokenAtHand = false
    /// The route has a `cache` block: the store is asked before the upstream.
    var usesStore = false
    /// A shared tier is configured and the route keeps stale answers: on an upstream failure
    /// with nothing stored here, the shared tier is asked (Docs/shared-tier.md).
    var usesSharedTier = false
    /// The answer is wrapped: a HEAD goes upstream as GET (the envelope needs the body).
    var enveloped = false
    /// `limits.body_buffer_bytes`: the body read before a connection is leased.
    var bodyReadAhead = 0
    /// The body kept for a retry after a token rejection (routes with a token).
    var replayLimit = 0
    /// Body bytes held while a token is fetched, before the request is given up.
    var pendingLimit = Int.max
  }

  /// Why the client checks refused the request before anything else.
  /// (No payloads: an action that carries a refusal stays a byte or two, and the inline
  /// list of actions each event returns stays small. A rate limit's `Retry-After` is the
  /// driver's to keep.)
  enum Refusal: Equatable {
    case clientKeyMissing
    case clientKeyInvalid
    case rateLimited
    /// A route with a required `jwt` got no bearer token (401, no error code: RFC 6750 §3.1).
    case bearerMissing
    /// The bearer token failed verification (401 `invalid_token`).
    case bearerInvalid
    /// Valid, without a scope the route asks for (403 `insufficient_scope`).
    case scopeInsufficient
    /// The provider has no signing keys at all (503): never "accept" for want of keys.
    case signingKeysUnavailable
    /// An `Upgrade: websocket` handshake on a route without `websocket` (400), or over
    /// HTTP/2, whose streams are never tunnelled (Docs/websockets.md).
    case webSocketNotEnabled
    /// `Upgrade: websocket` that breaks RFC 6455 §4.1 (not a bodiless GET, no valid key).
    case webSocketMalformed
    /// `limits.max_websockets` tunnels are open or opening (503).
    case webSocketsAtLimit
  }

  /// The request as the machine needs it.
  struct RequestFacts: Equatable {
    var idempotent = true
    var isHEAD = false
    var hasBody = false
    var expectsContinue = false
    /// Body bytes came right behind the head (the client did not wait for `100 Continue`).
    var bodyFollowsHead = false
    var refusal: Refusal?
    /// The bearer token waits for its provider's signing keys (the first fetch, or a
    /// refresh for an unknown `kid`): `signingKeysSettled` says how verification ended.
    var awaitsSigningKeys = false
    /// The client key's limit is counted in the shared tier (Docs/shared-tier.md): the request waits
    /// for the count (`rateLimitSettled`) before anything else, within `shared.timeout_ms`.
    /// The other checks' verdicts (`refusal`, `awaitsSigningKeys`) apply after it.
    var awaitsRateLimit = false
    /// A WebSocket handshake on a route that takes them: it goes on a fresh upstream
    /// connection that never returns to the pool, and a `101` turns the exchange into a
    /// tunnel.
    var upgrade = false
    /// Nil: no route matched.
    var route: RouteFacts?
  }

  // MARK: Phases

  enum Wait: Equatable {
    /// For the shared tier's count of the client key's window (a 429 or on); bounded by
    /// `shared.timeout_ms` (the connection's command timeout), not by a deadline.
    case rateLimit
    /// For the provider's keys, to verify the client's bearer token.
    case signingKeys
    case store
    case token
    case breakers
    case stubDelay
    case collapsed
    case bodyReadAhead
    /// A lease was asked for; the pool answers at once.
    case connection
    /// Every connection the upstream allows is busy: in its queue.
    case queue
    /// The upstream failed and nothing is stored here: the shared tier is asked for the key.
    /// Bounded by `shared.timeout_ms` (the connection's command timeout), not by a deadline.
    case sharedTier
  }

  enum RequestProgress: Equatable {
    case streaming
    case complete
  }

  /// The client's answer: nothing of it out yet (the upstream's head may be in, its body
  /// being gathered for the envelope), its head out and the rest following, or all out.
  enum AnswerProgress: Equatable {
    case notBegun
    case streaming
  }

  enum Phase: Equatable {
    case admitted
    case waiting(Wait)
    case forwarding(request: RequestProgress, answer: AnswerProgress)
    case answeredLocally
    /// The upstream switched protocols (`101`): client and upstream are joined as a byte
    /// tunnel until either closes, it falls silent, or the gateway stops.
    case tunnel
    case done
  }

  // MARK: Events and actions

  /// What the store said for the request's key.
  enum StoreResult: Equatable {
    case fresh
    case staleWhileRevalidate
    /// Nothing usable: the request goes to the upstream.
    case miss
    /// Nothing usable, and the request joined the exchange already with the upstream for
    /// the same key: it waits for that answer.
    case joinedCollapsed
    /// A stored answer too large for what is left of the buffer budget: refused before it
    /// is read, wrapped or copied.
    case overloaded
  }

  /// How the exchange a collapsed request waited for ended.
  enum CollapsedEnd: Equatable {
    /// With an answer it takes.
    case answered
    /// With a failure it answers as the leader did (`staleAvailable`: a stored answer the
    /// route allows is at hand).
    case failed(UpstreamFailure, staleAvailable: Bool)
    /// With nothing for it: it asks the upstream itself.
    case retry
  }

  /// What the gateway answers with, in place of the upstream's answer.
  enum Replacement: Equatable {
    /// A stored answer stands in for the upstream's (stale: the upstream failed).
    case stored
    /// The upstream confirmed the stored answer it was asked about (`304`).
    case revalidated
    case overloaded
  }

  enum Event: Equatable {
    case started(RequestFacts)
    /// The keys the bearer token waited for came (or did not): verified, or refused.
    case signingKeysSettled(refusal: Refusal?)
    /// The client key's count is in (from the shared tier, or the local bucket when the tier
    /// did not answer): `limited` answers 429.
    case rateLimitSettled(limited: Bool)
    case storeLookedUp(StoreResult)
    /// A value of the route's token is at hand.
    case tokenGranted
    /// None is at hand: the driver waits for one.
    case tokenMissing
    /// The wait ended without a value.
    case tokenUnavailable(staleAvailable: Bool)
    /// The breakers and health checks let the request through.
    case breakersAdmitted
    /// A connection was leased (`reused`: it carried earlier exchanges).
    case leased(reused: Bool)
    case noConnectionFree
    /// The queue the request waits in has room now.
    case connectionFree
    case clientBody(count: Int)
    case clientEnd
    /// The client's answer head is out (staged): the upstream's answer passes through or
    /// streams wrapped.
    case answerBegan
    /// The upstream's answer is complete and the client's written; `reusable`: the upstream
    /// connection may carry another exchange.
    case answerEnded(reusable: Bool)
    /// The upstream's answer gives way to one of the gateway's; `reusable`: the upstream
    /// connection was read to the end of the answer and may be kept (nil: it goes).
    case answerReplaced(Replacement, reusable: Bool?)
    /// The upstream said the token was rejected. `retry`: the driver found a retry
    /// worthwhile (the token can be refreshed or has changed); the machine adds whether the
    /// body allows one. `reusable` as for `answerReplaced`.
    case tokenRejected(retry: Bool, reusable: Bool?)
    /// `received`: some of the upstream's answer had arrived; `answerOut`: some of the
    /// client's answer has left (not only been staged).
    case upstreamFailed(UpstreamFailure, staleAvailable: Bool, received: Bool, answerOut: Bool)
    /// The try failed before any of its answer arrived, and the driver found that the
    /// upstream's `retry` rule and budget allow another on a different endpoint.
    case retryOnAnotherEndpoint
    /// The request was written behind another on a pipelined connection that will not
    /// answer it: not an attempt; it goes again, alone.
    case droppedFromPipeline
    case collapsedEnded(CollapsedEnd)
    /// The shared tier answered (`found`: a stored answer the route allows, now at hand), or
    /// failed, timed out or is not configured (`found: false`).
    case sharedTierLookedUp(found: Bool)
    /// The deadline of the phase passed. Failures the driver tells apart (an upstream
    /// answer or a queue place not in time) come as `upstreamFailed` instead.
    case deadlinePassed
    case clientGone
    /// The upstream answered a handshake with a `101` the driver checked (`Upgrade:
    /// websocket`, `Sec-WebSocket-Accept`).
    case upgraded
    /// Both sides of the tunnel are closed.
    case tunnelEnded
  }

  enum StoredKind: Equatable {
    case hit
    case stale
    /// Confirmed by the upstream just now.
    case revalidated
  }

  /// Why the gateway answers itself.
  enum LocalAnswer: Equatable {
    case refused(Refusal)
    case noRoute
    case noUpstream
    case badTarget
    case upstream(UpstreamFailure)
    case tokenUnavailable
    case tokenRejected
    case requestTimedOut
    case overloaded
  }

  /// The events an action leads to at once (the store looked up, a token at hand, the
  /// breakers' yes, a lease or none free): the driver hands one back from performing the
  /// action and feeds it next, in the same step. A byte or two to return, where an optional
  /// `Event` (whose `started` carries the request's facts) is several words.
  enum ImmediateEvent {
    case storeLookedUp(StoreResult)
    case tokenGranted
    case breakersAdmitted
    case leased(reused: Bool)
    case noConnectionFree
    /// No shared tier to ask after all (not running on this loop, no key).
    case sharedTierMissed
    /// The rate limit was decided without waiting (the local bucket, no tier to ask).
    case rateLimitSettled(limited: Bool)

    var event: Event {
      switch self {
      case .storeLookedUp(let result): .storeLookedUp(result)
      case .tokenGranted: .tokenGranted
      case .breakersAdmitted: .breakersAdmitted
      case .leased(let reused): .leased(reused: reused)
      case .noConnectionFree: .noConnectionFree
      case .sharedTierMissed: .sharedTierLookedUp(found: false)
      case .rateLimitSettled(let limited): .rateLimitSettled(limited: limited)
      }
    }
  }

  enum Action: Equatable {
    /// Count the request in the client key's shared window (`rateLimitSettled` follows).
    case countRateLimit
    /// Ask the provider for its keys and wait (`signingKeysSettled` follows).
    case awaitSigningKeys
    case lookUpStore
    case revalidateInBackground
    /// Take a value of the route's token: `tokenGranted` when one is at hand, else wait
    /// for one and say `tokenMissing`.
    case takeToken
    /// Ask the breakers and health checks (`retry`: for a retry, which never takes a trial).
    case askBreakers(retry: Bool)
    /// Lease a connection (`fresh`: never an idle one): `leased`, `noConnectionFree` or
    /// `upstreamFailed`.
    case lease(fresh: Bool)
    case queueForConnection
    case leaveQueue
    case sendContinue
    /// The read-ahead is full: stop reading the client until a connection takes it.
    case pauseClientReading
    /// Write the request head (as GET when `asGET`), then the body kept so far, and read
    /// the client again.
    case writeUpstreamHead(asGET: Bool)
    case forwardBody
    case endUpstreamBody
    case keepBody
    case dropBody
    /// Ask the shared tier for the key: `sharedTierLookedUp` follows, within `timeout_ms`.
    case lookUpSharedTier
    case serveStored(StoredKind)
    /// The answer of the exchange a collapsed request waited for.
    case serveCollapsed
    case serveStub
    case answerLocally(LocalAnswer)
    case releaseUpstream(reusable: Bool)
    case discardUpstream
    /// Cut the client connection: part of an answer is out and the rest cannot follow.
    case abortClient
    /// The client connection ends after this answer (`drainInput`: the rest of the request
    /// body is read and dropped while it lingers).
    case closeAfterAnswer(drainInput: Bool)
    /// A local answer is out and the body is still coming: read it and drop it.
    case drainBody
    /// The exchange is over: count it, write its line, and let the connection go on.
    case finish
    /// Pass the `101` to the client and join the two connections as a tunnel.
    case openTunnel
    /// Close both sides of the tunnel (it falls silent, or the gateway stops);
    /// `tunnelEnded` follows once they are closed.
    case closeTunnel
    /// The tunnel is over: count it and write its line; its client connection is gone.
    case finishTunnel
  }

  /// The deadline that applies in the current phase.
  enum Deadline: Equatable {
    case none
    case stubDelay
    /// A collapsed request waits for its leader at most this long.
    case collapsedWait
    case connectionQueue
    /// The body must keep coming (idle between reads, and `body_timeout_ms` in all).
    case requestUpload
    case upstreamAnswer
    /// A local answer is out; the rest of the body has the idle timeout to arrive.
    case drainBody
    /// `limits.websocket_idle_timeout_ms` since the last byte either way (kept by the tunnel).
    case tunnelIdle
  }
}
