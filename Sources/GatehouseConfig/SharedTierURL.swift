/// The shared tier's address (`shared.url`, Docs/shared-tier.md): `redis://[user:password@]host[:port][/db]`, or
/// `rediss://` for TLS. The port defaults to 6379 and the database to 0; user and password may
/// be percent-encoded. Parsed once at config time, so every problem is reported with a message
/// that never repeats the password.
///
/// It lives in GatehouseConfig (not beside the client in GatehouseSharedTier) so that the config
/// decoder validates `shared.url` like every other key, without importing sockets or hiredis.
public struct SharedTierURL: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
  /// `rediss://`: the connection speaks TLS and verifies the server's certificate.
  public let usesTLS: Bool
  /// A host name or an IP literal (an IPv6 one without its brackets).
  public let host: String
  public let port: UInt16
  /// The ACL user for `AUTH user password`; nil sends `AUTH password` (the default user).
  public let username: String?
  /// Nil: no `AUTH` (unless the config's separate `password` supplies one).
  public let password: String?
  /// Selected with `SELECT` after connecting when not 0.
  public let database: Int

  public static let defaultPort: UInt16 = 6379

  public init(parsing text: String) throws(SharedTierURLError) {
    let rest: Substring
    if text.hasPrefix("redis://") {
      usesTLS = false
      rest = text.dropFirst("redis://".count)
    } else if text.hasPrefix("rediss://") {
      usesTLS = true
      rest = text.dropFirst("rediss://".count)
    } else {
      throw SharedTierURLError("the URL must start with redis:// or rediss:// (TLS)")
    }
    // Credentials end at the last '@', so an unencoded '@' or '/' in a password still parses.
    var hostPart = rest
    var userInfo: Substring?
    if let at = rest.lastIndex(of: "@") {
      userInfo = rest[..<at]
      hostPart = rest[rest.index(after: at)...]
    }
    if hostPart.contains("?") || hostPart.contains("#") {
      throw SharedTierURLError("query parameters and fragments are not supported; set options in the config")
    }
    let authority: Substring
    var path: Substring = ""
    if let slash = hostPart.firstIndex(of: "/") {
      authority = hostPart[..<slash]
      path = hostPart[hostPart.index(after: slash)...]
    } else {
      authority = hostPart
    }
    (host, port) = try Self.parseAuthority(authority)
    database = try Self.parseDatabase(path)
    (username, password) = try Self.parseUserInfo(userInfo)
  }

  /// Host and port: `name`, `name:port`, `1.2.3.4:port`, `[v6]:port`.
  private static func parseAuthority(_ text: Substring) throws(SharedTierURLError) -> (String, UInt16) {
    var hostText: Substring
    var portText: Substring?
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]") else {
        throw SharedTierURLError("missing ']' after an IPv6 address")
      }
      hostText = text[text.index(after: text.startIndex)..<close]
      let after = text[text.index(after: close)...]
      if !after.isEmpty {
        guard after.hasPrefix(":") else { throw SharedTierURLError("unexpected text after the IPv6 address") }
        portText = after.dropFirst()
      }
      guard NetworkAddressSyntax.isIPv6(hostText) else {
        throw SharedTierURLError("'\(hostText)' is not an IPv6 address")
      }
    } else {
      if let colon = text.firstIndex(of: ":") {
        hostText = text[..<colon]
        portText = text[text.index(after: colon)...]
      } else {
        hostText = text
      }
      guard !hostText.isEmpty else { throw SharedTierURLError("the host is missing") }
      guard hostText.utf8.count <= 253,
        hostText.utf8.allSatisfy({ isHostByte($0) })
      else {
        throw SharedTierURLError("'\(hostText)' is not a valid host name (letters, digits, '.', '-', '_')")
      }
    }
    guard let portText else { return (String(hostText), defaultPort) }
    guard !portText.isEmpty, portText.utf8.count <= 5, portText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
      let port = UInt16(portText), port > 0
    else {
      throw SharedTierURLError("the port must be a number from 1 to 65535")
    }
    return (String(hostText), port)
  }

  private static func isHostByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
      true
    default:
      false
    }
  }

  private static func parseDatabase(_ path: Substring) throws(SharedTierURLError) -> Int {
    guard !path.isEmpty else { return 0 }
    guard path.utf8.count <= 9, path.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let database = Int(path) else {
      throw SharedTierURLError("the path must be a database number, as in redis://host:6379/0")
    }
    return database
  }

  private static func parseUserInfo(_ text: Substring?) throws(SharedTierURLError) -> (String?, String?) {
    guard let text else { return (nil, nil) }
    guard let colon = text.firstIndex(of: ":") else {
      throw SharedTierURLError(
        "credentials need a ':': redis://:password@host for a password, redis://user:password@host for a user")
    }
    let user = try percentDecoded(text[..<colon], what: "user")
    let password = try percentDecoded(text[text.index(after: colon)...], what: "password")
    if !user.isEmpty && password.isEmpty {
      throw SharedTierURLError("the user '\(user)' has no password")
    }
    return (user.isEmpty ? nil : user, password.isEmpty ? nil : password)
  }

  /// `%XX` escapes to bytes; the result must be UTF-8. The error names the part, never its text.
  private static func percentDecoded(_ text: Substring, what: String) throws(SharedTierURLError) -> String {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(text.utf8.count)
    var iterator = text.utf8.makeIterator()
    while let byte = iterator.next() {
      guard byte == UInt8(ascii: "%") else {
        bytes.append(byte)
        continue
      }
      guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
        throw SharedTierURLError("the \(what) has a '%' that is not followed by two hex digits")
      }
      bytes.append(high << 4 | low)
    }
    guard let decoded = String(validating: bytes, as: UTF8.self) else {
      throw SharedTierURLError("the \(what) is not valid UTF-8 once decoded")
    }
    return decoded
  }

  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
  }

  /// The URL without the password (`***` marks that one is set), for status pages and logs.
  public var redacted: String {
    var text = usesTLS ? "rediss://" : "redis://"
    switch (username, password) {
    case (let user?, _): text += "\(user):***@"
    case (nil, _?): text += ":***@"
    case (nil, nil): break
    }
    text += host.contains(":") ? "[\(host)]" : host
    text += ":\(port)/\(database)"
    return text
  }

  public var description: String { redacted }
  /// `dump` of a config shows the redacted URL, never the password.
  public var customMirror: Mirror { Mirror(self, children: ["url": redacted]) }
}

/// Why a `shared.url` was refused; `problem` is meant for `gatehouse check` and start-up errors.
public struct SharedTierURLError: Error, Sendable, Equatable, CustomStringConvertible {
  public let problem: String

  init(_ problem: String) {
    self.problem = problem
  }

  public var description: String { "shared.url: \(problem)" }
}
