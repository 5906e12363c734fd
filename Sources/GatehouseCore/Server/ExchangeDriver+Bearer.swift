/// The exchange's wait for an identity provider's signing keys (Docs/jwt.md).
extension ExchangeDriver {
  /// Asks the keyring for the provider's keys, then checks the bearer token again and tells
  /// the machine how that ended. Without a keyring (or route) the keys are unavailable.
  func waitForSigningKeys(_ exchange: Exchange) {
    guard let admission = exchange.bearer, let routeIndex = exchange.routeIndex,
      let plan = exchange.snapshot.routePlans[routeIndex].jwt, let broker = context.shared.keyring
    else {
      run(.signingKeysSettled(refusal: .signingKeysUnavailable))
      return
    }
    // The reply holds the session (which owns this driver): the client may be gone by then.
    broker.waitForKeys(provider: plan.providerName, unknownKey: admission.awaitsUnknownKey, replyOn: loop) {
      [session] in
      guard session.exchange === exchange, exchange.machine.phase == .waiting(.signingKeys), !session.closed else {
        return
      }
      let refusal: ExchangeMachine.Refusal?
      switch session.context.admitBearer(exchange.head, plan: plan, admission: admission, mayWait: false) {
      case .admitted: refusal = nil
      case .refused(let reason): refusal = reason
      // Not with `mayWait: false`; answered as keys unavailable rather than waiting again.
      case .awaitKeys: refusal = .signingKeysUnavailable
      }
      session.driver.run(.signingKeysSettled(refusal: refusal))
    }
  }
}
