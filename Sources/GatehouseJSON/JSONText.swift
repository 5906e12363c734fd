/// JSON text output without Foundation: strings escaped per RFC 8259.
public enum JSONText {
  public static func appendString(_ text: String, to out: inout [UInt8]) {
    appendString(bytes: text.utf8, to: &out)
  }

  /// Escapes quotes, backslashes and controls; bytes of valid UTF-8 pass as they are.
  @inlinable
  public static func appendString<S: Sequence>(bytes: S, to out: inout [UInt8]) where S.Element == UInt8 {
    out.append(0x22)
    appendStringContent(bytes: bytes, to: &out)
    out.append(0x22)
  }

  /// The escaped bytes of a JSON string without its quotes (for strings written in pieces).
  @inlinable
  public static func appendStringContent<S: Sequence>(bytes: S, to out: inout [UInt8]) where S.Element == UInt8 {
    for byte in bytes {
      switch byte {
      case 0x22: out.append(contentsOf: [0x5C, 0x22])
      case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
      case 0x0A: out.append(contentsOf: [0x5C, 0x6E])
      case 0x0D: out.append(contentsOf: [0x5C, 0x72])
      case 0x09: out.append(contentsOf: [0x5C, 0x74])
      case 0x00..<0x20, 0x7F:
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
      default: out.append(byte)
      }
    }
  }
}
