/// Masks secrets in a body that streams by in pieces of any size, however the pieces split
/// an occurrence: each byte of an occurrence (in any form and spelling `SecretMasking`
/// finds, encodings and escapes included) becomes `*`, so the body keeps its length (a
/// `Content-Length` already sent stays true). Holds back less than the longest occurrence
/// between pieces (the longest form, hex, with every byte escaped: `SecretSpellings`), and
/// only while a body is masked (error answers that pass through on a route that injects a
/// token).
struct StreamingSecretMasker {
  private let secrets: [SecretSpellings]
  /// The longest an occurrence can be (`SecretSpellings.longestOccurrence`).
  private let longest: Int
  /// The end of the last piece, which may start an occurrence the next piece completes.
  private var carry: [UInt8] = []

  static let maskByte: UInt8 = 0x2A  // "*"

  /// Nil when no secret is long enough to be looked for (`SecretMasking.minimumLength`).
  init?(secrets: [SecretSpellings]) {
    let candidates = secrets.filter(\.isSearched).sorted { $0.longestOccurrence > $1.longestOccurrence }
    guard let first = candidates.first else { return nil }
    self.secrets = candidates
    longest = first.longestOccurrence
  }

  /// The bytes of `piece` (after what was held back) that can go out now, masked.
  mutating func process(_ piece: UnsafeRawBufferPointer) -> [UInt8] {
    var buffer = carry
    buffer.append(contentsOf: piece)
    let safe = max(0, buffer.count - (longest - 1))
    let end = mask(&buffer, scanningBefore: safe)
    carry = Array(buffer[end...])
    buffer.removeSubrange(end...)
    return buffer
  }

  /// At the body's end: what was held back, masked.
  mutating func finish() -> [UInt8] {
    var buffer = carry
    carry = []
    _ = mask(&buffer, scanningBefore: buffer.count)
    return buffer
  }

  /// Masks every occurrence that starts before `limit` (each lies whole in `buffer`: one
  /// starting before `limit` ends by `limit + longest - 1`). Returns where the bytes that
  /// can go out end: `limit`, or the end of an occurrence that runs past it.
  private func mask(_ buffer: inout [UInt8], scanningBefore limit: Int) -> Int {
    let occurrences = buffer.withUnsafeBufferPointer { bytes in
      var found: [Range<Int>] = []
      var index = 0
      while index < limit {
        if let length = SecretMasking.firstMatchLength(secrets, bytes, at: index) {
          found.append(index..<(index + length))
          index += length
        } else {
          index += 1
        }
      }
      return found
    }
    for occurrence in occurrences {
      for position in occurrence { buffer[position] = Self.maskByte }
    }
    return max(limit, occurrences.last?.upperBound ?? limit)
  }
}
