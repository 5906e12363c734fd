import GatehouseHTTP

/// The strong `ETag` of a body the gateway sends itself (an envelope, a stub, an answer
/// from the store whose body is not the backend's bytes or came without a tag of the
/// backend's: `StoreEntryRules.backendTag`): `"` + the 128-bit SipHash-2-4 of the body under
/// a fixed key, in hex, + `"`. It depends on the bytes alone, so every replica, before and
/// after a restart, gives one body the same tag, and the gzip and identity codings of one
/// body (different bytes) different ones (RFC 9110 §8.8.3.3).
///
/// Why not SHA-256: through OpenSSL's EVP interface a digest costs about 5,000 instructions
/// of set-up per body, a third of a whole proxied request, on every enveloped answer. A
/// validator needs two bodies of one resource to differ, which a 128-bit hash gives with
/// odds of 2^-128 per change; it is no commitment against someone who controls the body
/// and searches for a collision (nor are the size-and-date tags of nginx or Apache).
enum EntityTagMaker {
  /// The key: part of what a tag means. Changing it changes every tag once (clients then
  /// download each answer again), never what a tag says about a body.
  static let k0: UInt64 = 0x7375_6F68_6574_6167  // "gatehous", little-endian
  static let k1: UInt64 = 0x312F_6761_7465_2D65  // "e-etag/1"

  /// The tag of `body`.
  static func tag(of body: [UInt8]) -> GatewayETag {
    let (first, second) = body.withUnsafeBytes { SipHash.hash128($0, k0: k0, k1: k1) }
    return GatewayETag(first: first, second: second)
  }
}

/// An entity tag the gateway made (`EntityTagMaker`): written straight into a head, without
/// an array of its own on the way.
public struct GatewayETag: Equatable, Sendable {
  let first: UInt64
  let second: UInt64

  private static let hexDigits: StaticString = "0123456789abcdef"

  /// `"` + 32 lowercase hex digits + `"`.
  var bytes: [UInt8] {
    var bytes: [UInt8] = []
    bytes.appendBytes(upTo: 34) { write(into: &$0) }
    return bytes
  }

  /// The tag as an `EntityTag` (strong), for comparisons.
  var entityTag: EntityTag { EntityTag(isWeak: false, opaque: bytes) }

  /// Writes the quoted tag.
  func write(into out: inout ByteCursor) {
    out.write(0x22)
    Self.writeHex(first, into: &out)
    Self.writeHex(second, into: &out)
    out.write(0x22)
  }

  /// A word's bytes in output order (little-endian), two hex digits each.
  @inline(__always)
  private static func writeHex(_ word: UInt64, into out: inout ByteCursor) {
    let digits = hexDigits.utf8Start
    for index in 0..<8 {
      let byte = UInt8(truncatingIfNeeded: word >> (8 * UInt64(index)))
      out.write(digits[Int(byte >> 4)])
      out.write(digits[Int(byte & 0x0F)])
    }
  }
}
