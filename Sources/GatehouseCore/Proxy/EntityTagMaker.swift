import CGatehouseOpenSSL

/// The strong `ETag` of a body the gateway sends itself (an envelope, a stub, an answer
/// from the store): `"` + the first 16 bytes of the body's SHA-256 in hex + `"`. It depends
/// on the bytes alone, so every replica, before and after a restart, gives one body the
/// same tag, and the gzip and identity codings of one body (different bytes) different
/// ones (RFC 9110 §8.8.3.3). 128 bits of SHA-256 make two bodies of one resource with one
/// tag as likely as a collision of a random 128-bit value.
///
/// One per loop (its digest context is reused: no allocation per tag). Confined to its loop.
final class EntityTagMaker {
  private let digest: OpaquePointer?

  init() {
    digest = EVP_MD_CTX_new()
  }

  deinit {
    EVP_MD_CTX_free(digest)
  }

  /// The tag of `body`, quotes included.
  func tag(of body: [UInt8]) -> [UInt8] {
    var hash = InlineArray<32, UInt8>(repeating: 0)
    var span = hash.mutableSpan
    let hashed = span.withUnsafeMutableBufferPointer { out in
      body.withUnsafeBytes { input -> Bool in
        guard let digest, EVP_DigestInit_ex(digest, EVP_sha256(), nil) == 1,
          EVP_DigestUpdate(digest, input.baseAddress, input.count) == 1
        else { return false }
        return EVP_DigestFinal_ex(digest, out.baseAddress, nil) == 1
      }
    }
    guard hashed else { return Self.tag(of: body) }
    return Self.render(hash)
  }

  /// The tag of `body` without a loop's context (the same bytes as `tag(of:)`).
  static func tag(of body: [UInt8]) -> [UInt8] {
    var hash = InlineArray<32, UInt8>(repeating: 0)
    var span = hash.mutableSpan
    span.withUnsafeMutableBufferPointer { out in
      body.withUnsafeBytes { input in
        _ = EVP_Digest(input.baseAddress, input.count, out.baseAddress, nil, EVP_sha256(), nil)
      }
    }
    return render(hash)
  }

  private static let hexDigits = Array("0123456789abcdef".utf8)

  private static func render(_ hash: InlineArray<32, UInt8>) -> [UInt8] {
    var out = [UInt8](repeating: 0x22, count: 34)
    for index in 0..<16 {
      out[1 + index * 2] = hexDigits[Int(hash[index] >> 4)]
      out[2 + index * 2] = hexDigits[Int(hash[index] & 0x0F)]
    }
    return out
  }
}
