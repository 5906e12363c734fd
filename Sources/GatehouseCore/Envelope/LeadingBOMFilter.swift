/// Drops a UTF-8 byte order mark at the start of a body that arrives in pieces, however the
/// pieces split it (RFC 8259 §8.1 lets a parser ignore it; it is not part of the value).
/// Holds at most two bytes, and only until the first three are known.
struct LeadingBOMFilter {
  private var held: [UInt8] = []
  private var decided = false

  /// The bytes to pass on instead of `piece`, or nil to pass `piece` as it is (every piece
  /// once the start is known: no copy).
  mutating func filter(_ piece: UnsafeRawBufferPointer) -> [UInt8]? {
    if decided { return nil }
    let mark = EnvelopeRenderer.byteOrderMark
    var start = held
    start.append(contentsOf: piece.prefix(mark.count - held.count))
    if start.count < mark.count && mark.starts(with: start) {
      // Still a possible start of the mark: hold it.
      held = start
      return []
    }
    decided = true
    let before = held
    held = []
    if start == mark {
      return Array(piece.dropFirst(mark.count - before.count))
    }
    if before.isEmpty { return nil }
    return before + Array(piece)
  }

  /// At the body's end: what is still held (the start of a mark that never completed).
  mutating func finish() -> [UInt8] {
    decided = true
    defer { held = [] }
    return held
  }
}
