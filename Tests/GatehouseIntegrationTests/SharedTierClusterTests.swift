import Foundation
import Glibc
import Testing

/// Several gateways on one `redis-server` (Docs/shared-tier.md): a client key's limit holds across
/// them (and falls back to each one's own buckets when the tier goes), and a purge on one
/// reaches the tier the others read. Skipped when `redis-server` is missing.
@Suite(.enabled(if: SharedTierRedis.isAvailable, "redis-server is not installed"))
struct SharedTierClusterTests {
  static let key = "cluster-key-CANARY-71d2"
  static let keyHeader = [("X-Api-Key", key)]

  /// A gateway whose one client key may send 5 requests a second, `shared` on `redis`.
  static func limitedGateway(backend: UInt16, redis: UInt16) throws -> GatewayProcess {
    var config = StoreTests.config(port: backend)
    if var routes = config["routes"] as? [[String: Any]] {
      routes[0]["cache"] = nil
      config["routes"] = routes
    }
    config["clients"] = [
      "required": true, "keys": [["id": "cluster", "sha256": try ExternalTool.sha256Hex(key), "rate_per_s": 5]],
    ]
    config["shared"] = ["url": "redis://127.0.0.1:\(redis)/0", "prefix": "test:", "timeout_ms": 200]
    return try GatewayProcess(config: config)
  }

  /// Sends `count` requests with the key, round robin over `gateways`; the statuses, and how
  /// many wall-clock seconds the sending touched (each second is a window of its own).
  static func burst(_ count: Int, over gateways: [GatewayProcess]) throws -> (statuses: [Int], seconds: Int) {
    let start = Date().timeIntervalSince1970
    var statuses: [Int] = []
    for index in 0..<count {
      let answer = try send("GET", "/limited/\(index)", to: gateways[index % gateways.count].port, headers: keyHeader)
      if answer.status == 429 { #expect(answer.head.value("Retry-After") != nil) }
      statuses.append(answer.status)
    }
    let end = Date().timeIntervalSince1970
    return (statuses, Int(end.rounded(.down)) - Int(start.rounded(.down)) + 1)
  }

  /// Waits for the start of a wall-clock second, so a quick burst stays in one window.
  static func waitForASecondsStart() {
    _ = waitUntil(timeout: 2) { Date().timeIntervalSince1970.truncatingRemainder(dividingBy: 1) < 0.05 }
  }

  @Test func aLimitHoldsAcrossThreeGatewaysAndFallsBackToEachOnesBuckets() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let gateways = try (0..<3).map { _ in try Self.limitedGateway(backend: backend.port, redis: redis.port) }
    defer { for gateway in gateways { gateway.stopExpectingCleanExit() } }
    #expect(waitUntil(timeout: 10) { gateways.allSatisfy { SharedTierGatewayTests.sharedUp($0) == 1 } })

    Self.waitForASecondsStart()
    let (statuses, seconds) = try Self.burst(30, over: gateways)
    let allowed = statuses.filter { $0 == 200 }.count
    // 5 per window in all, not 5 per gateway (15); two windows if the burst crossed a second.
    #expect(allowed >= 1 && allowed <= 5 * seconds, "\(allowed) allowed over \(seconds) s")
    #expect(statuses.allSatisfy { $0 == 200 || $0 == 429 })
    let counted = gateways.compactMap {
      try? SharedTierGatewayTests.metrics($0).value("gatehouse_shared_requests_total", ["op": "incr", "result": "ok"])
    }
    #expect(counted.reduce(0, +) == 30)

    // The tier goes: each gateway's own bucket (5, full: it was not used meanwhile) decides.
    redis.kill()
    #expect(waitUntil(timeout: 10) { gateways.allSatisfy { SharedTierGatewayTests.sharedUp($0) == 0 } })
    for gateway in gateways {
      let local = try Self.burst(10, over: [gateway]).statuses
      let passed = local.filter { $0 == 200 }.count
      // The burst of 5, and what refills while the ten are sent (5 a second).
      #expect(passed >= 5 && passed < 10, "\(passed) of 10 allowed by one gateway's bucket")
      #expect(
        gateway.waitForLogLine {
          $0["level"] as? String == "warn"
            && ($0["msg"] as? String)?.hasPrefix("shared tier did not count a rate limit") == true
        })
    }
  }

  @Test func aPurgeOnOneGatewayReachesTheSharedTier() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let first = try SharedTierGatewayTests.gateway(backend: backend.port, redis: redis.port)
    defer { first.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(first) == 1 })
    for path in ["/items/1", "/items/2", "/items/3"] {
      #expect(try send("GET", path, to: first.port).status == 200)
    }
    #expect(
      waitUntil(timeout: 10) {
        (try? SharedTierGatewayTests.metrics(first))?.value(
          "gatehouse_shared_requests_total", ["op": "set", "result": "ok"]) == 3
      })
    let admin = try first.admin(token: TestConfig.adminToken)
    let entries = try #require(try admin.json("/admin/cache/entries")["entries"] as? [[String: Any]])
    let one = try #require(entries.first { ($0["path"] as? String)?.hasSuffix("/items/1") == true }?["id"] as? String)
    let twoPath = try #require(
      entries.first { ($0["path"] as? String)?.hasSuffix("/items/2") == true }?["path"] as? String)

    // By id: the entry goes from the tier too (asynchronously: wait for the DEL's reply).
    #expect(try admin.request("DELETE", "/admin/cache/entries/\(one)").status == 200)
    #expect(
      waitUntil(timeout: 10) {
        (try? SharedTierGatewayTests.metrics(first))?.value(
          "gatehouse_shared_requests_total", ["op": "del", "result": "ok"]) == 1
      })
    // By prefix: what the purge index names under it (one `DEL`).
    #expect(try admin.request("DELETE", "/admin/cache/entries?prefix=\(twoPath)").status == 200)
    #expect(
      waitUntil(timeout: 10) {
        (try? SharedTierGatewayTests.metrics(first))?.value(
          "gatehouse_shared_requests_total", ["op": "del", "result": "ok"]) == 2
      })
    backend.stop()
    // A gateway with a fresh store: 502 for the purged keys, the tier's answer for the other.
    let second = try SharedTierGatewayTests.gateway(backend: backend.port, redis: redis.port)
    defer { second.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(second) == 1 })
    #expect(try send("GET", "/items/1", to: second.port).status == 502)
    #expect(try send("GET", "/items/2", to: second.port).status == 502)
    #expect(StoreTests.cacheHeader(try send("GET", "/items/3", to: second.port)) == "STALE")

    // Everything (`DELETE /admin/cache`): SCAN + DEL empties the tier of stored answers.
    #expect(try admin.request("DELETE", "/admin/cache").status == 200)
    #expect(
      waitUntil(timeout: 10) {
        (try? SharedTierGatewayTests.metrics(first))?.value(
          "gatehouse_shared_requests_total", ["op": "del", "result": "ok"]) ?? 0 >= 3
      })
    let third = try SharedTierGatewayTests.gateway(backend: backend.port, redis: redis.port)
    defer { third.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { SharedTierGatewayTests.sharedUp(third) == 1 })
    #expect(try send("GET", "/items/3", to: third.port).status == 502)
  }
}
