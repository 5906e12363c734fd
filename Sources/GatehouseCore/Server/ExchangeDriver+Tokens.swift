import GatehouseLogging

/// The exchange's part in token use: waiting for a value, and a backend's rejection of one.
extension ExchangeDriver {
  /// Waits (on the control loop) for a usable value of the route's token, then tells the
  /// machine; when none can be had it answers 401 (or a stale answer). After a rejection
  /// (`rejected`), waits for the value `TokenManager.retryAfterRejection` gives instead.
  func waitForToken(_ use: TokenUse, afterRejecting rejected: (serial: UInt64, endpoint: String)? = nil) {
    guard let exchange, let broker = context.shared.tokens else {
      tokenUnavailable()
      return
    }
    run(.tokenMissing)
    // The reply holds the session (which owns this driver): the client may be gone by then.
    let reply: (TokenOutcome) -> Void = { [session] outcome in
      guard session.exchange === exchange, exchange.machine.phase == .waiting(.token), !session.closed else { return }
      switch outcome {
      case .available(let grant):
        exchange.tokenGrant = grant
        session.driver.run(.tokenGranted)
      case .unavailable:
        session.driver.tokenUnavailable()
      }
    }
    if let rejected {
      broker.retryAfterRejection(
        token: use.name, serial: rejected.serial, endpoint: rejected.endpoint, replyOn: loop, completion: reply)
    } else {
      broker.waitForRefresh(token: use.name, replyOn: loop, completion: reply)
    }
  }

  func tokenUnavailable() {
    guard let exchange else { return }
    exchange.reason = .tokenUnavailable
    run(.tokenUnavailable(staleAvailable: routeCache.findStaleAnswer(for: exchange)))
  }

  /// A backend said the token was rejected (status or body field): counted and reported
  /// (`LoopContext.tokenRejection`), and retried with a fresh value when that is worthwhile.
  /// Returns true when a retry is under way (the answer in hand is then dropped);
  /// `reusable` as for `ExchangeMachine.Event.tokenRejected`.
  func tokenRejected(_ use: TokenUse, exchange: Exchange, reusable: Bool?) -> Bool {
    guard case .retry(let rejected) = context.tokenRejection(use, exchange: exchange) else { return false }
    return retryWithNewToken(exchange, rejected: rejected, reusable: reusable)
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
}
