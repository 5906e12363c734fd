import GatehouseHTTP

#if canImport(Glibc)
  import Glibc
#endif

/// The proxies whose `X-Forwarded-For` the access log believes (`log.trusted_proxies`):
/// the `client` of an access line is the peer address, or the first `X-Forwarded-For` hop
/// when the peer is one of these. Anyone else could write any address into that field.
public struct TrustedProxies: Sendable, Equatable {
  /// One address or network. IPv4 is held as its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`),
  /// so a v4 client that reaches a dual-stack listener matches its v4 entry.
  struct Network: Sendable, Equatable {
    let address: UInt128
    let prefixLength: Int

    func contains(_ other: UInt128) -> Bool {
      guard prefixLength > 0 else { return true }
      let mask = UInt128.max << (128 - prefixLength)
      return other & mask == address & mask
    }
  }

  let networks: [Network]

  public static let none = TrustedProxies(networks: [])

  init(networks: [Network]) {
    self.networks = networks
  }

  /// Entries already checked with `problem(_:)`; ones that do not parse are left out.
  public init(entries: [String]) {
    networks = entries.compactMap { try? Self.parse($0).get() }
  }

  public var isEmpty: Bool { networks.isEmpty }

  /// Why `entry` is no address or network (`10.0.0.0/8`, `127.0.0.1`, `fd00::/8`), or nil.
  public static func problem(_ entry: String) -> String? {
    switch parse(entry) {
    case .success: return nil
    case .failure(let problem): return problem.text
    }
  }

  struct Problem: Error {
    let text: String
  }

  static func parse(_ entry: String) -> Result<Network, Problem> {
    let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
    guard let address = parts.first.flatMap({ numeric(String($0)) }) else {
      return .failure(Problem(text: "must be an IP address or a network such as 10.0.0.0/8 or fd00::/8"))
    }
    let isIPv4 = !parts[0].contains(":")
    let width = isIPv4 ? 32 : 128
    var prefix = width
    if parts.count == 2 {
      guard let length = Int(parts[1]), parts[1].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), length <= width else {
        return .failure(Problem(text: "the prefix length after '/' must be a number from 0 to \(width)"))
      }
      prefix = length
    }
    return .success(Network(address: address, prefixLength: isIPv4 ? prefix + 96 : prefix))
  }

  /// An address as a 128-bit number (IPv4 mapped into IPv6), or nil.
  static func numeric(_ text: String) -> UInt128? {
    var v4 = in_addr()
    if inet_pton(AF_INET, text, &v4) == 1 {
      return UInt128(0xffff) << 32 | UInt128(UInt32(bigEndian: v4.s_addr))
    }
    var v6 = in6_addr()
    guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
    return withUnsafeBytes(of: &v6) { bytes in
      bytes.reduce(UInt128(0)) { $0 << 8 | UInt128($1) }
    }
  }

  public func contains(address text: String) -> Bool {
    guard !networks.isEmpty, let address = Self.numeric(text) else { return false }
    return networks.contains { $0.contains(address) }
  }

  /// The access line's `client`: `peer`, or the first hop of `forwardedFor` when the peer is
  /// trusted and that hop is an IP address (anything else is not believed).
  public func client(peer: [UInt8], forwardedFor: ArraySlice<UInt8>?) -> ArraySlice<UInt8> {
    guard !networks.isEmpty, let forwardedFor,
      contains(address: String(decoding: peer, as: UTF8.self))
    else { return peer[...] }
    var hop = forwardedFor[..<(forwardedFor.firstIndex(of: 0x2C) ?? forwardedFor.endIndex)]
    while let first = hop.first, first == 0x20 || first == 0x09 { hop = hop.dropFirst() }
    while let last = hop.last, last == 0x20 || last == 0x09 { hop = hop.dropLast() }
    guard !hop.isEmpty, hop.count <= 45, Self.numeric(String(decoding: hop, as: UTF8.self)) != nil else {
      return peer[...]
    }
    return hop
  }
}
