/// The few RFC 9110 grammar rules the config needs: header names and methods are tokens,
/// header values are visible characters, spaces and tabs.
enum HTTPSyntax {
  /// `tchar` from RFC 9110 §5.6.2.
  static func isTokenCharacter(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"):
      true
    case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
      UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
      UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
      true
    default:
      false
    }
  }

  static func isToken(_ text: String) -> Bool {
    !text.isEmpty && text.utf8.allSatisfy(isTokenCharacter)
  }

  /// Why `value` can't be a header value, or nil. The message never quotes the value, which
  /// may be a credential.
  static func headerValueProblem(_ value: String) -> String? {
    for byte in value.utf8 {
      switch byte {
      case 0x0D, 0x0A, 0x00: return "must not contain CR, LF or NUL"
      case 0x09: continue
      case 0x01..<0x20, 0x7F: return "must not contain control characters"
      default: continue
      }
    }
    if let first = value.utf8.first, first == 0x20 || first == 0x09 {
      return "must not start with whitespace"
    }
    if let last = value.utf8.last, last == 0x20 || last == 0x09 {
      return "must not end with whitespace"
    }
    return nil
  }

  /// Headers that describe one connection or the message framing. The gateway sets them
  /// itself, so a config may not set them (a wrong Content-Length would corrupt the stream).
  static let gatewayManagedHeaders: Set<String> = [
    "connection", "content-length", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    "proxy-connection",
  ]
}

/// A name for an upstream, token or route: it shows up in admin URLs, metric labels and logs,
/// so it is limited to characters that need no escaping anywhere.
enum ConfigName {
  static func problem(_ name: String) -> String? {
    if name.isEmpty { return "name must not be empty" }
    let isValid = name.utf8.allSatisfy { byte in
      (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
        || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
    }
    return isValid ? nil : "name may contain only letters, digits, '_', '-' and '.'"
  }
}
