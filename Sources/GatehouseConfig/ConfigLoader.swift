import GatehouseJSON

/// Why a config could not be loaded. `lines` gives what `gatehouse check` and
/// `POST /admin/reload` print.
public enum ConfigLoadError: Error, Sendable, Equatable {
  /// The file could not be read (missing, permissions, a directory).
  case unreadable(path: String, reason: String)
  /// The text is not JSON.
  case invalidJSON(JSONError)
  /// The JSON is not a valid config: every problem found (unset variables first, then the
  /// rest in the order the keys are read).
  case invalid([ConfigIssue])

  /// One line per problem: `path.to.key: problem`, or a JSON syntax error with line and column.
  public var lines: [String] {
    switch self {
    case .unreadable(let path, let reason): ["\(path): cannot read the config file: \(reason)"]
    case .invalidJSON(let error): ["not valid JSON: \(error)"]
    case .invalid(let issues): issues.map(\.description)
    }
  }
}

/// Loads and validates config files (Config/README.md): parse the JSON, expand `${ENV}`, decode and
/// check everything, and return either a complete `GatehouseConfig` or every problem.
public enum ConfigLoader {
  /// Loads the file at `path`, expanding variables from `environment` (the process
  /// environment unless a test passes its own).
  public static func load(
    contentsOf path: String, environment: [String: String] = LocalFile.processEnvironment()
  ) throws(ConfigLoadError) -> GatehouseConfig {
    let bytes: [UInt8]
    // Well above the JSON parser's own limit, so an oversized file is reported by the parser
    // with its limit; this bound only keeps a wrong path (a device, a huge log) from being read.
    switch LocalFile.read(path: path, maxBytes: JSONParser.Limits.config.maxBytes + 1) {
    case .success(let contents): bytes = contents
    case .failure(let failure):
      throw .unreadable(path: path, reason: failure.reason)
    }
    return try load(json: bytes, environment: environment)
  }

  /// Loads a config from JSON text.
  public static func load(json bytes: [UInt8], environment: [String: String]) throws(ConfigLoadError)
    -> GatehouseConfig
  {
    let document: JSONValue
    do {
      document = try JSONParser.parse(bytes, limits: .config)
    } catch {
      throw .invalidJSON(error)
    }
    return try load(document: document, environment: environment)
  }

  /// Loads a config from JSON text.
  public static func load(json text: String, environment: [String: String]) throws(ConfigLoadError)
    -> GatehouseConfig
  {
    try load(json: Array(text.utf8), environment: environment)
  }

  /// Validates an already parsed document (the embedded default config is built as one).
  public static func load(document: JSONValue, environment: [String: String]) throws(ConfigLoadError)
    -> GatehouseConfig
  {
    let diagnostics = ConfigDiagnostics()
    let decoder = ConfigDecoder(
      diagnostics: diagnostics, interpolation: EnvironmentInterpolation(environment: environment))
    let config = decoder.decode(document)
    guard diagnostics.issues.isEmpty, let config else {
      throw .invalid(diagnostics.issues)
    }
    return config
  }
}
