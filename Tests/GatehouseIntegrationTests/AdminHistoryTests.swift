import Foundation
import Testing

/// `GET /admin/history`: the dashboard's last 15 minutes, per route and upstream, from the
/// gateway's own memory.
@Suite struct AdminHistoryTests {
  @Test func historyCountsRequestsPerRouteUpstreamAndUnmatched() throws {
    let backend = try TestBackend { request in
      request.path.hasPrefix("/items/fail") ? .respond(BackendAnswer(status: 503)) : .respond(.text("ok"))
    }
    defer { backend.stop() }
    let config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [
          TestConfig.route("items", match: "/items/*"),
          TestConfig.route(
            "hello", match: "/hello", upstream: nil, extra: ["stub": ["mode": "always", "status": 200, "body": [:]]]),
        ],
        upstreams: ["api": TestConfig.upstream(port: backend.port)]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()

    #expect(try admin.request("GET", "/admin/history", credential: .none).status == 401)
    let first = try admin.json("/admin/history")
    #expect(first["interval_s"] as? Int == 10 && first["capacity"] as? Int == 90)

    for path in ["/items/a", "/items/b", "/items/fail", "/nowhere"] { _ = try send("GET", path, to: gateway.port) }
    // A sample is taken every 10 s: wait (bounded) for the one that holds the traffic.
    var history: [String: Any] = [:]
    func series(_ key: String, _ name: String) -> [String: Any]? {
      (history[key] as? [[String: Any]])?.first { $0["name"] as? String == name }
    }
    func total(_ series: [String: Any]?, _ figure: String) -> Int {
      (series?[figure] as? [Int])?.reduce(0, +) ?? -1
    }
    let seen = waitUntil(timeout: 40, interval: .milliseconds(500)) {
      history = (try? admin.json("/admin/history")) ?? [:]
      return total(series("routes", "items"), "requests") == 3 && total(series("routes", ""), "requests") == 1
    }
    #expect(seen, "\(history)")
    let times = history["at"] as? [String] ?? []
    #expect(!times.isEmpty && times.allSatisfy { AdminAPITests.isRFC3339($0) })
    let items = series("routes", "items")
    #expect(items?["upstream"] as? String == "api")
    #expect(total(items, "5xx") == 1)
    for figure in ["requests", "5xx", "p50_ms", "p99_ms"] {
      #expect((items?[figure] as? [Any])?.count == times.count, "\(figure) lines up with at")
    }
    #expect((items?["p99_ms"] as? [Any])?.contains { $0 is Double || $0 is Int } == true)
    #expect(series("routes", "")?["upstream"] is NSNull, "unmatched requests have their own series")
    #expect(total(series("upstreams", "api"), "requests") == 3)
    #expect(total(series("upstreams", "api"), "5xx") == 1)
    #expect(total(series("routes", "hello"), "requests") == 0)
  }
}
