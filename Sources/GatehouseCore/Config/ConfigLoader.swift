import Foundation

/// Why a config could not be loaded. `lines` gives what `gatehouse check` and
/// `POST /admin/reload` print.
public enum ConfigLoadError: Error, Sendable, Equatable {
  /// The file could not be read (missing, permissions, a directory).
  case unreadable(path: String, reason: String)
  /// The text is not JSON.
  case invalidJSON(JSONParseError)
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

/// Loads and validates config files (SPEC §2): parse the JSON, expand `${ENV}`, decode and
/// check everything, and return either a complete `GatehouseConfig` or every problem.
public enum ConfigLoader {
  /// Loads the file at `path`, expanding variables from `environment` (the process
  /// environment unless a test passes its own).
  public static func load(
    contentsOf path: String, environment: [String: String] = ProcessInfo.processInfo.environment
  ) throws(ConfigLoadError) -> GatehouseConfig {
    let bytes: [UInt8]
    do {
      let url = URL(fileURLWithPath: path)
      let values = try url.resourceValues(forKeys: [.isDirectoryKey])
      if values.isDirectory == true {
        throw ConfigLoadError.unreadable(path: path, reason: "it is a directory")
      }
      bytes = Array(try Data(contentsOf: url))
    } catch let error as ConfigLoadError {
      throw error
    } catch {
      throw .unreadable(path: path, reason: Self.describe(error))
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

  /// A short reason without Foundation's long error domains.
  private static func describe(_ error: any Error) -> String {
    let nsError = error as NSError
    if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError,
      underlying.domain == NSPOSIXErrorDomain, let code = POSIXErrorCode(rawValue: Int32(underlying.code))
    {
      return String(cString: strerror(code.rawValue))
    }
    if nsError.domain == NSCocoaErrorDomain, nsError.code == NSFileReadNoSuchFileError {
      return "no such file"
    }
    if nsError.domain == NSCocoaErrorDomain, nsError.code == NSFileReadNoPermissionError {
      return "permission denied"
    }
    return nsError.localizedDescription
  }
}
