import GatehouseConfig
import GatehouseHTTP

/// What happens to request headers on their way to the upstream for one route, compiled
/// once per config: which client fields are dropped, and the lines the gateway adds.
///
/// Top-level rules apply first, then the route's (Config/README.md), so for each name the last rule
/// wins: a name set globally and removed by the route is removed, and the reverse is set.
/// Names are compared ignoring case and reading `_` as `-`, the way CGI-style backends
/// read them: `X_Token` and `X-Token` are one name here, as they are one variable there.
///
/// A class: every request hands it to the request writer, and a struct holding this many
/// references would be copied field by field, a retain and a release each.
public final class HeaderPlan: Sendable {
  /// Client fields not forwarded (besides the hop-by-hop table): every name a rule touches,
  /// as written and with `_` read as `-`. A client name with `_` that reads as one of them
  /// is dropped too (`HopByHop.isUnderscoreLookAlike`).
  public let dropped: HeaderNameSet
  /// `dropped` and the names whose `_` look-alikes are dropped besides (a cached route's
  /// `vary` names: a backend that reads `Accept_Language` as `Accept-Language` would answer
  /// per a field the key does not hold).
  public let lookAlikesDropped: HeaderNameSet
  /// The client's `Accept-Encoding` is not forwarded; the upstream is asked for gzip when the
  /// client takes it, else for no coding (see `RoutePlan`): the gateway can decode, store and
  /// re-encode gzip, not br or zstd.
  public let normalizesAcceptEncoding: Bool
  /// Pre-serialized `Name: value\r\n` lines for the names that end up set.
  public let setLines: [UInt8]
  /// Drop `Authorization` when it carries a client key (`ApiKey …`), keep it otherwise.
  public let dropsAPIKeyAuthorization: Bool
  /// The `Host` value the rules set, written in place of the upstream URL's host and port
  /// (virtual hosting behind the gateway); nil when no rule sets it. Never in `setLines`,
  /// so the upstream always gets exactly one Host.
  public let host: [UInt8]?
  /// The client fields a request whose answer may be shared (it has a cache key: the
  /// answer is stored, handed to collapsed waiters, or refreshed in the background with
  /// the first client's request) still carries: those its cache key holds (`vary`) and the
  /// `pass` names. Any other field could make the upstream answer for that one client, and
  /// the answer would then be served to everyone.
  public let sharedFields: HeaderNameSet
  /// The gateway writes `Forwarded: for=…;proto=…` (`headers.forwarded`).
  public let writesForwarded: Bool

  /// Fields that tell a backend, or a framework in front of it, to take another URL,
  /// method, host or client address than the gateway's: honoured next to the injected
  /// token they would defeat route and method allow-lists, and echoed into stored answers
  /// they would poison the store. The gateway writes X-Forwarded-For and -Proto itself;
  /// these are dropped unless a `pass` list names them.
  public static let overrideFields = [
    "x-original-url", "x-rewrite-url", "x-original-uri", "x-http-method-override", "x-http-method",
    "x-method-override", "x-original-method", "forwarded", "x-real-ip", "x-client-ip", "true-client-ip",
    "x-forwarded-prefix", "x-forwarded-host", "x-forwarded-port", "x-forwarded-server", "x-forwarded-scheme",
    "x-forwarded-ssl", "x-original-host", "x-host", "x-forwarded-uri", "x-forwarded-path", "x-original-path",
  ]

  /// One header rule list: `set` pairs, `remove` and `pass` names, in config order.
  public struct Rules: Sendable {
    public var set: [(name: String, value: String)]
    public var remove: [String]
    public var pass: [String]
    /// Nil: this layer does not say.
    public var forwarded: Bool?
    public init(
      set: [(name: String, value: String)] = [], remove: [String] = [], pass: [String] = [], forwarded: Bool? = nil
    ) {
      self.set = set
      self.remove = remove
      self.pass = pass
      self.forwarded = forwarded
    }
  }

  /// - Parameter alsoDropped: names removed for other reasons, e.g. the token header of a
  ///   route with a token, or the client key header.
  public init(
    layers: [Rules], alsoDropped: [String] = [], dropsAPIKeyAuthorization: Bool = false, lookAlikesOf: [String] = [],
    normalizingAcceptEncoding: Bool = false
  ) {
    self.dropsAPIKeyAuthorization = dropsAPIKeyAuthorization
    var order: [String] = []
    var final: [String: (name: String, value: String?)] = [:]
    var dropped = HeaderNameSet([])
    func drop(_ name: String) {
      dropped.insert(name)
      dropped.insert(HTTPFieldSyntax.canonicalName(name))
    }
    for layer in layers {
      for (name, value) in layer.set {
        let key = HTTPFieldSyntax.canonicalName(name)
        if final[key] == nil { order.append(key) }
        final[key] = (name, value)
        drop(name)
      }
      for name in layer.remove {
        let key = HTTPFieldSyntax.canonicalName(name)
        if final[key] == nil { order.append(key) }
        final[key] = (name, nil)
        drop(name)
      }
    }
    for name in alsoDropped { drop(name) }
    let passed = Set(layers.flatMap(\.pass).map(HTTPFieldSyntax.canonicalName))
    for name in Self.overrideFields where !passed.contains(name) { drop(name) }
    writesForwarded = layers.compactMap(\.forwarded).last ?? false
    var shared = HeaderNameSet([])
    for name in lookAlikesOf + layers.flatMap(\.pass) {
      shared.insert(name.lowercased())
      shared.insert(HTTPFieldSyntax.canonicalName(name))
    }
    sharedFields = shared
    // A rule of the operator's own for the field wins over the normalization.
    let normalizes = normalizingAcceptEncoding && final["accept-encoding"] == nil
    if normalizes { drop("accept-encoding") }
    normalizesAcceptEncoding = normalizes
    var lines: [UInt8] = []
    var host: [UInt8]?
    for key in order {
      guard let entry = final[key], let value = entry.value else { continue }
      if key == "host" {
        host = Array(value.utf8)
        continue
      }
      lines.append(contentsOf: entry.name.utf8)
      lines.append(contentsOf: ": ".utf8)
      lines.append(contentsOf: value.utf8)
      lines.append(contentsOf: "\r\n".utf8)
    }
    self.dropped = dropped
    var lookAlikes = dropped
    // A passed override field goes as the client wrote it with dashes; its `_` spelling,
    // which a CGI-style backend reads as the same variable, would be a second value.
    for name in lookAlikesOf + Self.overrideFields {
      lookAlikes.insert(name)
      lookAlikes.insert(HTTPFieldSyntax.canonicalName(name))
    }
    self.lookAlikesDropped = lookAlikes
    self.setLines = lines
    self.host = host
  }
}
