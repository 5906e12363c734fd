import GatehouseHTTP

/// The config's rules for header names it manages: which fields `headers.set` and
/// `headers.remove` may name, and what a configured `Host` may be. The general field syntax
/// (tokens, values, canonical names) is `HTTPFieldSyntax` in GatehouseHTTP.
enum HeaderRuleSyntax {
  /// What the gateway does with a header on the upstream request, for the names whose value
  /// it controls (Config/README.md); nil for every other name.
  enum ManagedHeader: Equatable {
    /// Connection-specific and framing fields (`Connection` and the rest of the hop-by-hop
    /// table, every `Proxy-*`, `Content-Length`, and `Expect`, which the gateway answers
    /// itself): never forwarded, written by the gateway where they apply.
    case neverForwarded
    /// `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Request-Id`: always written by the gateway.
    case writtenByGateway
    /// `Host`: written by the gateway, from the upstream URL unless the config sets it.
    case host

    init?(canonicalName name: String) {
      switch name {
      case "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "content-length", "expect",
        "proxy":
        self = .neverForwarded
      case "x-forwarded-for", "x-forwarded-proto", "x-request-id":
        self = .writtenByGateway
      case "host":
        self = .host
      default:
        // `Proxy` alone is the httpoxy field (a CGI backend reads it as HTTP_PROXY).
        guard name.hasPrefix("proxy-") else { return nil }
        self = .neverForwarded
      }
    }
  }

  /// Why `headers.set` may not set `name`, or nil. `Host` may be set: it replaces the
  /// upstream's host for that route (virtual hosting behind the gateway). A name that only
  /// reads as a managed one (`X_Request_Id`) is refused too: the backend would take it for
  /// the gateway's.
  static func setProblem(_ name: String) -> String? {
    let canonical = HTTPFieldSyntax.canonicalName(name)
    guard let managed = ManagedHeader(canonicalName: canonical) else { return nil }
    switch managed {
    case .host:
      return nil
    case .neverForwarded, .writtenByGateway:
      if canonical != name.lowercased() {
        return "\(name) is managed by the gateway and cannot be set ('_' reads as '-' to many backends)"
      }
      return "\(name) is managed by the gateway and cannot be set"
    }
  }

  /// Why `headers.remove` may not list `name`, or nil. Removing drops the client's field;
  /// for `X-Forwarded-For` that means the client's list is not relayed and the backend gets
  /// only the address the gateway saw. The other managed fields are either never forwarded
  /// or always written by the gateway, so listing them would not do what it says.
  static func removeProblem(_ name: String) -> String? {
    guard let managed = ManagedHeader(canonicalName: name.lowercased()) else { return nil }
    switch managed {
    case .neverForwarded:
      return "\(name) is never forwarded (the gateway manages it); leave it out of remove"
    case .writtenByGateway:
      return name.lowercased() == "x-forwarded-for"
        ? nil : "\(name) is always sent by the gateway and cannot be removed"
    case .host:
      return "Host is always sent by the gateway and cannot be removed (set it to choose its value)"
    }
  }

  /// Why a configured `Host` value can't be one, or nil: a host name, IPv4 address or
  /// bracketed IPv6 address, with an optional port.
  static func hostValueProblem(_ value: String) -> String? {
    let valid =
      !value.isEmpty
      && value.utf8.allSatisfy { byte in
        isUnreserved(byte) || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "[") || byte == UInt8(ascii: "]")
      }
    return valid ? nil : "must be a host with an optional port, as in api.example.com:8443"
  }

  private static func isUnreserved(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
      UInt8(ascii: "~"):
      true
    default:
      false
    }
  }
}

/// A name for an upstream, token or route: it shows up in admin URLs, metric labels and logs,
/// so it is limited to characters that need no escaping anywhere.
enum ConfigName {
  static func problem(_ name: String) -> String? {
    if name.isEmpty { return "name must not be empty" }
    let isValid = name.utf8.allSatisfy { byte in
      (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
        || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
    }
    return isValid ? nil : "name may contain only letters, digits, '_', '-' and '.'"
  }
}
