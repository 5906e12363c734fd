import Foundation

/// Builds gateway config documents (Config/README.md) for tests: one listener on 127.0.0.1 port 0,
/// one worker, access log on stdout, and whatever routes, upstreams and limits a test needs.
enum TestConfig {
  /// A whole config document.
  static func make(
    routes: [[String: Any]], upstreams: [String: [String: Any]] = [:], limits: [String: Any]? = nil,
    headers: [String: Any]? = nil, access: String = "stdout", workers: Int = 1
  ) -> [String: Any] {
    var config: [String: Any] = [
      "listen": [["address": "127.0.0.1:0"]],
      // Many gateways run at once in the suite: the admin API takes a free port too.
      "admin": ["listen": "127.0.0.1:0"],
      "workers": workers,
      "routes": routes,
      "log": ["level": "info", "access": access, "format": "json"],
    ]
    if !upstreams.isEmpty { config["upstreams"] = upstreams }
    if let limits { config["limits"] = limits }
    if let headers { config["headers"] = headers }
    return config
  }

  /// An upstream at 127.0.0.1:`port` with an optional base path and timeouts.
  static func upstream(
    port: UInt16, basePath: String = "", answerTimeoutMs: Int? = nil, connectTimeoutMs: Int? = nil
  ) -> [String: Any] {
    var upstream: [String: Any] = ["url": "http://127.0.0.1:\(port)\(basePath)"]
    if let answerTimeoutMs { upstream["response_timeout_ms"] = answerTimeoutMs }
    if let connectTimeoutMs { upstream["connect_timeout_ms"] = connectTimeoutMs }
    return upstream
  }

  /// A route to upstream `upstream`. The envelope is off (bodies pass through) unless
  /// `extra` says otherwise; `extra` members are merged in last.
  static func route(
    _ name: String, match path: String, methods: [String]? = nil, upstream: String? = "api", rewrite: String? = nil,
    extra: [String: Any] = [:]
  ) -> [String: Any] {
    var match: [String: Any] = ["path": path]
    if let methods { match["methods"] = methods }
    var route: [String: Any] = ["name": name, "match": match, "envelope": ["enabled": false]]
    if let upstream { route["upstream"] = upstream }
    if let rewrite { route["path"] = rewrite }
    for (key, value) in extra { route[key] = value }
    return route
  }

  /// The usual single-backend setup: every path (`/*`) goes to `backend` as is.
  static func passThrough(
    to port: UInt16, limits: [String: Any]? = nil, answerTimeoutMs: Int? = nil, access: String = "stdout"
  ) -> [String: Any] {
    make(
      routes: [route("all", match: "/*")],
      upstreams: ["api": upstream(port: port, answerTimeoutMs: answerTimeoutMs)], limits: limits, access: access)
  }
}

/// Checks that `answer` is the gateway's JSON error envelope for `status` with `message`
/// (when given): exactly `code`, `datas` (null) and `message`.
func isErrorEnvelope(_ answer: ReceivedAnswer, status: Int, message: String? = nil) -> Bool {
  guard answer.status == status, let object = try? answer.jsonObject() else { return false }
  guard Set(object.keys) == ["code", "datas", "message"], object["code"] as? Int == status,
    object["datas"] is NSNull, let text = object["message"] as? String
  else { return false }
  return message.map { $0 == text } ?? true
}

extension TestConfig {
  /// `config` with request bodies streamed to the upstream as they come
  /// (`limits.body_buffer_bytes: 0`), for tests of what happens while a body is arriving.
  static func streamingBodies(_ config: [String: Any]) -> [String: Any] {
    var config = config
    var limits = config["limits"] as? [String: Any] ?? [:]
    limits["body_buffer_bytes"] = 0
    config["limits"] = limits
    return config
  }
}
