import GatehouseHTTP
import GatehouseJSON

/// One value in the config document together with where it is, with typed accessors that
/// report a wrong type to the diagnostics and return nil, so decoding goes on and finds every
/// other problem too.
struct ConfigField {
  let path: ConfigPath
  let value: JSONValue
  let diagnostics: ConfigDiagnostics

  func report(_ problem: String) {
    diagnostics.report(path, problem)
  }

  private func reportType(expected: String) {
    report("expected \(expected), got \(value.kindDescription)")
  }

  func string() -> String? {
    guard case .string(let string) = value else {
      reportType(expected: "a string")
      return nil
    }
    return string
  }

  /// A string that must not be empty.
  func nonEmptyString() -> String? {
    guard let string = string() else { return nil }
    guard !string.isEmpty else {
      report("must not be empty")
      return nil
    }
    return string
  }

  func bool() -> Bool? {
    guard case .bool(let bool) = value else {
      reportType(expected: "true or false")
      return nil
    }
    return bool
  }

  /// An integer literal within `range` (so `1.0` and `1e3` are rejected: sizes and durations
  /// are whole numbers, and a fraction is more likely a unit mistake than intended).
  func integer(in range: ClosedRange<Int> = 0...Int.max) -> Int? {
    guard case .number(let number) = value else {
      reportType(expected: "an integer")
      return nil
    }
    guard let integer = number.integer, let value = Int(exactly: integer) else {
      report("expected an integer, got \(number.double)")
      return nil
    }
    if value < range.lowerBound {
      report(
        range.lowerBound == 0
          ? "must not be negative, got \(value)" : "must be at least \(range.lowerBound), got \(value)")
      return nil
    }
    if value > range.upperBound {
      report("must be at most \(range.upperBound), got \(value)")
      return nil
    }
    return value
  }

  /// A positive duration in milliseconds (`_ms` keys).
  func milliseconds(allowZero: Bool = false) -> Duration? {
    integer(in: (allowZero ? 0 : 1)...Int(Int32.max)).map { .milliseconds($0) }
  }

  /// A duration in seconds (`_s` keys).
  func seconds(allowZero: Bool = true) -> Duration? {
    integer(in: (allowZero ? 0 : 1)...Int(Int32.max)).map { .seconds($0) }
  }

  /// A finite number greater than zero.
  func positiveNumber() -> Double? {
    guard case .number(let number) = value else {
      reportType(expected: "a number")
      return nil
    }
    guard number.double > 0 else {
      report("must be greater than 0, got \(number.double)")
      return nil
    }
    return number.double
  }

  /// One of `allowed`, with a "did you mean" for near misses.
  func enumeration<Value>(_ allowed: KeyValuePairs<String, Value>) -> Value? {
    guard let string = string() else { return nil }
    if let match = allowed.first(where: { $0.key == string }) { return match.value }
    let names = allowed.map(\.key)
    report(
      "unknown value \(JSONValue.string(string).serializedString()), expected one of "
        + names.map { "\"\($0)\"" }.joined(separator: ", ")
        + NameSuggestion.hint(for: string, among: names))
    return nil
  }

  func object() -> ConfigObjectReader? {
    guard case .object(let members) = value else {
      reportType(expected: "an object")
      return nil
    }
    return ConfigObjectReader(path: path, members: members, diagnostics: diagnostics)
  }

  func array() -> [ConfigField]? {
    guard case .array(let elements) = value else {
      reportType(expected: "an array")
      return nil
    }
    return elements.enumerated().map { index, element in
      ConfigField(path: path.appending(index: index), value: element, diagnostics: diagnostics)
    }
  }

  /// An array of strings; elements of the wrong type are reported and left out.
  func stringArray() -> [String]? {
    array().map { fields in fields.compactMap { $0.string() } }
  }

  /// An `http://` or `https://` URL (upstream `url`, a token's `token_url`).
  func httpURL() -> HTTPURL? {
    guard let text = nonEmptyString() else { return nil }
    switch HTTPURL.parse(text) {
    case .success(let url): return url
    case .failure(let error):
      report(error.description)
      return nil
    }
  }

  /// A header field name (a token in the RFC 9110 sense).
  func headerName() -> String? {
    guard let name = string() else { return nil }
    guard HTTPFieldSyntax.isToken(name) else {
      report("invalid header name (letters, digits and !#$%&'*+-.^_`|~ only)")
      return nil
    }
    return name
  }
}

/// Reads the members of one config object and remembers which keys were asked for, so
/// `finishReading()` can report every other key as unknown, with a "did you mean".
final class ConfigObjectReader {
  let path: ConfigPath
  let members: [(key: String, value: JSONValue)]
  let diagnostics: ConfigDiagnostics
  private var knownKeys: [String] = []

  init(path: ConfigPath, members: [(key: String, value: JSONValue)], diagnostics: ConfigDiagnostics) {
    self.path = path
    self.members = members
    self.diagnostics = diagnostics
  }

  func contains(_ key: String) -> Bool {
    members.contains { $0.key == key }
  }

  /// The member `key`, or nil if absent. Asking marks the key as known.
  func field(_ key: String) -> ConfigField? {
    knownKeys.append(key)
    diagnostics.noteRead(path.appending(key: key))
    guard let member = members.first(where: { $0.key == key }) else { return nil }
    return ConfigField(path: path.appending(key: key), value: member.value, diagnostics: diagnostics)
  }

  /// The member `key`, reporting it as missing when absent.
  func requiredField(_ key: String) -> ConfigField? {
    guard let field = field(key) else {
      diagnostics.report(path.appending(key: key), "missing required key")
      return nil
    }
    return field
  }

  /// Every member as a field, for objects keyed by user-chosen names (`upstreams`, `tokens`).
  func allFields() -> [(key: String, field: ConfigField)] {
    members.map { member in
      knownKeys.append(member.key)
      return (
        member.key,
        ConfigField(path: path.appending(name: member.key), value: member.value, diagnostics: diagnostics)
      )
    }
  }

  /// Reports every key that was never asked for. `kind` names the object in the message when
  /// the allowed keys depend on it, as in `unknown key for a "static" token`.
  func finishReading(kind: String? = nil) {
    for member in members where !knownKeys.contains(member.key) {
      let subject = kind.map { "unknown key for \($0)" } ?? "unknown key"
      diagnostics.report(
        path.appending(key: member.key), subject + NameSuggestion.keyHint(for: member.key, among: knownKeys))
    }
  }
}
