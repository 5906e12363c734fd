import Foundation
import Glibc
import Testing

/// The shared tier's purge index (`Docs/shared-tier.md`, "The purge index") with real gateways and one
/// `redis-server`: a prefix or route purge on a gateway that never saw the entries removes
/// them from the tier, whoever wrote them, and the index trims what expired. Skipped when
/// `redis-server` is missing.
@Suite(.enabled(if: SharedTierRedis.isAvailable, "redis-server is not installed"))
struct SharedTierIndexGatewayTests {
  /// A gateway with its own store, routes `pass` (`/pass/*`) and `passage` (`/passage/*`)
  /// cached for an hour, and `shared` on `redis` (records and index sealed with `secretKey`).
  static func gateway(backend: UInt16, redis: UInt16, secretKey: String) throws -> GatewayProcess {
    let cache: [String: Any] = ["cache": ["stale_if_error_s": 3600]]
    var config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [
          TestConfig.route("pass", match: "/pass/*", extra: cache),
          TestConfig.route("passage", match: "/passage/*", extra: cache),
        ],
        upstreams: ["api": TestConfig.upstream(port: backend, answerTimeoutMs: 1000)]))
    config["store"] = ["path": "var/store.sqlite", "secret_key": secretKey]
    config["shared"] = ["url": "redis://127.0.0.1:\(redis)/0", "prefix": "test:", "timeout_ms": 50]
    return try GatewayProcess(config: config)
  }

  /// The stored answers in the tier (not the index, not rate counters).
  static func storedAnswers(_ redis: SharedTierRedis) -> Int? {
    (try? redis.command(["--scan", "--pattern", "test:[0-9a-f]*"]))?.split(separator: "\n").count
  }

  /// The purge index's member count.
  static func indexed(_ redis: SharedTierRedis) -> Int? {
    (try? redis.command(["ZCARD", "test:ix"])).flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
  }

  /// Asks `gateway` for each path (the backend answers); the bodies, by path.
  @discardableResult
  static func gets(_ paths: [String], from gateway: GatewayProcess) throws -> [String: String] {
    var bodies: [String: String] = [:]
    for path in paths {
      let answer = try send("GET", path, to: gateway.port)
      #expect(answer.status == 200 && StoreTests.cacheHeader(answer) == "MISS", "\(path)")
      bodies[path] = answer.text
    }
    return bodies
  }

  /// Polls a condition on the tier (each poll runs `redis-cli`, so not too often).
  static func waitForTier(_ condition: () -> Bool) -> Bool {
    waitUntil(timeout: 10, interval: .milliseconds(100), condition)
  }

  @Test func aPrefixPurgeOnAGatewayThatNeverSawTheEntriesRemovesThemFromTheTier() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let writer = try SharedTierGatewayTests.gateway(backend: backend.port, redis: redis.port)
    defer { writer.stopExpectingCleanExit() }
    let purger = try SharedTierGatewayTests.gateway(backend: backend.port, redis: redis.port)
    defer { purger.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(writer) == 1 })
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(purger) == 1 })

    let bodies = try Self.gets(["/gone/1", "/gone/2", "/kept/1", "/kept/2"], from: writer)
    #expect(Self.waitForTier { Self.storedAnswers(redis) == 4 && Self.indexed(redis) == 4 })
    // Plain members name the path (no secret key here).
    #expect(try redis.command(["ZRANGE", "test:ix", "0", "-1"]).contains("/gone/1"))

    // The purger's store is empty: it purges nothing itself, the tier loses both `/gone/…`.
    let admin = try purger.admin(token: TestConfig.adminToken)
    let purged = try admin.request("DELETE", "/admin/cache/entries?prefix=/gone/")
    #expect(purged.status == 200)
    #expect(Self.waitForTier { Self.storedAnswers(redis) == 2 && Self.indexed(redis) == 2 })
    // One `DEL` for what the index named (nothing held here to delete besides).
    #expect(
      waitUntil(timeout: 10) {
        (try? SharedTierGatewayTests.metrics(purger))?.value(
          "gatehouse_shared_requests_total", ["op": "del", "result": "ok"]) == 1
      })

    // In the outage the purger (still nothing stored) finds no `/gone/…` in the tier, and
    // the other prefix as it was written.
    backend.stop()
    #expect(try send("GET", "/gone/1", to: purger.port).status == 502)
    #expect(try send("GET", "/gone/2", to: purger.port).status == 502)
    StoreTests.expectStale(try send("GET", "/kept/1", to: purger.port), body: bodies["/kept/1"] ?? "")
  }

  @Test func aRoutePurgeRemovesWhatTheRouteStoredFromTheTierAndSealedMembersHideThePaths() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let secret = "index-test-secret-0123456789abcdef"
    let writer = try Self.gateway(backend: backend.port, redis: redis.port, secretKey: secret)
    defer { writer.stopExpectingCleanExit() }
    let purger = try Self.gateway(backend: backend.port, redis: redis.port, secretKey: secret)
    defer { purger.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(writer) == 1 })
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(purger) == 1 })

    let bodies = try Self.gets(["/pass/1", "/pass/2", "/passage/1"], from: writer)
    #expect(Self.waitForTier { Self.storedAnswers(redis) == 3 && Self.indexed(redis) == 3 })
    #expect(try !redis.command(["ZRANGE", "test:ix", "0", "-1"]).contains("/pass"))

    // `pass`'s literal prefix, `/pass`, also starts `/passage/1`: that one is `passage`'s and stays.
    let admin = try purger.admin(token: TestConfig.adminToken)
    let purged = try admin.request("DELETE", "/admin/routes/pass/cache")
    #expect(purged.status == 200)
    #expect(Self.waitForTier { Self.storedAnswers(redis) == 1 && Self.indexed(redis) == 1 })

    backend.stop()
    // A third gateway with a fresh store: what `pass` stored is gone from the tier.
    let fresh = try Self.gateway(backend: backend.port, redis: redis.port, secretKey: secret)
    defer { fresh.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(fresh) == 1 })
    #expect(try send("GET", "/pass/1", to: fresh.port).status == 502)
    #expect(try send("GET", "/pass/2", to: purger.port).status == 502)
    StoreTests.expectStale(try send("GET", "/passage/1", to: fresh.port), body: bodies["/passage/1"] ?? "")
  }

  @Test func expiredMembersAreTrimmedAndTheIndexExpiresAfterItsEntries() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let gateway = try SharedTierGatewayTests.gateway(backend: backend.port, redis: redis.port)
    defer { gateway.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(gateway) == 1 })

    try Self.gets(["/t/0"], from: gateway)
    #expect(Self.waitForTier { Self.indexed(redis) == 1 })
    // A member whose entry expired long ago (score: 1 ms after the epoch), as a replica that
    // stopped would leave behind.
    try redis.command(["ZADD", "test:ix", "1", "left-behind"])
    #expect(Self.indexed(redis) == 2)

    // Later writes trim it (at most once a second per loop): keep writing until it is gone.
    var written = 1
    let trimmed = waitUntil(timeout: 20, interval: .milliseconds(200)) {
      if (try? send("GET", "/t/\(written)", to: gateway.port))?.status == 200 { written += 1 }
      return (try? redis.command(["ZSCORE", "test:ix", "left-behind"]))?
        .trimmingCharacters(in: .whitespacesAndNewlines).isEmpty == true
    }
    #expect(trimmed)
    // Every live entry is still indexed.
    #expect(Self.waitForTier { Self.indexed(redis) == written && Self.storedAnswers(redis) == written })
    // The index key expires after its longest-lived entry (an hour), not before, not never.
    let ttl = try #require(Int(try redis.command(["PTTL", "test:ix"]).trimmingCharacters(in: .whitespacesAndNewlines)))
    #expect(ttl > 3_600_000 - 60_000 && ttl <= 3_600_000 + 60_000, "PTTL \(ttl)")
  }
}
