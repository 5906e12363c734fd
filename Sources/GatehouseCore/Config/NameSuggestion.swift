/// Finds the closest known name to a mistyped one, for "did you mean" hints.
public enum NameSuggestion {
  /// The candidate with the smallest edit distance to `name`, if it is close enough to be a
  /// plausible typo: at most one edit per three characters (at least one, at most three).
  /// Case differences count as no edit, so `Routes` suggests `routes`.
  public static func closest(to name: String, among candidates: some Sequence<String>) -> String? {
    var best: (candidate: String, distance: Int)?
    for candidate in candidates where candidate != name {
      let distance = editDistance(Array(name.lowercased().utf8), Array(candidate.lowercased().utf8))
      let allowed = min(3, max(1, candidate.utf8.count / 3))
      guard distance <= allowed else { continue }
      if best == nil || distance < best!.distance {
        best = (candidate, distance)
      }
    }
    return best?.candidate
  }

  /// `" (did you mean "x"?)"` when a close candidate exists, else an empty string.
  public static func hint(for name: String, among candidates: some Sequence<String>) -> String {
    guard let suggestion = closest(to: name, among: candidates) else { return "" }
    return " (did you mean \"\(suggestion)\"?)"
  }

  /// Levenshtein distance with adjacent transpositions counted as one edit
  /// (optimal string alignment), since swapped letters are the most common typo.
  static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var previousPrevious = [Int](repeating: 0, count: b.count + 1)
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
      current[0] = i
      for j in 1...b.count {
        let cost = a[i - 1] == b[j - 1] ? 0 : 1
        current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
        if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
          current[j] = min(current[j], previousPrevious[j - 2] + 1)
        }
      }
      (previousPrevious, previous, current) = (previous, current, previousPrevious)
    }
    return previous[b.count]
  }
}
