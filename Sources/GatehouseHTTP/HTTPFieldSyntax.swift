/// RFC 9110 field syntax for text that is not parsed off the wire (config values, names to
/// compare): header names and methods are tokens, header values are visible characters,
/// spaces and tabs.
package enum HTTPFieldSyntax {
  /// Whether `text` is an RFC 9110 §5.6.2 token (a field name or a method).
  package static func isToken(_ text: String) -> Bool {
    !text.isEmpty && text.utf8.allSatisfy(ASCII.isTokenChar)
  }

  /// Why `value` can't be a header value, or nil. The message never quotes the value, which
  /// may be a credential.
  package static func headerValueProblem(_ value: String) -> String? {
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

  /// The header name as the gateway compares names: lowercased, and `_` read as `-`, as
  /// CGI, WSGI, PHP and many frameworks do (`X_Forwarded_For` and `X-Forwarded-For` are the
  /// same `HTTP_X_FORWARDED_FOR` to them).
  package static func canonicalName(_ name: String) -> String {
    String(decoding: name.utf8.map { byte in byte == UInt8(ascii: "_") ? UInt8(ascii: "-") : byte }, as: UTF8.self)
      .lowercased()
  }
}
