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

  /// `hint` for an unknown config key, where a name other gateways (or common sense) use for
  /// the same setting counts as close too: `rate` is no typo of `rate_per_s`, but it is what
  /// the operator meant. Only for keys: a user's upstream or token names have no synonyms.
  static func keyHint(for name: String, among keys: [String]) -> String {
    guard let suggestion = closest(to: name, among: keys) ?? synonym(of: name, among: keys) else { return "" }
    return " (did you mean \"\(suggestion)\"?)"
  }

  /// Names meant as one of our keys, each with the keys it may mean (in order of
  /// likelihood; the first one the object has is suggested).
  static let synonyms: [String: [String]] = [
    "rate": ["rate_per_s"],
    "rate_limit": ["rate_per_s"],
    "rps": ["rate_per_s"],
    "requests_per_second": ["rate_per_s"],
    "burst_size": ["burst"],
    "key": ["sha256"],
    "hash": ["sha256"],
    "ttl": ["fresh_s"],
    "ttl_s": ["fresh_s"],
    "max_age": ["fresh_s"],
    "max_age_s": ["fresh_s"],
    "fresh": ["fresh_s"],
    "stale": ["stale_if_error_s"],
    "stale_s": ["stale_if_error_s"],
    "stale_if_error": ["stale_if_error_s"],
    "stale_while_revalidate": ["stale_while_revalidate_s"],
    "timeout": ["response_timeout_ms"],
    "timeout_ms": ["response_timeout_ms"],
    "read_timeout_ms": ["response_timeout_ms"],
    "connect_timeout": ["connect_timeout_ms"],
    "interval": ["interval_ms"],
    "interval_s": ["interval_ms"],
    "delay": ["delay_ms"],
    "threshold": ["failures"],
    "max_failures": ["failures"],
    "open_s": ["open_ms"],
    "cooldown_ms": ["open_ms"],
    "keypath": ["key_path"],
    "data_path": ["key_path"],
    "path_prefix": ["path"],
    "prefix": ["path"],
    "method": ["methods"],
    "backend": ["upstream"],
    "target": ["upstream"],
    "host": ["url"],
    "address": ["url"],
    "bind": ["address", "listen"],
    "port": ["address", "listen"],
    "secret": ["secret_key", "client_secret", "value"],
    "token_value": ["value"],
    "header": ["token_header"],
    "format": ["token_format"],
    "scopes": ["scope"],
    "ca_file": ["ca"],
    "insecure": ["verify"],
    "skip_verify": ["verify"],
    "certificate": ["cert"],
    "private_key": ["key"],
    "size": ["max_bytes"],
    "max_size": ["max_bytes"],
    "threads": ["workers"],
    "enable": ["enabled"],
    "code": ["status"],
    "endpoints": ["servers"],
    "backends": ["servers"],
    "hosts": ["servers"],
    "nameservers": ["servers"],
    "dns": ["resolver"],
    "load_balancing": ["balance"],
    "lb_policy": ["balance"],
    "policy": ["balance"],
    "algorithm": ["balance"],
    "hash_key": ["hash_by"],
    "hash_on": ["hash_by"],
    "resolve_interval_s": ["resolve_s"],
    "dns_refresh_s": ["resolve_s"],
    "refresh_s": ["resolve_s"],
    "outlier_detection": ["outlier"],
    "ejection": ["outlier"],
    "consecutive_failures": ["failures"],
    "base_ejection_time_ms": ["eject_ms"],
    "ejection_time_ms": ["eject_ms"],
    "max_ejection_percent": ["max_ejected_percent"],
    "retries": ["retry", "attempts"],
    "max_attempts": ["attempts"],
    "tries": ["attempts"],
    "retry_on": ["on"],
    "conditions": ["on"],
    "budget": ["budget_percent"],
    "retry_budget": ["budget_percent"],
  ]

  /// The key `name` means by a synonym, if this object has it.
  static func synonym(of name: String, among candidates: [String]) -> String? {
    synonyms[name.lowercased()]?.first { candidates.contains($0) }
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
