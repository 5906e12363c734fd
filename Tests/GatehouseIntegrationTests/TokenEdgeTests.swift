import Foundation
import Synchronization
import Testing

/// Token edge cases (Docs/behaviour.md, Docs/admin-openapi.json and Docs/logs.md): many rejections of one value cause one refresh, an
/// operator's value releases requests waiting on a stuck login, a token endpoint cannot
/// inject headers, chunked bodies are replayed, persisted tokens belong to their client,
/// and token metrics.
@Suite struct TokenEdgeTests {
  static func config(
    backend: TestBackend, oauth: OAuth2TestServer, clientID: String? = nil, store: [String: Any]? = nil
  ) -> [String: Any] {
    var token = oauth.tokenConfig()
    if let clientID { token["client_id"] = clientID }
    return TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["partner": token],
      routes: [TestConfig.tokenRoute("all", match: "/*", token: "partner")], store: store)
  }

  @Test func manyConcurrentRejectionsOfOneValueCauseOneRefresh() throws {
    let oauth = try OAuth2TestServer()
    let rejectedToken = oauth.token(1)
    let backend = try TestBackend { request in
      bearerToken(of: request) == rejectedToken
        ? .respond(BackendAnswer(status: 401, reason: "Unauthorized", body: .bytes(Array("no".utf8))))
        : .respond(.text("yes"))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    #expect(try gateway.admin().waitForState("partner", "valid"))
    let refreshGate = Gate()
    defer { refreshGate.open() }
    oauth.setMode(.held(refreshGate))

    // 40 requests on 40 connections (4 threads × 10). Those that reach the backend with the
    // first token are rejected; those that come after the first rejection wait for the refresh.
    let sent = Atomic<Int>(0)
    let statuses = Mutex<[Int]>([])
    let failures = Mutex<[String]>([])
    let finished = Atomic<Int>(0)
    for thread in 0..<4 {
      Thread {
        defer { finished.add(1, ordering: .relaxed) }
        do {
          var clients: [RawClient] = []
          for index in 0..<10 {
            let client = try RawClient(port: gateway.port)
            try client.send(httpRequest("GET", "/r/\(thread)/\(index)"))
            clients.append(client)
            sent.add(1, ordering: .relaxed)
          }
          for client in clients {
            let status = try client.readAnswer(timeout: 60).status
            statuses.withLock { $0.append(status) }
          }
        } catch {
          failures.withLock { $0.append("\(error)") }
        }
      }.start()
    }
    let allSent = waitUntil(timeout: 30) { sent.load(ordering: .relaxed) == 40 }
    let refreshStarted = oauth.waitForRequests(2, timeout: 30)
    // Let the gateway read the last requests, so they meet the held refresh (well within
    // the gateway's 10 s login timeout).
    sleep(for: .milliseconds(500))
    refreshGate.open()
    let done = waitUntil(timeout: 60) { finished.load(ordering: .relaxed) == 4 }

    #expect(allSent && refreshStarted && done)
    #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
    #expect(statuses.withLock { $0 } == Array(repeating: 200, count: 40))
    #expect(oauth.requestCount == 2, "logins: \(oauth.requestCount)")
    let requests = backend.requests.filter { $0.path.hasPrefix("/r/") }
    #expect(requests.allSatisfy { [oauth.token(1), oauth.token(2)].contains(bearerToken(of: $0) ?? "") })
    // Every client request was answered by exactly one request with the new token, and
    // every rejected one was retried once.
    let fresh = requests.filter { bearerToken(of: $0) == oauth.token(2) }.map(\.path)
    let rejected = requests.filter { bearerToken(of: $0) == oauth.token(1) }.map(\.path)
    #expect(fresh.count == 40)
    #expect(Set(fresh).count == 40)
    #expect(Set(rejected).isSubset(of: Set(fresh)))
    #expect(rejected.count == Set(rejected).count)
    #expect(!rejected.isEmpty)
  }

  @Test func operatorValueReleasesRequestsWaitingOnAStuckLogin() throws {
    let oauth = try OAuth2TestServer()
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try send("GET", "/warm", to: gateway.port).status == 200)
    let loginGate = Gate()
    defer { loginGate.open() }
    oauth.setMode(.held(loginGate))
    #expect(try admin.invalidate("partner").status == 200)

    // The request needs a new login, which the endpoint holds.
    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/waiting"))
    #expect(oauth.waitForRequests(2))
    #expect(backend.requests.count == 1)
    #expect(try admin.setToken("partner", value: "operator-rescue-value").status == 200)
    let answer = try client.readAnswer(timeout: 20)
    loginGate.open()
    // The held login completes late; its token must not replace the operator's value.
    sleep(for: .milliseconds(500))
    let next = try send("GET", "/next", to: gateway.port)

    #expect(answer.status == 200)
    #expect(next.status == 200)
    #expect(
      backend.requests.compactMap(bearerToken) == [oauth.token(1), "operator-rescue-value", "operator-rescue-value"])
    #expect(try admin.token("partner")?["fingerprint"] as? String == SHA256Digest.fingerprint("operator-rescue-value"))
  }

  @Test func tokenWithALineBreakFromTheEndpointIsNeverSent() throws {
    let oauth = try OAuth2TestServer()
    oauth.setMode(
      .answer(
        BackendAnswer(
          headers: [("Content-Type", "application/json")],
          body: .bytes(Array(#"{"access_token":"evil-value\r\nX-Injected: yes","expires_in":3600}"#.utf8)))))
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/injected", to: gateway.port)
    let state = try #require(try gateway.admin().token("partner"))

    #expect(isErrorEnvelope(answer, status: 401, message: "upstream token unavailable"), "\(answer.text)")
    #expect(backend.requests.allSatisfy { !$0.head.has("X-Injected") })
    #expect(backend.requests.isEmpty)
    #expect(state["state"] as? String == "error")
    let lastError = try #require(state["last_error"] as? String)
    #expect(lastError.contains("refused"))
    #expect(!lastError.contains("evil-value"))
    #expect(!gateway.stdoutText.contains("evil-value"))
  }

  @Test func chunkedSmallBodyIsReplayedAfterARejection() throws {
    let oauth = try OAuth2TestServer()
    let rejectedToken = oauth.token(1)
    let backend = try TestBackend { request in
      bearerToken(of: request) == rejectedToken
        ? .respond(BackendAnswer(status: 401, reason: "Unauthorized", body: .bytes(Array("no".utf8))))
        : .respond(BackendAnswer(body: .echo))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    let pieces = [BodyPattern.bytes(700), Array("-second-piece-".utf8), BodyPattern.bytes(300)]
    let body = pieces.flatMap { $0 }

    let client = try RawClient(port: gateway.port)
    let answer = try client.exchange(
      httpRequest("POST", "/chunked", headers: [("Transfer-Encoding", "chunked")]) + chunkedBody(pieces))
    // The client connection goes on after the retried exchange.
    let after = try client.exchange(httpRequest("GET", "/after"))

    #expect(answer.status == 200)
    #expect(answer.body == body)
    #expect(after.status == 200)
    #expect(backend.requests.count == 3)
    #expect(backend.requests.prefix(2).allSatisfy { $0.method == "POST" && $0.body == body })
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2), oauth.token(2)])
  }

  @Test func storedTokenIsNotReusedForAnotherClient() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-client-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = ["path": directory.appendingPathComponent("store.sqlite").path]
    let first = try OAuth2TestServer(clientID: "first-client", tokenPrefix: "first-client-token")
    let second = try OAuth2TestServer(clientID: "second-client", tokenPrefix: "second-client-token")
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }

    let before = try GatewayProcess(config: Self.config(backend: backend, oauth: first, store: store))
    #expect(try send("GET", "/one", to: before.port).status == 200)
    sleep(for: .milliseconds(1500))
    before.stopExpectingCleanExit()
    // Same token name, another client (and endpoint): the stored token is not its own.
    let after = try GatewayProcess(config: Self.config(backend: backend, oauth: second, store: store))
    defer { after.stopExpectingCleanExit() }
    #expect(try send("GET", "/two", to: after.port).status == 200)

    #expect(first.requestCount == 1)
    #expect(second.requestCount == 1)
    #expect(backend.requests.compactMap(bearerToken) == [first.token(1), second.token(1)])
  }

  /// A port nothing listens on, below the kernel's ephemeral range: the gateway binds its
  /// listeners with SO_REUSEPORT, so a port that another test's gateway could get for
  /// "port 0" might end up shared by two gateways.
  static func portOutsideTheEphemeralRange() -> UInt16? {
    let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    let low = range.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32768
    guard low > 20_000 else { return nil }
    for _ in 0..<50 {
      let port = UInt16(Int.random(in: 20_000..<low))
      if !TestSocket.isListening(port: port) { return port }
    }
    return nil
  }

  @Test
  func requestsRightAfterStartFindTheStaticToken() throws {
    // The first requests a gateway accepts, sent as soon as its port takes connections.
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    var statuses: [Int] = []
    for attempt in 0..<5 {
      let port = try #require(Self.portOutsideTheEphemeralRange())
      var config = TestConfig.withTokens(
        upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": "static-at-start-\(attempt)"]],
        routes: [TestConfig.tokenRoute("all", match: "/*", token: "api")])
      config["listen"] = [["address": "127.0.0.1:\(port)"]]
      let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-early-\(UUID())")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      let configURL = directory.appendingPathComponent("early.json")
      try JSONSerialization.data(withJSONObject: config).write(to: configURL)
      let gateway = try GatewayProcess(
        arguments: ["serve", "--config", configURL.path], directory: directory, startTimeout: nil)
      var client: RawClient?
      let deadline = Deadline(seconds: 20)
      var tries = 0
      while client == nil, !deadline.hasPassed, tries < 1_000_000, gateway.isRunning {
        client = try? RawClient(port: port)
        tries += 1
      }
      let connected = try #require(client, "the gateway never took a connection")
      statuses.append(try connected.exchange(httpRequest("GET", "/early/\(attempt)"), timeout: 20).status)
      connected.close()
      gateway.stopExpectingCleanExit()
    }

    #expect(statuses == [200, 200, 200, 200, 200], "answers to the first request after start: \(statuses)")
  }

  @Test
  func aReplacedTokenEchoedByTheEndpointIsRedacted() throws {
    // The first token is replaced by an operator's refresh but has not expired: it is
    // still a working credential, and an endpoint error quoting it must not publish it.
    let oauth = try OAuth2TestServer(tokenPrefix: "replaced-but-valid")
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try send("GET", "/one", to: gateway.port).status == 200)
    #expect(try admin.refresh("partner").status == 200)
    oauth.setMode(.fail(description: "previous token \(oauth.token(1)) was revoked"))

    let failed = try admin.refresh("partner")
    let listing = try admin.request("GET", "/admin/tokens")

    #expect(failed.status == 502)
    #expect(oauth.requestCount == 3)
    #expect(!failed.text.contains(oauth.token(1)), "\(failed.text)")
    #expect(!listing.text.contains(oauth.token(1)), "\(listing.text)")
    #expect(!gateway.stdoutText.contains(oauth.token(1)))
  }

  @Test
  func tokenMetricsAreExported() throws {
    let oauth = try OAuth2TestServer()
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try send("GET", "/one", to: gateway.port).status == 200)
    oauth.setMode(.fail(description: "down"))
    #expect(try admin.refresh("partner").status == 502)

    let metrics = try admin.request("GET", "/metrics")
    let lines = metrics.text.split(separator: "\n").map(String.init)

    #expect(metrics.status == 200)
    let refreshLines = lines.filter {
      $0.hasPrefix("gatehouse_token_refresh_total{") && $0.contains(#"token="partner""#)
    }
    #expect(refreshLines.count >= 2, "refresh samples: \(refreshLines)")
    let stateLines = lines.filter { $0.hasPrefix("gatehouse_token_state{") && $0.contains(#"token="partner""#) }
    #expect(
      stateLines.contains { $0.contains(#"state="error""#) && $0.hasSuffix(" 1") }, "state samples: \(stateLines)")
    #expect(!metrics.text.contains(oauth.tokenPrefix))
  }
}
