import CGatehouseOpenSSL
import GatehouseAdmin
import GatehouseConfig
import GatehouseHTTP

/// The client keys of Config/README.md `clients`: which client a request comes from, checked
/// against SHA-256 digests in constant time (the digest comparison does not stop at the
/// first differing byte, and every configured key is compared).
public struct ClientKeys: Sendable {
  public struct Client: Sendable {
    public let id: String
    let digest: [UInt8]
    /// Index into the shared rate limiter's buckets; nil when the client has no limit.
    public let bucket: Int?
  }

  public let required: Bool
  public let clients: [Client]

  public init(_ config: ClientsConfig) {
    required = config.required
    var bucket = 0
    clients = config.keys.map { key in
      let index: Int? = key.rateLimit == nil ? nil : bucket
      if key.rateLimit != nil { bucket += 1 }
      return Client(id: key.id, digest: Self.bytes(hex: key.sha256Hex), bucket: index)
    }
  }

  public var isEmpty: Bool { clients.isEmpty && !required }

  /// What a request's credentials amount to.
  public enum Verdict: Sendable, Equatable {
    case anonymous
    case client(index: Int)
    case missing
    case invalid
  }

  /// Reads `X-Api-Key`, or `Authorization: ApiKey <key>`, and finds the client.
  public func verdict(for headers: HTTPHeaders) -> Verdict {
    guard let presented = Self.presentedKey(headers) else { return required ? .missing : .anonymous }
    let digest = AdminAuthorizer.sha256(Array(presented))
    var found: Int?
    digest.withUnsafeBytes { presentedDigest in
      for (index, client) in clients.enumerated() {
        let equal = client.digest.withUnsafeBytes {
          CRYPTO_memcmp(presentedDigest.baseAddress, $0.baseAddress, 32) == 0
        }
        if equal && found == nil { found = index }
      }
    }
    guard let found else { return .invalid }
    return .client(index: found)
  }

  /// The key bytes the client sent, if any. A key sent more than once (two `X-Api-Key`
  /// fields, or both forms) is refused as an empty key, which matches no client: which of
  /// them would count is exactly what a confused or crafted request leaves open.
  static func presentedKey(_ headers: HTTPHeaders) -> ArraySlice<UInt8>? {
    var found: ArraySlice<UInt8>?
    var sources = 0
    for index in 0..<headers.count {
      if headers.nameEquals(at: index, "x-api-key") {
        let value = headers.valueBytes(at: index)
        if value.isEmpty { continue }
        sources += 1
        found = value
      } else if headers.nameEquals(at: index, "authorization") {
        let value = headers.valueBytes(at: index)
        guard isAPIKeyScheme(value) else { continue }
        sources += 1
        found = value.dropFirst(7).drop { $0 == 0x20 }
      }
    }
    return sources > 1 ? ArraySlice() : found
  }

  /// `ApiKey ` (scheme names are case-insensitive).
  public static func isAPIKeyScheme(_ value: some Collection<UInt8>) -> Bool {
    // A key follows the scheme: `ApiKey ` alone carries none.
    value.count > 7 && ASCIIBytes.startsWithLowercase(value, "apikey ")
  }

  static func bytes(hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var high: UInt8?
    for byte in hex.utf8 {
      guard let value = AdminRouter.hexValue(byte) else { continue }
      if let h = high {
        out.append(h << 4 | value)
        high = nil
      } else {
        high = value
      }
    }
    return out
  }
}
