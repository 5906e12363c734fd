/// Strict base64url without padding (RFC 7515 §2 and Appendix C, RFC 4648 §5), the only
/// encoding JWS compact serialization and JWK members use.
///
/// Strict because a lenient decoder gives one signature many spellings and lets odd bytes
/// (whitespace, `=`, `+`, `/`) through to the parsers behind it: only `A-Z a-z 0-9 - _`, no
/// padding, no length of 1 mod 4, and the unused low bits of the last character must be zero
/// (RFC 4648 §3.5 canonical encoding), so each byte string has exactly one encoding.
package enum Base64URL {
  /// The 6-bit value of each byte, or 0xFF when it is not in the alphabet.
  private static let values: [UInt8] = {
    var table = [UInt8](repeating: 0xFF, count: 256)
    for (index, byte) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() {
      table[Int(byte)] = UInt8(index)
    }
    return table
  }()

  /// The decoded bytes, or nil when `text` is not canonical unpadded base64url.
  package static func decode(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
    let remainder = text.count % 4
    if remainder == 1 { return nil }
    var output: [UInt8] = []
    output.reserveCapacity(text.count / 4 * 3 + 2)
    var accumulator: UInt32 = 0
    var bits = 0
    for byte in text {
      let value = values[Int(byte)]
      if value == 0xFF { return nil }
      accumulator = (accumulator << 6) | UInt32(value)
      bits += 6
      if bits >= 8 {
        bits -= 8
        output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
      }
    }
    // What is left are the unused low bits of the last character: they must be zero.
    if bits > 0 && accumulator & ((1 << UInt32(bits)) - 1) != 0 { return nil }
    return output
  }

  package static func decode(_ text: String) -> [UInt8]? {
    var text = text
    return text.withUTF8 { decode(UnsafeRawBufferPointer($0)) }
  }

  /// Unpadded base64url of `bytes` (the tests and the fuzz seeds mint tokens with it).
  package static func encode<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    var output: [UInt8] = []
    output.reserveCapacity((bytes.count * 4 + 2) / 3)
    var accumulator: UInt32 = 0
    var bits = 0
    for byte in bytes {
      accumulator = (accumulator << 8) | UInt32(byte)
      bits += 8
      while bits >= 6 {
        bits -= 6
        output.append(alphabet[Int((accumulator >> UInt32(bits)) & 0x3F)])
      }
    }
    if bits > 0 { output.append(alphabet[Int((accumulator << UInt32(6 - bits)) & 0x3F)]) }
    return String(decoding: output, as: UTF8.self)
  }
}
