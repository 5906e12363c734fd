import CGatehouseOpenSSL
import GatehouseConfig

/// Who may call the admin API under one config: the token check and whether `/metrics` is
/// open. Built with each `GatewaySnapshot`, so both follow a reload together and one request
/// is judged against one config.
public struct AdminAccess: Sendable {
  public let authorizer: AdminAuthorizer
  public let metricsPublic: Bool

  public init(_ config: AdminConfig) {
    authorizer = AdminAuthorizer(token: config.token?.value)
    metricsPublic = config.metricsPublic
  }

  /// Whether a request routed to `routing` may go on: the open endpoints always, anything
  /// else (unknown paths and wrong methods included) only with the right token.
  public func allows(_ routing: AdminRouting, authorizationHeader: String?) -> Bool {
    if case .endpoint(let endpoint) = routing, !endpoint.requiresToken(metricsPublic: metricsPublic) { return true }
    return authorizer.isAuthorized(authorizationHeader: authorizationHeader)
  }
}

/// Checks `Authorization: Bearer <admin token>` in constant time: both sides are hashed
/// with SHA-256 and the digests compared with `CRYPTO_memcmp`, so neither the token's
/// length nor the position of the first wrong byte shows in the timing.
public struct AdminAuthorizer: Sendable {
  private let expectedDigest: [UInt8]?

  /// `token` nil means no admin token is configured: every protected endpoint is refused.
  public init(token: String?) {
    expectedDigest = token.map { Self.sha256(Array($0.utf8)) }
  }

  public func isAuthorized(authorizationHeader: String?) -> Bool {
    guard let expectedDigest, let header = authorizationHeader else { return false }
    let prefix = "Bearer "
    guard header.count > prefix.count, header.lowercased().hasPrefix("bearer ") else { return false }
    let presented = Array(header.utf8.dropFirst(prefix.utf8.count))
    let digest = Self.sha256(presented)
    return digest.withUnsafeBytes { a in
      expectedDigest.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, 32) == 0 }
    }
  }

  public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: 32)
    bytes.withUnsafeBytes { input in
      digest.withUnsafeMutableBytes { output in
        _ = EVP_Digest(
          input.baseAddress, input.count, output.baseAddress?.assumingMemoryBound(to: UInt8.self), nil, EVP_sha256(),
          nil)
      }
    }
    return digest
  }

  /// Lowercase hex of SHA-256, as used for fingerprints and cache ids.
  public static func sha256Hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in sha256(bytes) {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
  }
}
