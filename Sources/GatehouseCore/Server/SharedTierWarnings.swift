import GatehouseLogging
import GatehouseNet
import Synchronization

/// The shared tier's warnings (the purge index's, records refused on read), one line per kind
/// per 10 s at most from any loop (as the gateway's other throttled warnings), each with what
/// happened since the last line, so a misbehaving index or a tier holding records this
/// gateway did not write is seen without flooding the log. And the tier going down and up
/// again, once for the whole process (see `linkWentDown`).
final class SharedTierWarnings: Sendable {
  private struct Throttled {
    var throttle = LogThrottle(intervalNanoseconds: 10_000_000_000)
    /// Members dropped since the last line (the cap's warning).
    var dropped = 0
  }

  let logger: Logger
  private let capped = Mutex(Throttled())
  private let stopped = Mutex(Throttled())
  private let refused = Mutex(Throttled())

  private struct Links {
    /// The loops' links that went down and have not come up (nor been stopped) since.
    var down: Set<ObjectIdentifier> = []
    /// Whether the down line went out and the up line has not.
    var outage = false
  }

  private let links = Mutex(Links())

  static let indexCapped = "shared tier purge index over its cap; the members expiring soonest were dropped"
  static let scanStopped = "shared tier purge stopped at its scan round cap; what it did not reach stays until its TTL"
  static let recordRefused = "shared tier record refused; served as a miss"

  init(logger: Logger) { self.logger = logger }

  /// An upkeep dropped `dropped` members over `maxMembers` (`SharedTierIndexUpkeep`):
  /// purges no longer reach those entries through the index. The line counts them all since
  /// the last one.
  func indexCapped(dropped: Int, maxMembers: Int) {
    let now = EventLoop.monotonicNanoseconds()
    let line: (Int, Int)? = capped.withLock { state in
      state.dropped += dropped
      guard let earlier = state.throttle.admit(now: now) else { return nil }
      defer { state.dropped = 0 }
      return (state.dropped, earlier)
    }
    guard let (total, earlier) = line else { return }
    logger.warn(
      Self.indexCapped,
      [
        "dropped": .int(total), "max_members": .int(maxMembers),
        "suppressed_before": .int(earlier),
      ])
  }

  static let tierDown = "shared tier down; lookups miss and rate limits use the local buckets until it answers"
  static let tierUp = "shared tier up again"

  /// A loop's link (`link`: its `LoopSharedTier`) that was up went down for `problem`: lost,
  /// or its commands time out (`RedisLinkMachine.Settings.downAfterTimeouts`). The first loop
  /// to see it logs a warning, the others nothing: each loop has its own connection to the one
  /// tier, and an outage is one line however many workers there are.
  func linkWentDown(_ link: ObjectIdentifier, problem: String?, url: String) {
    let first = links.withLock { state in
      state.down.insert(link)
      defer { state.outage = true }
      return !state.outage
    }
    guard first else { return }
    logger.warn(Self.tierDown, ["url": .string(url), "problem": .string(problem ?? "unknown")])
  }

  /// A loop's link is up (again): once no link the outage took down is still down, one line
  /// says so. A link coming up without an outage (at start) says nothing.
  func linkCameUp(_ link: ObjectIdentifier, url: String) {
    let over = links.withLock { state in
      state.down.remove(link)
      guard state.outage, state.down.isEmpty else { return false }
      state.outage = false
      return true
    }
    guard over else { return }
    logger.info(Self.tierUp, ["url": .string(url)])
  }

  /// A loop's link was stopped (a reload replaced it, or the loop stops): it no longer holds
  /// the outage open; the link that replaces it says when the tier is up.
  func linkStopped(_ link: ObjectIdentifier) {
    links.withLock { _ = $0.down.remove(link) }
  }

  /// A purge's scan (`scan`: `keys` for everything, `index` for a prefix or a route) ran
  /// `rounds` rounds and stopped with the cursor not back at 0, having deleted `deleted`
  /// keys; `heldLeft`: ids this replica held that the index had not named yet (still deleted).
  func scanStopped(scan: String, rounds: Int, deleted: Int, heldLeft: Int? = nil) {
    let now = EventLoop.monotonicNanoseconds()
    guard let earlier = stopped.withLock({ $0.throttle.admit(now: now) }) else { return }
    var fields: [LogField] = [("scan", .string(scan)), ("rounds", .int(rounds)), ("deleted", .int(deleted))]
    if let heldLeft { fields.append(("held_left", .int(heldLeft))) }
    fields.append(("suppressed_before", .int(earlier)))
    logger.log(.warn, Self.scanStopped, fields: fields)
  }

  /// A record read for `route` was refused (`reason`: `LoopSharedTier.refusalReasons`; `rule`:
  /// for `rules`, the store's rule it breaks) and served as a miss. The line names the last
  /// refusal; `suppressed_before` counts those since the line before. Never the record's
  /// bytes, nor the key's id.
  func recordRefused(reason: String, rule: String?, route: String) {
    let now = EventLoop.monotonicNanoseconds()
    guard let earlier = refused.withLock({ $0.throttle.admit(now: now) }) else { return }
    var fields: [LogField] = [("reason", .string(reason))]
    if let rule { fields.append(("rule", .string(rule))) }
    fields.append(("route", .string(route)))
    fields.append(("suppressed_before", .int(earlier)))
    logger.log(.warn, Self.recordRefused, fields: fields)
  }
}
