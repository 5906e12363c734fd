/// `application/x-www-form-urlencoded` as OAuth 2 uses it (RFC 6749 Appendix B): unreserved characters
/// stay, a space becomes `+`, every other byte of the UTF-8 form becomes `%XX`.
enum FormURLEncoding {
  static func encode(_ text: String) -> String {
    var out: [UInt8] = []
    out.reserveCapacity(text.utf8.count)
    let hexDigits = Array("0123456789ABCDEF".utf8)
    for byte in text.utf8 {
      switch byte {
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
        UInt8(ascii: "~"):
        out.append(byte)
      case UInt8(ascii: " "):
        out.append(UInt8(ascii: "+"))
      default:
        out.append(UInt8(ascii: "%"))
        out.append(hexDigits[Int(byte >> 4)])
        out.append(hexDigits[Int(byte & 0x0F)])
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// `name=value&name=value`, both sides encoded.
  static func form(_ fields: [(name: String, value: String)]) -> String {
    fields.map { encode($0.name) + "=" + encode($0.value) }.joined(separator: "&")
  }
}

/// Standard base64 with padding (RFC 4648 §4): HTTP Basic credentials, and stored bodies
/// that are not UTF-8 in the admin API.
enum Base64 {
  private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

  static func encode(_ bytes: [UInt8]) -> String {
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
