import GatehouseConfig
import Synchronization

/// One token as the store keeps it, so a restart reuses an unexpired token instead of logging in again.
/// `value` is nil for values whose source of truth is the config or a file.
public struct PersistedToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
  CustomReflectable
{
  public let name: String
  /// Identifies the token's configuration (type, endpoint, client id, scope; never the secret): a value is
  /// only restored for the configuration that obtained it.
  public let source: String
  public let value: SecretValue?
  public let expiresAt: TokenInstant?
  public let refreshedAt: TokenInstant?
  public let state: TokenState
  public let lastError: String?

  public init(
    name: String, source: String, value: SecretValue?, expiresAt: TokenInstant?, refreshedAt: TokenInstant?,
    state: TokenState, lastError: String?
  ) {
    self.name = name
    self.source = source
    self.value = value
    self.expiresAt = expiresAt
    self.refreshedAt = refreshedAt
    self.state = state
    self.lastError = lastError
  }

  public var description: String {
    "PersistedToken(name: \(name), state: \(state.rawValue), value: \(value == nil ? "nil" : "<redacted>"), "
      + "expiresAt: \(expiresAt?.rfc3339 ?? "nil"), refreshedAt: \(refreshedAt?.rfc3339 ?? "nil"))"
  }
  public var debugDescription: String { description }
  public var customMirror: Mirror {
    Mirror(self, children: ["name": name, "state": state, "expiresAt": expiresAt as Any])
  }
}

/// Where `TokenManager` keeps token state across restarts. Called on the control loop: `load` once at
/// start, `save` after every change of a token, so `save` must not block (the store queues the write).
public protocol TokenPersistence: AnyObject {
  func load() -> [PersistedToken]
  func save(_ token: PersistedToken)
}

/// Keeps tokens in memory: for tests, and for running without a store.
public final class InMemoryTokenPersistence: TokenPersistence, Sendable {
  private let records = Mutex<[String: PersistedToken]>([:])
  private let saveCounter = Atomic<Int>(0)

  public init(_ tokens: [PersistedToken] = []) {
    records.withLock { records in
      for token in tokens { records[token.name] = token }
    }
  }

  public func load() -> [PersistedToken] {
    records.withLock { Array($0.values) }
  }

  public func save(_ token: PersistedToken) {
    saveCounter.add(1, ordering: .relaxed)
    records.withLock { $0[token.name] = token }
  }

  /// The record saved last for `name`.
  public func record(named name: String) -> PersistedToken? {
    records.withLock { $0[name] }
  }

  /// How many times `save` was called.
  public var saveCount: Int { saveCounter.load(ordering: .relaxed) }
}
