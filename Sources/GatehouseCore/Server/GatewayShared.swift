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

  init(logger: Logger, maxConnections: Int, store: Store?) {
    self.logger = logger
    self.store = store
    self.maxConnections = Atomic(maxConnections)
  }

  /// Open client connections right now.
  public var openClientConnections: Int { clientConnections.load(ordering: .relaxed) }
}
