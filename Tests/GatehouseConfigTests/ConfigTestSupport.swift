@testable import GatehouseConfig

/// The smallest valid config: one always-stub route, everything else default.
let minimalConfigJSON = #"{"routes": [{"name": "r", "match": {"path": "/"}, "stub": {"mode": "always"}}]}"#

/// A config with an upstream `api`, a static token `api` and one route using both; `route`
/// adds members to that route and `extra` adds top-level members.
func configJSON(route: String = "", extra: String = "") -> String {
  """
  {
    "upstreams": { "api": { "url": "http://127.0.0.1:3000/api/v1" } },
    "tokens": { "api": { "type": "static", "value": "s3cret-token" } },
    "routes": [ { "name": "users", "match": { "path": "/users/:id" }, "upstream": "api"\(route.isEmpty ? "" : ", " + route) } ]
    \(extra.isEmpty ? "" : ", " + extra)
  }
  """
}

/// The issues `check` would print for `json`, or `["loaded"]` when it is valid.
func issueLines(_ json: String, environment: [String: String] = [:]) -> [String] {
  do {
    _ = try ConfigLoader.load(json: json, environment: environment)
    return ["loaded"]
  } catch {
    return error.lines
  }
}

func loadConfig(_ json: String, environment: [String: String] = [:]) throws -> GatehouseConfig {
  try ConfigLoader.load(json: json, environment: environment)
}
