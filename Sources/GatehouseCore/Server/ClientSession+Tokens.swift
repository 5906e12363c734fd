import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// A session's part in token use: waiting for a value, and a backend's rejection of one.
extension ClientSession {
  /// Waits (on the control loop) for a usable value of the route's token, then sends the
  /// request; answers 401 (or a stale answer) when none can be had. After a rejection
  /// (`rejected`), waits for the value `TokenManager.retryAfterRejection` gives instead.
  func waitForToken(_ use: TokenUse, afterRejecting rejected: (serial: UInt64, endpoint: String)? = nil) {
    guard let exchange, let broker = context.shared.tokens else {
      tokenUnavailable()
      return
    }
    exchange.waitingForToken = true
    clearDeadline()
    let reply: (TokenOutcome) -> Void = { [self] outcome in
      guard self.exchange === exchange, exchange.waitingForToken, !closed else { return }
      exchange.waitingForToken = false
      switch outcome {
      case .available(let grant):
        exchange.tokenGrant = grant
        sendUpstream(fresh: false)
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
    if let stale = staleAnswer(for: exchange) {
      serveStored(stale, result: .stale)
      return
    }
    respondLocally(failure: .tokenUnavailable, reason: .tokenUnavailable)
  }

  /// A backend said the token was rejected (status or body field). Counts it for the route,
  /// reports it, and sends the request once more with a fresh value when it can be replayed.
  /// Returns true when a retry is under way (the answer in hand is then dropped).
  func tokenRejected(_ use: TokenUse, exchange: Exchange) -> Bool {
    context.metrics.countTokenRejection(token: use.name, route: use.routeName)
    guard let entry = context.tokenEntry(use.name, index: use.index), let serial = exchange.tokenSerial else {
      return false
    }
    let replayable = !Self.hasBody(exchange.head) || exchange.requestBodyCopy != nil
    // A body still arriving is replayable too while it fits the copy: authentication
    // middleware refuses a token from the head, before reading the body, and a client
    // that waits for `100 Continue` sends its body only after that. The rest is kept (in
    // the copy) while the token is fetched, and follows the copy to the next upstream.
    let canRetry =
      !exchange.tokenRetried && replayable && (exchange.requestComplete || exchange.requestBodyCopy != nil)
      && (exchange.head.method.isIdempotent || exchange.requestBodyCopy != nil || !Self.hasBody(exchange.head))
    guard entry.refreshable else {
      // A fixed or file value cannot be refreshed, and one endpoint's rejection says nothing
      // about the others: nothing to report. Sending the same value again would only be
      // rejected again: retried only when the value has changed since the request went out.
      guard entry.serial != serial, canRetry else { return false }
      exchange.tokenRetried = true
      exchange.tokenGrant = nil
      waitForToken(use)
      return true
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
    exchange.tokenRetried = true
    exchange.tokenGrant = nil
    waitForToken(use, afterRejecting: (serial, endpoint))
    return true
  }

  /// An answer below 400: an endpoint whose rejections were its own answers and that takes
  /// the token now counts again, and a retry after a rejection that went through says the
  /// refresh helped (see `TokenLifecycle.maximumRejectionHoldOff`). Costs an array read per
  /// answer unless the token has such endpoints or the request was retried.
  func noteTokenAccepted(_ exchange: Exchange) {
    guard let serial = exchange.tokenSerial, let status = exchange.upstreamStatus, status < 400,
      let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token,
      exchange.tokenRetried || context.tokenHasOwnAnswerEndpoints(index: use.index),
      let entry = context.tokenEntry(use.name, index: use.index), entry.refreshable
    else { return }
    let endpoint = RejectingEndpoints.key(route: use.routeName, path: exchange.head.path)
    guard exchange.tokenRetried || entry.ownAnswerEndpoints.contains(endpoint) else { return }
    context.shared.tokens?.reportAccepted(token: use.name, endpoint: endpoint, serial: serial)
  }
}
