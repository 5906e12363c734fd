import GatehouseStore
import Synchronization

/// What all loops share: the logger and a few atomic counters. Nothing here is touched per
/// request except the counters a connection changes when it opens or closes.
public final class GatewayShared: Sendable {
  public let logger: Logger
  /// The SQLite store; nil when it could not be opened (the gateway then serves without it).
  let store: Store?
  /// The way to the token manager; set once at start, before any request.
  nonisolated(unsafe) var tokens: TokenBroker?
  /// Client connections open across all loops (for `limits.max_connections`).
  let clientConnections = Atomic<Int>(0)
  /// Upstream connections open across all loops.
  let upstreamConnections = Atomic<Int>(0)
  let maxConnections: Atomic<Int>
  /// Config reloads (SIGHUP or the admin API) applied, and refused (a bad file, draining).
  let reloads = Atomic<Int>(0)
  let refusedReloads = Atomic<Int>(0)
  /// Client connections closed at once because `limits.max_connections` was reached.
  let refusedAtLimit = Atomic<Int>(0)
  /// Accepts that failed for want of descriptors or memory (the listener backs off).
  let acceptFailures = Atomic<Int>(0)
  /// When the last limit warning was logged (ms since the epoch): one per
  /// `limitWarningIntervalMs` at most, so a flood does not flood the log too.
  private let lastLimitWarningMs = Atomic<Int64>(0)
  static let limitWarningIntervalMs: Int64 = 10_000

  init(logger: Logger, maxConnections: Int, store: Store?) {
    self.logger = logger
    self.store = store
    self.maxConnections = Atomic(maxConnections)
  }

  /// Open client connections right now.
  public var openClientConnections: Int { clientConnections.load(ordering: .relaxed) }

  /// Logs a warning about a limit being hit, unless one went out in the last
  /// `limitWarningIntervalMs` (the counters carry the totals).
  func warnAboutLimit(_ message: String, _ fields: KeyValuePairs<String, LogValue>) {
    let now = RFC3339.nowMilliseconds()
    let last = lastLimitWarningMs.load(ordering: .relaxed)
    guard now - last >= Self.limitWarningIntervalMs,
      lastLimitWarningMs.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
    else { return }
    logger.warn(message, fields)
  }
}
