import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// A session's part in token use: waiting for a value, and a backend's rejection of one.
extension ClientSession {
  /// Waits (on the control loop) for a usable value of the route's token, then tells the
  /// machine; when none can be had it answers 401 (or a stale answer). After a rejection
  /// (`rejected`), waits for the value `TokenManager.retryAfterRejection` gives instead.
  func waitForToken(_ use: TokenUse, afterRejecting rejected: (serial: UInt64, endpoint: String)? = nil) {
    guard let exchange, let broker = context.shared.tokens else {
      tokenUnavailable()
      return
    }
    run(.tokenMissing)
    let reply: (TokenOutcome) -> Void = { [self] outcome in
      guard self.exchange === exchange, exchange.machine.phase == .waiting(.token), !closed else { return }
      switch outcome {
      case .available(let grant):
        exchange.tokenGrant = grant
        run(.tokenGranted)
      case .unavailable:
        tokenUnavailable()
      }
    }
    if let rejected {
      broker.retryAfterRejection(
        token: use.name, serial: rejected.serial, endpoint: rejected.endpoint, replyOn: loop, completion: reply)
    } else {
      broker.waitForRefresh(token: use.name, replyOn: loop, completion: reply)
    }
  }

  private func tokenUnavailable() {
    guard let exchange else { return }
    exchange.reason = .tokenUnavailable
    exchange.storedAnswer = staleAnswer(for: exchange)
    run(.tokenUnavailable(staleAvailable: exchange.storedAnswer != nil))
  }

  /// A backend said the token was rejected (status or body field). Counts it for the route,
  /// reports it, and tells the machine whether a retry with a fresh value is worthwhile.
  /// Returns true when a retry is under way (the answer in hand is then dropped);
  /// `reusable` as for `ExchangeMachine.Event.tokenRejected`.
  func tokenRejected(_ use: TokenUse, exchange: Exchange, reusable: Bool?) -> Bool {
    context.metrics.countTokenRejection(token: use.name, route: use.routeName)
    guard let entry = context.tokenEntry(use.name, index: use.index), let serial = exchange.tokenSerial else {
      return false
    }
    // A body still arriving is replayable too while it fits the copy: authentication
    // middleware refuses a token from the head, before reading the body, and a client
    // that waits for `100 Continue` sends its body only after that. The rest is kept (in
    // the copy) while the token is fetched, and follows the copy to the next upstream.
    let canRetry = exchange.machine.bodyAllowsTokenRetry
    guard entry.refreshable else {
      // A fixed or file value cannot be refreshed, and one endpoint's rejection says nothing
      // about the others: nothing to report. Sending the same value again would only be
      // rejected again: retried only when the value has changed since the request went out.
      guard entry.serial != serial, canRetry else { return false }
      return retryWithNewToken(exchange, rejected: nil, reusable: reusable)
    }
    let endpoint = RejectingEndpoints.key(route: use.routeName, path: exchange.head.path)
    // This endpoint rejects fresh values too: its 401 is its own answer, for the client.
    if !entry.ownAnswerEndpoints.isEmpty, entry.ownAnswerEndpoints.contains(endpoint) { return false }
    // A value fetched because of a rejection, rejected again at once, is not retried (see
    // `TokenLifecycle.rejectionHoldOff`); like a retry's own rejection it is still reported,
    // so that an endpoint that rejects every value stops causing refreshes.
    let heldOff =
      entry.serial == serial
      && entry.rejectionsIgnoredUntil.map { TokenInstant(millisecondsSinceEpoch: RFC3339.nowMilliseconds()) < $0 }
        ?? false
    guard canRetry, !heldOff else {
      context.shared.tokens?.reportRejected(token: use.name, serial: serial, endpoint: endpoint)
      return false
    }
    return retryWithNewToken(exchange, rejected: (serial, endpoint), reusable: reusable)
  }

  private func retryWithNewToken(
    _ exchange: Exchange, rejected: (serial: UInt64, endpoint: String)?, reusable: Bool?
  ) -> Bool {
    exchange.tokenGrant = nil
    exchange.awaitsNewToken = true
    exchange.rejectedToken = rejected
    run(.tokenRejected(retry: true, reusable: reusable))
    return true
  }

  /// An answer below 400: an endpoint whose rejections were its own answers and that takes
  /// the token now counts again, and a retry after a rejection that went through says the
  /// refresh helped (see `TokenLifecycle.maximumRejectionHoldOff`). Costs an array read per
  /// answer unless the token has such endpoints or the request was retried.
  func noteTokenAccepted(_ exchange: Exchange) {
    guard let serial = exchange.tokenSerial, let status = exchange.upstreamStatus, status < 400,
      let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token,
      exchange.machine.tokenRetried || context.tokenHasOwnAnswerEndpoints(index: use.index),
      let entry = context.tokenEntry(use.name, index: use.index), entry.refreshable
    else { return }
    let endpoint = RejectingEndpoints.key(route: use.routeName, path: exchange.head.path)
    guard exchange.machine.tokenRetried || entry.ownAnswerEndpoints.contains(endpoint) else { return }
    context.shared.tokens?.reportAccepted(token: use.name, endpoint: endpoint, serial: serial)
  }
}
