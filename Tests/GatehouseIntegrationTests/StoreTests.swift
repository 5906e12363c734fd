import Foundation
import Synchronization
import Testing

/// The store (Docs/clients-and-cache.md): stale answers when the backend fails, fresh hits, background
/// refreshes, what is never stored, the cache key, purges, restarts and a damaged file.
@Suite struct StoreTests {
  static let staleWarning = #"110 - "Response is Stale""#

  /// A config with one cached route (`/*`) to `port`, the admin API on, and the envelope
  /// off unless `envelope` says otherwise.
  static func config(
    port: UInt16, cache: [String: Any] = [:], envelope: [String: Any]? = nil, answerTimeoutMs: Int = 5000,
    upstreamExtra: [String: Any] = [:], clients: [String: Any]? = nil
  ) -> [String: Any] {
    var extra: [String: Any] = ["cache": cache]
    if let envelope { extra["envelope"] = envelope }
    var upstream = TestConfig.upstream(port: port, answerTimeoutMs: answerTimeoutMs)
    for (key, value) in upstreamExtra { upstream[key] = value }
    var config = TestConfig.withAdmin(
      TestConfig.make(routes: [TestConfig.route("cached", match: "/*", extra: extra)], upstreams: ["api": upstream]))
    config["store"] = ["path": "var/store.sqlite"]
    if let clients { config["clients"] = clients }
    return config
  }

  /// `store.max_bytes` applies on reload (least recently used entries go at once); the
  /// store's file and token key are kept until a restart, and the log says so.
  @Test func aReloadResizesTheStoreAndNamesWhatWaitsForARestart() throws {
    let backend = try ModalBackend()
    var config = Self.config(port: backend.port)
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    for index in 0..<4 { _ = try send("GET", "/size/\(index)", to: gateway.port) }
    let filled = waitUntil(timeout: 10) { (try? admin.json("/admin/cache")["entries"] as? Int) == 4 }
    let before = try admin.json("/admin/cache")
    let oneEntry = ((before["bytes"] as? Int) ?? 0) / 4

    // Room for one entry (they are all the same size), and a new file and key.
    config["store"] = ["path": "var/other.sqlite", "max_bytes": oneEntry + oneEntry / 2, "secret_key": "k"]
    try gateway.rewriteConfig(config)
    let reload = try admin.request("POST", "/admin/reload")
    let resized = waitUntil(timeout: 10) { (try? admin.json("/admin/cache")["entries"] as? Int) == 1 }
    let after = try admin.json("/admin/cache")

    #expect(filled && oneEntry > 0)
    #expect(reload.status == 200)
    #expect(resized)
    #expect(after["max_bytes"] as? Int == oneEntry + oneEntry / 2)
    #expect((after["evictions"] as? Int) == 3)
    #expect(!FileManager.default.fileExists(atPath: gateway.directory.appendingPathComponent("var/other.sqlite").path))
    #expect(
      gateway.waitForLogLine {
        $0["msg"] as? String == "changed settings take effect at the next start"
          && $0["keys"] as? String == "store.path, store.secret_key"
      }, "\(gateway.logLines().filter { $0["level"] as? String != "info" })")
  }

  static func cacheHeader(_ answer: ReceivedAnswer) -> String? { answer.head.value("X-Gatehouse-Cache") }

  /// Checks a stale answer: 200, `STALE`, a whole-seconds `Age`, the stale `Warning`.
  static func expectStale(
    _ answer: ReceivedAnswer, body: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    #expect(answer.status == 200, sourceLocation: sourceLocation)
    #expect(cacheHeader(answer) == "STALE", sourceLocation: sourceLocation)
    #expect(answer.text == body, sourceLocation: sourceLocation)
    #expect(answer.head.value("Age").flatMap { Int($0) }.map { $0 >= 0 } == true, sourceLocation: sourceLocation)
    #expect(answer.head.values("Warning") == [staleWarning], sourceLocation: sourceLocation)
    #expect(answer.head.contentLength == Int64(answer.body.count), sourceLocation: sourceLocation)
  }

  /// Fills the store with one answer for `path`: a MISS, then waits until it is on disk.
  static func prime(_ path: String, gateway: GatewayProcess, admin: AdminClient, entries: Int = 1) throws
    -> ReceivedAnswer
  {
    let first = try send("GET", path, to: gateway.port)
    #expect(first.status == 200)
    #expect(cacheHeader(first) == "MISS")
    try #require(admin.waitForStoredEntries(entries))
    return first
  }

  // MARK: Stale if error

  @Test func staleAnswerWhenTheBackendIsRefused() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try Self.prime("/items/1", gateway: gateway, admin: admin)
    backend.stop()
    sleep(for: .milliseconds(1100))  // so the answer is at least a second old
    let stale = try send("GET", "/items/1", to: gateway.port)

    Self.expectStale(stale, body: first.text)
    #expect(stale.head.value("Age").flatMap { Int($0) }.map { $0 >= 1 } == true)
    #expect(first.text == #"{"target":"/items/1","version":1,"lang":""}"#)
    #expect(first.head.value("Age") == nil)
    #expect(!first.head.has("Warning"))
  }

  @Test func staleAnswerWhenTheBackendAnswers503() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try Self.prime("/items/2", gateway: gateway, admin: admin)
    backend.mode.value = .failing
    let stale = try send("GET", "/items/2", to: gateway.port)

    Self.expectStale(stale, body: first.text)
    #expect(backend.requests.count == 2)
    #expect(try admin.json("/admin/cache")["stale_served"] as? Int == 1)
    // A path never stored gets the backend's error.
    let other = try send("GET", "/items/3", to: gateway.port)
    #expect(other.status == 503)
    #expect(Self.cacheHeader(other) == "MISS")
    // The stand-in says why it was served; the backend's own 503 is its answer, no reason.
    #expect(waitUntil { gateway.accessLines().count >= 3 })
    #expect(gateway.accessLines().map { $0["reason"] as? String } == [nil, "upstream_error", nil])
  }

  @Test func staleAnswerWhenTheBackendTimesOut() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, answerTimeoutMs: 300))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try Self.prime("/slow", gateway: gateway, admin: admin)
    backend.mode.value = .hanging
    let stale = try send("GET", "/slow", to: gateway.port)
    backend.gate.open()

    Self.expectStale(stale, body: first.text)
  }

  @Test func staleAnswerWhenTheBackendResets() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try Self.prime("/reset", gateway: gateway, admin: admin)
    backend.mode.value = .resetting
    Self.expectStale(try send("GET", "/reset", to: gateway.port), body: first.text)
  }

  @Test func answerOlderThanStaleIfErrorIsNotServed() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, cache: ["stale_if_error_s": 1]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    _ = try Self.prime("/old", gateway: gateway, admin: admin)
    backend.stop()
    sleep(for: .milliseconds(2100))
    let answer = try send("GET", "/old", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
    #expect(Self.cacheHeader(answer) != "STALE")
  }

  @Test func envelopeIsAppliedToStaleAnswersAndTheStoreKeepsTheRawAnswer() throws {
    let backend = try ModalBackend()
    let config = Self.config(port: backend.port, envelope: ["enabled": true, "key_path": "target"])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try Self.prime("/wrapped", gateway: gateway, admin: admin)
    backend.stop()
    let stale = try send("GET", "/wrapped", to: gateway.port)

    expectJSONAnswer(first, status: 200, body: successEnvelope(#""/wrapped""#))
    expectJSONAnswer(stale, status: 200, body: successEnvelope(#""/wrapped""#))
    Self.expectStale(stale, body: successEnvelope(#""/wrapped""#))
    let entry = try #require(try admin.allEntries().first)
    let stored = try admin.json("/admin/cache/entries/\(try #require(entry["id"] as? String))")
    #expect(stored["body"] as? String == #"{"target":"/wrapped","version":1,"lang":""}"#)
  }

  // MARK: Fresh and stale-while-revalidate

  @Test func freshAnswersAreHitsWithoutAskingTheBackend() throws {
    let backend = try ModalBackend()
    // An Age from a cache in front of the backend is where the answer's age started (RFC
    // 9111 §4.2.3): the gateway says how old it is now, once, that Age included.
    backend.extraHeaders.value = [("Age", "500"), ("Warning", "199 - \"old\"")]
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }

    let answers = try (0..<3).map { _ in try send("GET", "/fresh", to: gateway.port) }

    #expect(answers.map(Self.cacheHeader) == ["MISS", "HIT", "HIT"])
    // Answers from the store say how old they are (RFC 9111 §5.1).
    #expect(answers.dropFirst().allSatisfy { $0.head.values("Age").count == 1 && $0.head.values("Warning").isEmpty })
    #expect(answers.dropFirst().allSatisfy { ($0.head.value("Age").flatMap { Int($0) } ?? 0) >= 500 })
    #expect(answers.dropFirst().allSatisfy { ($0.head.value("Age").flatMap { Int($0) } ?? 1000) < 600 })
    #expect(Set(answers.map(\.text)).count == 1)
    #expect(answers.allSatisfy { $0.status == 200 && $0.head.contentLength == Int64($0.body.count) })
    #expect(backend.requests.count == 1)
  }

  /// An upstream Age that is not delta-seconds is ignored; a huge one is capped (ten years)
  /// instead of overflowing the sum.
  @Test(arguments: [("99999999999999999999", 315_360_000), ("-5", 0), ("1e3", 0)])
  func upstreamAgesAreBoundedAndValidated(sent: String, initial: Int) throws {
    let backend = try ModalBackend()
    backend.extraHeaders.value = [("Age", sent)]
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }

    _ = try send("GET", "/aged", to: gateway.port)
    let hit = try send("GET", "/aged", to: gateway.port)

    #expect(Self.cacheHeader(hit) == "HIT")
    let age = try #require(hit.head.value("Age").flatMap { Int($0) })
    #expect(age >= initial && age < initial + 60, "Age \(age)")
  }

  @Test func staleWhileRevalidateServesStaleAndRefreshesOnce() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, cache: ["fresh_s": 0, "stale_while_revalidate_s": 60]))
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/swr", to: gateway.port)
    let hold = Gate()
    backend.holdHealthy.value = hold
    backend.version.value = 2
    let stale = try (0..<3).map { _ in try send("GET", "/swr", to: gateway.port) }

    #expect(Self.cacheHeader(first) == "MISS")
    #expect(stale.map(Self.cacheHeader) == ["STALE", "STALE", "STALE"])
    #expect(stale.allSatisfy { $0.text == first.text })
    #expect(stale.allSatisfy { $0.head.values("Warning") == [Self.staleWarning] })
    #expect(backend.server.waitForRequests(2))
    sleep(for: .milliseconds(300))  // room for a second refresh, which must not come
    #expect(backend.requests.count == 2, "one refresh while it is in flight")

    hold.open()
    backend.holdHealthy.value = nil
    // The refreshed answer is served next.
    var latest = ""
    let refreshed = waitUntil(timeout: 10, interval: .milliseconds(50)) {
      latest = (try? send("GET", "/swr", to: gateway.port).text) ?? ""
      return latest.contains(#""version":2"#)
    }
    #expect(refreshed, "last answer: \(latest)")
  }

  /// Background refreshes count like a client's requests: a failing route's circuit
  /// (5xx counted, `count_5xx`) opens after `failures` of them, and no refresh goes out while it is open (nor takes its
  /// trial); they show in the upstream metrics.
  @Test func backgroundRefreshesCountForTheCircuitAndStopWhileItIsOpen() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port, cache: ["fresh_s": 0, "stale_while_revalidate_s": 60],
        upstreamExtra: ["circuit": ["failures": 3, "open_ms": 60_000, "count_5xx": true]]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try send("GET", "/swr", to: gateway.port)
    #expect(Self.cacheHeader(first) == "MISS")
    backend.mode.value = .failing
    // Each request is answered from the store and starts a refresh when none is running.
    var opened = false
    for _ in 0..<40 where !opened {
      let answer = try send("GET", "/swr", to: gateway.port)
      #expect(answer.text == first.text)
      sleep(for: .milliseconds(40))
      opened = try admin.openRoutes(of: "api")?.isEmpty == false
    }
    #expect(opened)
    let askedWhenOpened = backend.requests.count
    for _ in 0..<10 { _ = try send("GET", "/swr", to: gateway.port) }
    sleep(for: .milliseconds(300))
    #expect(askedWhenOpened == 4, "the first request and three failed refreshes")
    #expect(backend.requests.count == askedWhenOpened)
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_upstream_requests_total", ["upstream": "api", "outcome": "response"]) == 4)
  }

  /// A background refresh stores only what a client's request would: a 2xx with broken
  /// JSON leaves the last good answer in place.
  @Test func aBackgroundRefreshNeverStoresAnAnswerWithBrokenJSON() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port, cache: ["fresh_s": 0, "stale_while_revalidate_s": 60], envelope: ["enabled": true]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let first = try Self.prime("/swr-broken", gateway: gateway, admin: admin)

    backend.mode.value = .invalidJSON
    let whileRefreshing = try send("GET", "/swr-broken", to: gateway.port)
    #expect(backend.server.waitForRequests(2))
    sleep(for: .milliseconds(500))  // a write of the refreshed answer, had there been one, lands
    let after = try send("GET", "/swr-broken", to: gateway.port)

    #expect(whileRefreshing.text == first.text)
    #expect(Self.cacheHeader(after) == "STALE")
    #expect(after.text == first.text, "\(after.text)")
  }

  // MARK: What is never stored

  /// The kinds of answer Docs/clients-and-cache.md never stores.
  enum Unstorable: String, CaseIterable, Sendable {
    case post, notFound, noStore, privateAnswer, setCookie
  }

  @Test(arguments: Unstorable.allCases)
  func unstorableAnswersAreNeverStored(kind: Unstorable) throws {
    let backend = try TestBackend { request in
      switch (kind, request.path) {
      case (_, "/control"): return jsonAnswer(#"{"control":true}"#)
      case (.notFound, _): return jsonAnswer(#"{"error":"none"}"#, status: 404, reason: "Not Found")
      case (.noStore, _): return jsonAnswer("{}", headers: [("Cache-Control", "max-age=60, no-store")])
      case (.privateAnswer, _): return jsonAnswer("{}", headers: [("Cache-Control", "private")])
      case (.setCookie, _): return jsonAnswer("{}", headers: [("Set-Cookie", "sid=1; HttpOnly")])
      case (.post, _): return jsonAnswer(#"{"created":true}"#)
      }
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let method = kind == .post ? "POST" : "GET"

    let answers = try (0..<2).map { _ in try send(method, "/thing", to: gateway.port, body: kind == .post ? [] : nil) }
    // A storable answer afterwards: once it is on disk, anything queued before it is too.
    _ = try send("GET", "/control", to: gateway.port)
    try #require(admin.waitForStoredEntries(1))

    #expect(backend.requests.filter { $0.path == "/thing" }.count == 2)
    #expect(answers.map(Self.cacheHeader) == Array(repeating: kind == .post ? "BYPASS" : "MISS", count: 2))
    let entries = try admin.allEntries()
    #expect(entries.map { $0["path"] as? String } == ["/control"])
  }

  /// Docs/clients-and-cache.md keeps the *last* good answer: when the backend's newest good answer is one the
  /// store may not keep, the older stored one is superseded and never served stale.
  @Test(arguments: [("Cache-Control", "no-store"), ("Cache-Control", "private"), ("Set-Cookie", "sid=2")])
  func anAnswerTheStoreMayNotKeepRemovesTheOneItSupersedes(header: (String, String)) throws {
    let calls = Atomic<Int>(0)
    let backend = try TestBackend { request in
      if request.path == "/control" { return jsonAnswer(#"{"control":true}"#) }
      switch calls.add(1, ordering: .relaxed).newValue {
      case 1: return jsonAnswer(#"{"version":1}"#)
      case 2: return jsonAnswer(#"{"version":2}"#, headers: [header])
      default: return jsonAnswer(#"{"error":"down"}"#, status: 503, reason: "Service Unavailable")
      }
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    _ = try Self.prime("/doc", gateway: gateway, admin: admin)

    let newer = try send("GET", "/doc", to: gateway.port)
    #expect(newer.text == #"{"version":2}"#)
    // A storable answer afterwards: once it is on disk, the removal queued before it is done.
    _ = try send("GET", "/control", to: gateway.port)
    #expect(waitUntil { (try? admin.allEntries().map { $0["path"] as? String }) == ["/control"] })
    let duringOutage = try send("GET", "/doc", to: gateway.port)

    #expect(duringOutage.status == 503)
    #expect(Self.cacheHeader(duringOutage) == "MISS")
    #expect(!duringOutage.text.contains("version"))
  }

  // MARK: The cache key

  @Test func varyHeaderValuesGiveSeparateEntries() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, cache: ["fresh_s": 60, "vary": ["Accept-Language"]]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let sequence: [String?] = ["en", "fr", "en", "fr", nil, nil]
    let answers = try sequence.map { lang in
      try send("GET", "/greeting", to: gateway.port, headers: lang.map { [("Accept-Language", $0)] } ?? [])
    }

    #expect(answers.map(Self.cacheHeader) == ["MISS", "MISS", "HIT", "HIT", "MISS", "HIT"])
    #expect(answers.map { $0.text.contains(#""lang":"en""#) } == [true, false, true, false, false, false])
    #expect(answers.map { $0.text.contains(#""lang":"fr""#) } == [false, true, false, true, false, false])
    #expect(backend.requests.count == 3)
    #expect(admin.waitForStoredEntries(3))
    #expect(Set(try admin.allEntries().compactMap { $0["id"] as? String }).count == 3)
  }

  @Test func queryOrderDoesNotMatterToTheKey() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try send("GET", "/search?b=2&a=1", to: gateway.port)
    let sorted = try send("GET", "/search?a=1&b=2", to: gateway.port)
    let different = try send("GET", "/search?a=1&b=3", to: gateway.port)

    #expect(Self.cacheHeader(first) == "MISS")
    #expect(Self.cacheHeader(sorted) == "HIT")
    #expect(sorted.text == first.text)
    #expect(Self.cacheHeader(different) == "MISS")
    #expect(backend.requests.map(\.target) == ["/search?b=2&a=1", "/search?a=1&b=3"])
    #expect(admin.waitForStoredEntries(2))
    #expect(try admin.allEntries().count == 2)
  }

  @Test func storeStaysUnderMaxBytesByEvictingTheLeastRecentlyUsed() throws {
    let backend = try ModalBackend()
    backend.extraHeaders.value = [("X-Padding", String(repeating: "p", count: 400))]
    var config = Self.config(port: backend.port)
    config["store"] = ["path": "var/store.sqlite", "max_bytes": 2500]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    for index in 1...12 {
      _ = try send("GET", "/e/\(index)", to: gateway.port)
      // One at a time, so "least recently used" follows the request order.
      try #require(waitUntil { ((try? admin.json("/admin/cache")["writes"] as? Int) ?? 0) >= index })
    }
    let stats = try admin.json("/admin/cache")
    let paths = try admin.allEntries().compactMap { $0["path"] as? String }

    #expect((stats["bytes"] as? Int).map { $0 > 0 && $0 <= 2500 } == true, "\(stats)")
    #expect((stats["evictions"] as? Int).map { $0 >= 1 } == true, "\(stats)")
    #expect(stats["entries"] as? Int == paths.count)
    #expect(paths.count < 12)
    #expect(paths.contains("/e/12"))
    #expect(!paths.contains("/e/1"))
  }

  // MARK: Restart, purge, damaged file

  @Test func restartDuringAnOutageStillServesStale() throws {
    let backend = try ModalBackend()
    let config = Self.config(port: backend.port)
    let directory = try GatewayProcess.makeTestDirectory()
    let firstGateway = try GatewayProcess.start(config: config, in: directory)
    let admin = try firstGateway.admin(token: TestConfig.adminToken)
    let first = try Self.prime("/survives", gateway: firstGateway, admin: admin)
    firstGateway.stopExpectingCleanExit()
    backend.stop()

    let secondGateway = try GatewayProcess.start(config: config, in: directory)
    defer { secondGateway.stopExpectingCleanExit() }
    let stale = try send("GET", "/survives", to: secondGateway.port)

    Self.expectStale(stale, body: first.text)
    withExtendedLifetime(firstGateway) {}
  }

  @Test func purgeRemovesStoredAnswersSoAnOutageIs502() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try Self.prime("/purged", gateway: gateway, admin: admin)
    backend.stop()
    Self.expectStale(try send("GET", "/purged", to: gateway.port), body: first.text)
    let purge = try admin.request("DELETE", "/admin/cache")
    let after = try send("GET", "/purged", to: gateway.port)

    #expect(purge.status == 200)
    #expect(try purge.jsonObject()["purged"] as? Int == 1)
    #expect(isErrorEnvelope(after, status: 502, message: "upstream unavailable"))
    // The gateway's own error on a cached route still says where the answer came from.
    #expect(Self.cacheHeader(after) == "MISS")
  }

  /// A 2xx whose JSON is broken is the backend's failure: it never replaces the last good
  /// answer, which stands in for it (Docs/clients-and-cache.md keeps the last *good* answer).
  @Test func invalidJSONIsNeverStoredAndTheLastGoodAnswerStandsIn() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: Self.config(port: backend.port, envelope: ["enabled": true]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let first = try Self.prime("/ij", gateway: gateway, admin: admin)

    backend.mode.value = .invalidJSON
    let broken = try send("GET", "/ij", to: gateway.port)
    let neverStored = try send("GET", "/ij-new", to: gateway.port)
    backend.stop()
    let outage = try send("GET", "/ij", to: gateway.port)

    Self.expectStale(broken, body: first.text)
    #expect(isErrorEnvelope(neverStored, status: 502, message: "upstream sent invalid JSON"))
    #expect(Self.cacheHeader(neverStored) == "MISS")
    Self.expectStale(outage, body: first.text)
    #expect(try admin.json("/admin/cache")["entries"] as? Int == 1)
  }

  @Test func corruptStoreFileIsMovedAsideAndTheGatewayServes() throws {
    let backend = try ModalBackend()
    let directory = try GatewayProcess.makeTestDirectory()
    let varDirectory = directory.appendingPathComponent("var")
    try FileManager.default.createDirectory(at: varDirectory, withIntermediateDirectories: true)
    let garbage = [UInt8]((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 17) })
    try Data(Array("this is not a SQLite database\n".utf8) + garbage).write(
      to: varDirectory.appendingPathComponent("store.sqlite"))

    let gateway = try GatewayProcess.start(config: Self.config(port: backend.port), in: directory)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    #expect(gateway.logLines().contains { $0["level"] as? String == "warn" && $0["msg"] as? String == "store" })
    let names = try FileManager.default.contentsOfDirectory(atPath: varDirectory.path)
    #expect(names.contains { $0.hasPrefix("store.sqlite.corrupt-") }, "files: \(names)")
    let first = try Self.prime("/after-corruption", gateway: gateway, admin: admin)
    backend.stop()
    Self.expectStale(try send("GET", "/after-corruption", to: gateway.port), body: first.text)
  }

  @Test func storedBodyDamagedOnDiskIsNeverServed() throws {
    let backend = try ModalBackend()
    let config = Self.config(port: backend.port)
    let directory = try GatewayProcess.makeTestDirectory()
    let firstGateway = try GatewayProcess.start(config: config, in: directory)
    let first = try Self.prime(
      "/rotted", gateway: firstGateway, admin: try firstGateway.admin(token: TestConfig.adminToken))
    firstGateway.stopExpectingCleanExit()  // checkpoints: the row is in the main file now
    backend.stop()
    // One bit of the stored body changes, as on a bad disk block: SQLite keeps no checksums
    // of its own, so the row still reads without an error.
    let file = directory.appendingPathComponent("var/store.sqlite")
    var bytes = [UInt8](try Data(contentsOf: file))
    let found = try #require(bytes.firstRange(of: first.body))
    #expect(bytes[found.upperBound...].firstRange(of: first.body) == nil, "the body is stored once")
    bytes[found.lowerBound + first.body.count / 2] ^= 0x01
    try Data(bytes).write(to: file)

    let gateway = try GatewayProcess.start(config: config, in: directory)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let answer = try send("GET", "/rotted", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 502, message: "upstream unavailable"))
    #expect(Self.cacheHeader(answer) != "STALE")
    let removed = waitUntil(timeout: 10, interval: .milliseconds(25)) {
      guard let stats = try? admin.json("/admin/cache") else { return false }
      return stats["entries"] as? Int == 0 && stats["read_errors"] as? Int == 1
    }
    #expect(removed, "\((try? admin.json("/admin/cache")) ?? [:])")
  }

  /// A store file moved away (or deleted) while the gateway runs: a loop that cannot open
  /// its reader answers misses, counted in `read_errors` and logged once; once the file is
  /// back, it opens the reader again and serves stored answers without a restart.
  @Test func aStoreFileMovedAwayAndBackIsReadAgainWithoutARestart() throws {
    let backend = try ModalBackend()
    // One worker: the loop that failed is the one that must recover.
    let gateway = try GatewayProcess(config: Self.config(port: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    // Without fresh_s the loop reads the store only when the backend fails: its reader is
    // not open yet when the file goes.
    let first = try Self.prime("/moved", gateway: gateway, admin: admin)
    sleep(for: .milliseconds(1100))  // past the loop's memory of what it just wrote
    let file = gateway.directory.appendingPathComponent("var/store.sqlite")
    let away = gateway.directory.appendingPathComponent("var/away.sqlite")
    try FileManager.default.moveItem(at: file, to: away)

    backend.mode.value = .failing
    let during = try send("GET", "/moved", to: gateway.port)
    #expect(during.status == 503)
    #expect(Self.cacheHeader(during) == "MISS")
    #expect((try admin.json("/admin/cache")["read_errors"] as? Int).map { $0 >= 1 } == true)
    func isReaderWarning(_ line: [String: Any]) -> Bool {
      line["level"] as? String == "warn" && (line["msg"] as? String)?.hasPrefix("cannot open a store reader") == true
    }
    #expect(gateway.waitForLogLine(isReaderWarning))

    try FileManager.default.moveItem(at: away, to: file)
    var last: ReceivedAnswer?
    let served = try waitUntil(timeout: 60, interval: .milliseconds(100)) {
      let answer = try send("GET", "/moved", to: gateway.port)
      last = answer
      return Self.cacheHeader(answer) == "STALE"
    }

    #expect(served, "last answer: \(last.map { "\($0.status) \(Self.cacheHeader($0) ?? "-")" } ?? "none")")
    if served, let last { Self.expectStale(last, body: first.text) }
    #expect(gateway.waitForLogLine { $0["level"] as? String == "info" && $0["msg"] as? String == Self.readerBack })
    #expect(gateway.logLines().filter(isReaderWarning).count == 1, "one warning, not one per lookup")
  }

  static let readerBack = "store reader open again; stored answers are served again"
}

/// Stale answers in their other forms: HEAD, and a stored gzip body served through the
/// envelope (decoded, and compressed again for a client that asks).
@Suite struct StaleFormsTests {
  @Test func headDuringAnOutageGetsTheStaleHeadWithoutABody() throws {
    let backend = try ModalBackend()
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, envelope: ["enabled": true]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try StoreTests.prime("/h", gateway: gateway, admin: admin)
    backend.stop()
    let client = try RawClient(port: gateway.port)
    let head = try client.exchange(httpRequest("HEAD", "/h"), requestWasHEAD: true)
    let get = try client.exchange(httpRequest("GET", "/h"))

    #expect(head.status == 200)
    #expect(head.body.isEmpty)
    #expect(head.head.value("X-Gatehouse-Cache") == "STALE")
    #expect(head.head.contentLength == Int64(first.body.count))
    StoreTests.expectStale(get, body: first.text)
  }

  @Test func storedGzipAnswerIsDecodedWrappedAndCompressedAgainWhenStale() throws {
    let items = "[" + (0..<150).map { #"{"id":\#($0),"label":"stored item \#($0)"}"# }.joined(separator: ",") + "]"
    let compressed = try ExternalTool.gzip(Array(items.utf8))
    let up = Shared(true)
    let backend = try TestBackend { _ in
      guard up.value else { return jsonAnswer(#"{"error":"down"}"#, status: 503, reason: "Service Unavailable") }
      return .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")], body: .bytes(compressed)))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, envelope: ["enabled": true]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try StoreTests.prime("/zipped", gateway: gateway, admin: admin)
    up.value = false
    let plain = try send("GET", "/zipped", to: gateway.port)
    let zipped = try send("GET", "/zipped", to: gateway.port, headers: [("Accept-Encoding", "gzip")])

    expectJSONAnswer(first, status: 200, body: successEnvelope(items))
    StoreTests.expectStale(plain, body: successEnvelope(items))
    #expect(zipped.head.value("X-Gatehouse-Cache") == "STALE")
    #expect(zipped.head.value("Content-Encoding") == "gzip")
    #expect(zipped.head.contentLength == Int64(zipped.body.count))
    #expect(String(decoding: try ExternalTool.gunzip(zipped.body), as: UTF8.self) == successEnvelope(items))
  }
}
