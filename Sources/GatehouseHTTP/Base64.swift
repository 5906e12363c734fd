/// Standard base64 with padding (RFC 4648 §4): HTTP Basic credentials, and stored bodies
/// that are not UTF-8 in the admin API.
package enum Base64 {
  private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

  package static func encode(_ bytes: [UInt8]) -> String {
    var out: [UInt8] = []
    out.reserveCapacity((bytes.count + 2) / 3 * 4)
    var index = 0
    while index + 3 <= bytes.count {
      let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
      for shift in [18, 12, 6, 0] { out.append(alphabet[Int(group >> UInt32(shift) & 0x3F)]) }
      index += 3
    }
    let rest = bytes.count - index
    if rest > 0 {
      var group = UInt32(bytes[index]) << 16
      if rest == 2 { group |= UInt32(bytes[index + 1]) << 8 }
      out.append(alphabet[Int(group >> 18 & 0x3F)])
      out.append(alphabet[Int(group >> 12 & 0x3F)])
      out.append(rest == 2 ? alphabet[Int(group >> 6 & 0x3F)] : UInt8(ascii: "="))
      out.append(UInt8(ascii: "="))
    }
    return String(decoding: out, as: UTF8.self)
  }
}
