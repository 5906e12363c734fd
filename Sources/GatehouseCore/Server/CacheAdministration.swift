import GatehouseAdmin
import GatehouseConfig
import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// The cache endpoints of the admin API (Docs/admin-openapi.json). The store's admin calls block on SQLite,
/// so they run on the control loop, never on a loop that serves requests.
///
/// Made for one request; the work it schedules holds the server until it is done.
struct CacheAdministration: Sendable {
  let server: GatewayServer

  func answer(
    _ endpoint: AdminEndpoint, query: [String: String], completion: @escaping @Sendable (AdminAnswer) -> Void
  ) {
    guard let store = server.shared.store else {
      completion(.error(503, "the store is not open; see the start-up log"))
      return
    }
    switch endpoint {
    case .cacheStats:
      server.gather({ context in context.metrics.cacheResults }) { perLoop in
        var summed = CacheResultCounts()
        for loop in perLoop { summed.add(loop) }
        let results = summed
        server.onControl {
          let stats = store.stats()
          completion(
            .json(
              .object([
                ("entries", .int(Int(stats.entries))), ("bytes", .int(Int(stats.bytes))),
                ("max_bytes", .int(Int(stats.maxBytes))), ("hits", .int(results[label: "hit"])),
                ("stale_served", .int(results[label: "stale"])), ("misses", .int(results[label: "miss"])),
                ("bypass", .int(results[label: "bypass"])), ("revalidated", .int(results[label: "revalidated"])),
                ("writes", .int(Int(stats.writes))),
                ("dropped_writes", .int(Int(stats.droppedWrites))), ("evictions", .int(Int(stats.evictions))),
                ("read_errors", .int(Int(stats.readErrors))), ("write_errors", .int(Int(stats.writeErrors))),
                ("pending_token_writes", .int(Int(stats.pendingTokenWrites))),
                ("oversize_skipped", .int(Int(stats.oversizeSkipped))),
                ("dropped_touches", .int(Int(stats.droppedTouches))), ("queue_depth", .int(stats.queueDepth)),
              ])))
        }
      }
    case .cacheEntries:
      let limitText = query["limit"]
      guard let limit = limitText == nil ? 100 : limitText.flatMap({ Int($0) }), (1...1000).contains(limit) else {
        completion(.badParameter("limit", "limit must be a number from 1 to 1000"))
        return
      }
      let routes = CacheEntryRoutes(config: server.currentSnapshot.config)
      server.onControl {
        do {
          let page = try store.list(prefix: query["prefix"] ?? "", limit: limit, cursor: query["cursor"])
          let now = RFC3339.nowMilliseconds()
          completion(
            .json(
              .object([
                ("entries", .array(page.entries.map { Self.summaryDocument($0, nowMs: now, routes: routes) })),
                ("next_cursor", .optionalString(page.nextCursor)),
              ])))
        } catch let error as StoreError {
          completion(
            error.kind == .invalidCursor
              ? .badParameter("cursor", "cursor is malformed (pass a page's next_cursor as it was given)")
              : .error(500, "store error: \(error.kind)"))
        } catch {
          completion(.error(500, "\(error)"))
        }
      }
    case .cacheEntry(let id):
      let routes = CacheEntryRoutes(config: server.currentSnapshot.config)
      server.onControl {
        do {
          guard let entry = try store.entry(id: id) else {
            completion(.error(404, "no cache entry \(id)"))
            return
          }
          var members: [(String, JSONValue)] = []
          if case .object(let summary) = Self.summaryDocument(
            entry.summary, nowMs: RFC3339.nowMilliseconds(), routes: routes)
          {
            members = summary
          }
          members.append(("headers", .array(entry.headers.map { .array([.string($0.name), .string($0.value)]) })))
          if let text = String(validating: entry.body, as: UTF8.self) {
            members.append(("body", .string(text)))
            members.append(("body_encoding", .string("utf-8")))
          } else {
            members.append(("body", .string(Base64.encode(entry.body))))
            members.append(("body_encoding", .string("base64")))
          }
          members.append(("body_sha256", .string(entry.bodySHA256)))
          completion(.json(.object(members)))
        } catch let error as StoreError {
          completion(.error(500, "\(error.kind)"))
        } catch {
          completion(.error(500, "\(error)"))
        }
      }
    case .purgeCacheEntry(let id):
      // The shared tier is purged even when this replica had no such entry: a sibling's may be there.
      purge(completion: completion, shared: { _ in .ids([id]) }) {
        let count = try store.purge(id: id)
        return (count == 0 ? nil : count, [])
      } notFound: {
        "no cache entry \(id)"
      }
    case .purgeRouteCache(let name):
      purgeRoute(name, store: store, completion: completion)
    case .purgeCacheEntries:
      guard let prefix = query["prefix"], !prefix.isEmpty else {
        completion(.badParameter("prefix", "prefix is required (DELETE /admin/cache purges everything)"))
        return
      }
      // In the shared tier: every replica's entries under the prefix, as its purge index names
      // them, and the ids this replica holds there (listed before they go), should the index
      // lack some.
      purge(completion: completion, shared: { .selected(.prefix(prefix), heldHere: $0) }) {
        let ids = try Self.ids(in: store, prefix: prefix) { _ in true }
        return (try store.purge(prefix: prefix), ids)
      } notFound: {
        ""
      }
    case .purgeCache:
      purge(completion: completion, shared: { _ in .all }) {
        (try store.purgeAll(), [])
      } notFound: {
        ""
      }
    default:
      completion(.error(404, "not a cache endpoint"))
    }
  }

  /// `DELETE /admin/routes/{name}/cache`: the store does not record routes, so the
  /// route's entries are found as `CacheEntryRoutes` maps them: listed by the route's
  /// literal upstream path prefix, kept when they map to the route, then purged by id.
  private func purgeRoute(
    _ name: String, store: Store, completion: @escaping @Sendable (AdminAnswer) -> Void
  ) {
    let config = server.currentSnapshot.config
    let routes = CacheEntryRoutes(config: config)
    guard let prefix = routes.literalPrefix(route: name) else {
      let names = config.routes.map(\.name)
      let message =
        names.contains(name)
        ? "route \(name) has no upstream, so it has no cache entries"
        : "no route \(name)" + NameSuggestion.hint(for: name, among: names)
      var answer = AdminAnswer.error(404, message)
      answer.auditFacts = [("purged", .int(0))]
      completion(answer)
      return
    }
    // The index's entries are matched with the same config and the same rule, so the tier
    // loses what the local store loses, whichever replica wrote it.
    let selection = SharedTierPurgeSelection.route(name, routes: routes)
    purge(completion: completion, shared: { ids in selection.map { .selected($0, heldHere: ids) } ?? .ids(ids) }) {
      let ids = try Self.ids(in: store, prefix: prefix) { entry in
        routes.route(upstream: entry.upstream, method: entry.method, path: entry.path) == name
      }
      var count = 0
      for id in ids { count += try store.purge(id: id) }
      return (count, ids)
    } notFound: {
      ""
    }
  }

  /// The ids of the entries under `prefix` that `keep` keeps, every page of them.
  private static func ids(
    in store: Store, prefix: String, keep: (CacheEntrySummary) -> Bool
  ) throws(StoreError) -> [String] {
    var ids: [String] = []
    var cursor: String?
    repeat {
      let page = try store.list(prefix: prefix, limit: 1000, cursor: cursor)
      for entry in page.entries where keep(entry) { ids.append(entry.id) }
      cursor = page.nextCursor
    } while cursor != nil
    return ids
  }

  /// Runs a purge on the control loop, then makes every loop forget the answers it
  /// remembered so none is served after it was purged. `body` gives the local count (nil:
  /// not found) and the ids it found; `shared` turns those into what the shared tier loses,
  /// sent from the first loop (whose connection it is) without waiting: the answer reports
  /// the local count, and the tier's deletes are best effort (Docs/shared-tier.md).
  private func purge(
    completion: @escaping @Sendable (AdminAnswer) -> Void,
    shared: @escaping @Sendable ([String]) -> SharedTierPurge,
    _ body: @escaping @Sendable () throws -> (Int?, [String]),
    notFound: @escaping @Sendable () -> String
  ) {
    server.onControl {
      do {
        let (found, ids) = try body()
        let sharedPurge = shared(ids)
        server.onFirstLoop { context in context.sharedTier?.purge(sharedPurge) }
        guard let count = found else {
          var answer = AdminAnswer.error(404, notFound())
          answer.auditFacts = [("purged", .int(0))]
          completion(answer)
          return
        }
        server.gather({ context in context.store?.forgetRecent() }) { _ in
          var answer = AdminAnswer.json(.object([("purged", .int(count))]))
          answer.auditFacts = [("purged", .int(count))]
          completion(answer)
        }
      } catch let error as StoreError {
        completion(.error(500, "\(error.kind)"))
      } catch {
        completion(.error(500, "\(error)"))
      }
    }
  }

  /// One entry of the listing. `route` is the route of the running config whose requests
  /// produce the entry (`CacheEntryRoutes`), or null when none does.
  static func summaryDocument(_ entry: CacheEntrySummary, nowMs: Int64, routes: CacheEntryRoutes) -> JSONValue {
    .object([
      ("id", .string(entry.id)), ("method", .string(entry.method)), ("upstream", .string(entry.upstream)),
      ("path", .string(entry.path)), ("query", .string(entry.query)), ("status", .int(entry.status)),
      ("bytes", .int(Int(entry.bytes))), ("stored_at", .string(RFC3339.string(seconds: entry.storedAtMs / 1000))),
      ("age_s", .int(Int(max(0, StoreEntryRules.elapsedMs(since: entry.storedAtMs, nowMs: nowMs)) / 1000))),
      ("route", .optionalString(routes.route(upstream: entry.upstream, method: entry.method, path: entry.path))),
      // On a JWT route: whose answer it is, as the digest the key holds (never the user).
      ("user", .optionalString(CacheKey.user(inVaryPart: entry.vary))),
    ])
  }
}
