/// The token values the request path uses: an immutable snapshot built by `TokenManager` on the control
/// loop and handed to each event loop, which reads it without locks. A new snapshot replaces the old one
/// whenever any value, state or counter changes.
public struct TokenValues: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
  /// One token. `value` is what requests send right now; nil when the token cannot be used (the caller
  /// then asks `TokenManager.waitForRefresh` or answers 401). A class: requests look their
  /// token's entry up, and a copy of a struct this size would retain each of its references.
  public final class Entry: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public let name: String
    /// The position in `entries`, stable for the lifetime of a token configuration.
    public let index: Int
    public let value: [UInt8]?
    /// `value`'s masking forms (`SecretSpellings`), made when the value was set.
    public let spellings: SecretSpellings?
    /// Identifies `value`; pass it to `TokenManager.reportRejected` so a late rejection of an older value
    /// does not invalidate a newer one.
    public let serial: UInt64
    public let state: TokenState
    /// When `value` stops being usable. A loop may compare it with its own clock, because the next
    /// snapshot (published at expiry) can arrive a moment later.
    public let expiresAt: TokenInstant?
    /// Whether a backend's rejection can lead to a new value (oauth2 tokens).
    public let refreshable: Bool
    /// Until then a rejection of this value is not reported or retried (`TokenLifecycle.rejectionHoldOff`).
    public let rejectionsIgnoredUntil: TokenInstant?
    public let refreshSuccesses: Int
    public let refreshFailures: Int
    /// Endpoints (`RejectingEndpoints.key`) whose rejections are their own answers: neither
    /// reported nor retried. Usually empty.
    public let ownAnswerEndpoints: Set<String>

    public init(
      name: String, index: Int, value: [UInt8]?, serial: UInt64, state: TokenState, expiresAt: TokenInstant?,
      refreshable: Bool, rejectionsIgnoredUntil: TokenInstant?, refreshSuccesses: Int, refreshFailures: Int,
      ownAnswerEndpoints: Set<String> = [], spellings: SecretSpellings? = nil
    ) {
      self.name = name
      self.index = index
      self.value = value
      // The manager hands over the spellings made with the value; only a caller without
      // them (tests) has them made here.
      self.spellings = spellings ?? value.map(SecretSpellings.init)
      self.serial = serial
      self.state = state
      self.expiresAt = expiresAt
      self.refreshable = refreshable
      self.rejectionsIgnoredUntil = rejectionsIgnoredUntil
      self.refreshSuccesses = refreshSuccesses
      self.refreshFailures = refreshFailures
      self.ownAnswerEndpoints = ownAnswerEndpoints
    }

    /// The value if it is still usable at `now` by the snapshot's own expiry.
    public func value(at now: TokenInstant) -> [UInt8]? {
      if let expiresAt, now >= expiresAt { return nil }
      return value
    }

    public var grant: TokenGrant? { value.map { TokenGrant(bytes: $0, serial: serial, spellings: spellings) } }

    public var description: String {
      "\(name)#\(index) \(state.rawValue) value: \(value == nil ? "nil" : "<redacted>") serial: \(serial)"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
      Mirror(self, children: ["name": name, "index": index, "state": state, "serial": serial])
    }
  }

  public let entries: [Entry]
  private let indexByName: [String: Int]

  public init(entries: [Entry]) {
    self.entries = entries
    var indexByName: [String: Int] = [:]
    for entry in entries { indexByName[entry.name] = entry.index }
    self.indexByName = indexByName
  }

  /// No tokens at all (before the manager has published).
  public static let empty = TokenValues(entries: [])

  /// The index of a token, resolved once when a route plan is built.
  public func index(of name: String) -> Int? { indexByName[name] }

  public subscript(index: Int) -> Entry { entries[index] }

  public subscript(name: String) -> Entry? { indexByName[name].map { entries[$0] } }

  public var description: String { "TokenValues[\(entries.map(\.description).joined(separator: ", "))]" }
  public var debugDescription: String { description }
  public var customMirror: Mirror { Mirror(self, children: ["entries": entries]) }
}
