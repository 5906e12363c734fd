import GatehouseConfig
import GatehouseCore

/// `gatehouse admin [<verb>] --help`, and the "did you mean" of a mistyped verb.
enum AdminHelp {
  /// One verb: its words, how it is called, and what it does.
  struct Verb {
    let words: [String]
    let synopsis: String
    let about: [String]
  }

  static let verbs: [Verb] = [
    Verb(words: ["status"], synopsis: "status", about: ["Version, uptime, config file, workers and connections."]),
    Verb(words: ["cache", "stats"], synopsis: "cache stats", about: ["Cache counters and size."]),
    Verb(
      words: ["cache", "list"], synopsis: "cache list [--prefix P] [--route NAME]",
      about: [
        "Every cache entry (all pages), with the route whose requests stored it.",
        "--prefix P    only entries whose upstream path starts with P (the upstream URL's base",
        "              path included, as the PATH column shows it)",
        "--route NAME  only the entries of route NAME",
      ]),
    Verb(
      words: ["cache", "purge"], synopsis: "cache purge --prefix P | --route NAME | --key ID | --all",
      about: [
        "Removes cache entries and prints how many.",
        "--prefix P    entries whose upstream path starts with P (the upstream URL's base path",
        "              included); when none does, the stored paths near P are named on stderr",
        "--route NAME  the entries route NAME's requests stored",
        "--key ID      one entry, by the ID `cache list` shows",
        "--all         every entry",
      ]),
    Verb(words: ["tokens", "list"], synopsis: "tokens list", about: ["Token states (never values)."]),
    Verb(
      words: ["tokens", "set"], synopsis: "tokens set NAME --value V [--expires-in S]",
      about: ["Sets a token's value (state valid). --value - reads the value from stdin."]),
    Verb(
      words: ["tokens", "refresh"], synopsis: "tokens refresh NAME",
      about: ["Fetches a new value now (oauth2 tokens; a static or file token has nothing to fetch)."]),
    Verb(
      words: ["tokens", "invalidate"], synopsis: "tokens invalidate NAME",
      about: ["Marks the token invalid; an oauth2 token is fetched again on next use."]),
    Verb(
      words: ["jwt", "list"], synopsis: "jwt list",
      about: ["Identity providers: issuer, signing key ids, when fetched, last error."]),
    Verb(
      words: ["jwt", "refresh"], synopsis: "jwt refresh NAME",
      about: ["Fetches provider NAME's signing keys (JWKS) now; fails if the fetch does."]),
    Verb(
      words: ["upstreams"], synopsis: "upstreams",
      about: ["Health, circuit and connections per upstream."]),
    Verb(
      words: ["reload"], synopsis: "reload", about: ["Reloads the gateway's config file (refused if it fails check)."]),
  ]

  /// Options that take a value, so that their value is not read as a verb.
  static let valueOptions: Set<String> = [
    "--url", "--config", "-c", "--token", "--ca", "--replicas", "--timeout", "--prefix", "--route", "--key", "--value",
    "--expires-in",
  ]

  /// The words of the command line that are not options or option values.
  static func words(in arguments: [String]) -> [String] {
    var words: [String] = []
    var index = 0
    while index < arguments.count {
      let argument = arguments[index]
      index += 1
      if valueOptions.contains(argument) {
        index += 1
      } else if !argument.hasPrefix("-") || argument == "-" {
        words.append(argument)
      }
    }
    return words
  }

  /// The help for the verbs `words` name (`cache` names all three cache verbs); the whole
  /// usage when they name none.
  static func text(for words: [String]) -> String {
    let chosen = verbs.filter { verb in
      !words.isEmpty && words.count <= verb.words.count && Array(verb.words.prefix(words.count)) == words
    }
    guard !chosen.isEmpty else { return AdminCommand.usage }
    var lines: [String] = []
    for verb in chosen {
      if !lines.isEmpty { lines.append("") }
      lines.append("usage: gatehouse admin [--url URL] [--token T] [--json] \(verb.synopsis)")
      lines.append("")
      lines += verb.about.map { "  " + $0 }
    }
    lines.append("")
    lines.append("Connection options (--url or --config, --token, --ca, --insecure, --timeout, --all-replicas):")
    lines.append("gatehouse admin --help")
    return lines.joined(separator: "\n")
  }

  /// "unknown command 'stauts' (did you mean "status"?)".
  static func unknownVerbMessage(_ words: [String]) -> String {
    let given = words.prefix(2).joined(separator: " ")
    let first = words.first ?? ""
    let groups = Set(verbs.map { $0.words[0] })
    if groups.contains(first) {
      let subverbs = verbs.filter { $0.words[0] == first && $0.words.count > 1 }.map { $0.words[1] }
      guard words.count > 1 else {
        return "'\(first)' needs one of: \(subverbs.joined(separator: ", "))"
      }
      let hint = NameSuggestion.closest(to: words[1], among: subverbs).map { " (did you mean \"\(first) \($0)\"?)" }
      return "unknown command '\(given)'" + (hint ?? "")
    }
    let candidates = verbs.map { $0.words.joined(separator: " ") } + Array(groups)
    var hint = NameSuggestion.closest(to: first, among: candidates)
    // `stats` alone is close to `status`, but `cache stats` is also what may have been meant.
    if hint == nil, words.count == 1 {
      hint = verbs.first { $0.words.count == 2 && $0.words[1] == first }?.words.joined(separator: " ")
    }
    return "unknown command '\(given)'" + (hint.map { " (did you mean \"\($0)\"?)" } ?? "")
  }
}

/// The hints after `cache purge --prefix P` purged nothing, from the stored paths.
enum CachePrefixHints {
  /// At most this many paths or prefixes are named.
  static let shown = 3

  static func lines(prefix: String, entries: [(path: String, route: String?)]) -> [String] {
    guard !entries.isEmpty else { return ["hint: the cache has no entries"] }
    var lines = ["hint: no stored upstream path starts with \(prefix); paths include the upstream URL's base path"]
    // The prefix found further into a path: what comes before it is most likely the base path.
    var corrected: [String: (count: Int, routes: Set<String>)] = [:]
    var order: [String] = []
    for entry in entries {
      guard let range = entry.path.range(of: prefix), range.lowerBound != entry.path.startIndex else { continue }
      let candidate = String(entry.path[..<range.upperBound])
      if corrected[candidate] == nil { order.append(candidate) }
      corrected[candidate, default: (0, [])].count += 1
      if let route = entry.route { corrected[candidate]!.routes.insert(route) }
    }
    if !order.isEmpty {
      let ranked = order.sorted { corrected[$0]!.count > corrected[$1]!.count }
      for candidate in ranked.prefix(shown) {
        let figure = corrected[candidate]!
        var line =
          "hint: did you mean --prefix \(candidate) (\(figure.count) \(figure.count == 1 ? "entry" : "entries"))"
        if figure.routes.count == 1, let route = figure.routes.first { line += " or --route \(route)" }
        lines.append(line + "?")
      }
      return lines
    }
    // Else the paths that share the longest start with the prefix.
    func common(_ a: String, _ b: String) -> Int {
      zip(a.utf8, b.utf8).prefix { $0 == $1 }.count
    }
    let longest = entries.map { common($0.path, prefix) }.max() ?? 0
    var nearest: [String] = []
    for entry in entries where common(entry.path, prefix) == longest && !nearest.contains(entry.path) {
      nearest.append(entry.path)
      if nearest.count == shown { break }
    }
    lines.append("hint: nearest stored paths: " + nearest.joined(separator: ", "))
    return lines
  }
}

extension String {
  /// The first range where `other` occurs, by bytes.
  fileprivate func range(of other: String) -> Range<String.Index>? {
    let haystack = Array(utf8)
    let needle = Array(other.utf8)
    guard !needle.isEmpty, needle.count <= haystack.count else { return nil }
    for start in 0...(haystack.count - needle.count) where haystack[start..<start + needle.count].elementsEqual(needle)
    {
      let lower = utf8.index(utf8.startIndex, offsetBy: start)
      let upper = utf8.index(lower, offsetBy: needle.count)
      return lower..<upper
    }
    return nil
  }
}
