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
