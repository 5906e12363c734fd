/// The one table of fields that never cross the gateway as they are (RFC 9110 §7.6.1), plus
/// the fields the gateway writes itself on each side. Every filter consults this table
/// (through `isHopByHop`) rather than its own list.
public enum HopByHop {
  /// Connection-specific fields, dropped in both directions, besides every `Proxy-*` name
  /// (`isProxyField`).
  public static let fields: HeaderNameSet = HeaderNameSet([
    "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    // Framing is rewritten by the serializer from the body it actually sends.
    "content-length",
  ])

  /// Whether a field never crosses the gateway, in either direction.
  @inline(__always)
  public static func isHopByHop(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    isProxyField(name) || fields.contains(name)
  }

  /// `Proxy-` followed by anything, in any case: Config/README.md makes every `Proxy-*` field
  /// hop-by-hop, not only the registered ones (`Proxy-Authorization`, `Proxy-Connection`…).
  /// Also `Proxy_…`, which CGI-style backends read as `Proxy-…`, and `Proxy` alone, the
  /// httpoxy field (CVE-2016-5385: a CGI backend takes it for its `HTTP_PROXY` setting).
  /// The first byte rules out almost every other name.
  @inline(__always)
  public static func isProxyField(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    guard name.count >= 5, (name[0] | 0x20) == 0x70 else { return false }  // "p"
    guard (name[1] | 0x20) == 0x72, (name[2] | 0x20) == 0x6F, (name[3] | 0x20) == 0x78, (name[4] | 0x20) == 0x79
    else { return false }  // "roxy"
    return name.count == 5 || name[5] == 0x2D || name[5] == 0x5F
  }

  /// Fields of a client request that the gateway sets itself on the upstream request.
  public static let gatewayRequestFields: HeaderNameSet = HeaderNameSet([
    "host", "x-forwarded-for", "x-forwarded-proto", "x-request-id",
    // The gateway answers `Expect: 100-continue` itself before it streams the body.
    "expect",
  ])

  /// Fields of an upstream answer the client never sees: the one the gateway sets itself
  /// (`X-Request-Id`), and the upstream's `Server` and `X-Powered-By` — which software
  /// answers behind the gateway is none of the client's business, and a version number
  /// there tells an attacker which published flaws to try (nginx hides `Server`; hiding
  /// `X-Powered-By` is the usual hardening on top). `X-Gatehouse-Cache` is the gateway's
  /// to set too: a backend's own would make a client (or a cache before it) read a `HIT`
  /// the gateway never served, or two values. `X-Gatehouse-Decoded` is the store's own note
  /// on a stored answer (`StoreEntryRules.decodedMarkerName`): a backend's own would decide
  /// which `ETag` answers from the store carry, and clients never see it.
  public static let gatewayAnswerFields: HeaderNameSet = HeaderNameSet([
    "x-request-id", "server", "x-powered-by", "x-gatehouse-cache", "x-gatehouse-decoded",
  ])

  /// A name like `Transfer_Encoding` or `X_Backend_Token`: not the field itself, but CGI,
  /// WSGI and PHP backends read `_` as `-`, so forwarding it could make a backend see a
  /// framing or gateway field the gateway never checked, or merge a client's value into
  /// one the gateway sets, removes or injects (the route's token header, the client-key
  /// header, any `set` or `remove` name: all in `dropped`). Such names are dropped (nginx
  /// drops every name with `_` by default; this keeps the harmless ones). Costs a scan for
  /// `_` per field; the lookups run only for the rare names that have one.
  public static func isUnderscoreLookAlike(_ name: UnsafeBufferPointer<UInt8>, of dropped: HeaderNameSet) -> Bool {
    guard name.contains(0x5F) else { return false }
    return fields.containsReadingUnderscoreAsDash(name) || gatewayRequestFields.containsReadingUnderscoreAsDash(name)
      || dropped.containsReadingUnderscoreAsDash(name)
  }

  /// Other field names listed in a Connection header: hop-by-hop for this message only.
  public static func namesListed(inConnection headers: some Sequence<String>) -> [String] {
    var names: [String] = []
    for value in headers {
      for token in value.split(separator: ",") {
        let name = token.trimmingASCIIWhitespace().lowercased()
        if !name.isEmpty && name != "close" && name != "keep-alive" { names.append(name) }
      }
    }
    return names
  }
}

extension Substring {
  func trimmingASCIIWhitespace() -> Substring {
    var result = self
    while let first = result.first, first == " " || first == "\t" { result = result.dropFirst() }
    while let last = result.last, last == " " || last == "\t" { result = result.dropLast() }
    return result
  }
}
