import Foundation
import Testing

/// Route matching (Config/README.md): config order, literal paths, `:name` templates, `/*` prefixes,
/// the `methods` filter, path rewrites, and the query passed on unchanged. The backend
/// answers with the target it received, so each answer shows where the request went.
@Suite struct RoutingTests {
  /// A backend that echoes the target, and a gateway with the routing table below.
  final class Setup {
    let backend: TestBackend
    let gateway: GatewayProcess

    init() throws {
      backend = try TestBackend { request in .respond(.text(request.target)) }
      let routes: [[String: Any]] = [
        TestConfig.route("me", match: "/users/me", rewrite: "/self"),
        TestConfig.route("user", match: "/users/:id", rewrite: "/accounts/:id"),
        TestConfig.route("user-post", match: "/users/:uid/posts/:pid", rewrite: "/posts/:pid/by/:uid"),
        TestConfig.route("order", match: "/orders/:id", rewrite: "/order-by-id/:id"),
        TestConfig.route("latest-order", match: "/orders/latest", rewrite: "/latest-orders"),
        TestConfig.route("things-post", match: "/things", methods: ["POST"], rewrite: "/things-post"),
        TestConfig.route("things-get", match: "/things", methods: ["GET"], rewrite: "/things-get"),
        TestConfig.route("pass", match: "/pass/*", rewrite: "/v2/*"),
        TestConfig.route("plain", match: "/plain/*", upstream: "based"),
        TestConfig.route("based-rewrite", match: "/b/:id/*", upstream: "based", rewrite: "/items/:id/*"),
      ]
      do {
        gateway = try GatewayProcess(
          config: TestConfig.make(
            routes: routes,
            upstreams: [
              "api": TestConfig.upstream(port: backend.port),
              "based": TestConfig.upstream(port: backend.port, basePath: "/api/v1"),
            ]))
      } catch {
        backend.stop()
        throw error
      }
    }

    /// The target the backend received for `method target`, or the status when the gateway
    /// answered itself.
    func upstreamTarget(_ target: String, method: String = "GET") throws -> String {
      let answer = try send(method, target, to: gateway.port, body: method == "POST" ? [] : nil)
      return answer.status == 200 ? answer.text : "status \(answer.status)"
    }

    func finish() {
      gateway.stopExpectingCleanExit()
      backend.stop()
    }
  }

  @Test func literalRouteListedBeforeATemplateWins() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/users/me") == "/self")
  }

  @Test func templateParameterCarriesOverToTheRewrite() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/users/42") == "/accounts/42")
    #expect(try setup.upstreamTarget("/users/a-b_c.d") == "/accounts/a-b_c.d")
  }

  @Test func templateParametersCanBeReorderedByTheRewrite() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/users/7/posts/99") == "/posts/99/by/7")
  }

  @Test func templateNeedsANonEmptySegmentAndTheWholePath() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/users/") == "status 404")
    #expect(try setup.upstreamTarget("/users/7/extra") == "status 404")
    #expect(setup.backend.requests.isEmpty)
  }

  @Test func firstMatchingRouteWinsOverALaterLiteral() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/orders/latest") == "/order-by-id/latest")
  }

  @Test func methodsFilterSkipsToTheRouteThatTakesTheMethod() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/things", method: "POST") == "/things-post")
    #expect(try setup.upstreamTarget("/things", method: "GET") == "/things-get")
    // Listing GET admits HEAD.
    let head = try send("HEAD", "/things", to: setup.gateway.port)
    #expect(head.status == 200)
    #expect(setup.backend.requests.last.map { "\($0.method) \($0.target)" } == "HEAD /things-get")
  }

  @Test func requestNoRouteTakesIsA404Envelope() throws {
    let setup = try Setup()
    defer { setup.finish() }

    let wrongMethod = try send("DELETE", "/things", to: setup.gateway.port)
    let unknownPath = try send("GET", "/nowhere", to: setup.gateway.port)

    #expect(isErrorEnvelope(wrongMethod, status: 404, message: "no route for DELETE /things"))
    #expect(isErrorEnvelope(unknownPath, status: 404, message: "no route for GET /nowhere"))
    #expect(wrongMethod.head.value("Content-Type")?.hasPrefix("application/json") == true)
    #expect(setup.backend.requests.isEmpty)
  }

  @Test func prefixRewriteCarriesTheRestOfThePath() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/pass/a/b") == "/v2/a/b")
    #expect(try setup.upstreamTarget("/pass/") == "/v2/")
    #expect(try setup.upstreamTarget("/pass") == "/v2")
    #expect(try setup.upstreamTarget("/passage") == "status 404")
  }

  @Test func routeWithoutRewriteAppendsTheRequestPathToTheUpstreamBasePath() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/plain/x/y") == "/api/v1/plain/x/y")
  }

  @Test func rewriteIsAppendedToTheUpstreamBasePath() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/b/7/x/y") == "/api/v1/items/7/x/y")
    #expect(try setup.upstreamTarget("/b/7") == "/api/v1/items/7")
  }

  @Test
  func absoluteFormTargetIsRoutedByItsPath() throws {
    let setup = try Setup()
    defer { setup.finish() }
    // RFC 9112 §3.2.2: a server must accept the absolute form.
    #expect(try setup.upstreamTarget("http://gateway.test/users/42?x=1") == "/accounts/42?x=1")
  }

  @Test(
    arguments: ["users/42", "/users/42#fragment"])
  func invalidRequestTargetIs400(target: String) throws {
    let setup = try Setup()
    defer { setup.finish() }
    let client = try RawClient(port: setup.gateway.port)
    let answer = try client.exchange(httpRequest("GET", target))
    #expect(isErrorEnvelope(answer, status: 400))
    #expect(client.waitForEnd() != .stillOpen)
    #expect(setup.backend.requests.isEmpty)
  }

  /// The routes are an allow-list: a `.` or `..` segment would let the backend resolve a
  /// path no route allowed (with the matched route's headers and token), and once went
  /// upstream as sent (`/pass/../../admin/secret` as `/v2/../../admin/secret`) or filled a
  /// parameter with `..`. It is refused before routing, plain or percent-encoded.
  @Test(arguments: [
    "/pass/../../admin/secret", "/users/..", "/users/%2e%2e", "/users/.%2E", "/pass/a/./b", "/b/7/..%2Fadmin",
    "/plain/..;x/admin", "http://gateway.test/pass/../x",
  ])
  func dotSegmentIs400AndNeverForwarded(target: String) throws {
    let setup = try Setup()
    defer { setup.finish() }
    let client = try RawClient(port: setup.gateway.port)
    let answer = try client.exchange(httpRequest("GET", target))
    #expect(isErrorEnvelope(answer, status: 400, message: "bad request: the request path has a . or .. segment"))
    #expect(answer.head.value("Connection")?.lowercased() == "close")
    #expect(client.waitForEnd() != .stillOpen)
    #expect(setup.backend.requests.isEmpty)
  }

  /// Dots inside a segment, in the query, and escapes other than `%2E` are left alone.
  @Test func dotsThatAreNotSegmentsAndOtherEscapesPassAsSent() throws {
    let setup = try Setup()
    defer { setup.finish() }
    #expect(try setup.upstreamTarget("/users/v1.2") == "/accounts/v1.2")
    #expect(try setup.upstreamTarget("/users/...") == "/accounts/...")
    #expect(try setup.upstreamTarget("/pass/a%2Fb/%2E%2Ex?next=../..") == "/v2/a%2Fb/%2E%2Ex?next=../..")
  }

  @Test func queryIsForwardedUnchanged() throws {
    let setup = try Setup()
    defer { setup.finish() }
    let query = "b=2&a=1&a=0&sp=%20x+y&enc=%2F%3F&empty=&flag"
    #expect(try setup.upstreamTarget("/pass/a?\(query)") == "/v2/a?\(query)")
    #expect(try setup.upstreamTarget("/users/5?\(query)") == "/accounts/5?\(query)")
    #expect(try setup.upstreamTarget("/plain/q?\(query)") == "/api/v1/plain/q?\(query)")
    #expect(try setup.upstreamTarget("/pass/a?") == "/v2/a?")
  }
}

/// An upstream's `servers`: requests go to the servers' addresses, while the url still gives
/// the `Host` field (and the base path). A server that refuses connections costs no request:
/// each try on it goes again to the other.
@Suite struct UpstreamServersTests {
  @Test func requestsGoToTheServersWithTheUrlsHostAndBasePath() throws {
    let backend = try TestBackend { request in
      .respond(.text("\(request.target) \(request.head.value("Host") ?? "")"))
    }
    defer { backend.stop() }
    // The url's own address has nothing listening, nor has the second server.
    let upstream: [String: Any] = [
      "url": "http://api.internal:1/v1",
      "servers": [["address": "127.0.0.1:\(backend.port)"], ["address": "127.0.0.1:1", "weight": 3]],
    ]
    let gateway = try GatewayProcess(
      config: TestConfig.make(routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": upstream]))
    defer { gateway.stopExpectingCleanExit() }
    // Three: within the retry budget's three a second, whichever server each first try picks.
    for _ in 0..<3 {
      let answer = try send("GET", "/items", to: gateway.port)
      #expect(answer.status == 200)
      #expect(answer.text == "/v1/items api.internal:1")
    }
    #expect(backend.requests.count == 3)
  }
}
