import GatehouseHTTP

/// A route's `cache` block, compiled: ages in milliseconds and the vary names lowercased.
public struct CachePolicy: Sendable, Equatable {
  public let freshMs: Int64
  public let staleWhileRevalidateMs: Int64
  public let staleIfErrorMs: Int64
  public let vary: [String]
  /// Whether concurrent GETs with one cache key share one upstream exchange.
  public let collapse: Bool

  public init(
    freshMs: Int64, staleWhileRevalidateMs: Int64, staleIfErrorMs: Int64, vary: [String], collapse: Bool = true
  ) {
    self.freshMs = freshMs
    self.staleWhileRevalidateMs = staleWhileRevalidateMs
    self.staleIfErrorMs = staleIfErrorMs
    self.vary = vary.map { $0.lowercased() }
    self.collapse = collapse
  }

  init(_ config: RouteCacheConfig) {
    self.init(
      freshMs: Self.milliseconds(config.fresh), staleWhileRevalidateMs: Self.milliseconds(config.staleWhileRevalidate),
      staleIfErrorMs: Self.milliseconds(config.staleIfError), vary: config.vary, collapse: config.collapse)
  }

  static func milliseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds * 1000 + attoseconds / 1_000_000_000_000_000
  }

  /// Whether a lookup is needed before asking the upstream (only when something could be
  /// answered from the store without it).
  public var answersWithoutUpstream: Bool { freshMs > 0 || staleWhileRevalidateMs > 0 }

  /// What a stored answer of this age allows before the upstream is asked.
  public func beforeUpstream(ageMs: Int64) -> StoredAnswerUse {
    if ageMs < freshMs { return .fresh }
    if ageMs < freshMs + staleWhileRevalidateMs { return .staleWhileRevalidate }
    return .none
  }

  /// Whether a stored answer of this age may stand in for a failed upstream.
  public func allowsStaleIfError(ageMs: Int64) -> Bool {
    staleIfErrorMs > 0 && ageMs < staleIfErrorMs
  }
}

/// How a stored answer may be used before the upstream is asked.
public enum StoredAnswerUse: Equatable, Sendable {
  /// Younger than `fresh_s`: answer from the store (HIT).
  case fresh
  /// Inside `stale_while_revalidate_s`: answer from the store and refresh it in the background.
  case staleWhileRevalidate
  case none
}

/// The `X-Gatehouse-Cache` value of an answer.
public enum CacheResult: String, Sendable {
  case hit = "HIT"
  case stale = "STALE"
  case miss = "MISS"
  case bypass = "BYPASS"

  /// The `result` label of `gatehouse_cache_total`.
  public var metricLabel: String { rawValue.lowercased() }
}

/// Which upstream answers may be remembered (SPEC §5): 2xx answers to GET, never those the
/// upstream marked `no-store` or `private`, nor those setting cookies.
public enum CacheStorability {
  public static func isStorable(status: Int, headers: HTTPHeaders) -> Bool {
    guard (200..<300).contains(status), status != 206 else { return false }
    var storable = true
    headers.withEachField { name, value in
      guard storable else { return }
      if ASCIIBytes.equalsLowercase(name, "set-cookie") {
        storable = false
      } else if ASCIIBytes.equalsLowercase(name, "cache-control") {
        let lower = String(decoding: value, as: UTF8.self).lowercased()
        for directive in lower.split(separator: ",") {
          let token = directive.trimmingASCIIWhitespace().prefix { $0 != "=" }
          if token == "no-store" || token == "private" { storable = false }
        }
      }
    }
    return storable
  }
}
