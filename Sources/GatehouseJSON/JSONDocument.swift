/// Questions the envelope asks of a document that `JSONValidator` accepted: where is the value
/// at a key path, is it already an envelope, what error message does it carry. Values are
/// skipped, never built. On bytes that were not validated the answers are unspecified (but
/// never out-of-bounds reads).
///
/// Duplicate keys: the first member with a matching name is the one used, with no
/// backtracking (`{"a":1,"a":{"b":2}}` has nothing at `a.b`).
public enum JSONDocument {
  /// The byte range of the value at `path` (without surrounding whitespace), or nil when a
  /// member or element is missing or a step meets the wrong kind of value.
  public static func range(of path: JSONKeyPath, in document: UnsafeRawBufferPointer) -> Range<Int>? {
    guard let cursor = JSONCursor(document) else { return nil }
    var i = cursor.skipWhitespace(0)
    for segment in path.segments {
      switch cursor.byte(i) {
      case 0x7B:
        var found: Int?
        _ = segment.name.withUnsafeBufferPointer { name in
          cursor.forEachMember(ofObjectAt: i) { key, hasEscapes, value in
            guard cursor.keyEquals(key, hasEscapes: hasEscapes, name) else { return true }
            found = value
            return false
          }
        }
        guard let found else { return nil }
        i = found
      case 0x5B:
        guard let index = segment.index, let element = cursor.element(index, ofArrayAt: i) else { return nil }
        i = element
      default:
        return nil
      }
    }
    guard let end = cursor.valueEnd(i) else { return nil }
    return i..<end
  }

  /// `range(of:in:)` over an array.
  public static func range(of path: JSONKeyPath, in document: [UInt8]) -> Range<Int>? {
    document.withUnsafeBytes { range(of: path, in: $0) }
  }

  /// Whether the top-level value is an object with a `code` member and a `datas` or `message`
  /// member (Docs/envelope.md: such bodies are passed on unchanged).
  public static func isEnvelope(_ document: UnsafeRawBufferPointer) -> Bool {
    guard let cursor = JSONCursor(document) else { return false }
    var hasCode = false
    var hasDatasOrMessage = false
    let completed = cursor.forEachMember(ofObjectAt: cursor.skipWhitespace(0)) { key, hasEscapes, _ in
      if !hasCode && Self.code.withUnsafeBufferPointer({ cursor.keyEquals(key, hasEscapes: hasEscapes, $0) }) {
        hasCode = true
      } else if !hasDatasOrMessage
        && (Self.datas.withUnsafeBufferPointer { cursor.keyEquals(key, hasEscapes: hasEscapes, $0) }
          || Self.message.withUnsafeBufferPointer { cursor.keyEquals(key, hasEscapes: hasEscapes, $0) })
      {
        hasDatasOrMessage = true
      }
      return !(hasCode && hasDatasOrMessage)
    }
    return completed && hasCode && hasDatasOrMessage
  }

  /// `isEnvelope` over an array.
  public static func isEnvelope(_ document: [UInt8]) -> Bool {
    document.withUnsafeBytes { isEnvelope($0) }
  }

  /// The message of an error body: the string value of the first of `message`, `error`,
  /// `error_description`, `detail` (in that order of preference, whatever their order in the
  /// document) among the top-level members, unescaped. When `error` is an object with a string
  /// `message` (`{"error":{"code":7,"message":"..."}}`, the Google and JSON:API-like shape), that
  /// message counts as `error`'s: it is the human text, and the object itself is not a message.
  /// Members whose value is not a string (or such an object) are passed over.
  public static func errorMessage(_ document: UnsafeRawBufferPointer) -> String? {
    guard let cursor = JSONCursor(document) else { return nil }
    var best: (preference: Int, content: Range<Int>)?
    cursor.forEachMember(ofObjectAt: cursor.skipWhitespace(0)) { key, hasEscapes, value in
      let limit = best?.preference ?? messageKeys.count
      for preference in 0..<limit {
        let matches = messageKeys[preference].withUnsafeBufferPointer {
          cursor.keyEquals(key, hasEscapes: hasEscapes, $0)
        }
        guard matches else { continue }
        if let content = stringContent(cursor, value) {
          best = (preference, content)
        } else if preference == 1, cursor.byte(value) == 0x7B, let nested = nestedMessage(cursor, value) {
          best = (preference, nested)
        }
        break
      }
      return best?.preference != 0
    }
    guard let best else { return nil }
    var utf8: [UInt8] = []
    utf8.reserveCapacity(best.content.count)
    let decoded = cursor.decodeString(best.content) { byte in
      utf8.append(byte)
      return true
    }
    guard decoded else { return nil }
    return String(decoding: utf8, as: UTF8.self)
  }

  /// `errorMessage` over an array.
  public static func errorMessage(_ document: [UInt8]) -> String? {
    document.withUnsafeBytes { errorMessage($0) }
  }

  private static let code = Array("code".utf8)
  private static let datas = Array("datas".utf8)
  private static let message = Array("message".utf8)
  private static let messageKeys = ["message", "error", "error_description", "detail"].map { Array($0.utf8) }

  /// The content range (inside the quotes) when a string starts at `value`.
  private static func stringContent(_ cursor: JSONCursor, _ value: Int) -> Range<Int>? {
    guard cursor.byte(value) == 0x22, let string = cursor.stringEnd(value) else { return nil }
    return (value + 1)..<(string.end - 1)
  }

  /// The first `message` member of the object at `object`, when it is a string.
  private static func nestedMessage(_ cursor: JSONCursor, _ object: Int) -> Range<Int>? {
    var found: Range<Int>?
    _ = message.withUnsafeBufferPointer { name in
      cursor.forEachMember(ofObjectAt: object) { key, hasEscapes, value in
        guard cursor.keyEquals(key, hasEscapes: hasEscapes, name) else { return true }
        found = stringContent(cursor, value)
        return false
      }
    }
    return found
  }
}
