/// The identity of one stored answer: what the backend was asked, plus the request values
/// the answer may depend on. Built by a pure function; `id` is what the store, the admin API
/// and the logs use.
///
/// The canonical form is length-prefixed (`<byte count>:<bytes>`) so no choice of path,
/// query or header value can make two different requests collide, and versioned so a change
/// of rules changes every id rather than mixing old and new keys:
///
///     gatehouse-cache-v1 3:GET 3:api 8:/users/1 7:a=1&b=2 vary=1 15:accept-language 2:en client=-
public struct CacheKey: Sendable, Hashable, CustomStringConvertible {
  /// The parts, in one immutable object: a key is copied on every lookup (the loop's memo
  /// hands it out, the exchange keeps it), and one reference costs one retain where seven
  /// strings cost seven.
  private final class Parts: Sendable {
    let method: String
    let upstream: String
    let path: String
    let sortedQuery: String
    let varyPart: String
    let canonical: String
    let id: String

    init(method: String, upstream: String, path: String, sortedQuery: String, varyPart: String, canonical: String) {
      self.method = method
      self.upstream = upstream
      self.path = path
      self.sortedQuery = sortedQuery
      self.varyPart = varyPart
      self.canonical = canonical
      id = StoreCrypto.hex(StoreCrypto.sha256(canonical.utf8))
    }
  }

  private let parts: Parts

  /// Request method as given (HTTP methods are case-sensitive).
  public var method: String { parts.method }
  /// Upstream name from the config.
  public var upstream: String { parts.upstream }
  /// Upstream path (after route rewriting), without the query.
  public var path: String { parts.path }
  /// The query with its `&`-separated pairs sorted byte-wise, encoding kept as received.
  public var sortedQuery: String { parts.sortedQuery }
  /// The vary headers and client id part of the canonical key (stored for the admin API).
  public var varyPart: String { parts.varyPart }
  /// The full canonical key.
  public var canonical: String { parts.canonical }
  /// Lowercase hex SHA-256 of `canonical` (64 characters).
  public var id: String { parts.id }

  // Every part is written into the canonical form, length-prefixed: equal canonical forms
  // are equal keys.
  public static func == (lhs: CacheKey, rhs: CacheKey) -> Bool {
    lhs.parts === rhs.parts || lhs.parts.canonical == rhs.parts.canonical
  }

  public func hash(into hasher: inout Hasher) { hasher.combine(parts.canonical) }

  /// Builds the key.
  /// - Parameters:
  ///   - query: the raw query string, with or without a leading `?`; empty pairs are
  ///     ignored; pairs of one name keep their order (`a=1&a=2` and `a=2&a=1` differ).
  ///   - vary: for each configured vary header the client sent, its name and value.
  ///     Names are lowercased, pairs sorted; a header the client did not send is simply
  ///     absent (which differs from sending it empty).
  ///   - clientID: the client key id when `clients.required` is on, else nil.
  ///   - host: the `Host` a route sets for the upstream (virtual hosting), else nil. Added
  ///     to the key only when set, so keys without one are what they always were.
  ///   - scope: what else makes the route's requests differ for the backend (the token it
  ///     injects, the fields it sets), else nil; added only when set, like `host`.
  ///   - gzip: the entry holds the answer for clients that take gzip (routes that pass
  ///     bodies through keep one entry per coding); added only when true.
  ///   - user: on a route that verifies JWTs, a digest of the signed-in user (never the
  ///     user's id itself: keys are listed by the admin API); added only when set.
  public init(
    method: String, upstream: String, path: String, query: String, vary: [(name: String, value: String)] = [],
    clientID: String? = nil, host: String? = nil, scope: String? = nil, gzip: Bool = false, user: String? = nil
  ) {
    let sortedQuery = Self.sortQuery(query)

    var varyPart = "vary=\(vary.count)"
    let sortedVary = vary.map { (name: Self.asciiLowercased($0.name), value: $0.value) }.sorted { lhs, rhs in
      if lhs.name != rhs.name { return lhs.name.utf8.lexicographicallyPrecedes(rhs.name.utf8) }
      return lhs.value.utf8.lexicographicallyPrecedes(rhs.value.utf8)
    }
    for pair in sortedVary {
      varyPart += " " + Self.field(pair.name) + " " + Self.field(pair.value)
    }
    varyPart += " client=" + (clientID.map(Self.field) ?? "-")
    if let host { varyPart += " host=" + Self.field(Self.asciiLowercased(host)) }
    if let scope { varyPart += " scope=" + Self.field(scope) }
    if gzip { varyPart += " coding=gzip" }
    if let user { varyPart += " user=" + Self.field(user) }
    let canonical =
      "gatehouse-cache-v1 " + Self.field(method) + " " + Self.field(upstream) + " " + Self.field(path) + " "
      + Self.field(sortedQuery) + " " + varyPart
    parts = Parts(
      method: method, upstream: upstream, path: path, sortedQuery: sortedQuery, varyPart: varyPart,
      canonical: canonical)
  }

  public var description: String { canonical }

  /// The user digest in a key's vary part (`user=<length>:<digest>`), or nil.
  public static func user(inVaryPart vary: String) -> String? {
    let bytes = Array(vary.utf8)
    let marker = Array(" user=".utf8)
    guard bytes.count > marker.count,
      let start = (0...(bytes.count - marker.count)).first(where: {
        bytes[$0..<($0 + marker.count)].elementsEqual(marker)
      })
    else { return nil }
    let rest = bytes[(start + marker.count)...]
    guard let colon = rest.firstIndex(of: UInt8(ascii: ":")),
      let length = Int(String(decoding: rest[..<colon], as: UTF8.self))
    else { return nil }
    let value = rest[(colon + 1)...].prefix(length)
    return value.count == length ? String(decoding: value, as: UTF8.self) : nil
  }

  /// Sorts the `&`-separated pairs of a query byte-wise by name, keeping their encoding and,
  /// among pairs of one name, their order: `role=a&role=b` and `role=b&role=a` are different
  /// requests to most backends (first or last value wins), `a=1&b=2` and `b=2&a=1` are not.
  public static func sortQuery(_ query: String) -> String {
    var raw = Substring(query)
    if raw.first == "?" { raw = raw.dropFirst() }
    let pairs = raw.split(separator: "&", omittingEmptySubsequences: true)
    func name(_ pair: Substring) -> Substring.UTF8View { pair.prefix { $0 != "=" }.utf8 }
    return pairs.enumerated().sorted { lhs, rhs in
      let (left, right) = (name(lhs.element), name(rhs.element))
      if left.elementsEqual(right) { return lhs.offset < rhs.offset }
      return left.lexicographicallyPrecedes(right)
    }.map(\.element).joined(separator: "&")
  }

  private static func field(_ value: String) -> String { "\(value.utf8.count):\(value)" }

  // Header names are ASCII tokens; lowercasing only ASCII keeps this free of locale rules.
  private static func asciiLowercased(_ value: String) -> String {
    String(
      decoding: value.utf8.map { ($0 >= 0x41 && $0 <= 0x5A) ? $0 | 0x20 : $0 },
      as: UTF8.self)
  }
}

/// Checks that a string is a cache id (64 lowercase hex digits) before it reaches SQL.
package func isCacheID(_ value: String) -> Bool {
  value.utf8.count == 64 && value.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
}
