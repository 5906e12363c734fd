import Foundation
import Testing

/// Records in the shared tier are kept by the tier, not vouched for by it: whoever can write
/// to the server can write any record. With a real `redis-server` and two gateways, records
/// planted under the keys of real entries (a cookie, a redirect, an HTML page on an enveloped
/// route, a 204 with a body, a record copied from another key, one of the format before
/// records named their key) are misses, counted and logged, never served; genuine records,
/// and a planted one that breaks no rule, are served `STALE`. Skipped when `redis-server` is
/// missing.
@Suite(.enabled(if: SharedTierRedis.isAvailable, "redis-server is not installed"))
struct SharedTierTrustTests {
  /// Two cached routes to `backend` (`/p/*` passes bodies through, `/w/*` is enveloped),
  /// `shared` on `redis` under `test:`, and `store.secret_key` when `secret` is set.
  static func gateway(backend: UInt16, redis: UInt16, secret: String? = nil) throws -> GatewayProcess {
    let cache: [String: Any] = ["stale_if_error_s": 3600]
    var config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [
          TestConfig.route("plain", match: "/p/*", extra: ["cache": cache]),
          TestConfig.route("wrapped", match: "/w/*", extra: ["cache": cache, "envelope": ["enabled": true]]),
        ],
        upstreams: ["api": TestConfig.upstream(port: backend, answerTimeoutMs: 1000)]))
    var store: [String: Any] = ["path": "var/store.sqlite"]
    if let secret { store["secret_key"] = secret }
    config["store"] = store
    config["shared"] = ["url": "redis://127.0.0.1:\(redis)/0", "prefix": "test:", "timeout_ms": 200]
    return try GatewayProcess(config: config)
  }

  /// A plain record in the tier's format (version 2, big-endian): the id it was written
  /// under, status, stored_at, headers, body. Written here from the format's description,
  /// not by the gateway's code, as whoever writes to the tier would.
  static func record(
    id: String, status: Int, headers: [(String, String)], body: String, version: UInt8 = 2
  ) -> [UInt8] {
    var out: [UInt8] = [0x47, 0x48, version, 0]
    func append(_ value: UInt64, _ count: Int) {
      for index in stride(from: count - 1, through: 0, by: -1) {
        out.append(UInt8(truncatingIfNeeded: value >> (UInt64(index) * 8)))
      }
    }
    if version >= 2 {
      out.append(UInt8(id.utf8.count))
      out += Array(id.utf8)
    }
    append(UInt64(status), 2)
    append(UInt64(Date().timeIntervalSince1970 * 1000) - 5000, 8)
    append(UInt64(headers.count), 2)
    for (name, value) in headers {
      append(UInt64(name.utf8.count), 2)
      out += Array(name.utf8)
      append(UInt64(value.utf8.count), 4)
      out += Array(value.utf8)
    }
    append(UInt64(body.utf8.count), 4)
    return out + Array(body.utf8)
  }

  static func refused(_ gateway: GatewayProcess, _ reason: String) -> Double? {
    (try? SharedTierGatewayTests.metrics(gateway))?.value("gatehouse_shared_records_refused_total", ["reason": reason])
  }

  /// Asks `gateway` for `paths`, then waits for their records in the tier; the ids of their
  /// entries by path (from the admin API: the tier's keys are `test:` + id).
  static func store(_ paths: [String], through gateway: GatewayProcess) throws -> [String: String] {
    for path in paths {
      let answer = try send("GET", path, to: gateway.port)
      #expect(answer.status == 200 && StoreTests.cacheHeader(answer) == "MISS", "\(path): \(answer.text)")
    }
    #expect(
      waitUntil(timeout: 10) {
        (try? SharedTierGatewayTests.metrics(gateway))?.value(
          "gatehouse_shared_requests_total", ["op": "set", "result": "ok"]) == Double(paths.count)
      })
    let admin = try gateway.admin()
    #expect(admin.waitForStoredEntries(paths.count))
    var ids: [String: String] = [:]
    for entry in try admin.allEntries() {
      if let path = entry["path"] as? String, let id = entry["id"] as? String { ids[path] = id }
    }
    #expect(Set(ids.keys) == Set(paths))
    return ids
  }

  @Test func plantedRecordsAreMissesNeverAnswers() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let first = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { first.stopExpectingCleanExit() }
    let second = try Self.gateway(backend: backend.port, redis: redis.port)
    defer { second.stopExpectingCleanExit() }
    #expect(
      waitUntil(timeout: 10) {
        SharedTierGatewayTests.sharedUp(first) == 1 && SharedTierGatewayTests.sharedUp(second) == 1
      })
    let paths = [
      "/p/cookie", "/p/location", "/p/nocontent", "/w/html", "/p/source", "/p/copied", "/p/old", "/p/planted",
      "/p/kept", "/w/kept",
    ]
    let ids = try Self.store(paths, through: first)
    func key(_ path: String) -> String { "test:" + (ids[path] ?? "missing") }
    func plant(_ path: String, status: Int = 200, _ headers: [(String, String)], body: String, version: UInt8 = 2)
      throws
    {
      let record = Self.record(id: ids[path] ?? "", status: status, headers: headers, body: body, version: version)
      _ = try ExternalTool.run("/usr/bin/redis-cli", ["-p", "\(redis.port)", "-x", "SET", key(path)], input: record)
    }
    let json = ("Content-Type", "application/json")
    try plant("/p/cookie", [json, ("Set-Cookie", "session=attacker; Path=/")], body: #"{"cookie":1}"#)
    try plant("/p/location", [json, ("Location", "https://evil.example/")], body: #"{"location":1}"#)
    let smuggled = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 26\r\n\r\n<script>alert(1)</script>"
    try plant("/p/nocontent", status: 204, [], body: smuggled)
    try plant("/w/html", [("Content-Type", "text/html")], body: "<script>alert(1)</script>")
    // A genuine record, copied to another entry's key.
    try redis.command(["COPY", key("/p/source"), key("/p/copied"), "REPLACE"])
    try plant("/p/old", [json], body: #"{"old":1}"#, version: 1)
    // Planted too, but an answer the gateway would have stored: the records above are refused
    // for what they hold, not for how they were written.
    try plant("/p/planted", [json, ("ETag", #""p1""#)], body: #"{"planted":1}"#)
    backend.stop()

    for path in ["/p/cookie", "/p/location", "/p/nocontent", "/w/html", "/p/copied", "/p/old"] {
      let answer = try send("GET", path, to: second.port, timeout: 5)
      #expect(answer.status == 502, "\(path): \(answer.status) \(answer.text)")
      #expect(StoreTests.cacheHeader(answer) == "MISS", "\(path)")
      #expect(answer.head.values("Set-Cookie").isEmpty && answer.head.values("Location").isEmpty, "\(path)")
      #expect(!answer.text.contains("script") && !answer.text.contains("source"), "\(path): \(answer.text)")
    }
    StoreTests.expectStale(try send("GET", "/p/planted", to: second.port, timeout: 5), body: #"{"planted":1}"#)
    StoreTests.expectStale(
      try send("GET", "/p/kept", to: second.port, timeout: 5), body: #"{"target":"/p/kept","version":1,"lang":""}"#)
    let wrapped = try send("GET", "/w/kept", to: second.port, timeout: 5)
    #expect(wrapped.status == 200 && StoreTests.cacheHeader(wrapped) == "STALE", "\(wrapped.text)")

    // One per request for a planted record: the cookie, the redirect, the 204, the page.
    #expect(Self.refused(second, "rules") == 4)
    #expect(Self.refused(second, "key") == 1)
    #expect(Self.refused(second, "version") == 1)
    #expect(Self.refused(second, "seal") == 0 && Self.refused(second, "record") == 0)
    #expect(
      second.waitForLogLine {
        $0["msg"] as? String == "shared tier record refused; served as a miss" && $0["level"] as? String == "warn"
          && $0["route"] is String && $0["reason"] is String
      })
    let lines = second.logLines().filter { $0["msg"] as? String == "shared tier record refused; served as a miss" }
    // Throttled: at most one line per 10 s, whatever the count.
    #expect(lines.count == 1, "\(lines)")
    #expect(!second.stdoutText.contains("attacker"))
  }

  /// Sealed records (`store.secret_key`) still serve a sibling, and a sealed record copied to
  /// another key does not open there.
  @Test func sealedRecordsServeASiblingAndACopyDoesNotOpen() throws {
    let redis = try SharedTierRedis()
    let backend = try ModalBackend()
    let secret = "a-shared-secret-of-enough-length-42"
    let first = try Self.gateway(backend: backend.port, redis: redis.port, secret: secret)
    defer { first.stopExpectingCleanExit() }
    let second = try Self.gateway(backend: backend.port, redis: redis.port, secret: secret)
    defer { second.stopExpectingCleanExit() }
    #expect(
      waitUntil(timeout: 10) {
        SharedTierGatewayTests.sharedUp(first) == 1 && SharedTierGatewayTests.sharedUp(second) == 1
      })
    let ids = try Self.store(["/p/source", "/p/copied", "/w/kept"], through: first)
    try redis.command([
      "COPY", "test:" + (ids["/p/source"] ?? ""), "test:" + (ids["/p/copied"] ?? ""), "REPLACE",
    ])
    backend.stop()

    StoreTests.expectStale(
      try send("GET", "/p/source", to: second.port, timeout: 5),
      body: #"{"target":"/p/source","version":1,"lang":""}"#)
    let wrapped = try send("GET", "/w/kept", to: second.port, timeout: 5)
    #expect(wrapped.status == 200 && StoreTests.cacheHeader(wrapped) == "STALE", "\(wrapped.text)")
    let copied = try send("GET", "/p/copied", to: second.port, timeout: 5)
    #expect(copied.status == 502, "\(copied.text)")
    #expect(Self.refused(second, "seal") == 1)
  }
}
