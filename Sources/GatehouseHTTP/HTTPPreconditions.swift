/// Conditional requests (RFC 9110 §13): entity tags and the evaluation order of §13.2.2,
/// for a GET or HEAD answered by the gateway itself. Pure: the request's fields and the
/// selected representation's validators in, what to answer out.
public enum HTTPPreconditions {
  public enum Outcome: Equatable, Sendable {
    /// Send the answer as it is.
    case proceed
    /// `304 Not Modified`: the client's copy is current.
    case notModified
    /// `412 Precondition Failed` (`If-Match`, `If-Unmodified-Since`).
    case preconditionFailed
  }

  /// Whether the request may carry a field that `evaluate` reads (an `If-` field): most do
  /// not, and they need no validator looked at. One pass over the names.
  public static func isConditional(_ headers: HTTPHeaders) -> Bool {
    headers.containsName(lowercasePrefix: "if-")
  }

  /// RFC 9110 §13.2.2 for a GET or HEAD whose selected representation has the entity tag
  /// `etag` (its opaque part, quotes included; weak when `etagIsWeak`) and was last modified
  /// at `lastModified` (seconds), each possibly unknown. A field that is no valid list of
  /// entity tags or no valid date is ignored, as are dates without a modification date to
  /// compare with (§13.1.3, §13.1.4).
  public static func evaluate(
    _ headers: HTTPHeaders, etag: [UInt8]?, etagIsWeak: Bool = false, lastModified: Int64?
  ) -> Outcome {
    // 1. If-Match: a strong match of any member (a weak tag matches none), or "*" (a
    // representation exists).
    if let ifMatch = combined(headers, "if-match"), let list = EntityTagList(ifMatch) {
      switch list {
      case .any: break
      case .tags(let tags):
        guard let etag, !etagIsWeak, tags.contains(where: { $0.matchesStrongly(etag) }) else {
          return .preconditionFailed
        }
      }
    } else if let date = singleDate(headers, "if-unmodified-since"), let lastModified {
      // 2. If-Unmodified-Since, only without If-Match.
      if lastModified > date { return .preconditionFailed }
    }
    // 3. If-None-Match: a weak match of any member, or "*".
    if let ifNoneMatch = combined(headers, "if-none-match"), let list = EntityTagList(ifNoneMatch) {
      switch list {
      case .any: return .notModified
      case .tags(let tags):
        if let etag, tags.contains(where: { $0.matchesWeakly(etag) }) { return .notModified }
        return .proceed
      }
    }
    // 4. If-Modified-Since, only without If-None-Match.
    if let date = singleDate(headers, "if-modified-since"), let lastModified, lastModified <= date {
      return .notModified
    }
    return .proceed
  }

  /// The field's lines joined as one list, or nil when it is absent.
  private static func combined(_ headers: HTTPHeaders, _ name: StaticString) -> [UInt8]? {
    var joined: [UInt8]?
    headers.withEachField { fieldName, value in
      guard ASCII.equalsLowercase(fieldName, 0, fieldName.count, name) else { return }
      if joined == nil {
        joined = Array(value)
      } else {
        joined!.append(0x2C)
        joined!.append(contentsOf: value)
      }
    }
    return joined
  }

  /// The date of a field that must have one member (a second line makes it invalid).
  private static func singleDate(_ headers: HTTPHeaders, _ name: StaticString) -> Int64? {
    var date: Int64?
    var lines = 0
    headers.withEachField { fieldName, value in
      guard ASCII.equalsLowercase(fieldName, 0, fieldName.count, name) else { return }
      lines += 1
      date = HTTPDate.parse(value)
    }
    return lines == 1 ? date : nil
  }
}

/// One entity tag (RFC 9110 §8.8.3): its opaque part with the quotes, and whether it is weak.
public struct EntityTag: Equatable, Sendable {
  public let isWeak: Bool
  /// `"…"`, quotes included.
  public let opaque: [UInt8]

  public init(isWeak: Bool, opaque: [UInt8]) {
    self.isWeak = isWeak
    self.opaque = opaque
  }

  /// Reads one tag (`W/"x"` or `"x"`) that is the whole of `bytes`.
  public init?(_ bytes: some Collection<UInt8>) {
    let bytes = Array(bytes)
    var start = 0
    if bytes.count >= 2, bytes[0] == 0x57, bytes[1] == 0x2F { start = 2 }
    let opaque = Array(bytes[start...])
    guard opaque.count >= 2, opaque.first == 0x22, opaque.last == 0x22,
      opaque.dropFirst().dropLast().allSatisfy(Self.isTagByte)
    else { return nil }
    self.init(isWeak: start == 2, opaque: opaque)
  }

  /// etagc: `!`, `#`…`~`, and obs-text.
  static func isTagByte(_ byte: UInt8) -> Bool {
    byte == 0x21 || (byte >= 0x23 && byte != 0x7F)
  }

  /// Strong comparison with `etag`, a strong tag's opaque part: neither may be weak.
  public func matchesStrongly(_ etag: [UInt8]) -> Bool {
    !isWeak && opaque == etag
  }

  /// Weak comparison: the opaque parts are equal, weakness aside.
  public func matchesWeakly(_ etag: [UInt8]) -> Bool {
    opaque == etag
  }
}

/// The value of `If-Match` or `If-None-Match`: `*` or a list of entity tags.
public enum EntityTagList: Equatable, Sendable {
  case any
  case tags([EntityTag])

  /// nil when `value` is neither `*` nor a comma-separated list of tags (empty members,
  /// which the list syntax allows, are skipped).
  public init?(_ value: some Collection<UInt8>) {
    let bytes = Array(value)
    let trimmed = bytes.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed()
    if trimmed.count == 1 && trimmed.first == 0x2A {
      self = .any
      return
    }
    var tags: [EntityTag] = []
    var index = 0
    while index < bytes.count {
      let byte = bytes[index]
      if byte == 0x20 || byte == 0x09 || byte == 0x2C {
        index += 1
        continue
      }
      // A tag runs to its closing quote: commas inside the quotes are its own.
      var start = index
      if byte == 0x57, index + 1 < bytes.count, bytes[index + 1] == 0x2F { start = index + 2 }
      guard start < bytes.count, bytes[start] == 0x22,
        let close = bytes[(start + 1)...].firstIndex(of: 0x22),
        let tag = EntityTag(bytes[index...close])
      else { return nil }
      tags.append(tag)
      index = close + 1
      // What follows a tag is whitespace, then a comma or the end.
      while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
      guard index == bytes.count || bytes[index] == 0x2C else { return nil }
    }
    guard !tags.isEmpty else { return nil }
    self = .tags(tags)
  }
}
