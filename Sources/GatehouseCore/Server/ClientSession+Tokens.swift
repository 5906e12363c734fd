import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseNet
import GatehouseStore

/// A session's part in token use: waiting for a value, and a backend's rejection of one.
extension ClientSession {
  /// Waits (on the control loop) for a usable value of the route's token, then sends the
  /// request; answers 401 (or a stale answer) when none can be had.
  func waitForToken(_ use: TokenUse) {
    guard let exchange, let broker = context.shared.tokens else {
      tokenUnavailable()
      return
    }
    exchange.waitingForToken = true
    clearDeadline()
    broker.waitForRefresh(token: use.name, replyOn: loop) { [self] outcome in
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
  }

  private func tokenUnavailable() {
    guard let exchange else { return }
    if let stale = staleAnswer(for: exchange) {
      serveStored(stale, result: .stale)
      return
    }
    respondLocally(failure: .tokenUnavailable)
  }

  /// A backend said the token was rejected (status or body field). Reports it, and sends the
  /// request once more with a fresh value when it can be replayed. Returns true when a retry
  /// is under way (the answer in hand is then dropped).
  func tokenRejected(_ use: TokenUse, exchange: Exchange) -> Bool {
    let entry = context.tokenEntry(use.name, index: use.index)
    if let serial = exchange.tokenSerial {
      // A value fetched because of a rejection, rejected again at once: neither reported
      // nor retried (see `TokenLifecycle.rejectionHoldOff`); the client gets the answer.
      if let entry, entry.serial == serial, let until = entry.rejectionsIgnoredUntil,
        TokenInstant(millisecondsSinceEpoch: RFC3339.nowMilliseconds()) < until
      {
        return false
      }
      // A refused fixed or file value already shows `invalid`: nothing new to report.
      if !context.tokenRefused(use.name, index: use.index, serial: serial) {
        context.shared.tokens?.reportRejected(token: use.name, serial: serial)
      }
    }
    // Sending the same value again would only be rejected again: a fixed or file token is
    // retried only when its value has changed since the request went out.
    guard let entry, entry.refreshable || entry.serial != exchange.tokenSerial else { return false }
    let replayable = !Self.hasBody(exchange.head) || exchange.requestBodyCopy != nil
    // A body still arriving is replayable too while it fits the copy: authentication
    // middleware refuses a token from the head, before reading the body, and a client
    // that waits for `100 Continue` sends its body only after that. The rest is kept (in
    // the copy) while the token is fetched, and follows the copy to the next upstream.
    guard !exchange.tokenRetried, replayable, exchange.requestComplete || exchange.requestBodyCopy != nil,
      exchange.head.method.isIdempotent || exchange.requestBodyCopy != nil || !Self.hasBody(exchange.head)
    else { return false }
    exchange.tokenRetried = true
    exchange.tokenGrant = nil
    waitForToken(use)
    return true
  }

  /// A fixed or file token that a backend refused shows `invalid` until a backend takes it
  /// again: an answer below 400 sent with that very value says it did. Costs an array read
  /// per answer unless the token is in that state.
  func noteTokenAccepted(_ exchange: Exchange) {
    guard let serial = exchange.tokenSerial, let status = exchange.upstreamStatus, status < 400,
      let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token,
      context.tokenRefused(use.name, index: use.index, serial: serial)
    else { return }
    context.shared.tokens?.reportAccepted(token: use.name, serial: serial)
  }
}
