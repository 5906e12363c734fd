import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// Builds a table from route lines such as `{"match": {"path": "/pass/*"}, "path": "/v2/*"}`;
/// every route gets a name and the upstream `api` with base path `base`.
private func routeTable(_ routes: [String], base: String = "") throws -> RouteTable {
  let routeList = routes.enumerated().map { index, route in
    let body = route.dropFirst().dropLast()
    return #"{"name": "r\#(index)", "upstream": "api", \#(body)}"#
  }
  let json = """
    {
      "upstreams": { "api": { "url": "http://127.0.0.1:3000\(base)" } },
      "routes": [\(routeList.joined(separator: ",\n"))]
    }
    """
  return RouteTable(config: try loadConfig(json))
}

/// The index of the route that takes the request, or nil.
private func matchedIndex(_ table: RouteTable, _ method: String, _ path: String) -> Int? {
  table.match(method: method, path: path)?.routeIndex
}

/// The upstream path and query for a request target such as `/pass/a?x=1`.
private func upstreamTarget(_ table: RouteTable, _ target: String, method: String = "GET") -> String? {
  let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
  let path = ArraySlice(parts[0].utf8)
  let query = parts.count > 1 ? ArraySlice(parts[1].utf8) : nil
  guard let match = table.match(method: ArraySlice(method.utf8), path: path) else { return nil }
  return String(decoding: table.upstreamPath(for: match, requestPath: path, query: query), as: UTF8.self)
}

@Suite struct RouteTableTests {
  // MARK: - Matching

  @Test func literalPathsMatchExactly() throws {
    let table = try routeTable([#"{"match": {"path": "/users"}}"#])
    #expect(matchedIndex(table, "GET", "/users") == 0)
    #expect(matchedIndex(table, "GET", "/users/") == nil)
    #expect(matchedIndex(table, "GET", "/user") == nil)
    #expect(matchedIndex(table, "GET", "/users/1") == nil)
    #expect(matchedIndex(table, "GET", "/Users") == nil)
    #expect(matchedIndex(table, "GET", "") == nil)
  }

  @Test func trailingSlashInATemplateIsSignificant() throws {
    let table = try routeTable([#"{"match": {"path": "/users/"}}"#, #"{"match": {"path": "/"}}"#])
    #expect(matchedIndex(table, "GET", "/users/") == 0)
    #expect(matchedIndex(table, "GET", "/users") == nil)
    #expect(matchedIndex(table, "GET", "/") == 1)
  }

  @Test func parametersMatchOneNonEmptySegment() throws {
    let table = try routeTable([#"{"match": {"path": "/users/:id/posts/:post"}}"#])
    let path = "/users/42/posts/a%2Fb"
    let match = try #require(table.match(method: "GET", path: path))
    #expect(match.parameterCount == 2)
    #expect(match.parameterRange(at: 0) == 7..<9)
    #expect(
      table.parameters(of: match, in: path).map { "\($0.name)=\($0.value)" } == ["id=42", "post=a%2Fb"])
    #expect(match.remainder == nil)
    #expect(matchedIndex(table, "GET", "/users//posts/1") == nil)
    #expect(matchedIndex(table, "GET", "/users/42/posts/") == nil)
    #expect(matchedIndex(table, "GET", "/users/42/posts/1/") == nil)
    #expect(matchedIndex(table, "GET", "/users/42/posts") == nil)
  }

  @Test func wildcardMatchesThePrefixWithAndWithoutTheSlash() throws {
    let table = try routeTable([#"{"match": {"path": "/pass/*"}}"#])
    #expect(table.match(method: "GET", path: "/pass")?.remainder == 5..<5)
    #expect(table.match(method: "GET", path: "/pass/")?.remainder == 5..<6)
    #expect(table.match(method: "GET", path: "/pass/a/b")?.remainder == 5..<9)
    #expect(table.match(method: "GET", path: "/pass//a")?.remainder == 5..<8)
    #expect(matchedIndex(table, "GET", "/passage") == nil)
    #expect(matchedIndex(table, "GET", "/pas") == nil)
    #expect(matchedIndex(table, "GET", "/") == nil)
  }

  @Test func rootWildcardMatchesEverything() throws {
    let table = try routeTable([#"{"match": {"path": "/*"}}"#])
    #expect(table.match(method: "GET", path: "/")?.remainder == 0..<1)
    #expect(table.match(method: "GET", path: "/a/b")?.remainder == 0..<4)
  }

  /// `OPTIONS *` or `CONNECT host:port` once reached a `/*` route and went upstream as
  /// `/api/v1*`; the parser refuses them now, and the table never matches a non-path.
  @Test func onlyPathsStartingWithASlashMatch() throws {
    let table = try routeTable([#"{"match": {"path": "/*"}}"#], base: "/api/v1")
    #expect(upstreamTarget(table, "*", method: "OPTIONS") == nil)
    #expect(upstreamTarget(table, "example.com:443", method: "CONNECT") == nil)
    #expect(matchedIndex(table, "GET", "") == nil)
    #expect(upstreamTarget(table, "/x") == "/api/v1/x")
  }

  @Test func parametersAndWildcardTogether() throws {
    let table = try routeTable([#"{"match": {"path": "/t/:tenant/*"}, "path": "/tenants/:tenant/*"}"#])
    let match = try #require(table.match(method: "GET", path: "/t/acme/x/y"))
    #expect(match.parameterRange(at: 0) == 3..<7)
    #expect(match.remainder == 7..<11)
    #expect(upstreamTarget(table, "/t/acme/x/y") == "/tenants/acme/x/y")
    #expect(matchedIndex(table, "GET", "/t/") == nil)
  }

  @Test func percentEncodedBytesAreComparedAsTheyAre() throws {
    let table = try routeTable([#"{"match": {"path": "/caf%C3%A9"}}"#, #"{"match": {"path": "/a/b"}}"#])
    #expect(matchedIndex(table, "GET", "/caf%C3%A9") == 0)
    #expect(matchedIndex(table, "GET", "/caf%c3%a9") == nil)
    #expect(matchedIndex(table, "GET", "/a%2Fb") == nil)
    #expect(matchedIndex(table, "GET", "/%61/b") == nil)
  }

  @Test func routesAreTriedInOrder() throws {
    let table = try routeTable([
      #"{"match": {"path": "/users/me"}}"#,
      #"{"match": {"path": "/users/:id"}}"#,
      #"{"match": {"path": "/*"}}"#,
    ])
    #expect(matchedIndex(table, "GET", "/users/me") == 0)
    #expect(matchedIndex(table, "GET", "/users/7") == 1)
    #expect(matchedIndex(table, "GET", "/other") == 2)
    let reversed = try routeTable([
      #"{"match": {"path": "/users/:id"}}"#, #"{"match": {"path": "/users/me"}}"#,
    ])
    #expect(matchedIndex(reversed, "GET", "/users/me") == 0)
  }

  @Test func methodFilterFallsThroughToLaterRoutes() throws {
    let table = try routeTable([
      #"{"match": {"path": "/items", "methods": ["POST"]}}"#,
      #"{"match": {"path": "/items", "methods": ["GET", "DELETE"]}}"#,
    ])
    #expect(matchedIndex(table, "POST", "/items") == 0)
    #expect(matchedIndex(table, "GET", "/items") == 1)
    #expect(matchedIndex(table, "DELETE", "/items") == 1)
    #expect(matchedIndex(table, "PUT", "/items") == nil)
    #expect(matchedIndex(table, "get", "/items") == nil)
    #expect(matchedIndex(table, "GETX", "/items") == nil)
  }

  @Test func getAlsoAdmitsHeadButNothingElseDoes() throws {
    let table = try routeTable([
      #"{"match": {"path": "/a", "methods": ["GET"]}}"#,
      #"{"match": {"path": "/b", "methods": ["POST"]}}"#,
      #"{"match": {"path": "/c"}}"#,
    ])
    #expect(matchedIndex(table, "HEAD", "/a") == 0)
    #expect(matchedIndex(table, "HEAD", "/b") == nil)
    #expect(matchedIndex(table, "PATCH", "/c") == 2)
  }

  @Test func matchWorksOnRawBuffersAndSlices() throws {
    let table = try routeTable([#"{"match": {"path": "/users/:id"}}"#])
    let line = Array("GET /users/9 HTTP/1.1".utf8)
    // A slice in the middle of a request line: ranges count from the slice's start.
    let match = try #require(table.match(method: line[0..<3], path: line[4..<12]))
    #expect(match.parameterRange(at: 0) == 7..<8)
    let viaPointers = line.withUnsafeBytes { bytes in
      table.match(
        method: UnsafeRawBufferPointer(rebasing: bytes[0..<3]),
        path: UnsafeRawBufferPointer(rebasing: bytes[4..<12]))
    }
    #expect(viaPointers?.routeIndex == 0)
  }

  // MARK: - Upstream path

  @Test func withoutPathTheRequestPathIsAppendedToTheBasePath() throws {
    let table = try routeTable([#"{"match": {"path": "/*"}}"#], base: "/api/v1/")
    #expect(upstreamTarget(table, "/users/1") == "/api/v1/users/1")
    #expect(upstreamTarget(table, "/") == "/api/v1/")
  }

  @Test func templateParametersCarryOver() throws {
    let table = try routeTable(
      [#"{"match": {"path": "/users/:id"}, "path": "/people/:id/profile"}"#], base: "/api")
    #expect(upstreamTarget(table, "/users/42") == "/api/people/42/profile")
    #expect(upstreamTarget(table, "/users/a%20b") == "/api/people/a%20b/profile")
  }

  @Test func parametersCanBeReordered() throws {
    let table = try routeTable([#"{"match": {"path": "/:a/:b"}, "path": "/x/:b/:a"}"#])
    #expect(upstreamTarget(table, "/one/two") == "/x/two/one")
  }

  @Test func wildcardRewriteCarriesTheRest() throws {
    let table = try routeTable([#"{"match": {"path": "/pass/*"}, "path": "/v2/*"}"#])
    #expect(upstreamTarget(table, "/pass/a/b") == "/v2/a/b")
    #expect(upstreamTarget(table, "/pass/") == "/v2/")
    #expect(upstreamTarget(table, "/pass") == "/v2")
  }

  /// A parameter holding an encoded `?` or `#` would cut the rewrite short for a backend
  /// that decodes before splitting: refused. A rest (it ends the template) and paths
  /// without a rewrite go as sent.
  @Test func rewritesRefuseEncodedQueryAndFragmentDelimitersInParameters() throws {
    let table = try routeTable([
      #"{"match": {"path": "/users/:id"}, "path": "/v2/users/:id/profile"}"#,
      #"{"match": {"path": "/tail/*"}, "path": "/t/*"}"#,
      #"{"match": {"path": "/plain/:id"}}"#,
    ])
    func refused(_ path: String) throws -> Bool {
      let bytes = ArraySlice(path.utf8)
      let match = try #require(table.match(method: ArraySlice("GET".utf8), path: bytes))
      return table.rewriteCarriesEncodedDelimiter(for: match, requestPath: bytes)
    }
    for path in ["/users/1%3F", "/users/1%3fadmin=1", "/users/1%23", "/users/%23x", "/users/a%2F%3F"] {
      #expect(try refused(path), "\(path)")
    }
    for path in ["/users/1", "/users/%3", "/users/1%2F", "/users/1%33F", "/tail/a%3F", "/tail/a%23/b", "/plain/1%3F"] {
      #expect(try !refused(path), "\(path)")
    }
  }

  @Test func rewriteMayDropTheRest() throws {
    let table = try routeTable([#"{"match": {"path": "/legacy/*"}, "path": "/new"}"#])
    #expect(upstreamTarget(table, "/legacy/a/b") == "/new")
  }

  @Test func rewriteToRootWildcardWithoutBasePathNeverYieldsAnEmptyPath() throws {
    let table = try routeTable([#"{"match": {"path": "/pass/*"}, "path": "/*"}"#])
    #expect(upstreamTarget(table, "/pass") == "/")
    #expect(upstreamTarget(table, "/pass/x") == "/x")
    let withBase = try routeTable([#"{"match": {"path": "/pass/*"}, "path": "/*"}"#], base: "/api")
    #expect(upstreamTarget(withBase, "/pass") == "/api")
    #expect(upstreamTarget(withBase, "/pass/x") == "/api/x")
  }

  @Test func queryIsForwardedUnchanged() throws {
    let table = try routeTable([#"{"match": {"path": "/users/:id"}, "path": "/u/:id"}"#], base: "/api")
    #expect(upstreamTarget(table, "/users/1?b=2&a=%20&a") == "/api/u/1?b=2&a=%20&a")
    #expect(upstreamTarget(table, "/users/1?") == "/api/u/1?")
    #expect(upstreamTarget(table, "/users/1") == "/api/u/1")
  }

  /// Only a route with neither a base path nor a rewrite sends the request's own target (the
  /// session then uses its bytes without a copy): its upstream path is the target itself.
  @Test func onlyARouteWithoutBasePathOrRewriteSendsTheTargetUnchanged() throws {
    let plain = try routeTable([#"{"match": {"path": "/users/*"}}"#])
    let plainMatch = try #require(plain.match(method: "GET", path: "/users/1"))
    #expect(plain.sendsTargetUnchanged(plainMatch))
    for target in ["/users/1", "/users/1?b=2&a=%20&a", "/users/1?", "/users/a%2Fb"] {
      #expect(upstreamTarget(plain, target) == target)
    }
    let rewritten = try routeTable([#"{"match": {"path": "/pass/*"}, "path": "/*"}"#])
    #expect(!rewritten.sendsTargetUnchanged(try #require(rewritten.match(method: "GET", path: "/pass/x"))))
    let based = try routeTable([#"{"match": {"path": "/users/*"}}"#], base: "/api")
    #expect(!based.sendsTargetUnchanged(try #require(based.match(method: "GET", path: "/users/1"))))
  }

  @Test func stubRouteWithoutUpstreamHasNoBasePath() throws {
    let config = try loadConfig(minimalConfigJSON)
    let table = RouteTable(config: config)
    let match = try #require(table.match(method: "GET", path: "/"))
    #expect(table.routes[match.routeIndex].stub.mode == .always)
    #expect(table.upstreamPath(for: match, requestPath: ArraySlice("/".utf8), query: nil) == Array("/".utf8))
  }
}

@Suite struct RouteTemplateTests {
  @Test func parsesSegmentsParametersAndWildcard() throws {
    let template = try RouteTemplate.parse("/users/:id/files/*").get()
    #expect(template.segments == [.literal("users"), .parameter(name: "id"), .literal("files")])
    #expect(template.hasWildcard)
    #expect(template.parameterNames == ["id"])
  }

  @Test func rootAndRootWildcard() throws {
    #expect(try RouteTemplate.parse("/").get().segments == [.literal("")])
    let all = try RouteTemplate.parse("/*").get()
    #expect(all.segments.isEmpty && all.hasWildcard)
  }

  @Test func colonInsideASegmentIsLiteral() throws {
    #expect(
      try RouteTemplate.parse("/v1/items:batch").get().segments == [.literal("v1"), .literal("items:batch")])
  }

  @Test func limitsTheNumberOfParameters() throws {
    let nine = "/" + (1...9).map { ":p\($0)" }.joined(separator: "/")
    let eight = "/" + (1...8).map { ":p\($0)" }.joined(separator: "/")
    #expect(throws: RouteTemplateError.self) { try RouteTemplate.parse(nine).get() }
    #expect(try RouteTemplate.parse(eight).get().parameterNames.count == 8)
  }
}
