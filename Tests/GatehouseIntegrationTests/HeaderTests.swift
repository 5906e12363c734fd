import Foundation
import Testing

/// Request and answer header handling (Config/README.md): configured set/remove rules, hop-by-hop
/// fields, `X-Forwarded-*`, `X-Request-Id` and `Host`.
@Suite struct HeaderTests {
  static func isGeneratedRequestID(_ id: String?) -> Bool {
    guard let id else { return false }
    return id.utf8.count == 32 && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
  }

  /// The upstream's `Server` and `X-Powered-By` fields do not reach clients, on
  /// pass-through and enveloped answers alike; its other fields do.
  @Test func theUpstreamsServerFieldsAreNotPassedOn() throws {
    let backend = try TestBackend(
      always: .respond(
        BackendAnswer(
          headers: [
            ("Content-Type", "application/json"), ("Server", "Apache/2.4.1"), ("X-Powered-By", "PHP/8.1.2"),
            ("X-Kept", "yes"),
          ],
          body: .bytes(Array("{}".utf8)))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [
          TestConfig.route("wrapped", match: "/e/*", extra: ["envelope": ["enabled": true]]),
          TestConfig.route("plain", match: "/*"),
        ], upstreams: ["api": TestConfig.upstream(port: backend.port)]))
    defer { gateway.stopExpectingCleanExit() }

    for path in ["/p/1", "/e/1"] {
      let answer = try send("GET", path, to: gateway.port)
      #expect(answer.status == 200, "\(path)")
      #expect(answer.head.value("Server") == nil, "\(path)")
      #expect(answer.head.value("X-Powered-By") == nil, "\(path)")
      #expect(answer.head.value("X-Kept") == "yes", "\(path)")
    }
  }

  /// On enveloped or cached routes the upstream is asked for gzip when the client takes it,
  /// else for no coding: the gateway must read, keep and re-encode what comes back, and it
  /// speaks gzip, not br or zstd. Plain pass-through routes forward the client's field.
  @Test func acceptEncodingIsNarrowedToGzipWhereTheGatewayReadsTheBody() throws {
    let backend = try TestBackend(always: .respond(.text("{}")))
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [
        TestConfig.route("wrapped", match: "/e/*", extra: ["envelope": ["enabled": true]]),
        TestConfig.route("cached", match: "/c/*", extra: ["cache": ["stale_if_error_s": 60]]),
        TestConfig.route(
          "set", match: "/s/*",
          extra: ["envelope": ["enabled": true], "headers": ["set": ["Accept-Encoding": "identity"]]]),
        TestConfig.route("plain", match: "/*"),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let cases: [(path: String, sent: String?, expected: [String])] = [
      // Enveloped: never gzip from the upstream (the gateway compresses the envelope).
      ("/e/1", "br, gzip;q=0.5, zstd", []),
      ("/e/2", "br", []),
      ("/e/3", nil, []),
      ("/c/1", "gzip, deflate, br", ["gzip"]),
      ("/c/2", "identity", []),
      ("/s/1", "gzip, br", ["identity"]),
      ("/p/1", "br, zstd", ["br, zstd"]),
    ]
    for item in cases {
      _ = try send("GET", item.path, to: gateway.port, headers: item.sent.map { [("Accept-Encoding", $0)] } ?? [])
    }
    #expect(backend.waitForRequests(cases.count))
    for item in cases {
      let request = backend.requests.first { $0.target == item.path }
      #expect(request?.head.values("Accept-Encoding") == item.expected, "\(item.path)")
    }
  }

  @Test func topLevelRulesApplyThenTheRoutesOwn() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [
        TestConfig.route(
          "layered", match: "/layered",
          extra: [
            "headers": [
              "set": ["X-Layer": "route", "X-Route-Only": "r"],
              "remove": ["X-Global-Only"],
            ]
          ]),
        TestConfig.route("plain", match: "/plain"),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port)],
      headers: [
        "set": ["Accept": "application/json", "X-Layer": "global", "X-Global-Only": "g"],
        "remove": ["Cookie", "X-Strip"],
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let clientHeaders = [
      ("Accept", "text/html"), ("Cookie", "session=abc"), ("X-Strip", "1"), ("X-Layer", "client"),
      ("X-Keep", "kept"),
    ]

    _ = try send("GET", "/layered", to: gateway.port, headers: clientHeaders)
    _ = try send("GET", "/plain", to: gateway.port, headers: clientHeaders)

    try #require(backend.requests.count == 2)
    let layered = backend.requests[0].head
    #expect(layered.values("Accept") == ["application/json"])
    #expect(layered.values("X-Layer") == ["route"])
    #expect(layered.values("X-Route-Only") == ["r"])
    #expect(!layered.has("X-Global-Only"))
    #expect(!layered.has("Cookie"))
    #expect(!layered.has("X-Strip"))
    #expect(layered.values("X-Keep") == ["kept"])
    let plain = backend.requests[1].head
    #expect(plain.values("Accept") == ["application/json"])
    #expect(plain.values("X-Layer") == ["global"])
    #expect(plain.values("X-Global-Only") == ["g"])
    #expect(!plain.has("X-Route-Only"))
    #expect(!plain.has("Cookie"))
    #expect(plain.values("X-Keep") == ["kept"])
  }

  @Test func hopByHopRequestFieldsNeverReachTheBackend() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send(
      "GET", "/hop", to: gateway.port,
      headers: [
        ("Connection", "keep-alive, X-Named-Hop"), ("X-Named-Hop", "secret"), ("Keep-Alive", "timeout=5"),
        // (`Upgrade: websocket` on a route without `websocket` is a 400 now: WebSocketTests.)
        ("TE", "trailers"), ("Trailer", "X-Checksum"), ("Upgrade", "h2c"),
        ("Proxy-Authorization", "Basic dXNlcjpwYXNz"), ("Proxy-Connection", "keep-alive"), ("X-End-To-End", "yes"),
      ])

    #expect(answer.status == 200)
    let head = try #require(backend.requests.first).head
    for name in [
      "Connection", "X-Named-Hop", "Keep-Alive", "TE", "Trailer", "Upgrade", "Proxy-Authorization",
      "Proxy-Connection",
    ] {
      #expect(!head.has(name), "\(name) reached the backend")
    }
    #expect(head.values("X-End-To-End") == ["yes"])
  }

  /// Config/README.md: every Proxy-* field is hop-by-hop, in both directions; only a fixed list of
  /// them used to be dropped, so `Proxy-Foo` crossed both ways. `Proxy` (httpoxy) and
  /// `Proxy_…` (read as `Proxy-…` by CGI-style backends) are dropped too.
  @Test func everyProxyFieldIsDroppedInBothDirections() throws {
    let backend = try TestBackend(
      always: .respond(
        .text("ok", headers: [("Proxy-Foo", "from-backend"), ("Proxy-Status", "origin"), ("X-Kept", "yes")])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send(
      "GET", "/proxy", to: gateway.port,
      headers: [
        ("Proxy-Foo", "1"), ("proxy-bar", "2"), ("Proxy", "http://attacker:3128"), ("Proxy_Baz", "3"),
        ("X-Proxy-Id", "kept"),
      ])

    #expect(answer.status == 200)
    let head = try #require(backend.requests.first).head
    for name in ["Proxy-Foo", "Proxy-Bar", "Proxy", "Proxy_Baz"] {
      #expect(!head.has(name), "\(name) reached the backend")
    }
    #expect(head.values("X-Proxy-Id") == ["kept"])
    #expect(!answer.head.has("Proxy-Foo"))
    #expect(!answer.head.has("Proxy-Status"))
    #expect(answer.head.values("X-Kept") == ["yes"])
  }

  @Test func fieldNamesMatchWhateverTheirCase() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: backend.port)],
      headers: ["set": ["Accept": "application/json"], "remove": ["Cookie"]])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    _ = try send(
      "GET", "/case", to: gateway.port,
      headers: [
        ("accept", "text/html"), ("COOKIE", "a=b"), ("connection", "X-NAMED"), ("x-named", "hop"),
        ("UPGRADE", "foo/2"), ("te", "trailers"), ("PROXY-authorization", "Basic eA=="),
        ("x-request-id", "lower-case-id"),
      ])

    let head = try #require(backend.requests.first).head
    #expect(head.values("Accept") == ["application/json"])
    for name in ["Cookie", "Connection", "X-Named", "Upgrade", "TE", "Proxy-Authorization"] {
      #expect(!head.has(name), "\(name) reached the backend")
    }
    #expect(head.values("X-Request-Id") == ["lower-case-id"])
  }

  @Test func fieldValuesPassByteForByte() throws {
    let backend = try TestBackend(always: .respond(.text("ok", headers: [("X-Back", "caf\u{e9} \t tab")])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let long = String(repeating: "v", count: 8000)

    let answer = try send(
      "GET", "/values", to: gateway.port,
      headers: [("X-Utf8", "caf\u{e9} \u{2603}"), ("X-Empty", ""), ("X-Long", long), ("X-Dup", "1"), ("X-Dup", "2")])

    let head = try #require(backend.requests.first).head
    #expect(head.values("X-Utf8") == ["caf\u{e9} \u{2603}"])
    #expect(head.values("X-Empty") == [""])
    #expect(head.values("X-Long") == [long])
    #expect(head.values("X-Dup") == ["1", "2"])
    #expect(answer.head.values("X-Back") == ["caf\u{e9} \t tab"])
  }

  @Test func hopByHopAnswerFieldsNeverReachTheClient() throws {
    let backend = try TestBackend(
      always: .respond(
        .text(
          "ok",
          headers: [
            ("Connection", "X-Backend-Hop"), ("X-Backend-Hop", "secret"), ("Keep-Alive", "timeout=5, max=100"),
            ("Trailer", "X-Checksum"), ("Upgrade", "h2c"), ("Proxy-Authenticate", "Basic realm=x"),
            ("Proxy-Connection", "keep-alive"), ("X-End-To-End", "yes"),
          ])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/hop", to: gateway.port)

    #expect(answer.status == 200)
    #expect(answer.text == "ok")
    for name in ["X-Backend-Hop", "Keep-Alive", "Trailer", "Upgrade", "Proxy-Authenticate", "Proxy-Connection"] {
      #expect(!answer.head.has(name), "\(name) reached the client")
    }
    // The gateway may say Connection: close for its own connection, never relay the backend's.
    #expect(answer.head.values("Connection").allSatisfy { $0.lowercased() == "close" })
    #expect(answer.head.values("X-End-To-End") == ["yes"])
  }

  @Test func forwardedForAndProtoAreSet() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    _ = try send("GET", "/fresh", to: gateway.port, headers: [("X-Forwarded-Proto", "https")])
    _ = try send("GET", "/relayed", to: gateway.port, headers: [("X-Forwarded-For", "203.0.113.7")])

    try #require(backend.requests.count == 2)
    let fresh = backend.requests[0].head
    #expect(fresh.values("X-Forwarded-For") == ["127.0.0.1"])
    #expect(fresh.values("X-Forwarded-Proto") == ["http"])
    let relayed = backend.requests[1].head
    #expect(relayed.values("X-Forwarded-For") == ["203.0.113.7, 127.0.0.1"])
    #expect(relayed.values("X-Forwarded-Proto") == ["http"])
  }

  @Test
  func everyForwardedForLineIsKeptInOrder() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    // Two field lines mean the same as one comma-joined line (RFC 9110 §5.3).
    _ = try send(
      "GET", "/chain", to: gateway.port,
      headers: [("X-Forwarded-For", "198.51.100.1, 198.51.100.2"), ("X-Forwarded-For", "203.0.113.7")])

    let head = try #require(backend.requests.first).head
    #expect(head.values("X-Forwarded-For") == ["198.51.100.1, 198.51.100.2, 203.0.113.7, 127.0.0.1"])
  }

  @Test func gatewayMadeAnswersCarryTheRequestID() throws {
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [TestConfig.route("down", match: "/down")],
        upstreams: ["api": TestConfig.upstream(port: try TestSocket.unusedPort())]))
    defer { gateway.stopExpectingCleanExit() }

    let noRoute = try send("GET", "/elsewhere", to: gateway.port, headers: [("X-Request-Id", "trace-404")])
    let unavailable = try send("GET", "/down", to: gateway.port, headers: [("X-Request-Id", "trace-502")])
    let generated = try send("GET", "/elsewhere", to: gateway.port)

    #expect(noRoute.head.values("X-Request-Id") == ["trace-404"])
    #expect(unavailable.head.values("X-Request-Id") == ["trace-502"])
    #expect(Self.isGeneratedRequestID(generated.head.value("X-Request-Id")))
  }

  @Test func requestIDIsMadeWhenAbsentAndEchoedToTheClient() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/one", to: gateway.port)
    let second = try send("GET", "/two", to: gateway.port)

    try #require(backend.requests.count == 2)
    let sentUpstream = backend.requests.map { $0.head.values("X-Request-Id") }
    #expect(sentUpstream.allSatisfy { $0.count == 1 && Self.isGeneratedRequestID($0[0]) })
    #expect(first.head.value("X-Request-Id") == sentUpstream[0].first)
    #expect(second.head.value("X-Request-Id") == sentUpstream[1].first)
    #expect(sentUpstream[0] != sentUpstream[1])
  }

  @Test func plainClientRequestIDIsKept() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/id", to: gateway.port, headers: [("X-Request-Id", "client-req_42.a:b")])

    #expect(backend.requests.first?.head.values("X-Request-Id") == ["client-req_42.a:b"])
    #expect(answer.head.values("X-Request-Id") == ["client-req_42.a:b"])
  }

  @Test func unsafeClientRequestIDIsReplaced() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/id", to: gateway.port, headers: [("X-Request-Id", "two words\"<x>")])

    let upstream = try #require(backend.requests.first).head.values("X-Request-Id")
    #expect(upstream.count == 1 && Self.isGeneratedRequestID(upstream.first))
    #expect(answer.head.values("X-Request-Id") == upstream)
  }

  @Test func backendsRequestIDDoesNotReplaceTheGateways() throws {
    let backend = try TestBackend(always: .respond(.text("ok", headers: [("X-Request-Id", "from-backend")])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/id", to: gateway.port)

    let upstream = try #require(backend.requests.first).head.values("X-Request-Id")
    #expect(answer.head.values("X-Request-Id") == upstream)
  }

  /// A configured Host replaces the upstream's (virtual hosting behind the gateway): one
  /// Host reaches the backend, the route's over the top level's. It used to be sent as a
  /// second Host line.
  @Test func configuredHostReplacesTheUpstreams() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [
        TestConfig.route("tenant", match: "/tenant/*", extra: ["headers": ["set": ["Host": "tenant-a.internal"]]]),
        TestConfig.route("rest", match: "/*"),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port)],
      headers: ["set": ["host": "api.internal:8443"]])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    _ = try send("GET", "/tenant/x", to: gateway.port)
    _ = try send("GET", "/other", to: gateway.port)

    try #require(backend.requests.count == 2)
    #expect(backend.requests[0].head.values("Host") == ["tenant-a.internal"])
    #expect(backend.requests[1].head.values("Host") == ["api.internal:8443"])
  }

  /// Routes that set their own Host to one upstream are virtual hosts: the same path on
  /// each is a different resource, so one's stored answer never answers the other.
  @Test func routesWithTheirOwnHostNeverShareStoredAnswers() throws {
    let backend = try TestBackend { request in
      .respond(.text("answer of \(request.head.value("Host") ?? "-") for \(request.path)"))
    }
    defer { backend.stop() }
    var config = TestConfig.make(
      routes: [
        TestConfig.route(
          "a", match: "/a/*", rewrite: "/*",
          extra: ["headers": ["set": ["Host": "a.internal"]], "cache": ["fresh_s": 60]]),
        TestConfig.route(
          "b", match: "/b/*", rewrite: "/*",
          extra: ["headers": ["set": ["Host": "b.internal"]], "cache": ["fresh_s": 60]]),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    config["store"] = ["path": "var/store.sqlite"]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let a = try send("GET", "/a/users", to: gateway.port)
    let b = try send("GET", "/b/users", to: gateway.port)
    let aAgain = try send("GET", "/a/users", to: gateway.port)

    #expect(a.text == "answer of a.internal for /users")
    #expect(b.text == "answer of b.internal for /users")
    #expect(b.head.value("X-Gatehouse-Cache") == "MISS")
    #expect(aAgain.text == a.text)
  }

  /// `gatehouse check` refuses `headers.set` of what the gateway writes itself (these were
  /// accepted and sent twice, or sent though the gateway had handled them), and `remove`
  /// of what it never forwards or always sends.
  @Test func checkRefusesSettingOrRemovingManagedHeaders() throws {
    var config = TestConfig.passThrough(to: 3000)
    config["headers"] = [
      "set": [
        "X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https", "X-Request-Id": "fixed", "Expect": "100-continue",
        "Proxy-Authorization": "Basic eA==",
      ],
      "remove": ["Host", "Connection"],
    ]
    let json = try JSONSerialization.data(withJSONObject: config)
    let result = try LifecycleTests.runCheck(
      ["--config", "config.json"], config: String(decoding: json, as: UTF8.self))

    #expect(result.status == 1)
    let lines = Set(result.err.split(separator: "\n").map(String.init))
    for name in ["X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id", "Expect", "Proxy-Authorization"] {
      #expect(lines.contains("headers.set.\(name): \(name) is managed by the gateway and cannot be set"), "\(name)")
    }
    #expect(
      lines.contains(
        "headers.remove[0]: Host is always sent by the gateway and cannot be removed (set it to choose its value)"))
    #expect(
      lines.contains(
        "headers.remove[1]: Connection is never forwarded (the gateway manages it); leave it out of remove"))
  }

  @Test func removingForwardedForRelaysOnlyThePeerAddress() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let config = TestConfig.make(
      routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: backend.port)],
      headers: ["remove": ["X-Forwarded-For"]])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    _ = try send("GET", "/spoof", to: gateway.port, headers: [("X-Forwarded-For", "203.0.113.7")])

    #expect(backend.requests.first?.head.values("X-Forwarded-For") == ["127.0.0.1"])
  }

  @Test func hostIsTheUpstreams() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    _ = try send("GET", "/host", to: gateway.port)

    let head = try #require(backend.requests.first).head
    #expect(head.values("Host") == ["127.0.0.1:\(backend.port)"])
  }
}
