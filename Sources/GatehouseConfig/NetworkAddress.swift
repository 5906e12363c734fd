#if canImport(Glibc)
  import Glibc
#endif

/// An address to listen on: `127.0.0.1:8080`, `[::1]:9901`, `0.0.0.0:8080` or
/// `localhost:8080`. Host names other than `localhost` are refused, because binding to a name
/// that resolves differently later is a classic source of surprises.
public struct ListenAddress: Sendable, Equatable, Hashable, CustomStringConvertible {
  /// How the host was written.
  public enum Family: Sendable, Equatable, Hashable {
    case ipv4
    case ipv6
    /// `localhost`, bound as `127.0.0.1`.
    case localhost
  }

  /// The host without brackets: `127.0.0.1`, `::1` or `localhost`.
  public let host: String
  public let port: UInt16
  public let family: Family

  /// True for addresses only this machine can reach; the admin listener may run without a
  /// token only on these.
  public var isLoopback: Bool {
    switch family {
    case .localhost: true
    case .ipv4: host.hasPrefix("127.")
    case .ipv6: host == "::1"
    }
  }

  /// `host:port`, with brackets around an IPv6 host.
  public var description: String {
    switch family {
    case .ipv4, .localhost: "\(host):\(port)"
    case .ipv6: "[\(host)]:\(port)"
    }
  }

  /// Parses `host:port`; the error explains what is wrong with the text.
  public static func parse(_ text: String) -> Result<ListenAddress, AddressError> {
    let host: Substring
    let portText: Substring
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]") else {
        return .failure(AddressError("missing ']' after the IPv6 address"))
      }
      host = text[text.index(after: text.startIndex)..<close]
      let rest = text[text.index(after: close)...]
      guard rest.hasPrefix(":") else {
        return .failure(AddressError("expected host:port, such as [::1]:8080"))
      }
      portText = rest.dropFirst()
      guard NetworkAddressSyntax.isIPv6(host) else {
        return .failure(AddressError("\"\(host)\" is not an IPv6 address"))
      }
    } else {
      guard let colon = text.lastIndex(of: ":") else {
        return .failure(AddressError("expected host:port, such as 127.0.0.1:8080"))
      }
      host = text[..<colon]
      portText = text[text.index(after: colon)...]
      if host.contains(":") {
        return .failure(AddressError("an IPv6 address needs brackets, such as [::1]:8080"))
      }
      guard host == "localhost" || NetworkAddressSyntax.isIPv4(host) else {
        return .failure(
          AddressError("host must be an IPv4 address, an [IPv6] address or localhost, got \"\(host)\""))
      }
    }
    let port: UInt16
    switch NetworkAddressSyntax.parsePort(portText, allowZero: true) {
    case .success(let value): port = value
    case .failure(let error): return .failure(error)
    }
    let family: Family =
      text.hasPrefix("[") ? .ipv6 : (host == "localhost" ? .localhost : .ipv4)
    return .success(ListenAddress(host: String(host), port: port, family: family))
  }
}

/// Why an address or URL was rejected.
public struct AddressError: Error, Sendable, Equatable, CustomStringConvertible {
  public let description: String

  init(_ description: String) {
    self.description = description
  }
}

/// An `http://` or `https://` URL as the gateway uses it: where to connect and what path to
/// put in front of request paths.
public struct HTTPURL: Sendable, Equatable, CustomStringConvertible {
  /// The URL scheme.
  public enum Scheme: String, Sendable, Equatable {
    case http
    case https

    public var defaultPort: UInt16 {
      switch self {
      case .http: 80
      case .https: 443
      }
    }
  }

  public let scheme: Scheme
  /// A DNS name, an IPv4 address, or an IPv6 address without brackets.
  public let host: String
  public let port: UInt16
  /// The path without a trailing `/`: `/api/v1` for `http://h/api/v1/`, empty for `http://h`
  /// and `http://h/`. Request paths always start with `/`, so `basePath + path` never
  /// doubles a slash.
  public let basePath: String
  /// The `Host` header for requests to this URL: the port appears only when it is not the
  /// scheme's default.
  public let hostHeader: String

  public var description: String {
    "\(scheme.rawValue)://\(hostHeader)\(basePath)"
  }

  /// True when the host is this machine by its spelling alone: `localhost`, 127.0.0.0/8 or
  /// `::1` (also as `::ffff:127.x.y.z`). No name is resolved: any other name may point
  /// elsewhere tomorrow.
  public var hostIsLoopback: Bool {
    if host == "localhost" { return true }
    var ipv4 = in_addr()
    if inet_pton(AF_INET, host, &ipv4) == 1 {
      return withUnsafeBytes(of: &ipv4) { $0[0] == 127 }
    }
    var ipv6 = in6_addr()
    guard inet_pton(AF_INET6, host, &ipv6) == 1 else { return false }
    return withUnsafeBytes(of: &ipv6) { bytes in
      let loopback = bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1
      let mappedPrefix: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]
      return loopback || (bytes.prefix(12).elementsEqual(mappedPrefix) && bytes[12] == 127)
    }
  }

  /// Parses an absolute URL. User info, queries and fragments are refused: credentials
  /// belong in `tokens`, and a query on a base URL has no sound way to merge with the
  /// request's own query.
  public static func parse(_ text: String) -> Result<HTTPURL, AddressError> {
    guard let schemeEnd = text.firstRange(of: "://") else {
      return .failure(AddressError("expected an absolute URL such as http://127.0.0.1:3000/api"))
    }
    let schemeText = text[..<schemeEnd.lowerBound].lowercased()
    guard let scheme = Scheme(rawValue: schemeText) else {
      return .failure(AddressError("URL scheme must be http or https, got \"\(schemeText)\""))
    }
    let afterScheme = text[schemeEnd.upperBound...]
    let authorityEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? afterScheme.endIndex
    let authority = afterScheme[..<authorityEnd]
    let pathAndRest = afterScheme[authorityEnd...]
    if authority.contains("@") {
      return .failure(AddressError("URL must not contain user info; put credentials in a token"))
    }
    if pathAndRest.contains("?") || pathAndRest.contains("#") {
      return .failure(AddressError("URL must not have a query or fragment"))
    }
    guard !authority.isEmpty else { return .failure(AddressError("URL has no host")) }

    var host: Substring
    var portText: Substring?
    var hostForHeader: String
    if authority.hasPrefix("[") {
      guard let close = authority.firstIndex(of: "]") else {
        return .failure(AddressError("missing ']' after the IPv6 address"))
      }
      host = authority[authority.index(after: authority.startIndex)..<close]
      guard NetworkAddressSyntax.isIPv6(host) else {
        return .failure(AddressError("\"\(host)\" is not an IPv6 address"))
      }
      let rest = authority[authority.index(after: close)...]
      if !rest.isEmpty {
        guard rest.hasPrefix(":") else { return .failure(AddressError("unexpected text after ']'")) }
        portText = rest.dropFirst()
      }
      hostForHeader = "[\(host)]"
    } else {
      if let colon = authority.lastIndex(of: ":") {
        host = authority[..<colon]
        portText = authority[authority.index(after: colon)...]
      } else {
        host = authority
      }
      guard NetworkAddressSyntax.isIPv4(host) || NetworkAddressSyntax.isHostName(host) else {
        return .failure(AddressError("\"\(host)\" is not a valid host name or IP address"))
      }
      host = Substring(host.lowercased())
      hostForHeader = String(host)
    }
    var port = scheme.defaultPort
    if let portText {
      switch NetworkAddressSyntax.parsePort(portText) {
      case .success(let value): port = value
      case .failure(let error): return .failure(error)
      }
    }
    if port != scheme.defaultPort { hostForHeader += ":\(port)" }

    if let problem = RoutePathSyntax.pathCharactersProblem(pathAndRest) {
      return .failure(AddressError("URL path \(problem)"))
    }
    var basePath = String(pathAndRest)
    while basePath.hasSuffix("/") { basePath.removeLast() }
    return .success(
      HTTPURL(scheme: scheme, host: String(host), port: port, basePath: basePath, hostHeader: hostForHeader))
  }
}

/// The syntax checks shared by listen addresses and URLs.
enum NetworkAddressSyntax {
  static func isIPv4(_ text: Substring) -> Bool {
    var address = in_addr()
    // glibc's inet_pton accepts exactly four decimal parts and refuses leading zeros.
    return inet_pton(AF_INET, String(text), &address) == 1
  }

  static func isIPv6(_ text: Substring) -> Bool {
    var address = in6_addr()
    return inet_pton(AF_INET6, String(text), &address) == 1
  }

  /// RFC 1123 host names: dot-separated labels of letters, digits and `-`, not starting or
  /// ending with `-`, at most 63 bytes each and 253 in all.
  static func isHostName(_ text: Substring) -> Bool {
    guard !text.isEmpty, text.utf8.count <= 253 else { return false }
    // A name made only of digits and dots is a mistyped IPv4 address, not a host name.
    if text.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }) { return false }
    return text.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
      !label.isEmpty && label.utf8.count <= 63 && !label.hasPrefix("-") && !label.hasSuffix("-")
        && label.utf8.allSatisfy { byte in
          (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
        }
    }
  }

  /// Listen addresses may use port 0 (the kernel picks a free port, which the gateway logs
  /// at start); a URL needs a real port to connect to.
  static func parsePort(_ text: Substring, allowZero: Bool = false) -> Result<UInt16, AddressError> {
    let lowest = allowZero ? 0 : 1
    guard !text.isEmpty, text.utf8.count <= 5,
      text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
      let value = Int(text)
    else {
      return .failure(AddressError("port must be a number from \(lowest) to 65535, got \"\(text)\""))
    }
    guard (lowest...65535).contains(value) else {
      return .failure(AddressError("port must be from \(lowest) to 65535, got \(value)"))
    }
    return .success(UInt16(value))
  }
}

extension ServerAddress {
  /// Parses an address to connect to: `10.0.1.5:8080`, `[2001:db8::5]:8080` or, with
  /// `allowsNames`, `api.internal:8080`. With a `defaultPort` the port may be left out
  /// (`10.0.0.2`, `[2001:db8::2]`, and then a bare `2001:db8::2` too, which has no port
  /// to be confused with). The error explains what is wrong with the text.
  static func parse(
    _ text: String, defaultPort: UInt16? = nil, allowsNames: Bool = true
  ) -> Result<ServerAddress, AddressError> {
    let example = allowsNames ? "10.0.1.5:8080 or [2001:db8::5]:8080" : "10.0.0.2:53 or [2001:db8::2]:53"
    let hostText: Substring
    var portText: Substring?
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]") else {
        return .failure(AddressError("missing ']' after the IPv6 address"))
      }
      hostText = text[text.index(after: text.startIndex)..<close]
      guard NetworkAddressSyntax.isIPv6(hostText) else {
        return .failure(AddressError("\"\(hostText)\" is not an IPv6 address"))
      }
      let rest = text[text.index(after: close)...]
      if !rest.isEmpty {
        guard rest.hasPrefix(":") else { return .failure(AddressError("unexpected text after ']'")) }
        portText = rest.dropFirst()
      }
    } else if NetworkAddressSyntax.isIPv6(Substring(text)) {
      // Without brackets the last group could be read as a port; refuse rather than guess.
      guard defaultPort != nil else {
        return .failure(AddressError("an IPv6 address needs brackets and a port, such as [\(text)]:8080"))
      }
      hostText = Substring(text)
    } else if let colon = text.lastIndex(of: ":") {
      hostText = text[..<colon]
      portText = text[text.index(after: colon)...]
    } else {
      hostText = Substring(text)
    }

    let host: Host
    if text.hasPrefix("[") || NetworkAddressSyntax.isIPv6(hostText) {
      guard let canonical = NetworkAddressSyntax.canonicalIPv6(hostText) else {
        return .failure(AddressError("\"\(hostText)\" is not an IPv6 address"))
      }
      host = .ipv6(canonical)
    } else if hostText.contains(":") {
      return .failure(AddressError("an IPv6 address needs brackets, such as \(example)"))
    } else if NetworkAddressSyntax.isIPv4(hostText) {
      host = .ipv4(String(hostText))
    } else if NetworkAddressSyntax.isHostName(hostText) {
      guard allowsNames else {
        // The resolver's own address cannot come from the resolver.
        return .failure(AddressError("must be an IP address, not a name, got \"\(hostText)\""))
      }
      host = .name(hostText.lowercased())
    } else {
      return .failure(
        AddressError(
          "host must be an IP address" + (allowsNames ? " or a DNS name" : "") + ", got \"\(hostText)\""))
    }

    guard let portText else {
      guard let defaultPort else {
        return .failure(AddressError("expected host:port, such as \(example)"))
      }
      return .success(ServerAddress(host: host, port: defaultPort))
    }
    switch NetworkAddressSyntax.parsePort(portText) {
    case .success(let port): return .success(ServerAddress(host: host, port: port))
    case .failure(let error): return .failure(error)
    }
  }
}

extension NetworkAddressSyntax {
  /// The one spelling `inet_ntop` gives an IPv6 address (`2001:DB8:0::5` → `2001:db8::5`),
  /// so two spellings of one address are seen as one endpoint; nil when `text` is not one.
  static func canonicalIPv6(_ text: Substring) -> String? {
    var address = in6_addr()
    guard inet_pton(AF_INET6, String(text), &address) == 1 else { return nil }
    var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
    guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}
