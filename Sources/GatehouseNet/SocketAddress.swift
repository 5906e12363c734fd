import Glibc

/// An IPv4 or IPv6 address with a port, parsed from config text such as `127.0.0.1:8080`,
/// `[::1]:8080` or `localhost:8080`. Host names other than `localhost` are not resolved here.
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
  enum Host: Sendable, Hashable {
    /// `s_addr` exactly as it sits in memory (network byte order).
    case ipv4(UInt32)
    /// The 16 address bytes in memory order, split in two words so the type stays Hashable.
    case ipv6(UInt64, UInt64, scopeID: UInt32)
  }

  let host: Host
  /// The port in host byte order.
  public let port: UInt16

  init(host: Host, port: UInt16) {
    self.host = host
    self.port = port
  }

  /// `127.0.0.1:port`, the only address tests bind.
  public static func loopback(port: UInt16) -> SocketAddress {
    SocketAddress(host: .ipv4(UInt32(0x7f00_0001).bigEndian), port: port)
  }

  /// Parses `a.b.c.d:port`, `[v6]:port` or `localhost:port` (which means 127.0.0.1: no DNS lookups here).
  public init(parsing text: String) throws(AddressParseError) {
    let (hostText, portText): (Substring, Substring)
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]") else {
        throw AddressParseError(input: text, reason: "missing ']' after an IPv6 address")
      }
      hostText = text[text.index(after: text.startIndex)..<close]
      let rest = text[text.index(after: close)...]
      guard rest.hasPrefix(":") else { throw AddressParseError(input: text, reason: "missing ':port'") }
      portText = rest.dropFirst()
    } else {
      guard let colon = text.lastIndex(of: ":") else {
        throw AddressParseError(input: text, reason: "missing ':port'")
      }
      hostText = text[..<colon]
      portText = text[text.index(after: colon)...]
      if hostText.contains(":") {
        throw AddressParseError(input: text, reason: "an IPv6 address must be written in brackets: [::1]:80")
      }
    }
    guard !portText.isEmpty, portText.utf8.count <= 5, portText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
      let port = UInt16(portText)
    else {
      throw AddressParseError(input: text, reason: "the port must be a number from 0 to 65535")
    }
    guard let host = SocketAddress.parseHost(hostText) else {
      throw AddressParseError(input: text, reason: "'\(hostText)' is not an IP address or localhost")
    }
    self.init(host: host, port: port)
  }

  static func parseHost(_ text: Substring) -> Host? {
    if text == "localhost" { return .ipv4(UInt32(0x7f00_0001).bigEndian) }
    var ipv4 = in_addr()
    if inet_pton(AF_INET, String(text), &ipv4) == 1 { return .ipv4(ipv4.s_addr) }
    var ipv6 = in6_addr()
    if inet_pton(AF_INET6, String(text), &ipv6) == 1 {
      let (high, low) = withUnsafeBytes(of: &ipv6) { bytes in
        (
          bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self),
          bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
        )
      }
      return .ipv6(high, low, scopeID: 0)
    }
    return nil
  }

  /// Reads an address the kernel filled in (accept, getsockname) or a resolver returned; nil for families
  /// other than IPv4/IPv6.
  package init?(storage: sockaddr_storage) {
    var storage = storage
    switch Int32(storage.ss_family) {
    case AF_INET:
      let address = withUnsafeBytes(of: &storage) { $0.loadUnaligned(as: sockaddr_in.self) }
      self.init(host: .ipv4(address.sin_addr.s_addr), port: UInt16(bigEndian: address.sin_port))
    case AF_INET6:
      var address = withUnsafeBytes(of: &storage) { $0.loadUnaligned(as: sockaddr_in6.self) }
      let (high, low) = withUnsafeBytes(of: &address.sin6_addr) { bytes in
        (
          bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self),
          bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
        )
      }
      self.init(
        host: .ipv6(high, low, scopeID: address.sin6_scope_id), port: UInt16(bigEndian: address.sin6_port))
    default:
      return nil
    }
  }

  /// The same host with another port (used to bind further SO_REUSEPORT listeners on the port the first got).
  public func withPort(_ port: UInt16) -> SocketAddress {
    SocketAddress(host: host, port: port)
  }

  var family: Int32 {
    switch host {
    case .ipv4: AF_INET
    case .ipv6: AF_INET6
    }
  }

  /// Calls `body` with a `sockaddr` built on the stack for this address.
  package func withSockAddr<Result, Failure: Error>(
    _ body: (UnsafePointer<sockaddr>, socklen_t) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    switch host {
    case .ipv4(let raw):
      var address = sockaddr_in()
      address.sin_family = sa_family_t(AF_INET)
      address.sin_port = port.bigEndian
      address.sin_addr.s_addr = raw
      return try withUnsafePointer(to: &address) { pointer throws(Failure) in
        try body(
          UnsafeRawPointer(pointer).assumingMemoryBound(to: sockaddr.self),
          socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    case .ipv6(let high, let low, let scopeID):
      var address = sockaddr_in6()
      address.sin6_family = sa_family_t(AF_INET6)
      address.sin6_port = port.bigEndian
      address.sin6_scope_id = scopeID
      withUnsafeMutableBytes(of: &address.sin6_addr) { bytes in
        bytes.storeBytes(of: high, toByteOffset: 0, as: UInt64.self)
        bytes.storeBytes(of: low, toByteOffset: 8, as: UInt64.self)
      }
      return try withUnsafePointer(to: &address) { pointer throws(Failure) in
        try body(
          UnsafeRawPointer(pointer).assumingMemoryBound(to: sockaddr.self),
          socklen_t(MemoryLayout<sockaddr_in6>.size))
      }
    }
  }

  /// The host alone as text (`127.0.0.1`, `::1`), the form `X-Forwarded-For` wants.
  public var hostText: String {
    switch host {
    case .ipv4(let raw):
      let address = in_addr(s_addr: raw)
      return withUnsafeBytes(of: address) { SocketAddress.format(family: AF_INET, $0.baseAddress!) }
    case .ipv6(let high, let low, _):
      var address = in6_addr()
      withUnsafeMutableBytes(of: &address) { bytes in
        bytes.storeBytes(of: high, toByteOffset: 0, as: UInt64.self)
        bytes.storeBytes(of: low, toByteOffset: 8, as: UInt64.self)
      }
      return withUnsafeBytes(of: address) { SocketAddress.format(family: AF_INET6, $0.baseAddress!) }
    }
  }

  private static func format(family: Int32, _ address: UnsafeRawPointer) -> String {
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { buffer in
      guard inet_ntop(family, address, buffer.baseAddress, socklen_t(buffer.count)) != nil else { return "?" }
      return String(cString: buffer.baseAddress!)
    }
  }

  /// `127.0.0.1:8080` or `[::1]:8080`.
  public var description: String {
    switch host {
    case .ipv4: "\(hostText):\(port)"
    case .ipv6: "[\(hostText)]:\(port)"
    }
  }
}

/// Text that is not a `host:port` address we accept; `description` says why, for config errors.
public struct AddressParseError: Error, Sendable, Equatable, CustomStringConvertible {
  public let input: String
  public let reason: String

  public var description: String { "invalid address '\(input)': \(reason)" }
}
