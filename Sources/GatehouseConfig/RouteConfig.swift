import GatehouseJSON

/// One route (`routes[]`): which requests it takes and how they reach the backend.
public struct RouteConfig: Sendable, Equatable {
  /// Unique among routes; used in logs, metrics and the admin API.
  public let name: String
  public let match: RouteMatchRule
  /// The upstream name; nil only for routes with `stub.mode: "always"`.
  public let upstream: String?
  /// The `path` key: how to rewrite the upstream path. Nil: the request path as is.
  public let upstreamPath: RouteTemplate?
  /// The token name to inject; nil injects nothing.
  public let token: String?
  /// Default `Authorization`.
  public let tokenHeader: String
  /// Default `Bearer {token}`.
  public let tokenFormat: TokenFormat
  public let invalidToken: InvalidTokenRule
  /// Applied after the top-level `headers`.
  public let headers: HeaderRules
  public let envelope: EnvelopeConfig
  /// Nil: answers of this route are never stored (Docs/clients-and-cache.md).
  public let cache: RouteCacheConfig?
  /// `mode` is `.off` when the route has no `stub` block.
  public let stub: StubConfig
  /// `jwt`: the client's token is verified before anything else (Docs/jwt.md); nil: not.
  public var jwt: RouteJWTConfig?
  /// `websocket`: `Upgrade: websocket` handshakes are taken and, on `101`, tunnelled (Docs/websockets.md).
  /// Default false: an upgrade on this route gets a 400.
  public var websocket = false
}

/// `match`: a path template and an optional method list.
public struct RouteMatchRule: Sendable, Equatable {
  public let path: RouteTemplate
  /// Uppercase method names; nil means any method. Listing `GET` also admits `HEAD`, as
  /// RFC 9110 §9.3.2 expects every GET resource to answer HEAD.
  public let methods: [String]?
}

/// How a token value becomes a header value: `Bearer {token}` is split once into the text
/// before and after `{token}`, so rendering is two appends.
public struct TokenFormat: Sendable, Equatable, CustomStringConvertible {
  public let template: String
  public let prefix: String
  public let suffix: String

  public static let bearer = TokenFormat(template: "Bearer {token}")!

  /// Nil unless `template` contains `{token}` exactly once.
  public init?(template: String) {
    let parts = template.split(separator: "{token}", omittingEmptySubsequences: false)
    guard parts.count == 2 else { return nil }
    self.template = template
    self.prefix = String(parts[0])
    self.suffix = String(parts[1])
  }

  public func render(_ token: String) -> String { prefix + token + suffix }

  public var description: String { template }
}

/// When a backend answer means "your token is no good" (Docs/behaviour.md).
public struct InvalidTokenRule: Sendable, Equatable {
  /// Default `[401]`.
  public let statuses: [Int]
  /// A top-level member of a JSON answer body to look at; nil: bodies are not inspected.
  public let bodyField: String?
  /// Scalar JSON values of `bodyField` that mean the token is invalid.
  public let bodyValues: [JSONValue]
}

/// The JSON envelope for a route (Docs/envelope.md).
public struct EnvelopeConfig: Sendable, Equatable {
  /// Default true.
  public let enabled: Bool
  /// Dot-separated path into the backend's JSON (`data.items`), split into its components;
  /// nil wraps the whole body.
  public let keyPath: [String]?
  /// Default `.mirror`.
  public let status: EnvelopeStatusMode
  /// The largest backend body the gateway buffers in order to wrap it. Default 8 MiB.
  public let maxBytes: Int
}

/// Which HTTP status an enveloped answer carries.
public enum EnvelopeStatusMode: String, Sendable, Equatable {
  /// The backend's status (or the gateway's, for its own errors).
  case mirror
  /// Always 200; the real status is only in `code`.
  case always200 = "always_200"
}

/// Stale answers for a route (Docs/clients-and-cache.md).
public struct RouteCacheConfig: Sendable, Equatable {
  /// Default 86400 s (one day): the reason to have a `cache` block at all.
  public let staleIfError: Duration
  /// Default 0 (always ask the backend first).
  public let fresh: Duration
  /// Default 0.
  public let staleWhileRevalidate: Duration
  /// Request headers whose values are part of the cache key. Default none.
  public let vary: [String]
  /// Concurrent GETs with the same cache key share one upstream exchange. Default true.
  public var collapse = true
  /// `shared`: on a route with `jwt`, one answer for every user (the key leaves out the
  /// token's `sub`). Default false.
  public var shared = false
}

/// A canned answer (`stub`), for demos and for backends that do not exist yet.
public struct StubConfig: Sendable, Equatable {
  public let mode: StubMode
  /// Default 200.
  public let status: Int
  /// The `body` JSON, serialized compactly; nil when no body is configured (`datas` is null).
  public let body: [UInt8]?
  /// Default 0.
  public let delay: Duration

  public static let off = StubConfig(mode: .off, status: 200, body: nil, delay: .zero)
}

/// When the stub answers.
public enum StubMode: String, Sendable, Equatable {
  /// Never (the default).
  case off
  /// Always, without contacting a backend.
  case always
  /// When the backend is unavailable and nothing fresher is stored.
  case fallback
}
