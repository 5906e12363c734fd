import GatehouseLogging

/// What a backend's rejection of a token calls for (see `LoopContext.tokenRejection`).
enum TokenRejectionVerdict {
  /// The rejection is the answer: the client gets it (or what stands in for it).
  case final
  /// Worth sending again with another value: the one a refresh brings after `rejected`
  /// (the value's serial and the endpoint, for a refreshable token), else the current one.
  case retry(rejected: (serial: UInt64, endpoint: String)?)
}

/// The loop's view of the token values the token manager publishes, and the rules for a
/// backend's word on a value (rejected, or accepted again).
extension LoopContext {
  /// Whether the token at `index` may have endpoints that answer on their own (see
  /// `TokenValues.Entry.ownAnswerEndpoints`): an array read, false for an unknown index.
  func tokenHasOwnAnswerEndpoints(index: Int?) -> Bool {
    guard let index, index < tokensWithOwnAnswerEndpoints.count else { return false }
    return tokensWithOwnAnswerEndpoints[index]
  }

  /// A usable value of `name` by the snapshot's own expiry, with its serial.
  func usableToken(_ name: String, index: Int? = nil) -> TokenGrant? {
    guard let entry = tokenEntry(name, index: index) else { return nil }
    // A value without an expiry (static and file tokens) needs no clock reading.
    let value: [UInt8]?
    if entry.expiresAt == nil {
      value = entry.value
    } else {
      value = entry.value(at: TokenInstant(millisecondsSinceEpoch: RFC3339.nowMilliseconds()))
    }
    guard let value else { return nil }
    return TokenGrant(bytes: value, serial: entry.serial, spellings: entry.spellings)
  }

  /// The published entry of token `name`. The route's index into the values is tried first
  /// (no hashing); a reload may have moved the token, so the name decides.
  func tokenEntry(_ name: String, index: Int? = nil) -> TokenValues.Entry? {
    if let index, index < tokens.entries.count, tokens.entries[index].name == name {
      return tokens.entries[index]
    }
    return tokens[name]
  }

  /// What a backend's rejection of the token an exchange sent (status or body field) calls
  /// for. Counts it for the route and reports it to the token manager where that helps.
  func tokenRejection(_ use: TokenUse, exchange: Exchange) -> TokenRejectionVerdict {
    metrics.countTokenRejection(token: use.name, route: use.routeName)
    guard let entry = tokenEntry(use.name, index: use.index), let serial = exchange.tokenSerial else {
      return .final
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
      guard entry.serial != serial, canRetry else { return .final }
      return .retry(rejected: nil)
    }
    let endpoint = RejectingEndpoints.key(route: use.routeName, path: exchange.head.path)
    // This endpoint rejects fresh values too: its 401 is its own answer, for the client.
    if !entry.ownAnswerEndpoints.isEmpty, entry.ownAnswerEndpoints.contains(endpoint) { return .final }
    // A value fetched because of a rejection, rejected again at once, is not retried (see
    // `TokenLifecycle.rejectionHoldOff`); like a retry's own rejection it is still reported,
    // so that an endpoint that rejects every value stops causing refreshes.
    let heldOff =
      entry.serial == serial
      && entry.rejectionsIgnoredUntil.map { TokenInstant(millisecondsSinceEpoch: RFC3339.nowMilliseconds()) < $0 }
        ?? false
    guard canRetry, !heldOff else {
      shared.tokens?.reportRejected(token: use.name, serial: serial, endpoint: endpoint)
      return .final
    }
    return .retry(rejected: (serial, endpoint))
  }

  /// An answer below 400: an endpoint whose rejections were its own answers and that takes
  /// the token now counts again, and a retry after a rejection that went through says the
  /// refresh helped (see `TokenLifecycle.maximumRejectionHoldOff`). Costs an array read per
  /// answer unless the token has such endpoints or the request was retried.
  func noteTokenAccepted(_ exchange: Exchange) {
    guard let serial = exchange.tokenSerial, let status = exchange.upstreamStatus, status < 400,
      let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token,
      exchange.machine.tokenRetried || tokenHasOwnAnswerEndpoints(index: use.index),
      let entry = tokenEntry(use.name, index: use.index), entry.refreshable
    else { return }
    let endpoint = RejectingEndpoints.key(route: use.routeName, path: exchange.head.path)
    guard exchange.machine.tokenRetried || entry.ownAnswerEndpoints.contains(endpoint) else { return }
    shared.tokens?.reportAccepted(token: use.name, endpoint: endpoint, serial: serial)
  }
}
