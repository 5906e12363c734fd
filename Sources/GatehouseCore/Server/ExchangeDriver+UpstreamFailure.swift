import GatehouseNet

/// The upstream failing an exchange (a connection that closed or broke, no answer in time,
/// an answer that was none), a pipelined request sent again alone, and a connection given
/// back after an answer.
extension ExchangeDriver {
  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason) {
    guard let exchange, exchange.upstream === upstream else { return }
    let (failure, detail) = UpstreamFailure.of(reason, received: exchange.answerBytesReceived)
    if case .tlsFailed(let error) = reason {
      context.shared.logger.warn(
        "upstream TLS failed", ["upstream": .string(upstream.pool.plan.name), "error": .string(error.description)])
      upstreamFailed(failure, detail: detail, reason: .tlsFailed)
      return
    }
    upstreamFailed(failure, detail: detail)
  }

  func upstreamDroppedQueuedRequest(_ upstream: UpstreamConnection) {
    guard let exchange, exchange.upstream === upstream, case .forwarding = exchange.machine.phase else { return }
    exchange.upstream = nil
    sendAgainAlone(exchange)
  }

  /// A request pipelined behind another that was not answered on its connection (dropped
  /// with it, or given up while waiting): not a failure of this request nor of the
  /// upstream, and not an attempt. It goes again, alone this time.
  func sendAgainAlone(_ exchange: Exchange) {
    context.metrics.pipelineResent &+= 1
    exchange.pipelineDropped = true
    exchange.waitedBehindAnother = false
    // The parser may have seen the end of the old connection (or bytes that were no
    // answer): the answer on the new one starts from scratch.
    exchange.startAnswerAfresh()
    run(.droppedFromPipeline)
  }

  /// Gives the upstream connection of a completely read answer back to its pool
  /// (`upstreamReusable`: as far as the exchange goes; the machine has weighed the request).
  func releaseUpstream(_ exchange: Exchange, upstreamReusable: Bool) {
    guard let upstream = exchange.upstream, let pool = exchange.pool else { return }
    exchange.upstream = nil
    let reusable = upstreamReusable && exchange.upstreamKeepAlive && !exchange.answerParser.isClosed
    pool.release(upstream, reusable: reusable, leavesDoubt: exchange.answerLeavesDoubt)
  }

  /// The try's endpoint answered 502, 503 or 504 (`kind`), before any of the answer went to
  /// the client: when the rules allow another try on another endpoint
  /// (`retriesOnAnotherEndpoint`), it is under way and this returns true.
  func retriesAnsweredFailure(_ exchange: Exchange, pool: UpstreamPool, after kind: AttemptFailure) -> Bool {
    guard !exchange.machine.answerBegan, retriesOnAnotherEndpoint(exchange, pool: pool, after: kind) else {
      return false
    }
    context.metrics.countRetry(upstream: pool.plan.name, reason: kind.configValue)
    context.metrics.recordUpstream(pool.plan.name, outcome: "error_status")
    pool.lastError = "status \(exchange.upstreamStatus ?? 0)"
    exchange.upstreamStatus = nil
    run(.retryOnAnotherEndpoint)
    return true
  }

  /// Whether the failed try goes again to another endpoint: the upstream has more than
  /// one, none of the answer went to the client, the request can be sent again whole, and
  /// the upstream's `retry` rule and budget allow it (Docs/fleets.md).
  private func retriesOnAnotherEndpoint(_ exchange: Exchange, pool: UpstreamPool, after kind: AttemptFailure) -> Bool {
    guard pool.endpoints.count > 1, !exchange.machine.answerBegan, !exchange.machine.facts.upgrade,
      exchange.machine.bodyHeldForReplay, exchange.machine.attempts >= 1
    else { return false }
    return pool.allowsRetry(
      after: kind, tryNumber: exchange.machine.attempts, method: exchange.head.method,
      hasIdempotencyKey: exchange.head.headers.contains("idempotency-key"), bodyHeld: true)
  }

  /// `detail` is what `/admin/upstreams` shows as the upstream's last error when there is more
  /// to say than the outcome the metrics count; `reason` the access line's, when it is more
  /// precise than the failure's own.
  func upstreamFailed(_ failure: UpstreamFailure, detail: String? = nil, reason: LocalAnswerReason? = nil) {
    guard let exchange else { return }
    // The connection ended, or sent what is not an answer, before this request's answer
    // began while it was pipelined behind another: the upstream may never have read it
    // (it closed after the answer in front, or reset because requests were left unread),
    // or the bytes were left over from the answer in front. A safe request goes again alone.
    if failure == .closed || failure == .invalidAnswer, exchange.waitedBehindAnother,
      exchange.upstreamStatus == nil
    {
      sendAgainAlone(exchange)
      return
    }
    if let pool = exchange.pool, let upstream = exchange.upstream, let kind = AttemptFailure(failure),
      exchange.upstreamStatus == nil, !exchange.answerBytesReceived
    {
      // The try's endpoint hears of it when the connection is given up (`UpstreamPool`).
      pool.reportOutcome(.failure(kind), on: upstream, error: detail ?? failure.outcome)
      if retriesOnAnotherEndpoint(exchange, pool: pool, after: kind) {
        // Not a failure of the upstream as a whole: its breakers do not hear of it.
        context.metrics.countRetry(upstream: pool.plan.name, reason: kind.configValue)
        context.metrics.recordUpstream(pool.plan.name, outcome: failure.outcome)
        pool.lastError = detail ?? failure.outcome
        run(.retryOnAnotherEndpoint)
        return
      }
    }
    // A waiter that gave up is no longer answered by the exchange it waited for.
    if exchange.collapseRole == .waiting { exchange.collapseRole = .none }
    if let pool = exchange.pool {
      context.recordUpstreamFailure(failure, pool: pool, route: ForwardingRules.routeName(of: exchange), detail: detail)
    }
    if exchange.machine.answerBegan && !exchange.answerFlushed {
      // The answer's head is only staged (the upstream broke within the read that brought
      // it): dropped, so the client gets the answer the machine picks instead of a cut
      // connection.
      answers.discardStaged()
      exchange.rechunkAnswer = false
      exchange.bytesSent = 0
      exchange.bodyBytes = 0
    }
    // Whatever answers now (a stored answer, the stub, an error) does so for this reason.
    exchange.failure = failure
    exchange.failureReason = reason
    let staleAvailable = routeCache.findStaleAnswer(for: exchange)
    run(
      .upstreamFailed(
        failure, staleAvailable: staleAvailable, received: exchange.answerBytesReceived,
        answerOut: exchange.answerFlushed))
  }
}
