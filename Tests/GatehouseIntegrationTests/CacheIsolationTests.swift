import Foundation
import Testing

/// One client's answer never reaches another through the store or a shared exchange
/// (RFC 9111 §3.5, §4.1): requests with credentials of the client's own, answers whose
/// `Vary` the key does not hold, routes that send different tokens or fields, a key that
/// must not depend on what the loop saw before; and answers the upstream forbade to reuse
/// (`no-cache`) or to serve stale (`must-revalidate`), and gzip for clients without it.
@Suite struct CacheIsolationTests {
  /// Answers `{"n":<count>,"auth":…,"cookie":…,"user":…,"lang":…}` echoing what it got;
  /// `?h=Name:Value` adds an answer field; `up` false answers 503; `holdMs` holds answers.
  final class EchoBackend: Sendable {
    let up = Shared(true)
    let holdMs = Shared(0)
    let count = Shared(0)
    let server: TestBackend

    init() throws {
      let (up, holdMs, count) = (self.up, self.holdMs, self.count)
      server = try TestBackend { request in
        guard up.value else { return jsonAnswer(#"{"error":"down"}"#, status: 503, reason: "Service Unavailable") }
        if holdMs.value > 0 { Thread.sleep(forTimeInterval: Double(holdMs.value) / 1000) }
        let n = count.update { value -> Int in
          value += 1
          return value
        }
        var headers = [("Content-Type", "application/json")]
        for part in (request.target.split(separator: "?").dropFirst().first ?? "").split(separator: "&")
        where part.hasPrefix("h=") {
          let field = (part.dropFirst(2).removingPercentEncoding ?? "").split(separator: ":", maxSplits: 1)
          if field.count == 2 { headers.append((String(field[0]), String(field[1]))) }
        }
        func echo(_ name: String) -> String { request.head.value(name) ?? "" }
        let body =
          #"{"n":\#(n),"auth":"\#(echo("Authorization"))","cookie":"\#(echo("Cookie"))","user":"\#(echo("X-User"))","#
          + #""lang":"\#(echo("Accept-Language"))\#(echo("Accept_Language"))"}"#
        return .respond(BackendAnswer(headers: headers, body: .bytes(Array(body.utf8))))
      }
    }

    var port: UInt16 { server.port }
    func stop() { server.stop() }
  }

  static func config(port: UInt16, routes: [[String: Any]]) -> [String: Any] {
    var config = TestConfig.withAdmin(
      TestConfig.make(routes: routes, upstreams: ["api": TestConfig.upstream(port: port, answerTimeoutMs: 5000)]))
    config["store"] = ["path": "var/store.sqlite"]
    config["tokens"] = [
      "a": ["type": "static", "value": "token-A-1234"], "b": ["type": "static", "value": "token-B-5678"],
    ]
    return config
  }

  static func cached(
    _ name: String, _ match: String, path: String? = nil, cache: [String: Any], extra: [String: Any] = [:]
  )
    -> [String: Any]
  {
    var members = extra
    members["cache"] = cache
    return TestConfig.route(name, match: match, rewrite: path, extra: members)
  }

  static func field(_ answer: ReceivedAnswer, _ name: String) -> String? {
    (try? answer.jsonObject())?[name] as? String
  }

  @Test func requestsWithTheClientsOwnCredentialsNeitherReadNorFeedTheStore() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port,
        routes: [
          Self.cached("keyed", "/k/*", cache: ["fresh_s": 60, "vary": ["Authorization"]]),
          Self.cached("open", "/*", cache: ["fresh_s": 60]),
        ]))
    defer { gateway.stopExpectingCleanExit() }

    var seen: [String] = []
    for (name, value) in [("Authorization", "Bearer alice"), ("Cookie", "sid=alice"), ("X-Api-Key", "alice-key")] {
      let alice = try send("GET", "/me", to: gateway.port, headers: [(name, value)])
      let bob = try send(
        "GET", "/me", to: gateway.port, headers: [(name, value.replacingOccurrences(of: "alice", with: "bob"))])
      let anonymous = try send("GET", "/me", to: gateway.port)
      #expect(StoreTests.cacheHeader(alice) == "BYPASS", "\(name)")
      #expect(StoreTests.cacheHeader(bob) == "BYPASS", "\(name)")
      #expect(!bob.text.contains("alice"), "\(name): \(bob.text)")
      #expect(!anonymous.text.contains("alice") && !anonymous.text.contains("bob"), "\(name): \(anonymous.text)")
      seen.append(anonymous.text)
    }
    // The anonymous answers are shared as usual (the first was stored, the others are hits).
    #expect(Set(seen).count == 1)

    // A route whose key holds Authorization caches per credential.
    let answers = try ["alice", "bob", "alice"].map {
      try send("GET", "/k/me", to: gateway.port, headers: [("Authorization", "Bearer \($0)")])
    }
    #expect(answers.map(StoreTests.cacheHeader) == ["MISS", "MISS", "HIT"])
    #expect(Self.field(answers[1], "auth") == "Bearer bob")
    #expect(Self.field(answers[2], "auth") == "Bearer alice")

    // Nothing of alice's stands in during an outage either.
    backend.up.value = false
    let outage = try send("GET", "/other", to: gateway.port, headers: [("Authorization", "Bearer alice")])
    #expect(outage.status == 503)
  }

  @Test func concurrentRequestsWithDifferentCredentialsDoNotShareAnExchange() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    backend.holdMs.value = 500
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [Self.cached("open", "/*", cache: ["stale_if_error_s": 60])]))
    defer { gateway.stopExpectingCleanExit() }

    let results = Shared<[String: String]>([:])
    let threads = ["alice", "bob"].map { user in
      Thread {
        let answer = try? send("GET", "/slow", to: gateway.port, headers: [("Authorization", "Bearer \(user)")])
        results.update { $0[user] = answer.flatMap { Self.field($0, "auth") } ?? "none" }
      }
    }
    threads.forEach { $0.start() }
    #expect(waitUntil(timeout: 20) { results.value.count == 2 })
    #expect(results.value == ["alice": "Bearer alice", "bob": "Bearer bob"])
    #expect(backend.count.value == 2)
  }

  @Test func answersWhoseVaryTheKeyDoesNotHoldAreNotShared() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [Self.cached("open", "/*", cache: ["fresh_s": 60])]))
    defer { gateway.stopExpectingCleanExit() }

    for vary in ["X-User", "*", "Accept-Language, X-User"] {
      let target = "/v?h=" + "Vary:\(vary)".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
      let first = try send("GET", target, to: gateway.port, headers: [("X-User", "alice")])
      let second = try send("GET", target, to: gateway.port, headers: [("X-User", "bob")])
      // X-User is not in the key, so it does not reach the upstream on a request whose
      // answer may be shared; and alice's answer is never bob's.
      #expect(Self.field(second, "user") == "", "Vary: \(vary)")
      #expect(!second.text.contains("alice"), "Vary: \(vary)")
      #expect([first, second].map(StoreTests.cacheHeader) == ["MISS", "MISS"], "Vary: \(vary)")
    }
    // Vary: Accept-Encoding is the gateway's own business (each client gets its coding).
    let target = "/ae?h=Vary%3AAccept-Encoding"
    let answers = try (0..<2).map { _ in try send("GET", target, to: gateway.port) }
    #expect(answers.map(StoreTests.cacheHeader) == ["MISS", "HIT"])
  }

  @Test func routesThatSendDifferentTokensOrFieldsKeepApartEntries() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    let cache: [String: Any] = ["stale_if_error_s": 60]
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port,
        routes: [
          Self.cached("ta", "/ta/*", path: "/shared/*", cache: cache, extra: ["token": "a"]),
          Self.cached("tb", "/tb/*", path: "/shared/*", cache: cache, extra: ["token": "b"]),
          Self.cached("ha", "/ha/*", path: "/hshared/*", cache: cache, extra: ["headers": ["set": ["X-User": "a"]]]),
          Self.cached("hb", "/hb/*", path: "/hshared/*", cache: cache, extra: ["headers": ["set": ["X-User": "b"]]]),
        ]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()

    #expect(Self.field(try send("GET", "/ta/report", to: gateway.port), "auth") == "Bearer token-A-1234")
    #expect(Self.field(try send("GET", "/ha/report", to: gateway.port), "user") == "a")
    #expect(admin.waitForStoredEntries(2))
    backend.up.value = false

    #expect(try send("GET", "/tb/report", to: gateway.port).status == 503)
    #expect(try send("GET", "/hb/report", to: gateway.port).status == 503)
    #expect(StoreTests.cacheHeader(try send("GET", "/ta/report", to: gateway.port)) == "STALE")
    // The key names the token, never a set value (values may be secrets).
    let listed = try admin.request("GET", "/admin/cache/entries").text
    #expect(!listed.contains("token-A-1234"))
  }

  /// Two routes on one path keyed on different fields that carry equal values, and the
  /// same route before and after a reload that changes its `vary`, are different keys.
  @Test func theKeyDependsOnTheVaryNamesNotOnlyTheirValues() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port,
        routes: [
          Self.cached("vx", "/vx/*", path: "/vshared/*", cache: ["fresh_s": 60, "vary": ["Accept-Language"]]),
          Self.cached("vy", "/vy/*", path: "/vshared/*", cache: ["fresh_s": 60, "vary": ["X-User"]]),
        ]))
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/vx/doc", to: gateway.port, headers: [("Accept-Language", "alice")])
    let second = try send("GET", "/vy/doc", to: gateway.port, headers: [("X-User", "alice")])
    #expect(StoreTests.cacheHeader(first) == "MISS")
    #expect(StoreTests.cacheHeader(second) == "MISS")
    #expect(Self.field(second, "user") == "alice")
  }

  @Test func answersTheUpstreamForbadeToReuseOrServeStaleAreNot() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [Self.cached("open", "/*", cache: ["fresh_s": 1])]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()

    let noCache = try (0..<2).map { _ in try send("GET", "/nc?h=Cache-Control%3Ano-cache", to: gateway.port) }
    #expect(noCache.map(StoreTests.cacheHeader) == ["MISS", "MISS"])
    #expect(Set(noCache.map(\.text)).count == 2)

    // must-revalidate: fresh for `fresh_s` (the operator's freshness), never served stale.
    for directive in ["must-revalidate", "proxy-revalidate", "s-maxage=30"] {
      let target =
        "/mr-\(directive.prefix(3))?h=" + "Cache-Control:\(directive)".addingPercentEncoding(
          withAllowedCharacters: .alphanumerics)!
      let answers = try (0..<2).map { _ in try send("GET", target, to: gateway.port) }
      #expect(answers.map(StoreTests.cacheHeader) == ["MISS", "HIT"], "\(directive)")
    }
    let plain = try send("GET", "/plain", to: gateway.port)
    #expect(StoreTests.cacheHeader(plain) == "MISS")
    #expect(admin.waitForStoredEntries(4))
    sleep(for: .milliseconds(1200))
    backend.up.value = false
    for directive in ["must-revalidate", "proxy-revalidate", "s-maxage=30"] {
      let target =
        "/mr-\(directive.prefix(3))?h=" + "Cache-Control:\(directive)".addingPercentEncoding(
          withAllowedCharacters: .alphanumerics)!
      #expect(try send("GET", target, to: gateway.port).status == 503, "\(directive)")
    }
    #expect(StoreTests.cacheHeader(try send("GET", "/plain", to: gateway.port)) == "STALE")
  }

  /// On a pass-through route, clients that take gzip and clients that do not keep their own
  /// entries: neither gets the other's coding, and no kept body is inflated per answer.
  @Test func gzipAndPlainClientsKeepTheirOwnEntriesOnPassThroughRoutes() throws {
    let plain = #"{"items":"\#(String(repeating: "x", count: 400))"}"#
    let compressed = try ExternalTool.gzip(Array(plain.utf8))
    let backend = try TestBackend { request in
      let gzip = request.head.value("Accept-Encoding")?.contains("gzip") == true
      var headers = [("Content-Type", "application/json"), ("Vary", "Accept-Encoding")]
      if gzip { headers.append(("Content-Encoding", "gzip")) }
      return .respond(BackendAnswer(headers: headers, body: .bytes(gzip ? compressed : Array(plain.utf8))))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(port: backend.port, routes: [Self.cached("raw", "/*", cache: ["fresh_s": 60])]))
    defer { gateway.stopExpectingCleanExit() }

    let zipped = try (0..<2).map { _ in try send("GET", "/z", to: gateway.port, headers: [("Accept-Encoding", "gzip")])
    }
    let identity = try send("GET", "/z", to: gateway.port, headers: [("Accept-Encoding", "identity")])
    let none = try send("GET", "/z", to: gateway.port)
    #expect(zipped.map(StoreTests.cacheHeader) == ["MISS", "HIT"])
    #expect(zipped.allSatisfy { $0.head.value("Content-Encoding") == "gzip" && $0.body == compressed })
    #expect([identity, none].map(StoreTests.cacheHeader) == ["MISS", "HIT"])
    for answer in [identity, none] {
      #expect(answer.head.value("Content-Encoding") == nil)
      #expect(answer.text == plain)
      #expect(answer.head.contentLength == Int64(plain.utf8.count))
    }
    #expect(backend.requests.count == 2)
  }

  /// A vary field's `_` look-alike (read as the field by CGI, WSGI and PHP backends) is not
  /// forwarded: the backend cannot answer per a field the key does not hold.
  @Test func aVaryFieldsUnderscoreLookAlikeIsNotForwarded() throws {
    let backend = try EchoBackend()
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(
        port: backend.port, routes: [Self.cached("v", "/*", cache: ["fresh_s": 60, "vary": ["Accept-Language"]])]))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/doc", to: gateway.port, headers: [("Accept_Language", "de")])
    #expect(Self.field(answer, "lang") == "")
    #expect(backend.server.requests.allSatisfy { $0.head.value("Accept_Language") == nil })
  }
}
