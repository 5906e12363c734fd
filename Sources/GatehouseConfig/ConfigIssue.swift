import GatehouseJSON

/// One thing wrong with a config, printed by `gatehouse check` as `path.to.key: problem`.
public struct ConfigIssue: Sendable, Equatable, CustomStringConvertible {
  /// Where the problem is, such as `routes[2].upstream`; `(top level)` for the document itself.
  public let path: String
  /// What is wrong. Never contains a secret value (tokens, client secrets, keys).
  public let problem: String

  public init(path: String, problem: String) {
    self.path = path
    self.problem = problem
  }

  public var description: String { "\(path): \(problem)" }
}

/// A location in the config document, rendered as `routes[2].match.path`.
///
/// Keys that are not plain identifiers (user-chosen upstream names may contain dots) are
/// rendered as `upstreams["a.b"]`, so a path is never ambiguous.
struct ConfigPath: Sendable, Equatable, CustomStringConvertible {
  private(set) var rendered: String
  /// The same place as `ConfigKeys` names it: indexes as `[]` and user-chosen names (an
  /// upstream's, a token's) as `*`, as in `routes[].cache.vary` or `upstreams.*.url`.
  private(set) var schema: String = ""

  static let root = ConfigPath(rendered: "")

  /// `schema` extended by a fixed key.
  private func schema(adding key: String) -> String { schema.isEmpty ? key : schema + "." + key }

  /// A member whose key the user chose (an upstream or token name, a header name), so its
  /// schema path reads `*` whatever the name.
  func appending(name: String) -> ConfigPath {
    var path = appending(key: name)
    path.schema = schema(adding: "*")
    return path
  }

  func appending(key: String) -> ConfigPath {
    let isPlain =
      !key.isEmpty
      && key.utf8.allSatisfy { byte in
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
          || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
          || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
          || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
      }
    if isPlain {
      return ConfigPath(rendered: rendered.isEmpty ? key : rendered + "." + key, schema: schema(adding: key))
    }
    return ConfigPath(
      rendered: rendered + "[" + JSONValue.string(key).serializedString() + "]", schema: schema(adding: key))
  }

  func appending(index: Int) -> ConfigPath {
    ConfigPath(rendered: rendered + "[\(index)]", schema: schema + "[]")
  }

  var description: String { rendered.isEmpty ? "(top level)" : rendered }
}

/// Collects every issue found while reading a config, so `check` reports all of them at once
/// instead of stopping at the first.
final class ConfigDiagnostics {
  private(set) var issues: [ConfigIssue] = []
  private var silencedPaths: Set<String> = []
  /// Every key the decoder asked for, as `ConfigKeys` paths (present in the document or
  /// not): what a test compares with the `ConfigKeys` table, so the two cannot drift apart.
  private(set) var keysRead: Set<String> = []

  func noteRead(_ path: ConfigPath) {
    keysRead.insert(path.schema)
  }

  func report(_ path: ConfigPath, _ problem: String) {
    guard !silencedPaths.contains(path.description) else { return }
    issues.append(ConfigIssue(path: path.description, problem: problem))
  }

  /// Reports `problem` and drops later reports for the same path: when `${API_URL}` is unset,
  /// "environment variable API_URL is not set" is the whole story, and a second line saying
  /// the unexpanded text is not a URL would only distract.
  func reportAndSilence(_ path: ConfigPath, _ problem: String) {
    report(path, problem)
    silencedPaths.insert(path.description)
  }
}
