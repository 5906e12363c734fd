/// A route path pattern from the config, used both for `match.path` and for a route's
/// upstream `path`:
///
/// - a literal path: `/users`, `/` (a trailing slash is significant: `/users/` is another path);
/// - a template with parameters that fill whole segments: `/users/:id/posts/:post`;
/// - either of those followed by `/*`, which matches the rest of the path: `/pass/*`.
///
/// Literal segments are compared byte for byte, percent-encoding included, so `/caf%C3%A9`
/// matches only that spelling: the gateway forwards paths as it received them and does not
/// decide what the backend considers equal.
public struct RouteTemplate: Sendable, Equatable, CustomStringConvertible {
  /// One `/`-separated piece of the template.
  public enum Segment: Sendable, Equatable {
    case literal(String)
    case parameter(name: String)
  }

  /// Templates can hold at most this many parameters, so a match can keep its captures inline
  /// without allocating.
  public static let maxParameters = 8

  /// The template as written in the config.
  public let source: String
  /// The segments before the optional `/*`. `/` is one empty literal segment; `/*` has none.
  public let segments: [Segment]
  /// True when the template ends with `/*`.
  public let hasWildcard: Bool

  /// The parameter names in order of appearance.
  public var parameterNames: [String] {
    segments.compactMap { segment in
      switch segment {
      case .literal: nil
      case .parameter(let name): name
      }
    }
  }

  public var description: String { source }

  /// Parses and checks a template; the error says what is wrong.
  public static func parse(_ text: String) -> Result<RouteTemplate, RouteTemplateError> {
    guard text.hasPrefix("/") else { return .failure(RouteTemplateError("path must start with '/'")) }
    if text.contains("?") || text.contains("#") {
      return .failure(RouteTemplateError("path must not contain a query or fragment"))
    }
    var body = Substring(text)
    let hasWildcard = text.hasSuffix("/*")
    if hasWildcard { body = body.dropLast(2) }
    if let problem = RoutePathSyntax.pathCharactersProblem(body) {
      return .failure(RouteTemplateError("path \(problem)"))
    }
    // "/" and "/*" are the only templates whose body may be empty or a lone slash.
    let pieces: [Substring] =
      body.isEmpty ? [] : body.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
    var segments: [Segment] = []
    var names: Set<String> = []
    for (index, piece) in pieces.enumerated() {
      let isLast = index == pieces.count - 1
      if piece.isEmpty {
        // A trailing slash is a real, distinct path; an empty segment in the middle ("//")
        // is almost always a typo and no client sends it on purpose.
        guard isLast, !hasWildcard else {
          return .failure(RouteTemplateError("path has an empty segment ('//')"))
        }
        segments.append(.literal(""))
      } else if piece.contains("*") {
        return .failure(RouteTemplateError("'*' is only allowed as the last segment, as in /prefix/*"))
      } else if piece.hasPrefix(":") {
        let name = String(piece.dropFirst())
        guard RoutePathSyntax.isParameterName(name) else {
          return .failure(
            RouteTemplateError(
              "parameter name \"\(name)\" must be a letter or '_' followed by letters, digits or '_'"))
        }
        guard names.insert(name).inserted else {
          return .failure(RouteTemplateError("parameter :\(name) appears twice"))
        }
        segments.append(.parameter(name: name))
      } else {
        segments.append(.literal(String(piece)))
      }
    }
    if names.count > maxParameters {
      return .failure(RouteTemplateError("path has more than \(maxParameters) parameters"))
    }
    return .success(RouteTemplate(source: text, segments: segments, hasWildcard: hasWildcard))
  }
}

/// Why a route path template was rejected.
public struct RouteTemplateError: Error, Sendable, Equatable, CustomStringConvertible {
  public let description: String

  init(_ description: String) {
    self.description = description
  }
}

/// Character rules for paths in templates and URLs.
enum RoutePathSyntax {
  /// A problem with the characters of a path, or nil: each byte must be an RFC 3986 `pchar`
  /// or `/`, and every `%` must start a `%XX` escape.
  static func pathCharactersProblem(_ path: Substring) -> String? {
    let bytes = Array(path.utf8)
    var index = 0
    while index < bytes.count {
      let byte = bytes[index]
      if byte == UInt8(ascii: "%") {
        guard index + 2 < bytes.count, isHexDigit(bytes[index + 1]), isHexDigit(bytes[index + 2]) else {
          return "has a '%' that is not followed by two hex digits"
        }
        index += 3
        continue
      }
      guard isPathCharacter(byte) else {
        if byte >= 0x80 { return "must be percent-encoded (non-ASCII character)" }
        if byte < 0x20 || byte == 0x7F { return "must not contain control characters" }
        return "must not contain '\(Character(UnicodeScalar(byte)))' (percent-encode it)"
      }
      index += 1
    }
    return nil
  }

  static func isParameterName(_ name: String) -> Bool {
    guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
      return false
    }
    return name.utf8.allSatisfy { byte in
      (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
        || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
    }
  }

  private static func isHexDigit(_ byte: UInt8) -> Bool {
    (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
      || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
      || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
  }

  /// unreserved / sub-delims / ":" / "@" / "/" (RFC 3986 §3.3).
  private static func isPathCharacter(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"):
      true
    case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
      true
    case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("),
      UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"),
      UInt8(ascii: "="):
      true
    case UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "/"):
      true
    default:
      false
    }
  }
}
