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

  static let root = ConfigPath(rendered: "")

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
      return ConfigPath(rendered: rendered.isEmpty ? key : rendered + "." + key)
    }
    return ConfigPath(rendered: rendered + "[" + JSONValue.string(key).serializedString() + "]")
  }

  func appending(index: Int) -> ConfigPath {
    ConfigPath(rendered: rendered + "[\(index)]")
  }

  var description: String { rendered.isEmpty ? "(top level)" : rendered }
}

/// Collects every issue found while reading a config, so `check` reports all of them at once
/// instead of stopping at the first.
final class ConfigDiagnostics {
  private(set) var issues: [ConfigIssue] = []
  private var silencedPaths: Set<String> = []

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
