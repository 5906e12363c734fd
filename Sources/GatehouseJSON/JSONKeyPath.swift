/// A dot-separated path to a value inside a document (`data.items`, `users.0.name`), parsed
/// once from a route's `key_path`. A segment of decimal digits indexes an array and, on an
/// object, names the member `"0"`; any other segment only names object members.
public struct JSONKeyPath: Hashable, Sendable, CustomStringConvertible {
  /// One step of the path.
  public struct Segment: Hashable, Sendable {
    /// The member name as UTF-8, compared with keys after they are unescaped.
    public let name: [UInt8]
    /// The array index when the segment is a canonical decimal (`0`, `12`, not `01`), else nil.
    public let index: Int?

    public init(_ name: Substring) {
      self.init(bytes: Array(name.utf8))
    }

    public init(bytes name: [UInt8]) {
      self.name = name
      self.index = Self.canonicalIndex(name)
    }

    private static func canonicalIndex(_ bytes: [UInt8]) -> Int? {
      guard !bytes.isEmpty, bytes.count <= 18, bytes.allSatisfy({ $0 &- 0x30 < 10 }) else { return nil }
      if bytes.count > 1 && bytes[0] == 0x30 { return nil }  // `01` is a key, not an index
      return bytes.reduce(0) { $0 * 10 + Int($1 &- 0x30) }
    }
  }

  /// The steps from the top-level value; empty for the whole document.
  public let segments: [Segment]

  /// The whole document.
  public static let root = JSONKeyPath(segments: [])

  /// Nil for an empty string or an empty segment (`a..b`, `.a`): such paths name no member a
  /// config author can mean, so a typo is caught when the config is checked.
  ///
  /// Split at the byte `.`, not at Characters: a dot followed by a combining mark is one
  /// Character to Swift, and `a.\u{0820}b` must still be the two steps `a` and `\u{0820}b`.
  public init?(_ path: String) {
    let bytes = Array(path.utf8)
    let parts = bytes.split(separator: 0x2E, omittingEmptySubsequences: false)
    guard !bytes.isEmpty, parts.allSatisfy({ !$0.isEmpty }) else { return nil }
    segments = parts.map { Segment(bytes: Array($0)) }
  }

  public init(segments: [Segment]) { self.segments = segments }

  public var description: String {
    segments.map { String(decoding: $0.name, as: UTF8.self) }.joined(separator: ".")
  }
}
