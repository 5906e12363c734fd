/// Which endpoints (a route and a request path) rejected which value of one refreshable token,
/// so that an endpoint whose 401 is its own answer (this client may not see this resource)
/// cannot force refresh after refresh: once an endpoint has caused a refresh and then rejects
/// the value fetched for it too, its rejections are its own answers and cause nothing more,
/// until it accepts a value again. A pure value owned by `TokenLifecycle`; memory is bounded
/// (`capacity` endpoints, the least recently seen forgotten first; keys cut to
/// `maximumPathLength`).
public struct RejectingEndpoints: Sendable, Equatable {
  /// Endpoints remembered per token at most.
  public static let capacity = 256
  /// Longer paths are cut: they still name their endpoint well enough, and a key stays small.
  public static let maximumPathLength = 256

  /// What is known of one endpoint.
  struct Record: Sendable, Equatable {
    /// The serial of the last value whose rejection by this endpoint asked for a new one.
    var causedRefreshOf: UInt64?
    /// Its rejections are its own answers: they cause no refresh and no retry.
    var ownAnswer = false
    /// When it was last seen (a counter), to forget the least recently seen one first.
    var seen: UInt64 = 0
  }

  private var records: [String: Record] = [:]
  private var tick: UInt64 = 0
  /// The endpoints whose rejections are their own answers; changes only when one is added or
  /// removed, so the owner can publish them when they change.
  public private(set) var ownAnswers: Set<String> = []

  public init() {}

  /// The key of an endpoint: the route's name and the request's path (without its query).
  public static func key(route: String, path: some Collection<UInt8>) -> String {
    var key = route
    key.append(" ")
    key.append(String(decoding: path.prefix(maximumPathLength), as: UTF8.self))
    return key
  }

  /// Whether the rejections of `endpoint` are its own answers.
  public func isOwnAnswer(_ endpoint: String) -> Bool { ownAnswers.contains(endpoint) }

  /// Whether `endpoint` asked for the refresh that replaced the value with `serial`.
  func causedRefresh(of serial: UInt64, _ endpoint: String) -> Bool {
    records[endpoint]?.causedRefreshOf == serial
  }

  /// `endpoint` rejected the value with `serial`, and that asks for a new value.
  mutating func noteCausedRefresh(of serial: UInt64, _ endpoint: String) {
    update(endpoint) { $0.causedRefreshOf = serial }
  }

  /// `endpoint` rejected the value fetched because it rejected the one before: from now on
  /// its rejections are its own answers.
  mutating func noteOwnAnswer(_ endpoint: String) {
    update(endpoint) { $0.ownAnswer = true }
  }

  /// `endpoint` accepted a value: whatever it did before is forgotten. Returns whether it was
  /// remembered as answering on its own.
  @discardableResult
  mutating func noteAccepted(_ endpoint: String) -> Bool {
    guard let record = records.removeValue(forKey: endpoint) else { return false }
    if record.ownAnswer { ownAnswers.remove(endpoint) }
    return record.ownAnswer
  }

  private mutating func update(_ endpoint: String, _ change: (inout Record) -> Void) {
    tick &+= 1
    var record = records[endpoint] ?? Record()
    change(&record)
    record.seen = tick
    if records[endpoint] == nil, records.count >= Self.capacity { forgetLeastRecentlySeen() }
    records[endpoint] = record
    if record.ownAnswer { ownAnswers.insert(endpoint) }
  }

  /// A linear scan, but only when a new endpoint arrives with the table full.
  private mutating func forgetLeastRecentlySeen() {
    guard let oldest = records.min(by: { $0.value.seen < $1.value.seen }) else { return }
    records.removeValue(forKey: oldest.key)
    ownAnswers.remove(oldest.key)
  }
}
