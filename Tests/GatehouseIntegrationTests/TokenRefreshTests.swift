import Foundation
import Synchronization
import Testing

/// OAuth2 client-credentials tokens (Docs/behaviour.md): the login, background refresh before expiry,
/// one refresh for many waiting requests, endpoint errors in `last_error`, rejection by
/// status or body field with exactly one retry, and what clients get when no token can be
/// had (a 401 envelope, or a stale stored answer).
@Suite struct TokenRefreshTests {
  /// A backend that rejects `rejected` tokens with `rejection` and answers others with `accepted`.
  static func backend(
    rejecting rejected: Set<String>, with rejection: BackendAnswer = json(#"{"message":"token rejected"}"#, 401),
    accepted: BackendAnswer = json(#"{"name":"accepted"}"#)
  ) throws -> TestBackend {
    try TestBackend { request in
      guard let token = bearerToken(of: request), !rejected.contains(token) else { return .respond(rejection) }
      return .respond(accepted)
    }
  }

  static func json(_ text: String, _ status: Int = 200) -> BackendAnswer {
    BackendAnswer(
      status: status, reason: status == 200 ? "OK" : "Rejected", headers: [("Content-Type", "application/json")],
      body: .bytes(Array(text.utf8)))
  }

  static func config(
    backend: TestBackend, oauth: OAuth2TestServer, refreshBeforeS: Int? = nil, routes: [[String: Any]]? = nil,
    store: [String: Any]? = nil
  ) -> [String: Any] {
    TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["partner": oauth.tokenConfig(refreshBeforeS: refreshBeforeS)],
      routes: routes ?? [TestConfig.tokenRoute("all", match: "/*", token: "partner")], store: store)
  }

  // MARK: Login and refresh

  @Test func firstRequestCarriesTheFetchedToken() throws {
    let oauth = try OAuth2TestServer()
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/accounts", to: gateway.port, headers: [("Authorization", "Bearer mine")])

    #expect(answer.status == 200)
    #expect(backend.requests.map { $0.head.values("Authorization") } == [["Bearer \(oauth.token(1))"]])
    #expect(oauth.requestCount == 1)
    #expect(oauth.problems.isEmpty, "\(oauth.problems)")
    #expect(gateway.logLines().contains { $0["msg"] as? String == "token refreshed" })
  }

  @Test func backgroundRefreshHappensBeforeExpiry() throws {
    let oauth = try OAuth2TestServer(lifetimes: [6, 3600])
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, refreshBeforeS: 3))
    defer { gateway.stopExpectingCleanExit() }

    #expect(try send("GET", "/before", to: gateway.port).status == 200)
    #expect(bearerToken(of: try #require(backend.requests.last)) == oauth.token(1))
    // No request needs it: the refresh comes from the gateway's own timer.
    #expect(oauth.waitForRequests(2, timeout: 20))
    let admin = try gateway.admin()
    let adopted = waitUntil(timeout: 10, interval: .milliseconds(50)) {
      (try? admin.token("partner"))?["fingerprint"] as? String == SHA256Digest.fingerprint(oauth.token(2))
    }
    #expect(adopted)
    #expect(try send("GET", "/after", to: gateway.port).status == 200)

    let logins = oauth.logins
    #expect(logins.count == 2)
    if logins.count == 2 {
      #expect(logins[1].arrivedAt - logins[0].arrivedAt < .seconds(6), "the refresh came after the first token expired")
    }
    #expect(bearerToken(of: try #require(backend.requests.last)) == oauth.token(2))
    #expect(backend.requests.count == 2)
  }

  /// Requests waiting for the login when a reload lands are sent once the token comes,
  /// to the running config's pool for their upstream.
  @Test func requestsWaitingForATokenOutliveAReload() throws {
    let oauth = try OAuth2TestServer()
    let loginGate = Gate()
    defer { loginGate.open() }
    oauth.setMode(.held(loginGate))
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    #expect(oauth.waitForRequests(1, timeout: 20))
    let waiting = try (0..<3).map { index in
      let client = try RawClient(port: gateway.port)
      try client.send(httpRequest("GET", "/wait/\(index)"))
      return client
    }
    // Give the gateway a moment to read them, so they wait on the held login.
    sleep(for: .milliseconds(300))
    #expect(try gateway.admin().request("POST", "/admin/reload").status == 200)
    oauth.setMode(.issue)
    loginGate.open()
    let answers = try waiting.map { try $0.readAnswer(timeout: 30) }

    #expect(answers.map(\.status) == [200, 200, 200], "\(answers.map(\.text))")
    #expect(backend.requests.filter { $0.path.hasPrefix("/wait/") }.count == 3)
  }

  @Test func twoHundredConcurrentRequestsAcrossAnExpiryCauseExactlyOneLogin() throws {
    let oauth = try OAuth2TestServer(lifetimes: [3, 3600])
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    // refresh_before_s 0: the refresh starts when the first token expires.
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, refreshBeforeS: 0))
    defer { gateway.stopExpectingCleanExit() }
    #expect(try send("GET", "/warm", to: gateway.port).status == 200)
    let refreshGate = Gate()
    defer { refreshGate.open() }
    oauth.setMode(.held(refreshGate))

    // 20 threads × 10 connections, one request each: the first 5 of every thread go out
    // before the refresh starts, the other 5 while it is held at the token endpoint.
    let threadCount = 20
    let perThread = 10
    let sent = Atomic<Int>(0)
    let secondHalfAllowed = Gate()
    defer { secondHalfAllowed.open() }
    let results = Mutex<[(path: String, status: Int)]>([])
    let failures = Mutex<[String]>([])
    let finished = Atomic<Int>(0)
    for thread in 0..<threadCount {
      let worker = Thread {
        defer { finished.add(1, ordering: .relaxed) }
        var clients: [(RawClient, String)] = []
        do {
          for index in 0..<perThread {
            if index == perThread / 2, !secondHalfAllowed.wait(timeout: 30) { throw TestSocketError.timedOut("gate") }
            let client = try RawClient(port: gateway.port)
            let path = "/c/\(thread)/\(index)"
            try client.send(httpRequest("GET", path))
            clients.append((client, path))
            sent.add(1, ordering: .relaxed)
          }
          for (client, path) in clients {
            let answer = try client.readAnswer(timeout: 60)
            results.withLock { $0.append((path, answer.status)) }
            client.close()
          }
        } catch {
          failures.withLock { $0.append("thread \(thread): \(error)") }
        }
      }
      worker.start()
    }
    let firstHalfSent = waitUntil(timeout: 30) { sent.load(ordering: .relaxed) >= threadCount * perThread / 2 }
    let refreshStarted = oauth.waitForRequests(2, timeout: 30)
    secondHalfAllowed.open()
    let allSent = waitUntil(timeout: 30) { sent.load(ordering: .relaxed) == threadCount * perThread }
    // Give the gateway a moment to read the last requests, so they wait on the held refresh.
    sleep(for: .milliseconds(300))
    refreshGate.open()
    let allFinished = waitUntil(timeout: 90) { finished.load(ordering: .relaxed) == threadCount }

    #expect(firstHalfSent && refreshStarted && allSent && allFinished)
    #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
    let collected = results.withLock { $0 }
    #expect(collected.count == threadCount * perThread)
    #expect(collected.allSatisfy { $0.status == 200 })
    #expect(oauth.requestCount == 2, "logins: \(oauth.requestCount)")
    let seen = backend.requests.filter { $0.path.hasPrefix("/c/") }
    #expect(seen.count == threadCount * perThread)
    #expect(Set(seen.compactMap(bearerToken)).isSubset(of: [oauth.token(1), oauth.token(2)]))
    // Requests sent after the first token expired all carried the second one.
    let late = seen.filter { request in Int(request.path.split(separator: "/").last ?? "") ?? 0 >= perThread / 2 }
    #expect(late.count == threadCount * perThread / 2)
    #expect(late.allSatisfy { bearerToken(of: $0) == oauth.token(2) })
  }

  @Test func endpointErrorsShowInLastErrorWithoutTheSecret() throws {
    let secret = "endpoint-error-secret-6d1"
    let oauth = try OAuth2TestServer(clientSecret: secret)
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(admin.waitForState("partner", "valid"))

    let modes: [(String, OAuth2TestServer.Mode, String)] = [
      ("fail", .fail(description: "secret \(secret) was revoked"), "invalid_client"),
      ("garbage", .garbage, "invalid JSON"),
      ("close", .close, "closed"),
    ]
    for (label, mode, expected) in modes {
      oauth.setMode(mode)
      let refresh = try admin.refresh("partner")
      #expect(refresh.status == 502, "\(label): \(refresh.status)")
      let lastError = try #require(try refresh.jsonObject()["last_error"] as? String, "\(label)")
      #expect(lastError.contains(expected), "\(label): \(lastError)")
      #expect(!lastError.contains(secret), "\(label): \(lastError)")
      let listed = try #require(try admin.token("partner"))
      #expect(listed["state"] as? String == "error", "\(label)")
      #expect(listed["last_error"] as? String == lastError, "\(label)")
    }
    #expect(!gateway.stdoutText.contains(secret))
    #expect(!gateway.stderrText.contains(secret))
  }

  @Test func httpsTokenURLPassesCheck() throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-check-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let configURL = directory.appendingPathComponent("check.json")
    var config = TestConfig.withTokens(
      upstreamPort: 9, tokens: [:], routes: [TestConfig.tokenRoute("all", match: "/*", token: "partner")])
    config["tokens"] = [
      "partner": [
        "type": "oauth2_client_credentials", "token_url": "https://auth.example.test/oauth/token",
        "client_id": "gw", "client_secret": "check-secret-2f",
      ]
    ]
    try JSONSerialization.data(withJSONObject: config).write(to: configURL)

    let check = try GatewayProcess(
      arguments: ["check", "--config", configURL.path], directory: directory, startTimeout: nil)
    let outcome = check.waitForExit(timeout: 30)

    #expect(outcome == ExitOutcome(code: 0, bySignal: false))
    let output = check.stdoutText + check.stderrText
    #expect(!output.contains("check-secret-2f"))
  }

  @Test func rejectedStatusRefreshesAndRetriesOnce() throws {
    let oauth = try OAuth2TestServer()
    let backend = try Self.backend(rejecting: [oauth.token(1)])
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/profile", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.text == #"{"name":"accepted"}"#)
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2)])
    #expect(backend.requests.map(\.path) == ["/profile", "/profile"])
    #expect(oauth.requestCount == 2)
    #expect(gateway.logLines().contains { $0["msg"] as? String == "token rejected by backend" })
  }

  /// A catch-all route with token `partner` whose backend says "rejected" with
  /// `{"status":-1}` in the body, as well as with 401.
  static func bodyFieldRoute(enveloped: Bool, extra: [String: Any] = [:]) -> [String: Any] {
    var members: [String: Any] = [
      "invalid_token": ["status": [401], "body_field": "status", "body_values": [-1]],
      "envelope": ["enabled": enveloped],
    ]
    for (key, value) in extra { members[key] = value }
    return TestConfig.tokenRoute("all", match: "/*", token: "partner", extra: members)
  }

  @Test(arguments: [false, true])
  func rejectedBodyFieldRefreshesAndRetriesOnce(enveloped: Bool) throws {
    let oauth = try OAuth2TestServer()
    let backend = try Self.backend(
      rejecting: [oauth.token(1)], with: Self.json(#"{"status":-1}"#),
      accepted: Self.json(#"{"status":0,"name":"fresh"}"#))
    defer { backend.stop() }
    let route = Self.bodyFieldRoute(enveloped: enveloped)
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, routes: [route]))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/orders", to: gateway.port)

    #expect(answer.status == 200)
    if enveloped {
      let object = try answer.jsonObject()
      #expect(object["code"] as? Int == 0)
      #expect((object["datas"] as? [String: Any])?["name"] as? String == "fresh")
    } else {
      #expect(answer.text == #"{"status":0,"name":"fresh"}"#)
    }
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2)])
    #expect(oauth.requestCount == 2)
  }

  @Test func alwaysRejectedGetsExactlyOneRetryThenTheBackendsAnswer() throws {
    let oauth = try OAuth2TestServer()
    let backend = try TestBackend(always: .respond(Self.json(#"{"message":"token rejected"}"#, 401)))
    defer { backend.stop() }
    let route = TestConfig.tokenRoute("all", match: "/*", token: "partner", extra: ["envelope": ["enabled": true]])
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, routes: [route]))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/always", to: gateway.port)
    // Anything a further retry would send has time to arrive.
    sleep(for: .milliseconds(500))

    #expect(isErrorEnvelope(answer, status: 401, message: "token rejected"), "\(answer.status) \(answer.text)")
    #expect(backend.requests.count == 2)
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2)])
    #expect(oauth.requestCount >= 2)
  }

  /// A value fetched because of a rejection and rejected again is kept for a while: a
  /// backend that rejects every token costs one login per episode, not two per request.
  @Test func aRejectionEpisodeCostsOneLoginNotOnePerRequest() throws {
    let oauth = try OAuth2TestServer()
    let backend = try TestBackend(always: .respond(Self.json(#"{"message":"token rejected"}"#, 401)))
    defer { backend.stop() }
    let route = TestConfig.tokenRoute("all", match: "/*", token: "partner", extra: ["envelope": ["enabled": true]])
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, routes: [route]))
    defer { gateway.stopExpectingCleanExit() }

    let answers = try (0..<5).map { index in try send("GET", "/always/\(index)", to: gateway.port) }
    sleep(for: .milliseconds(300))  // time for any further login to arrive

    for answer in answers {
      #expect(isErrorEnvelope(answer, status: 401, message: "token rejected"), "\(answer.status) \(answer.text)")
    }
    // The first login, then one more for the first rejection; only the first request is retried.
    #expect(oauth.requestCount == 2)
    #expect(
      backend.requests.map(\.path) == ["/always/0", "/always/0", "/always/1", "/always/2", "/always/3", "/always/4"])
    #expect(backend.requests.dropFirst().allSatisfy { bearerToken(of: $0) == oauth.token(2) })
  }

  /// A backend with one endpoint that answers 401 whatever the token (this client may not
  /// see it) while `denying` holds, and 200 everywhere else.
  static func backendWithADeniedEndpoint(denying: Shared<Bool> = Shared(true)) throws -> TestBackend {
    try TestBackend { request in
      request.path == "/denied" && denying.value
        ? .respond(Self.json(#"{"message":"not yours"}"#, 401)) : .respond(Self.json(#"{"name":"accepted"}"#))
    }
  }

  /// One 401 while the token endpoint is down does not throw away a value that has not
  /// expired: every other request keeps sending it while the refresh fails.
  @Test func aRejectedValueStaysInUseWhileTheTokenEndpointIsDown() throws {
    let oauth = try OAuth2TestServer()
    let backend = try Self.backendWithADeniedEndpoint()
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    #expect(try send("GET", "/first", to: gateway.port).status == 200)
    oauth.setMode(.fail(description: "endpoint is down for maintenance"))
    let denied = try send("GET", "/denied", to: gateway.port)
    #expect(denied.status == 401)
    // The refresh that rejection asked for fails; the value is still sent meanwhile.
    #expect(oauth.waitForRequests(2, timeout: 10))
    var statuses: [Int] = []
    for index in 0..<5 {
      statuses.append(try send("GET", "/other/\(index)", to: gateway.port).status)
      sleep(for: .milliseconds(100))
    }

    #expect(statuses == [200, 200, 200, 200, 200], "\(statuses)")
    let others = backend.requests.filter { $0.path.hasPrefix("/other/") }
    #expect(others.count == 5)
    #expect(others.allSatisfy { bearerToken(of: $0) == oauth.token(1) })
  }

  /// An endpoint whose 401 is its own answer costs one refresh: it caused one, rejected the
  /// fresh value too, and from then on its 401 goes to the client as it is, however long
  /// after the 10 s episode it comes. Once it accepts a value, its rejections count again.
  @Test func anEndpointThatRejectsTheFreshValueTooCausesNoMoreRefreshes() throws {
    let oauth = try OAuth2TestServer()
    let denying = Shared(true)
    let backend = try Self.backendWithADeniedEndpoint(denying: denying)
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/denied", to: gateway.port)
    #expect(first.status == 401)
    #expect(first.text == #"{"message":"not yours"}"#)
    #expect(oauth.requestCount == 2)
    // Past `rejectionHoldOff` (10 s), when a rejection of the fresh value would ask again.
    sleep(for: .milliseconds(10_500))
    var answers: [ReceivedAnswer] = []
    for _ in 0..<4 {
      answers.append(try send("GET", "/denied", to: gateway.port))
      sleep(for: .milliseconds(200))
    }
    let other = try send("GET", "/other", to: gateway.port)
    sleep(for: .milliseconds(500))  // time for any further login to arrive

    for answer in answers {
      #expect(answer.status == 401)
      #expect(answer.text == #"{"message":"not yours"}"#)
    }
    #expect(other.status == 200)
    #expect(oauth.requestCount == 2, "\(oauth.requestCount) logins")
    // Each later 401 is the endpoint's own answer: not sent again.
    #expect(backend.requests.filter { $0.path == "/denied" }.count == 2 + answers.count)
    #expect(backend.requests.dropFirst().allSatisfy { bearerToken(of: $0) == oauth.token(2) })

    // It takes the token now: it counts again, and its next rejection asks for a new value.
    denying.value = false
    #expect(try send("GET", "/denied", to: gateway.port).status == 200)
    #expect(gateway.waitForLogLine { $0["msg"] as? String == "endpoint accepts the token again" })
    denying.value = true
    let refreshed = try send("GET", "/denied", to: gateway.port)
    #expect(refreshed.status == 401)
    #expect(oauth.requestCount == 3)
    #expect(bearerToken(of: try #require(backend.requests.last)) == oauth.token(3))
  }

  /// Endpoints that answer 401 on their own, met one path after another, cannot make a
  /// refresh every 10 s either: after a futile refresh the next one waits twice as long.
  @Test func endpointsMetOneAfterAnotherCannotForceARefreshEveryTenSeconds() throws {
    let oauth = try OAuth2TestServer()
    let backend = try TestBackend { request in
      request.path.hasPrefix("/denied/")
        ? .respond(Self.json(#"{"message":"not yours"}"#, 401)) : .respond(Self.json(#"{"name":"accepted"}"#))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/denied/1", to: gateway.port)
    #expect(first.status == 401)
    #expect(oauth.requestCount == 2)
    // Past the 10 s of a first episode, not the 20 s that follow a futile refresh.
    sleep(for: .milliseconds(10_500))
    let second = try send("GET", "/denied/2", to: gateway.port)
    let other = try send("GET", "/other", to: gateway.port)
    sleep(for: .milliseconds(500))  // time for any further login to arrive

    #expect(second.status == 401)
    #expect(second.text == #"{"message":"not yours"}"#)
    #expect(other.status == 200)
    #expect(oauth.requestCount == 2, "\(oauth.requestCount) logins")
  }

  /// A body that still says "rejected" after the retry is no answer to keep or to wrap as
  /// a success: the last good answer stands in, and without one the client gets a 401.
  @Test func aBodyStillRejectingAfterTheRetryIsNeverStoredOrWrapped() throws {
    let oauth = try OAuth2TestServer()
    let rejecting = Shared(false)
    let backend = try TestBackend { _ in
      rejecting.value
        ? .respond(Self.json(#"{"status":-1,"message":"token rejected"}"#))
        : .respond(Self.json(#"{"status":0,"v":"good"}"#))
    }
    defer { backend.stop() }
    let route = Self.bodyFieldRoute(enveloped: true, extra: ["cache": ["stale_if_error_s": 600]])
    let gateway = try GatewayProcess(
      config: Self.config(backend: backend, oauth: oauth, routes: [route], store: ["path": "var/store.sqlite"]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    let good = try send("GET", "/bv", to: gateway.port)
    try #require(admin.waitForStoredEntries(1))

    rejecting.value = true
    let standIn = try send("GET", "/bv", to: gateway.port)
    let nothingStored = try send("GET", "/bv-new", to: gateway.port)
    rejecting.value = false
    sleep(for: .milliseconds(300))  // a write of the rejection, had there been one, lands

    #expect(good.status == 200 && StoreTests.cacheHeader(good) == "MISS")
    StoreTests.expectStale(standIn, body: good.text)
    #expect(
      isErrorEnvelope(nothingStored, status: 401, message: "upstream rejected the token"), "\(nothingStored.text)")
    #expect(try admin.json("/admin/cache")["entries"] as? Int == 1)
    // Both the stand-in and the refusal say why the backend's answer was not used.
    #expect(ErrorTests.loggedReason(gateway, path: "/bv-new") == "token_rejected")
    #expect(
      gateway.accessLines().filter { $0["path"] as? String == "/bv" }.map { $0["reason"] as? String } == [
        nil, "token_rejected",
      ])
  }

  /// `body_field` is looked for in the decoded body of a gzip answer, as the envelope sees it.
  @Test func aRejectionInAGzipBodyIsRecognized() throws {
    let oauth = try OAuth2TestServer()
    let rejection = try ExternalTool.gzip(Array(#"{"status":-1}"#.utf8))
    let backend = try TestBackend { request in
      guard bearerToken(of: request) == oauth.token(1) else { return .respond(Self.json(#"{"status":0}"#)) }
      return .respond(
        BackendAnswer(
          status: 200, reason: "OK", headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")],
          body: .bytes(rejection)))
    }
    defer { backend.stop() }
    let route = Self.bodyFieldRoute(enveloped: true)
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth, routes: [route]))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/gz", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.text == #"{"code":0,"datas":{"status":0},"message":""}"#)
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2)])
  }

  @Test func smallPostIsRetriedWithTheSameBody() throws {
    let oauth = try OAuth2TestServer()
    let body = BodyPattern.bytes(4000)
    let backend = try TestBackend { request in
      bearerToken(of: request) == oauth.token(1)
        ? .respond(Self.json(#"{"message":"token rejected"}"#, 401)) : .respond(BackendAnswer(body: .echo))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send(
      "POST", "/submit", to: gateway.port, headers: [("Content-Type", "application/octet-stream")], body: body)

    #expect(answer.status == 200)
    #expect(answer.body == body)
    #expect(backend.requests.count == 2)
    #expect(backend.requests.map(\.method) == ["POST", "POST"])
    #expect(backend.requests.allSatisfy { $0.body == body })
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2)])
  }

  /// A backend that answers requests carrying `rejected` with `rejection` from their head,
  /// before reading their body (as authentication middleware does), and echoes the body of
  /// every other request.
  static func backendRejectingFromTheHead(_ rejected: String, with rejection: FaultAnswer) throws -> FaultBackend {
    try FaultBackend(
      headAnswer: { head in head.value("Authorization") == "Bearer \(rejected)" ? rejection : nil },
      handler: { request in
        FaultAnswer.http(headers: [("Content-Type", "application/octet-stream")], body: request.body)
      })
  }

  /// A backend that refuses the token from the request's head (before reading its body, as
  /// authentication middleware does) still gets the retry with the whole body when the
  /// client sends the rest of it later, or only after `100 Continue`; a large rest streams
  /// behind the kept start once the retry is under way. A body that outgrows what the
  /// gateway keeps for a replay while the new token is still being fetched gets the
  /// rejection as a 401 envelope instead.
  @Test(arguments: ["split", "continue", "large", "large, slow login"])
  func aRejectionBeforeTheBodyHasArrivedIsStillRetried(_ mode: String) throws {
    let oauth = try OAuth2TestServer()
    let login = Gate()
    defer { login.open() }
    let body = BodyPattern.bytes(mode.hasPrefix("large") ? 100_000 : 2000)
    let backend = try Self.backendRejectingFromTheHead(
      oauth.token(1),
      with: FaultAnswer.http(
        status: 401, reason: "Unauthorized", headers: [("Content-Type", "application/json")],
        body: Array(#"{"message":"token rejected"}"#.utf8)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.streamingBodies(
        TestConfig.withTokens(
          upstreamPort: backend.port, tokens: ["partner": oauth.tokenConfig()],
          routes: [TestConfig.tokenRoute("all", match: "/*", token: "partner")])))
    defer { gateway.stopExpectingCleanExit() }

    if mode == "large, slow login" {
      // Token 1 is issued; the login that the rejection starts waits for the gate.
      #expect(waitUntil(timeout: 10) { oauth.issuedCount >= 1 })
      oauth.setMode(.held(login))
    }
    let client = try RawClient(port: gateway.port)
    var head = "POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
    head += "Content-Length: \(body.count)\r\n"
    if mode == "continue" { head += "Expect: 100-continue\r\n" }
    head += "\r\n"
    let firstPart = mode == "continue" ? 0 : 1000
    try client.send(Array(head.utf8) + body[..<firstPart])
    if mode == "continue" {
      #expect(try client.readAnswer().status == 100)
    }
    // The rest only once the backend has refused the first attempt.
    #expect(waitUntil(timeout: 10) { backend.requests.count >= 1 })
    sleep(for: .milliseconds(100))
    try client.send(Array(body[firstPart...]))
    let answer = try client.readAnswer()

    if mode == "large, slow login" {
      // The gateway's own answer (the backend's refusal went to the dropped attempt).
      #expect(isErrorEnvelope(answer, status: 401))
      #expect(backend.requests.count == 1)
    } else {
      #expect(answer.status == 200)
      #expect(answer.body == body)
      #expect(backend.requests.count == 2)
      #expect(backend.requests.last?.body == body)
      #expect(backend.requests.last.flatMap(bearerToken) == oauth.token(2))
    }
  }

  /// A rejection in the body (`body_field`) read while the client's body is still arriving:
  /// the connection it came on still expects the rest of that body, so the retry never goes
  /// on it (it would be read as that body: a desync that could smuggle a request).
  @Test func aBodyFieldRejectionBeforeTheBodyHasArrivedNeverReusesItsConnection() throws {
    let oauth = try OAuth2TestServer()
    let body = BodyPattern.bytes(2000)
    let backend = try Self.backendRejectingFromTheHead(
      oauth.token(1),
      with: FaultAnswer.http(headers: [("Content-Type", "application/json")], body: Array(#"{"status":-1}"#.utf8)))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.streamingBodies(
        TestConfig.withTokens(
          upstreamPort: backend.port, tokens: ["partner": oauth.tokenConfig()],
          routes: [Self.bodyFieldRoute(enveloped: false)])))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let head =
      "POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
      + "Content-Length: \(body.count)\r\n\r\n"
    try client.send(Array(head.utf8) + body[..<1000])
    #expect(waitUntil(timeout: 10) { backend.requests.count >= 1 })
    sleep(for: .milliseconds(100))
    try client.send(Array(body[1000...]))
    let answer = try client.readAnswer()

    #expect(answer.status == 200)
    #expect(answer.body == body)
    let requests = backend.requests
    #expect(requests.count == 2)
    #expect(requests.last?.body == body)
    #expect(requests.last?.connectionIndex != requests.first?.connectionIndex)
  }

  /// A request refused before its body had all arrived, whose body then ends while the new
  /// token is still being fetched, waits for the token without an answer deadline running
  /// (that starts when it is sent again): a slow login is not an upstream timeout.
  @Test func aRetryWaitingForASlowLoginIsNotTimedOutAsTheUpstream() throws {
    let oauth = try OAuth2TestServer()
    let login = Gate()
    defer { login.open() }
    let body = BodyPattern.bytes(2000)
    let backend = try FaultBackend(
      headAnswer: { head in
        head.value("Authorization") == "Bearer \(oauth.token(1))"
          ? FaultAnswer.http(status: 401, reason: "Unauthorized", body: Array("no".utf8)) : nil
      },
      handler: { request in FaultAnswer.http(body: request.body) })
    defer { backend.stop() }
    var config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["partner": oauth.tokenConfig()],
      routes: [TestConfig.tokenRoute("all", match: "/*", token: "partner")])
    config["upstreams"] = ["api": TestConfig.upstream(port: backend.port, answerTimeoutMs: 300)]
    let gateway = try GatewayProcess(config: TestConfig.streamingBodies(config))
    defer { gateway.stopExpectingCleanExit() }
    #expect(waitUntil(timeout: 10) { oauth.issuedCount >= 1 })
    oauth.setMode(.held(login))

    let client = try RawClient(port: gateway.port)
    let head = "POST /submit HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\n\r\n"
    try client.send(Array(head.utf8) + body[..<1000])
    #expect(waitUntil(timeout: 10) { backend.requests.count >= 1 })
    try client.send(Array(body[1000...]))
    sleep(for: .milliseconds(800))
    login.open()
    let answer = try client.readAnswer()

    #expect(answer.status == 200)
    #expect(answer.body == body)
  }

  /// A rejection body is read as the envelope reads bodies: one with a byte order mark or
  /// a lone surrogate escape elsewhere is still recognized (not wrapped as a success).
  @Test(arguments: ["\u{FEFF}{\"status\":-1}", #"{"status":-1,"note":"cut \ud83d"}"#])
  func aRejectionBodyTheEnvelopeAcceptsIsRecognized(_ rejection: String) throws {
    let oauth = try OAuth2TestServer()
    let backend = try TestBackend { request in
      bearerToken(of: request) == oauth.token(1)
        ? .respond(Self.json(rejection)) : .respond(Self.json(#"{"status":0}"#))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: Self.config(backend: backend, oauth: oauth, routes: [Self.bodyFieldRoute(enveloped: true)]))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/x", to: gateway.port)
    #expect(answer.text == #"{"code":0,"datas":{"status":0},"message":""}"#)
    #expect(backend.requests.compactMap(bearerToken) == [oauth.token(1), oauth.token(2)])
  }

  @Test func postOverSixtyFourKibibytesIsNotRetried() throws {
    let oauth = try OAuth2TestServer()
    let body = BodyPattern.bytes(64 * 1024 + 4096)
    let backend = try TestBackend { request in
      bearerToken(of: request) == oauth.token(1)
        ? .respond(.text("rejected-by-backend", status: 401)) : .respond(.text("accepted"))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: Self.config(backend: backend, oauth: oauth))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send(
      "POST", "/upload", to: gateway.port, headers: [("Content-Type", "application/octet-stream")], body: body)
    sleep(for: .milliseconds(500))

    #expect(answer.status == 401)
    #expect(answer.text == "rejected-by-backend")
    #expect(backend.requests.count == 1)
    #expect(backend.requests.first?.body == body)
    // The rejection is still reported: the next request gets a fresh token.
    #expect(try send("GET", "/next", to: gateway.port).status == 200)
    #expect(backend.requests.last.flatMap(bearerToken) == oauth.token(2))
  }

  // MARK: No token to be had

  @Test func tokenEndpointDownAtStartGivesA401Envelope() throws {
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    let downPort = try TestSocket.unusedPort()
    let token: [String: Any] = [
      "type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:\(downPort)/oauth/token",
      "client_id": "gw", "client_secret": "down-secret",
    ]
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["partner": token],
      routes: [TestConfig.tokenRoute("all", match: "/*", token: "partner")])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/needs-token", to: gateway.port)

    #expect(isErrorEnvelope(answer, status: 401, message: "upstream token unavailable"), "\(answer.text)")
    #expect(backend.requests.isEmpty)
    let state = try #require(try gateway.admin().token("partner"))
    #expect(state["state"] as? String == "error")
    #expect((state["last_error"] as? String)?.isEmpty == false)
    #expect(state["fingerprint"] is NSNull)
  }

  @Test func failedRefreshKeepsTheLastValueThenAnswers401OrStale() throws {
    let oauth = try OAuth2TestServer(lifetimes: [6, 3600])
    let backend = try Self.backend(rejecting: [])
    defer { backend.stop() }
    let store = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-stale-\(UUID()).sqlite")
    defer { removeStoreFiles(store) }
    let routes = [
      TestConfig.tokenRoute(
        "cached", match: "/cached/*", token: "partner", extra: ["cache": ["stale_if_error_s": 600]]),
      TestConfig.tokenRoute("plain", match: "/plain/*", token: "partner"),
    ]
    let gateway = try GatewayProcess(
      config: Self.config(
        backend: backend, oauth: oauth, refreshBeforeS: 3, routes: routes, store: ["path": store.path]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()

    let first = try send("GET", "/cached/item", to: gateway.port)
    #expect(first.status == 200)
    #expect(first.head.value("X-Gatehouse-Cache") == "MISS")
    let stored = waitUntil(timeout: 10) {
      ((try? admin.request("GET", "/admin/cache").jsonObject())?["entries"] as? Int ?? 0) >= 1
    }
    #expect(stored, "the answer was not stored")
    oauth.setMode(.fail(description: "endpoint is down for maintenance"))
    // The background refresh (3 s before expiry) fails; the first token is still usable.
    let failed = waitUntil(timeout: 10) { (try? admin.token("partner"))?["state"] as? String == "error" }
    #expect(
      failed, "running: \(gateway.isRunning); stdout: \(gateway.stdoutText.suffix(3000)) stderr: \(gateway.stderrText)")

    var statuses: [Int] = []
    var last: ReceivedAnswer?
    try waitUntil(timeout: 15, interval: .milliseconds(200)) {
      let answer = try send("GET", "/plain/item", to: gateway.port)
      statuses.append(answer.status)
      last = answer
      return answer.status != 200
    }

    // 200s with the old token until it expired, then the 401 envelope.
    #expect(statuses.count >= 1)
    #expect(statuses.dropLast().allSatisfy { $0 == 200 })
    #expect(last.map { isErrorEnvelope($0, status: 401, message: "upstream token unavailable") } == true)
    #expect(backend.requests.allSatisfy { bearerToken(of: $0) == oauth.token(1) })
    let backendCount = backend.requests.count
    let stale = try send("GET", "/cached/item", to: gateway.port)
    #expect(stale.status == 200)
    #expect(stale.head.value("X-Gatehouse-Cache") == "STALE")
    #expect(stale.body == first.body)
    #expect(backend.requests.count == backendCount)
  }
}

/// Removes a store file and its `-wal` and `-shm` companions.
func removeStoreFiles(_ store: URL) {
  for suffix in ["", "-wal", "-shm", "-journal"] {
    try? FileManager.default.removeItem(atPath: store.path + suffix)
  }
}
