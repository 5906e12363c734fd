import GatehouseConfig
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
  /// From the store, after the upstream confirmed it (`304` to a conditional request).
  case revalidated = "REVALIDATED"

  /// The `result` label of `gatehouse_cache_total` (literals: every answer of a cached
  /// route counts one).
  public var metricLabel: String {
    switch self {
    case .hit: "hit"
    case .stale: "stale"
    case .miss: "miss"
    case .bypass: "bypass"
    case .revalidated: "revalidated"
    }
  }
}

/// Answers of routes with a cache, by `CacheResult`: a counter each, counted without
/// hashing the label (`gatehouse_cache_total` counts one per such answer).
public struct CacheResultCounts: Sendable, Equatable {
  public private(set) var hit: UInt64 = 0
  public private(set) var stale: UInt64 = 0
  public private(set) var miss: UInt64 = 0
  public private(set) var bypass: UInt64 = 0
  public private(set) var revalidated: UInt64 = 0

  public init() {}

  public mutating func count(_ result: CacheResult) {
    switch result {
    case .hit: hit &+= 1
    case .stale: stale &+= 1
    case .miss: miss &+= 1
    case .bypass: bypass &+= 1
    case .revalidated: revalidated &+= 1
    }
  }

  public mutating func add(_ other: CacheResultCounts) {
    hit &+= other.hit
    stale &+= other.stale
    miss &+= other.miss
    bypass &+= other.bypass
    revalidated &+= other.revalidated
  }

  /// The count of the result whose metric label is `label` (0 for none).
  public subscript(label label: String) -> UInt64 {
    switch label {
    case CacheResult.hit.metricLabel: hit
    case CacheResult.stale.metricLabel: stale
    case CacheResult.miss.metricLabel: miss
    case CacheResult.bypass.metricLabel: bypass
    case CacheResult.revalidated.metricLabel: revalidated
    default: 0
    }
  }
}

/// Which upstream answers may be remembered and shared (RFC 9111): 2xx answers to GET, never
/// those the upstream marked `no-store`, `private` or `no-cache` (the last may not be reused
/// without a revalidation the gateway does not make), nor those setting cookies, nor those
/// whose `Vary` names a request field the route's key does not hold (`Vary: *` never
/// matches): another client's request could differ there, and the answer would be theirs.
/// `Accept-Encoding` is covered: the gateway gives each client the coding it accepts (gzip or
/// none), so only gzip or unencoded answers are kept. Nor those with a `Location`: on a 2xx
/// it names what this request made or must poll (a 201's new resource, a 202's job), which
/// is no other client's. Nor, on an enveloped route, an HTML page: the route's clients take
/// JSON, and a 2xx page from behind an API is a login or maintenance page put in front of it
/// (passed to the client who got it, kept for nobody).
///
/// The same rules decide what an answer read from the shared tier may be
/// (`StoreEntryRules.refusal(ofShared:)`): what a gateway would not store, it does not serve.
public enum CacheStorability {
  /// - Parameter keyed: the lowercased names of the route's `vary` list.
  /// - Parameter enveloped: the route wraps answers in the envelope.
  public static func isStorable(status: Int, headers: HTTPHeaders, keyed: [String], enveloped: Bool) -> Bool {
    refusal(status: status, headers: headers, keyed: keyed, enveloped: enveloped) == nil
  }

  /// The rule an answer breaks (a short name for logs: `status`, or the field's), nil when it
  /// may be stored.
  static func refusal(status: Int, headers: HTTPHeaders, keyed: [String], enveloped: Bool) -> String? {
    guard (200..<300).contains(status), status != 206 else { return "status" }
    var refusal: String?
    headers.withEachField { name, value in
      guard refusal == nil else { return }
      if ASCIIBytes.equalsLowercase(name, "set-cookie") {
        refusal = "set-cookie"
      } else if ASCIIBytes.equalsLowercase(name, "location") {
        refusal = "location"
      } else if ASCIIBytes.equalsLowercase(name, "cache-control") {
        if directives(value).contains(where: { $0 == "no-store" || $0 == "private" || $0 == "no-cache" }) {
          refusal = "cache-control"
        }
      } else if ASCIIBytes.equalsLowercase(name, "vary") {
        if !directives(value).allSatisfy({ $0 == "accept-encoding" || keyed.contains($0) }) { refusal = "vary" }
      } else if ASCIIBytes.equalsLowercase(name, "content-encoding") {
        if !directives(value).allSatisfy({ $0 == "gzip" || $0 == "identity" }) { refusal = "content-encoding" }
      } else if enveloped && ASCIIBytes.equalsLowercase(name, "content-type") && isMarkup(value) {
        refusal = "content-type"
      }
    }
    return refusal
  }

  /// Whether a `Content-Type` names an HTML page (`text/html`, `application/xhtml+xml`),
  /// parameters aside, in any case.
  /// Byte by byte, with no string made: every enveloped answer's type passes through here.
  static func isMarkup(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
    var start = 0
    while start < value.count, value[start] == 0x20 || value[start] == 0x09 { start += 1 }
    var end = start
    while end < value.count, value[end] != UInt8(ascii: ";") { end += 1 }
    while end > start, value[end - 1] == 0x20 || value[end - 1] == 0x09 { end -= 1 }
    let type = UnsafeBufferPointer(rebasing: value[start..<end])
    return ASCIIBytes.equalsLowercase(type, "text/html") || ASCIIBytes.equalsLowercase(type, "application/xhtml+xml")
  }

  /// Whether a stored answer may be served once it is no longer fresh (`stale_if_error_s`,
  /// `stale_while_revalidate_s`): not when the upstream forbade it with `must-revalidate`,
  /// `proxy-revalidate` or `s-maxage` (which implies the latter for a shared cache), RFC 9111
  /// §4.2.4 and §5.2.2. `fresh_s`, the operator's own freshness, still applies to them.
  public static func allowsStale(_ headers: [(name: String, value: String)]) -> Bool {
    for field in headers where field.name.lowercased() == "cache-control" {
      let forbidding = ["must-revalidate", "proxy-revalidate", "s-maxage"]
      if directives(Array(field.value.utf8)).contains(where: forbidding.contains) { return false }
    }
    return true
  }

  /// The lowercased names of a comma-separated list (`Cache-Control` directives without their
  /// arguments, `Vary` field names, content codings).
  static func directives(_ value: some Collection<UInt8>) -> [String] {
    String(decoding: value, as: UTF8.self).lowercased().split(separator: ",").map {
      String($0.trimmingASCIIWhitespace().prefix { $0 != "=" }.trimmingASCIIWhitespace())
    }.filter { !$0.isEmpty }
  }
}
