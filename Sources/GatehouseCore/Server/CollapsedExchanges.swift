import GatehouseHTTP

/// A leading exchange and the requests waiting for its answer (see `RequestCollapsing`).
/// Confined to one loop, like the sessions it refers to.
final class CollapseGroup {
  /// Weak: a group whose leader vanished without releasing it (which no path should allow)
  /// is replaced by the next request instead of collecting waiters for ever.
  private weak var leader: Exchange?
  /// Waiters must share the leader's config: the same route of the same snapshot.
  let snapshot: GatewaySnapshot
  let routeIndex: Int
  private(set) var waiters: [(session: ClientSession, exchange: Exchange)] = []

  init(leader: Exchange, routeIndex: Int) {
    self.leader = leader
    snapshot = leader.snapshot
    self.routeIndex = routeIndex
  }

  /// Whether the leader is still with the upstream.
  var isLive: Bool { leader?.collapseRole == .leading }

  func isLed(by exchange: Exchange) -> Bool { leader === exchange }

  func admits(_ exchange: Exchange, routeIndex: Int) -> Bool {
    exchange.snapshot === snapshot && routeIndex == self.routeIndex
  }

  func add(_ session: ClientSession, _ exchange: Exchange) {
    waiters.append((session, exchange))
  }

  /// A group taken out of the loop's table, with the outcome for its waiters.
  struct Release {
    let group: CollapseGroup
    let outcome: CollapseOutcome

    /// Answers each waiter still waiting (one whose client left, or that gave up, is skipped).
    func release() {
      for waiter in group.waiters {
        waiter.session.collapsedExchangeEnded(waiter.exchange, outcome: outcome)
      }
    }
  }
}

/// An exchange's part in collapsed forwarding.
enum CollapseRole {
  case none
  /// With the upstream, for itself and any waiters.
  case leading
  /// Waiting for a leader's answer.
  case waiting
}

/// What a leader hands its waiters.
enum CollapseOutcome {
  case answer(CollapsedAnswer)
  case failed(UpstreamFailure)
  case retry
}

/// A complete upstream answer shared with waiters: the raw answer, and the envelope the
/// leader rendered from it (the same route, so the same rendering), made once for all.
final class CollapsedAnswer {
  let head: HTTPResponseHead
  let body: [UInt8]
  let rendered: EnvelopeOutcome?

  init(head: HTTPResponseHead, body: [UInt8], rendered: EnvelopeOutcome?) {
    self.head = head
    self.body = body
    self.rendered = rendered
  }
}
