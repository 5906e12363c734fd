import Testing

@testable import GatehouseCore

/// Finding a cache entry's route from its upstream and upstream path.
@Suite struct CacheEntryRoutesTests {
  static let config = """
    {
      "upstreams": {
        "api": { "url": "http://127.0.0.1:3000/api/v1" },
        "other": { "url": "http://127.0.0.1:3001" }
      },
      "routes": [
        { "name": "me", "match": { "path": "/me" }, "upstream": "api", "path": "/users/current",
          "cache": { "stale_if_error_s": 60 } },
        { "name": "user", "match": { "path": "/users/:id", "methods": ["GET"] }, "upstream": "api",
          "cache": { "stale_if_error_s": 60 } },
        { "name": "users", "match": { "path": "/users" }, "upstream": "api", "cache": { "stale_if_error_s": 60 } },
        { "name": "pass", "match": { "path": "/pass/*" }, "upstream": "other", "cache": { "stale_if_error_s": 60 } },
        { "name": "uncached", "match": { "path": "/*" }, "upstream": "api" },
        { "name": "hello", "match": { "path": "/hello" }, "stub": { "mode": "always" } }
      ]
    }
    """

  let routes: CacheEntryRoutes

  init() throws {
    routes = CacheEntryRoutes(config: try loadConfig(Self.config))
  }

  @Test func theFirstFittingRouteOnTheSameUpstreamWins() {
    #expect(routes.route(upstream: "api", method: "GET", path: "/api/v1/users") == "users")
    #expect(routes.route(upstream: "api", method: "GET", path: "/api/v1/users/42") == "user")
    #expect(routes.route(upstream: "api", method: "HEAD", path: "/api/v1/users/42") == "user", "GET admits HEAD")
    // A rewrite is what reaches the upstream: `/me` is stored as `/users/current`, which the
    // rewrite fits before `/users/:id` does.
    #expect(routes.route(upstream: "api", method: "GET", path: "/api/v1/users/current") == "me")
    #expect(routes.route(upstream: "other", method: "GET", path: "/pass") == "pass")
    #expect(routes.route(upstream: "other", method: "GET", path: "/pass/a/b") == "pass")
    #expect(routes.route(upstream: "other", method: "GET", path: "/passage") == nil)
    // Without the base path or on another upstream, the entry is not the route's.
    #expect(routes.route(upstream: "api", method: "GET", path: "/users/42") == nil)
    #expect(routes.route(upstream: "other", method: "GET", path: "/api/v1/users") == nil)
    #expect(routes.route(upstream: "gone", method: "GET", path: "/api/v1/users") == nil)
    // An empty segment is not a parameter.
    #expect(routes.route(upstream: "api", method: "GET", path: "/api/v1/users/") == "uncached")
  }

  @Test func literalPrefixesNarrowTheSearch() {
    #expect(routes.literalPrefix(route: "user") == "/api/v1/users/")
    #expect(routes.literalPrefix(route: "me") == "/api/v1/users/current")
    #expect(routes.literalPrefix(route: "pass") == "/pass")
    #expect(routes.literalPrefix(route: "uncached") == "/api/v1")
    #expect(routes.literalPrefix(route: "hello") == nil, "a stub-only route stores nothing")
    #expect(routes.literalPrefix(route: "nope") == nil)
  }
}
