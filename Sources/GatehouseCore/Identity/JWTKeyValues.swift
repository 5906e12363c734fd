import GatehouseJWT

/// The signing keys of every identity provider, as the keyring last published them: the
/// loops verify tokens against this without locks, and go to the keyring (through
/// `JWTKeyBroker`) only to wait for keys they lack.
final class JWTKeyValues: Sendable {
  struct Provider: Sendable {
    let name: String
    /// Nil: none at hand (never fetched, nothing stored, no usable key).
    let keys: JWTKeySet?
    /// Changes whenever `keys` does: tokens verified before are verified again.
    let generation: UInt64
    /// A fetch is under way: a request without keys waits for it instead of a 503.
    let fetching: Bool
    /// Before this (ms since the epoch) a token with an unknown `kid` is refused without
    /// asking for a refresh: at most one per 10 s (Docs/jwt.md), however many clients ask.
    let unknownKeyRefreshAfterMs: Int64
  }

  let providers: [Provider]

  init(providers: [Provider]) {
    self.providers = providers
  }

  static let empty = JWTKeyValues(providers: [])

  /// The provider `name`, tried at `index` first (no search), as a reload may move it.
  func provider(_ name: String, index: Int) -> Provider? {
    if index < providers.count, providers[index].name == name { return providers[index] }
    return providers.first { $0.name == name }
  }
}
