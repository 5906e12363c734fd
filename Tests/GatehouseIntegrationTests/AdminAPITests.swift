import Foundation
import Testing

/// The admin API (Docs/admin-openapi.json) and `/metrics` (Docs/logs.md): each endpoint's JSON shape, the errors
/// (401, 404, 400, 405), cursors, purges, and counters that follow the traffic.
@Suite struct AdminAPITests {
  /// A gateway with a cached route `/*` (fresh for a minute) to a healthy backend.
  final class Setup {
    let backend: ModalBackend
    let gateway: GatewayProcess
    let admin: AdminClient

    init(fresh: Int = 60) throws {
      backend = try ModalBackend()
      var config = StoreTests.config(port: backend.port, cache: ["fresh_s": fresh])
      config["store"] = ["path": "var/store.sqlite", "max_bytes": 50_000_000]
      gateway = try GatewayProcess(config: config)
      admin = try gateway.admin(token: TestConfig.adminToken)
    }

    /// Stores one answer per path and waits until all are on disk.
    func fill(_ paths: [String]) throws {
      for path in paths { _ = try send("GET", path, to: gateway.port) }
      try #require(admin.waitForStoredEntries(paths.count))
    }

    deinit {
      gateway.stopExpectingCleanExit()
      backend.stop()
    }
  }

  static func isRFC3339(_ value: Any?) -> Bool {
    guard let text = value as? String else { return false }
    return text.range(of: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$"#, options: .regularExpression) != nil
  }

  // MARK: Open endpoints

  @Test func healthAndReadinessNeedNoToken() throws {
    let setup = try Setup()
    let health = try setup.admin.request("GET", "/healthz", credential: .none)
    let ready = try setup.admin.request("GET", "/readyz", credential: .none)

    #expect(health.status == 200)
    #expect(health.head.value("Content-Type") == "application/json")
    #expect(health.text == #"{"status":"ok"}"#)
    #expect(ready.status == 200)
    #expect(try ready.jsonObject()["status"] as? String == "ready")
    #expect(try setup.admin.request("GET", "/admin/", credential: .none).status == 200)
    #expect(try setup.admin.request("GET", "/admin/openapi.json", credential: .none).status == 200)
  }

  /// With no admin token (allowed on loopback) the protected endpoints answer 401 to
  /// everything, so the start-up log says why; the open endpoints still answer.
  @Test func noAdminTokenIsWarnedAtStart() throws {
    let backend = try ModalBackend()
    defer { backend.stop() }
    // `TestConfig.make` configures the admin listener without a token.
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: nil)
    let address = gateway.logLines().first { $0["msg"] as? String == "admin listening" }?["address"] as? String

    #expect(
      gateway.waitForLogLine {
        $0["level"] as? String == "warn"
          && $0["msg"] as? String == "the admin API's protected endpoints are unusable until admin.token is set"
          && $0["address"] as? String == address
      })
    #expect(try admin.request("GET", "/admin/status", credential: .header("Bearer ")).status == 401)
    #expect(try admin.request("GET", "/admin/status").status == 401)
    #expect(try admin.request("GET", "/healthz").status == 200)
  }

  // MARK: Errors

  static let protectedEndpoints: [(String, String)] = [
    ("GET", "/admin/status"), ("GET", "/admin/cache"), ("GET", "/admin/cache/entries"),
    ("GET", "/admin/cache/entries/0000"), ("DELETE", "/admin/cache/entries/0000"),
    ("DELETE", "/admin/cache/entries?prefix=/"), ("DELETE", "/admin/cache"), ("GET", "/admin/routes"),
    ("GET", "/admin/upstreams"), ("POST", "/admin/reload"), ("GET", "/metrics"),
  ]

  @Test func everyProtectedEndpointRefusesAMissingOrWrongToken() throws {
    let setup = try Setup()
    try setup.fill(["/kept"])
    let credentials: [AdminClient.Credential] = [
      .none, .header("Bearer wrong"), .header("Bearer \(TestConfig.adminToken)x"),
      .header("Bearer \(TestConfig.adminToken.dropLast())"), .header(TestConfig.adminToken),
      .header("Basic \(TestConfig.adminToken)"), .header("Bearer "),
      // The right token next to another value is not accepted, whichever comes first.
      .headers(["Bearer \(TestConfig.adminToken)", "Bearer wrong"]),
      .headers(["Bearer wrong", "Bearer \(TestConfig.adminToken)"]),
      .headers(["Bearer \(TestConfig.adminToken)", "Bearer \(TestConfig.adminToken)"]),
    ]
    for (method, path) in Self.protectedEndpoints {
      for credential in credentials {
        let answer = try setup.admin.request(method, path, credential: credential)
        #expect(answer.status == 401, "\(method) \(path) with \(credential)")
        #expect(answer.text == #"{"error":"unauthorized"}"#)
        #expect(answer.head.value("WWW-Authenticate") == "Bearer")
      }
    }
    // Nothing was purged or reloaded by the refused calls.
    #expect(try setup.admin.cacheEntryCount() == 1)
    #expect(!setup.gateway.logLines().contains { $0["msg"] as? String == "config reloaded" })
  }

  @Test func unknownPathsAndEntriesAre404() throws {
    let setup = try Setup()
    let unknownID = String(repeating: "ab", count: 32)
    let answers = [
      try setup.admin.request("GET", "/admin/nothing"),
      try setup.admin.request("GET", "/admin/cache/entries/\(unknownID)"),
      try setup.admin.request("DELETE", "/admin/cache/entries/\(unknownID)"),
      try setup.admin.request("GET", "/users/1"),
    ]
    #expect(answers.map(\.status) == [404, 404, 404, 404])
    #expect(answers.allSatisfy { (try? $0.jsonObject())?["error"] is String })
  }

  @Test func badLimitsAndCursorsAre400() throws {
    let setup = try Setup()
    try setup.fill(["/a", "/b"])
    for query in ["limit=0", "limit=1001", "limit=-3", "cursor=not-a-cursor", "limit=1&cursor=%00%01"] {
      let answer = try setup.admin.request("GET", "/admin/cache/entries?\(query)")
      #expect(answer.status == 400, "\(query): \(answer.text)")
      #expect((try? answer.jsonObject())?["error"] is String)
    }
    let missingPrefix = try setup.admin.request("DELETE", "/admin/cache/entries")
    #expect(missingPrefix.status == 400)
    #expect(try setup.admin.cacheEntryCount() == 2)
  }

  @Test
  func nonNumericLimitIs400() throws {
    let setup = try Setup()
    let answer = try setup.admin.request("GET", "/admin/cache/entries?limit=abc")
    #expect(answer.status == 400)
  }

  /// A query parameter an endpoint does not take is refused before anything is done, on
  /// every endpoint: `DELETE /admin/cache?prefix=...` must not purge everything.
  @Test func unknownOrRepeatedQueryParametersAre400AndChangeNothing() throws {
    let setup = try Setup()
    try setup.fill(["/api/k/1", "/api/other/1"])
    let id = try #require(try setup.admin.allEntries().first?["id"] as? String)
    let refused: [(String, String, String)] = [
      ("DELETE", "/admin/cache?prefix=/api/k/", "prefix"),
      ("DELETE", "/admin/cache?all", "all"),
      ("DELETE", "/admin/cache/entries?prefix=/api/k/&prefx=/api/", "prefx"),
      ("DELETE", "/admin/cache/entries?prefix=/api/k/&prefix=/", "prefix"),
      ("DELETE", "/admin/cache/entries/\(id)?dry_run=1", "dry_run"),
      ("POST", "/admin/reload?force=1", "force"),
      ("PUT", "/admin/tokens/api?value=x", "value"),
      ("POST", "/admin/tokens/api/refresh?now", "now"),
      ("POST", "/admin/tokens/api/invalidate?x=1", "x"),
      ("GET", "/admin/cache/entries?limit=5&limit=6", "limit"),
      ("GET", "/admin/cache/entries?prefix=/api/&offset=2", "offset"),
      ("GET", "/admin/cache/entries/\(id)?full=1", "full"),
      ("GET", "/admin/status?verbose=1", "verbose"),
      ("GET", "/admin/cache?x=", "x"),
      ("GET", "/admin/tokens?name=api", "name"),
      ("GET", "/admin/routes?x=1", "x"),
      ("GET", "/admin/upstreams?x=1", "x"),
    ]
    for (method, path, parameter) in refused {
      let body: [UInt8]? = method == "PUT" ? Array(#"{"value":"v"}"#.utf8) : nil
      let answer = try setup.admin.request(method, path, body: body)
      #expect(answer.status == 400, "\(method) \(path): \(answer.status) \(answer.text)")
      let object = try? answer.jsonObject()
      #expect(object?["parameter"] as? String == parameter, "\(method) \(path): \(answer.text)")
      #expect((object?["error"] as? String)?.contains(parameter) == true, "\(method) \(path): \(answer.text)")
    }
    // Endpoints that read and change nothing ignore the query: probes and scrapers add their own.
    for path in ["/metrics?x=1", "/healthz?x=1&x=2", "/readyz?ts=%ZZ", "/admin/?x=1", "/admin/openapi.json?v=2"] {
      #expect(try setup.admin.request("GET", path).status == 200, "GET \(path)")
    }
    // Without the token the answer is still 401 and nothing else.
    let anonymous = try setup.admin.request("DELETE", "/admin/cache?prefix=/api/k/", credential: .none)
    // Nothing was purged or reloaded; the right call then purges only its prefix.
    let countAfterRefusals = try setup.admin.cacheEntryCount()
    let byPrefix = try setup.admin.request("DELETE", "/admin/cache/entries?prefix=/api/k/")
    let left = try setup.admin.allEntries().compactMap { $0["path"] as? String }

    #expect(anonymous.status == 401)
    #expect(anonymous.text == #"{"error":"unauthorized"}"#)
    #expect(countAfterRefusals == 2)
    #expect(!setup.gateway.logLines().contains { $0["msg"] as? String == "config reloaded" })
    #expect(byPrefix.text == #"{"purged":1}"#)
    #expect(left == ["/api/other/1"])
  }

  /// A query that is not valid percent-encoding is refused (naming the parameter), never
  /// read as an empty value: an empty `prefix` would list or purge every entry.
  @Test func badPercentEncodingInAQueryIs400() throws {
    let setup = try Setup()
    try setup.fill(["/api/p/1", "/api/q/1"])
    let refused: [(String, String, String)] = [
      ("GET", "/admin/cache/entries?prefix=/api/p/%ZZ", "prefix"),
      ("GET", "/admin/cache/entries?prefix=/api/p/%E2%82", "prefix"),
      ("GET", "/admin/cache/entries?limit=1&cursor=%G0", "cursor"),
      ("GET", "/admin/cache/entries?limit=%3", "limit"),
      ("DELETE", "/admin/cache/entries?prefix=/api/p/%ZZ", "prefix"),
      ("DELETE", "/admin/cache/entries?pre%ZZfix=/api/p/", "pre%ZZfix"),
    ]
    for (method, path, parameter) in refused {
      let answer = try setup.admin.request(method, path)
      #expect(answer.status == 400, "\(method) \(path): \(answer.status) \(answer.text)")
      #expect((try? answer.jsonObject())?["parameter"] as? String == parameter, "\(method) \(path)")
    }
    let encoded = try setup.admin.json("/admin/cache/entries?prefix=%2Fapi%2Fp%2F")["entries"] as? [[String: Any]]

    #expect(try setup.admin.cacheEntryCount() == 2)
    #expect(encoded?.compactMap { $0["path"] as? String } == ["/api/p/1"])
  }

  @Test func wrongMethodsAre405WithAllow() throws {
    let setup = try Setup()
    let cases: [(String, String, String)] = [
      ("POST", "/admin/status", "GET, HEAD"), ("PUT", "/admin/cache", "GET, HEAD, DELETE"),
      ("POST", "/admin/cache/entries", "GET, HEAD, DELETE"), ("GET", "/admin/reload", "POST"),
      ("DELETE", "/healthz", "GET, HEAD"), ("POST", "/metrics", "GET, HEAD"),
      ("PATCH", "/admin/cache/entries/abc", "GET, HEAD, DELETE"),
      // The gateway's listeners refuse CONNECT and TRACE with 501 while parsing; the admin
      // API answers them like any other method a path does not take.
      ("TRACE", "/admin/status", "GET, HEAD"), ("CONNECT", "/admin/cache", "GET, HEAD, DELETE"),
    ]
    for (method, path, allow) in cases {
      let answer = try setup.admin.request(method, path)
      #expect(answer.status == 405, "\(method) \(path)")
      #expect(answer.head.value("Allow") == allow, "\(method) \(path)")
    }
  }

  // MARK: Status, routes, upstreams

  @Test func statusRoutesAndUpstreamsDescribeTheGateway() throws {
    let setup = try Setup()
    let status = try setup.admin.json("/admin/status")
    let routes = try setup.admin.json("/admin/routes")["routes"] as? [[String: Any]] ?? []
    let upstreams = try setup.admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []

    #expect((status["version"] as? String)?.isEmpty == false)
    #expect((status["uptime_s"] as? Int).map { $0 >= 0 } == true)
    #expect((status["config_file"] as? String)?.hasSuffix("gatehouse-test.json") == true)
    #expect(Self.isRFC3339(status["config_loaded_at"]))
    #expect(status["workers"] as? Int == 1)
    #expect(status["connections"] is [String: Any])
    #expect(routes.map { $0["name"] as? String } == ["cached"])
    let cache = routes.first?["cache"] as? [String: Any]
    #expect(cache?["fresh_s"] as? Int == 60)
    #expect((routes.first?["match"] as? [String: Any])?["path"] as? String == "/*")
    #expect(upstreams.count == 1)
    let api = try #require(upstreams.first)
    #expect(api["name"] as? String == "api")
    #expect(api["address"] as? String == "127.0.0.1:\(setup.backend.port)")
    #expect(api["circuit"] as? String == "closed")
    #expect(api["open_connections"] is Int)
    #expect(api["idle_connections"] is Int)
    #expect(api["last_error"] is NSNull)
  }

  // MARK: The cache endpoints

  @Test func cacheStatsCountTheTraffic() throws {
    let setup = try Setup()
    let answers = try (0..<3).map { _ in try send("GET", "/counted", to: setup.gateway.port) }
    _ = try send("POST", "/counted", to: setup.gateway.port, body: [])
    try #require(setup.admin.waitForStoredEntries(1))
    let stats = try setup.admin.json("/admin/cache")

    #expect(answers.map { $0.head.value("X-Gatehouse-Cache") } == ["MISS", "HIT", "HIT"])
    for key in [
      "entries", "bytes", "max_bytes", "hits", "stale_served", "misses", "writes", "evictions", "read_errors",
      "write_errors", "pending_token_writes", "oversize_skipped", "dropped_touches", "queue_depth",
    ] {
      #expect(stats[key] is Int, "\(key) in \(stats)")
    }
    #expect(stats["entries"] as? Int == 1)
    #expect((stats["bytes"] as? Int).map { $0 > 0 } == true)
    #expect(stats["max_bytes"] as? Int == 50_000_000)
    #expect(stats["hits"] as? Int == 2)
    #expect(stats["misses"] as? Int == 1)
    #expect(stats["stale_served"] as? Int == 0)
    #expect((stats["writes"] as? Int).map { $0 >= 1 } == true)
    #expect(stats["evictions"] as? Int == 0)
    #expect(stats["read_errors"] as? Int == 0)
    #expect(stats["write_errors"] as? Int == 0)
    #expect(stats["pending_token_writes"] as? Int == 0)
    #expect(stats["oversize_skipped"] as? Int == 0)
  }

  @Test func entriesArePagedWithCursorsAndFilteredByPrefix() throws {
    let setup = try Setup()
    let pPaths = (1...7).map { "/p/\($0)" }
    try setup.fill(pPaths + ["/q/1", "/q/2"])

    var pages: [[[String: Any]]] = []
    var cursor: String?
    for _ in 0..<10 {
      var path = "/admin/cache/entries?limit=3"
      if let cursor { path += "&cursor=\(percentEncoded(cursor))" }
      let page = try setup.admin.json(path)
      pages.append(page["entries"] as? [[String: Any]] ?? [])
      #expect(page.keys.contains("next_cursor"))
      guard let next = page["next_cursor"] as? String else { break }
      cursor = next
    }
    let all = pages.flatMap { $0 }
    let filtered = try setup.admin.allEntries(prefix: "/p/", limit: 2)

    #expect(pages.map(\.count) == [3, 3, 3])
    #expect(all.count == 9)
    #expect(Set(all.compactMap { $0["id"] as? String }).count == 9)
    #expect(Set(all.compactMap { $0["path"] as? String }) == Set(pPaths + ["/q/1", "/q/2"]))
    #expect(Set(filtered.compactMap { $0["path"] as? String }) == Set(pPaths))
    #expect(filtered.count == 7)
    for entry in all {
      #expect((entry["id"] as? String)?.count == 64)
      #expect(entry["method"] as? String == "GET")
      #expect(entry["upstream"] as? String == "api")
      #expect(entry["query"] as? String == "")
      #expect(entry["status"] as? Int == 200)
      #expect((entry["bytes"] as? Int).map { $0 > 0 } == true)
      #expect(Self.isRFC3339(entry["stored_at"]))
      #expect((entry["age_s"] as? Int).map { $0 >= 0 } == true)
    }
  }

  @Test func oneEntryShowsItsHeadersAndBody() throws {
    let setup = try Setup()
    try setup.fill(["/detail?x=1"])
    let summary = try #require(try setup.admin.allEntries().first)
    let id = try #require(summary["id"] as? String)
    let entry = try setup.admin.json("/admin/cache/entries/\(id)")
    let body = #"{"target":"/detail?x=1","version":1,"lang":""}"#

    #expect(entry["id"] as? String == id)
    #expect(entry["path"] as? String == "/detail")
    #expect(entry["query"] as? String == "x=1")
    #expect(entry["body"] as? String == body)
    #expect(entry["body_encoding"] as? String == "utf-8")
    // `bytes` is the stored size: the body and the stored headers.
    #expect((entry["bytes"] as? Int).map { $0 > body.utf8.count } == true)
    #expect(entry["body_sha256"] as? String == (try ExternalTool.sha256Hex(body)))
    let headers = entry["headers"] as? [[String]] ?? []
    #expect(headers.contains(["Content-Type", "application/json"]))
  }

  @Test func binaryEntryBodyIsBase64() throws {
    let bytes: [UInt8] = [0xFF, 0xFE, 0x00, 0x80, 0x41, 0xC3]
    let backend = try TestBackend(
      always: .respond(BackendAnswer(headers: [("Content-Type", "application/octet-stream")], body: .bytes(bytes))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    _ = try send("GET", "/blob", to: gateway.port)
    try #require(admin.waitForStoredEntries(1))
    let id = try #require(try admin.allEntries().first?["id"] as? String)
    let entry = try admin.json("/admin/cache/entries/\(id)")

    #expect(entry["body_encoding"] as? String == "base64")
    #expect((entry["body"] as? String).flatMap { Data(base64Encoded: $0) }.map(Array.init) == bytes)
  }

  @Test func purgesByIdPrefixAndAll() throws {
    let setup = try Setup()
    try setup.fill(["/a/1", "/a/2", "/b/1", "/b/2", "/c/1"])
    let entries = try setup.admin.allEntries()
    let cID = try #require(entries.first { $0["path"] as? String == "/c/1" }?["id"] as? String)

    let byID = try setup.admin.request("DELETE", "/admin/cache/entries/\(cID)")
    let byIDAgain = try setup.admin.request("DELETE", "/admin/cache/entries/\(cID)")
    let byPrefix = try setup.admin.request("DELETE", "/admin/cache/entries?prefix=/a/")
    let left = try setup.admin.allEntries().compactMap { $0["path"] as? String }
    // A purged answer is asked for again; a kept one is still a hit.
    let purgedPath = try send("GET", "/a/1", to: setup.gateway.port)
    let keptPath = try send("GET", "/b/1", to: setup.gateway.port)
    try #require(setup.admin.waitForStoredEntries(3))
    let all = try setup.admin.request("DELETE", "/admin/cache")

    #expect(byID.status == 200)
    #expect(byID.text == #"{"purged":1}"#)
    #expect(byIDAgain.status == 404)
    #expect(byPrefix.text == #"{"purged":2}"#)
    #expect(Set(left) == ["/b/1", "/b/2"])
    #expect(purgedPath.head.value("X-Gatehouse-Cache") == "MISS")
    #expect(keptPath.head.value("X-Gatehouse-Cache") == "HIT")
    #expect(all.status == 200)
    #expect(all.text == #"{"purged":3}"#)
    #expect(try setup.admin.cacheEntryCount() == 0)
    #expect(try send("GET", "/b/1", to: setup.gateway.port).head.value("X-Gatehouse-Cache") == "MISS")
  }

  // MARK: Metrics

  @Test func metricsCountersMoveWithTheTraffic() throws {
    let setup = try Setup()
    let before = try MetricsPage(try setup.admin.request("GET", "/metrics").text)
    for _ in 0..<5 { _ = try send("GET", "/metered", to: setup.gateway.port) }
    setup.backend.mode.value = .failing
    _ = try send("GET", "/other", to: setup.gateway.port)
    let metricsAnswer = try setup.admin.request("GET", "/metrics")
    let after = try MetricsPage(metricsAnswer.text)

    func delta(_ name: String, _ labels: [String: String]) -> Double {
      after.value(name, labels) - before.value(name, labels)
    }
    #expect(metricsAnswer.head.value("Content-Type")?.hasPrefix("text/plain") == true)
    #expect(delta("gatehouse_requests_total", ["route": "cached", "code": "200", "protocol": "HTTP/1.1"]) == 5)
    #expect(delta("gatehouse_requests_total", ["route": "cached", "code": "503", "protocol": "HTTP/1.1"]) == 1)
    #expect(delta("gatehouse_cache_total", ["result": "miss"]) == 2)
    #expect(delta("gatehouse_cache_total", ["result": "hit"]) == 4)
    #expect(delta("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "response"]) == 2)
    #expect(after.types["gatehouse_requests_total"] == "counter")
    #expect(after.types["gatehouse_request_duration_seconds"] == "histogram")
    #expect(after.types["gatehouse_cache_total"] == "counter")
    #expect(!after.samples("gatehouse_connections", ["side": "client"]).isEmpty)
    // One worker loop: its stall counter and longest turn are listed.
    #expect(after.types["gatehouse_loop_stalls_total"] == "counter")
    #expect(after.samples("gatehouse_loop_stalls_total", ["loop": "0"]).count == 1)
    #expect(after.samples("gatehouse_loop_longest_turn_seconds", ["loop": "0"]).count == 1)

    // The histogram: cumulative buckets in order of `le`, +Inf equal to the count, the
    // count equal to the requests counted for the route.
    let buckets = after.samples("gatehouse_request_duration_seconds_bucket", ["route": "cached"])
      .map { (bound: Double($0.labels["le"]!.replacingOccurrences(of: "+Inf", with: "inf")) ?? -1, value: $0.value) }
      .sorted { $0.bound < $1.bound }
    let count = after.value("gatehouse_request_duration_seconds_count", ["route": "cached"])
    let requests = after.samples("gatehouse_requests_total", ["route": "cached"]).reduce(0) { $0 + $1.value }
    #expect(buckets.count >= 2)
    #expect(buckets.last?.bound == .infinity)
    #expect(zip(buckets, buckets.dropFirst()).allSatisfy { $0.value <= $1.value })
    #expect(buckets.last?.value == count)
    #expect(count == requests)
    #expect(count == 6)
    #expect(after.value("gatehouse_request_duration_seconds_sum", ["route": "cached"]) > 0)
  }

  @Test
  func metricsHaveEverySpecFamily() throws {
    let setup = try Setup()
    try setup.fill(["/one"])
    let page = try MetricsPage(try setup.admin.request("GET", "/metrics").text)
    for family in [
      "gatehouse_requests_total", "gatehouse_request_duration_seconds", "gatehouse_upstream_requests_total",
      "gatehouse_cache_total", "gatehouse_cache_writes_total", "gatehouse_cache_evictions_total",
      "gatehouse_cache_bytes", "gatehouse_circuit_open", "gatehouse_connections",
    ] {
      #expect(page.types[family] != nil, "no # TYPE for \(family)")
    }
    #expect(page.value("gatehouse_cache_writes_total") >= 1)
    #expect(page.value("gatehouse_cache_bytes") > 0)
    #expect(page.samples("gatehouse_circuit_open", ["upstream": "api"]).first?.value == 0)
  }

  /// Besides the request metrics: the store's failures have metrics too, so a store that stopped
  /// persisting (a full disk) shows on a dashboard, not only in `/admin/cache`.
  @Test func metricsShowTheStoresFailureCounters() throws {
    let setup = try Setup()
    try setup.fill(["/one"])
    let page = try MetricsPage(try setup.admin.request("GET", "/metrics").text)
    for (family, type) in [
      ("gatehouse_cache_dropped_writes_total", "counter"), ("gatehouse_cache_oversize_skipped_total", "counter"),
      ("gatehouse_store_write_errors_total", "counter"), ("gatehouse_store_pending_token_writes", "gauge"),
      ("gatehouse_store_read_errors_total", "counter"), ("gatehouse_store_dropped_touches_total", "counter"),
      ("gatehouse_store_queue_depth", "gauge"),
    ] {
      #expect(page.types[family] == type, "# TYPE of \(family)")
      // The queue may hold access times just handed over; everything else stays 0 here.
      let value = page.samples(family, [:]).first?.value
      #expect(family == "gatehouse_store_queue_depth" ? value.map { $0 >= 0 } == true : value == 0, "\(family)")
    }
  }

  @Test func headOfAnEndpointHasItsLengthAndNoBody() throws {
    let setup = try Setup()
    let client = try RawClient(port: setup.admin.port)
    let authorization = [("Authorization", "Bearer \(TestConfig.adminToken)")]
    let head = try client.exchange(httpRequest("HEAD", "/admin/routes", headers: authorization), requestWasHEAD: true)
    let get = try client.exchange(httpRequest("GET", "/admin/routes", headers: authorization))

    #expect(head.status == 200)
    #expect(head.body.isEmpty)
    #expect(head.head.contentLength == Int64(get.body.count))
    #expect(get.status == 200)
    #expect(get.head.value("Cache-Control") == "no-store")
  }

  @Test func secretsNeverAppearInAdminAnswersOrMetrics() throws {
    let upstreamToken = "upstream-token-CANARY-a1b2"
    let clientKey = "client-key-CANARY-c3d4"
    let backend = try ModalBackend()
    var config = StoreTests.config(port: backend.port)
    var routes = config["routes"] as! [[String: Any]]
    routes[0]["token"] = "api"
    config["routes"] = routes
    config["tokens"] = ["api": ["type": "static", "value": upstreamToken]]
    config["clients"] = [
      "required": true, "keys": [["id": "app", "sha256": try ExternalTool.sha256Hex(clientKey)]],
    ]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let proxied = try send("GET", "/with-secrets", to: gateway.port, headers: [("X-Api-Key", clientKey)])
    try #require(admin.waitForStoredEntries(1))
    let id = try #require(try admin.allEntries().first?["id"] as? String)
    var answers: [String] = []
    for path in [
      "/admin/status", "/admin/routes", "/admin/upstreams", "/admin/cache", "/admin/cache/entries",
      "/admin/cache/entries/\(id)", "/metrics",
    ] {
      answers.append(try admin.request("GET", path).text)
    }

    #expect(proxied.status == 200)
    #expect(backend.requests.first?.head.value("Authorization") == "Bearer \(upstreamToken)")
    for (index, text) in answers.enumerated() {
      #expect(!text.contains("CANARY"), "answer \(index) shows a secret: \(text)")
      #expect(!text.contains(try ExternalTool.sha256Hex(clientKey)), "answer \(index) shows a key hash")
    }
  }
}
