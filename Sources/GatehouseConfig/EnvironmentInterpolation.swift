/// Expands `${NAME}` and `${NAME:-default}` in config strings.
///
/// - `${NAME}`: the variable's value; an error if it is not set.
/// - `${NAME:-default}`: the value, or `default` when the variable is unset or empty (as in
///   POSIX shells). The default is taken literally up to the first `}`; it is not expanded again.
/// - `$${` is an escape for a literal `${`. A `$` anywhere else is kept as is.
/// - Names are POSIX style: a letter or `_`, then letters, digits or `_`.
///
/// Expansion happens once, on the parsed JSON strings (never on keys), so a value from the
/// environment is never parsed as JSON and can't inject structure.
public struct EnvironmentInterpolation: Sendable {
  /// Why a string could not be expanded. Messages never include the string itself or any
  /// variable's value, because the string may hold a secret.
  public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
    case unsetVariable(name: String)
    case unterminatedReference
    case invalidVariableName

    public var description: String {
      switch self {
      case .unsetVariable(let name):
        "environment variable \(name) is not set (use ${\(name):-default} for a default)"
      case .unterminatedReference:
        "'${' without a closing '}' (write '$${' for a literal '${')"
      case .invalidVariableName:
        "invalid environment variable name in '${...}' (letters, digits and '_', not starting with a digit)"
      }
    }
  }

  /// The variables to expand from; tests pass their own instead of the process environment.
  public let environment: [String: String]

  public init(environment: [String: String]) {
    self.environment = environment
  }

  /// Expands every reference in `text`.
  public func expand(_ text: String) throws(Failure) -> String {
    let bytes = Array(text.utf8)
    // Fast path: nearly all config strings have no '$'.
    guard bytes.contains(UInt8(ascii: "$")) else { return text }
    var output: [UInt8] = []
    output.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
      let byte = bytes[index]
      if byte == UInt8(ascii: "$"), index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "$"),
        bytes[index + 2] == UInt8(ascii: "{")
      {
        output.append(contentsOf: "${".utf8)
        index += 3
      } else if byte == UInt8(ascii: "$"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "{") {
        guard let close = bytes[(index + 2)...].firstIndex(of: UInt8(ascii: "}")) else {
          throw .unterminatedReference
        }
        output.append(contentsOf: try resolve(bytes[(index + 2)..<close]).utf8)
        index = close + 1
      } else {
        output.append(byte)
        index += 1
      }
    }
    return String(decoding: output, as: UTF8.self)
  }

  /// Resolves the inside of one `${...}`: `NAME` or `NAME:-default`.
  private func resolve(_ reference: ArraySlice<UInt8>) throws(Failure) -> String {
    var nameBytes = reference
    var defaultValue: String?
    if let colon = reference.firstIndex(of: UInt8(ascii: ":")) {
      guard colon + 1 < reference.endIndex, reference[colon + 1] == UInt8(ascii: "-") else {
        throw .invalidVariableName
      }
      nameBytes = reference[reference.startIndex..<colon]
      defaultValue = String(decoding: reference[(colon + 2)...], as: UTF8.self)
    }
    guard Self.isValidName(nameBytes) else { throw .invalidVariableName }
    let name = String(decoding: nameBytes, as: UTF8.self)
    if let value = environment[name], !(value.isEmpty && defaultValue != nil) {
      return value
    }
    if let defaultValue { return defaultValue }
    throw .unsetVariable(name: name)
  }

  private static func isValidName(_ name: ArraySlice<UInt8>) -> Bool {
    guard let first = name.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
      return false
    }
    return name.allSatisfy { byte in
      (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
        || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
    }
  }
}
