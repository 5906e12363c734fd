import GatehouseLogging
import GatehouseNet
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
  /// The way to the identity providers' keys; set once at start, before any request.
  nonisolated(unsafe) var keyring: JWTKeyBroker?
  /// Client connections open across all loops (for `limits.max_connections`).
  let clientConnections = Atomic<Int>(0)
  /// Upstream connections open across all loops.
  let upstreamConnections = Atomic<Int>(0)
  let maxConnections: Atomic<Int>
  /// WebSocket tunnels open or opening across all loops, against `maxWebSockets`
  /// (`limits.max_websockets`, set again on reload).
  let webSockets = Atomic<Int>(0)
  let maxWebSockets = Atomic<Int>(1000)
  /// Open tunnels by route name, for `gatehouse_websockets{route}`. Behind a lock: touched
  /// only when a tunnel opens or closes, never per request or per byte.
  let webSocketsByRoute = Mutex([String: Int]())
  /// Config reloads (SIGHUP or the admin API) applied, and refused (a bad file, draining).
  let reloads = Atomic<Int>(0)
  let refusedReloads = Atomic<Int>(0)
  /// Client connections closed at once because `limits.max_connections` was reached.
  let refusedAtLimit = Atomic<Int>(0)
  /// Accepts that failed for want of descriptors or memory (the listener backs off).
  let acceptFailures = Atomic<Int>(0)
  /// Upstream answer bytes held across all loops to be wrapped whole (enveloped answers),
  /// from the first byte kept until the client's connection has taken the answer.
  let bufferedAnswerBytes = Atomic<Int>(0)
  /// The most `bufferedAnswerBytes` reached since the heap was last trimmed.
  private let bufferedAnswerPeak = Atomic<Int>(0)
  /// One limit warning per 10 s at most, from any loop, so a flood does not flood the log
  /// too (the admin listener throttles its refusals the same way).
  private let limitWarnings = Mutex(LogThrottle(intervalNanoseconds: 10_000_000_000))
  /// Upstream connections that could not be opened (out of descriptors or memory): every
  /// request would fail the same way and log it, so one line per 10 s from any loop, with
  /// how many were held back since the last one.
  private let upstreamOpenFailures = Mutex(LogThrottle(intervalNanoseconds: 10_000_000_000))
  private let http2Abuses = Mutex(LogThrottle(intervalNanoseconds: 10_000_000_000))
  /// Rate limits counted by the local buckets because the shared tier did not answer: one
  /// warning per 10 s from any loop (`GatewayShared+SharedTier.swift`).
  let sharedRateFallbacks = Mutex(LogThrottle(intervalNanoseconds: 10_000_000_000))
  /// The shared tier's purge-index warnings (throttled the same way), for every loop's tier.
  let sharedTierWarnings: SharedTierWarnings
  static let cannotOpenUpstream = "cannot open upstream connection"
  /// When each route last warned that its `key_path` found nothing: one line per route per
  /// 10 s, since a wrong `key_path` misses on every answer.
  private let keyPathWarnings = Mutex([String: UInt64]())
  static let keyPathMissing = "envelope key_path not found in the upstream answer; datas is null"

  init(logger: Logger, maxConnections: Int, store: Store?) {
    self.logger = logger
    self.store = store
    sharedTierWarnings = SharedTierWarnings(logger: logger)
    self.maxConnections = Atomic(maxConnections)
  }

  /// Takes `count` bytes out of the `limits.buffered_bytes` budget (`limit`); false, and
  /// nothing taken, when they do not fit. One atomic add on the path of buffered answers
  /// only (never for answers that stream).
  func chargeBufferedAnswer(_ count: Int, limit: Int) -> Bool {
    let total = bufferedAnswerBytes.add(count, ordering: .relaxed).newValue
    guard total > limit else {
      if total > bufferedAnswerPeak.load(ordering: .relaxed) { bufferedAnswerPeak.store(total, ordering: .relaxed) }
      return true
    }
    bufferedAnswerBytes.subtract(count, ordering: .relaxed)
    return false
  }

  /// The throttled warning of an answer refused (or streamed) because `limits.buffered_bytes`
  /// (`limit`) is spent.
  func warnBufferedBudgetSpent(limit: Int) {
    warnAboutLimit("buffered answers reached limits.buffered_bytes", ["limit": .int(limit)])
  }

  /// Whether `count` more bytes might fit the budget now: a read, nothing taken (the charge
  /// that follows decides). Lets a large answer be refused before the work of making it.
  func bufferedAnswerMightFit(_ count: Int, limit: Int) -> Bool {
    bufferedAnswerBytes.load(ordering: .relaxed) + count <= limit
  }

  func releaseBufferedAnswer(_ count: Int) {
    guard count > 0 else { return }
    let total = bufferedAnswerBytes.subtract(count, ordering: .relaxed).newValue
    // Once a burst of large answers is over, the allocator is asked to hand the freed pages
    // back (glibc keeps them otherwise, and a pod near its memory limit would stay there).
    // Rare by construction: only when the held bytes fall to zero after passing 32 MiB.
    if total == 0, bufferedAnswerPeak.load(ordering: .relaxed) > Self.trimAfterPeak,
      bufferedAnswerPeak.exchange(0, ordering: .relaxed) > Self.trimAfterPeak
    {
      Heap.returnFreePages()
    }
  }

  static let trimAfterPeak = 32 << 20

  /// Open client connections right now.
  public var openClientConnections: Int { clientConnections.load(ordering: .relaxed) }

  /// Logs a warning about a limit being hit, unless one went out in the last 10 s (the
  /// counters carry the totals). Called on refusals only, never per request.
  func warnAboutLimit(_ message: String, _ fields: KeyValuePairs<String, LogValue>) {
    let now = EventLoop.monotonicNanoseconds()
    guard limitWarnings.withLock({ $0.admit(now: now) }) != nil else { return }
    logger.warn(message, fields)
  }

  /// An upstream connection could not be opened: a warning unless one went out in the last
  /// 10 s (`suppressed_before` counts the ones held back since the previous line).
  func warnCannotOpenUpstream(_ upstream: String, error: any Error) {
    let now = EventLoop.monotonicNanoseconds()
    guard let earlier = upstreamOpenFailures.withLock({ $0.admit(now: now) }) else { return }
    logger.warn(
      Self.cannotOpenUpstream,
      ["upstream": .string(upstream), "error": .string("\(error)"), "suppressed_before": .int(earlier)])
  }

  /// An HTTP/2 client abused its connection, which ended (Docs/http2.md): a warning unless one
  /// went out in the last 10 s (`suppressed_before` counts the ones held back since).
  func warnAboutHTTP2Abuse(_ abuse: String, client: String) {
    let now = EventLoop.monotonicNanoseconds()
    guard let earlier = http2Abuses.withLock({ $0.admit(now: now) }) else { return }
    logger.warn(
      "HTTP/2 client abused its connection; it is closed (GOAWAY)",
      ["abuse": .string(abuse), "client": .string(client), "suppressed_before": .int(earlier)])
  }

  /// A JSON success answer did not have its route's `key_path`: a warning naming both,
  /// unless this route warned in the last 10 s (`gatehouse_envelope_key_path_missing_total`
  /// counts every one).
  func warnKeyPathMissing(route: String, keyPath: String) {
    let now = EventLoop.monotonicNanoseconds()
    let due = keyPathWarnings.withLock { last in
      if let previous = last[route], now &- previous < 10_000_000_000 { return false }
      last[route] = now
      return true
    }
    guard due else { return }
    logger.warn(Self.keyPathMissing, ["route": .string(route), "key_path": .string(keyPath)])
  }

  /// Reports the failures held back since the last line once 10 s have passed (from the
  /// loops' sweeps), so the end of a burst is not left unreported.
  func flushUpstreamOpenFailures() {
    let now = EventLoop.monotonicNanoseconds()
    guard let held = upstreamOpenFailures.withLock({ $0.flush(now: now) }) else { return }
    logger.warn(Self.cannotOpenUpstream, ["suppressed_before": .int(held)])
  }
}
