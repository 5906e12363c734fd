import GatehouseConfig
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// Keeps token states in the SQLite store (encrypted there when `store.secret_key` is set),
/// so a restart reuses unexpired tokens without a new login.
///
/// The store's `state` column holds `"<state> <source>"`: the token's state, a space, and the
/// fingerprint of the configuration that obtained it, so a value is only restored for the
/// same endpoint and client (`PersistedToken.source`).
final class StoreTokenPersistence: TokenPersistence {
  let store: Store
  let logger: Logger
  /// Names whose stored value could not be read at start (see `TokenLoadResult.unreadable`).
  /// Their rows are not overwritten with "no value": one start with a wrong or missing
  /// `store.secret_key` must not destroy what a start with the right one would read. A save
  /// that carries a value replaces the row as usual.
  private var unreadable: Set<String> = []

  init(store: Store, logger: Logger) {
    self.store = store
    self.logger = logger
  }

  func load() -> [PersistedToken] {
    let result: TokenLoadResult
    do {
      result = try store.loadTokens()
    } catch {
      logger.warn("cannot read stored tokens; they are fetched again", ["error": .string("\(error.kind)")])
      return []
    }
    for warning in result.warnings { logger.warn("store", ["detail": .string(warning)]) }
    unreadable = result.unreadable
    return result.tokens.compactMap { stored in
      let parts = stored.state.split(separator: " ", maxSplits: 1)
      guard let first = parts.first, let state = TokenState(rawValue: String(first)) else { return nil }
      return PersistedToken(
        name: stored.name, source: parts.count > 1 ? String(parts[1]) : "",
        value: stored.value.isEmpty ? nil : SecretValue(stored.value),
        expiresAt: stored.expiresAtMs.map(TokenInstant.init(millisecondsSinceEpoch:)),
        refreshedAt: stored.refreshedAtMs.map(TokenInstant.init(millisecondsSinceEpoch:)), state: state,
        lastError: stored.lastError)
    }
  }

  func save(_ token: PersistedToken) {
    if unreadable.contains(token.name) {
      guard token.value != nil else { return }
      unreadable.remove(token.name)
    }
    do {
      try store.saveToken(
        name: token.name, value: token.value?.value ?? "", expiresAtMs: token.expiresAt?.millisecondsSinceEpoch,
        refreshedAtMs: token.refreshedAt?.millisecondsSinceEpoch, state: "\(token.state.rawValue) \(token.source)",
        lastError: token.lastError)
    } catch {
      logger.warn("cannot store a token state", ["token": .string(token.name), "error": .string("\(error.kind)")])
    }
  }
}

/// The request loops' way to the token manager, which lives on the control loop: every call
/// hops there, and every answer hops back to the caller's loop.
final class TokenBroker: @unchecked Sendable {
  /// Touched only on `control` (the manager is confined to it).
  let manager: TokenManager
  let control: EventLoop

  init(manager: TokenManager, control: EventLoop) {
    self.manager = manager
    self.control = control
  }

  /// A usable value for `token`, refreshed if needed; `completion` runs on `loop`.
  func waitForRefresh(token: String, replyOn loop: EventLoop, completion: @escaping (TokenOutcome) -> Void) {
    nonisolated(unsafe) let completion = completion
    nonisolated(unsafe) let manager = self.manager
    control.execute {
      manager.waitForRefresh(token: token) { outcome in
        loop.execute { completion(outcome) }
      }
    }
  }

  /// A backend rejected the value with this serial at `endpoint` (`RejectingEndpoints.key`).
  func reportRejected(token: String, serial: UInt64, endpoint: String?) {
    nonisolated(unsafe) let manager = self.manager
    control.execute { manager.reportRejected(token: token, serial: serial, endpoint: endpoint) }
  }

  /// A backend rejected the value with this serial at `endpoint` and the request goes again with
  /// what `TokenManager.retryAfterRejection` gives; `completion` runs on `loop`.
  func retryAfterRejection(
    token: String, serial: UInt64, endpoint: String?, replyOn loop: EventLoop,
    completion: @escaping (TokenOutcome) -> Void
  ) {
    nonisolated(unsafe) let completion = completion
    nonisolated(unsafe) let manager = self.manager
    control.execute {
      manager.retryAfterRejection(token: token, serial: serial, endpoint: endpoint) { outcome in
        loop.execute { completion(outcome) }
      }
    }
  }

  /// `endpoint` accepted the token's value with `serial`: its rejections count again, and a
  /// refresh it asked for helped.
  func reportAccepted(token: String, endpoint: String, serial: UInt64) {
    nonisolated(unsafe) let manager = self.manager
    control.execute { manager.reportAccepted(token: token, endpoint: endpoint, serial: serial) }
  }
}
