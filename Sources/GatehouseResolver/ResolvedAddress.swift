import GatehouseNet
import Glibc

/// One address a host name resolved to, with how long it may be kept.
public struct ResolvedAddress: Sendable, Hashable, CustomStringConvertible {
  /// The record type an address came from.
  public enum Family: Sendable, Hashable {
    /// An A record (or an IPv4 literal).
    case ipv4
    /// An AAAA record (or an IPv6 literal).
    case ipv6
  }

  /// The address with port 0; `socketAddress(port:)` gives the one to connect to.
  public let address: SocketAddress
  public let family: Family
  /// Seconds the address may be used before it is resolved again: its record's TTL, lowered to
  /// the shortest TTL of the CNAMEs that led to it. 0 means "do not keep" (c-ares gives 0 to
  /// /etc/hosts entries). nil means it never expires: an IP literal or `localhost`, which were
  /// not looked up.
  public let ttl: UInt32?

  /// Makes an address from its parts; `address`'s port is kept as given.
  public init(address: SocketAddress, family: Family, ttl: UInt32?) {
    self.address = address
    self.family = family
    self.ttl = ttl
  }

  /// The IP as text: `127.0.0.2`, `::1`.
  public var text: String { address.hostText }

  /// The address with `port`, for `TCPSocket.connect(to:)`.
  public func socketAddress(port: UInt16) -> SocketAddress {
    address.withPort(port)
  }

  /// `127.0.0.2 (ttl 30 s)`, or the bare IP when it never expires.
  public var description: String {
    guard let ttl else { return text }
    return "\(text) (ttl \(ttl) s)"
  }

  /// An IPv4 or IPv6 literal (`[v6]` too) as the one address it names, never expiring; nil for
  /// anything else. Only the strict forms inet_pton takes: `127.1` is a name, not an address.
  init?(literal text: String) {
    var host = Substring(text)
    if host.hasPrefix("["), host.hasSuffix("]") {
      host = host.dropFirst().dropLast()
    }
    let hostText = String(host)
    var storage = sockaddr_storage()
    var ipv4 = sockaddr_in()
    var ipv6 = sockaddr_in6()
    let family: Family
    if inet_pton(AF_INET, hostText, &ipv4.sin_addr) == 1 {
      ipv4.sin_family = sa_family_t(AF_INET)
      withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: ipv4, as: sockaddr_in.self) }
      family = .ipv4
    } else if inet_pton(AF_INET6, hostText, &ipv6.sin6_addr) == 1 {
      ipv6.sin6_family = sa_family_t(AF_INET6)
      withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: ipv6, as: sockaddr_in6.self) }
      family = .ipv6
    } else {
      return nil
    }
    guard let address = SocketAddress(storage: storage) else { return nil }
    self.init(address: address, family: family, ttl: nil)
  }

  /// `localhost`, answered without a lookup as RFC 6761 §6.3 asks: 127.0.0.1, then ::1.
  static let localhost: [ResolvedAddress] = [
    ResolvedAddress(literal: "127.0.0.1")!, ResolvedAddress(literal: "::1")!,
  ]

  /// Whether `host` is `localhost` in any case, with or without the root's trailing dot.
  static func isLocalhost(_ host: String) -> Bool {
    let name = host.hasSuffix(".") ? host.dropLast() : Substring(host)
    return name.utf8.count == 9 && name.lowercased() == "localhost"
  }
}
