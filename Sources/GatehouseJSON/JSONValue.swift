/// A parsed JSON document as a tree, for config files and admin request bodies.
///
/// Objects keep their members in source order (error messages and `GET /admin/routes` read
/// better that way); the parser rejects duplicate keys, so a key appears at most once.
/// This is not the hot-path JSON: bodies that are only passed through are never turned into
/// a tree.
public enum JSONValue: Sendable {
  case null
  case bool(Bool)
  case number(JSONNumber)
  case string(String)
  case array([JSONValue])
  case object([(key: String, value: JSONValue)])

  /// The member named `key` of an object, or nil (also when this is not an object).
  public subscript(key: String) -> JSONValue? {
    guard case .object(let members) = self else { return nil }
    return members.first { $0.key == key }?.value
  }

  /// A short name of the kind of value, for messages such as "expected a string, got an array".
  public var kindDescription: String {
    switch self {
    case .null: "null"
    case .bool: "a boolean"
    case .number: "a number"
    case .string: "a string"
    case .array: "an array"
    case .object: "an object"
    }
  }
}

/// A JSON number: its value as a `Double`, plus the exact integer when the literal was written
/// as an integer (no fraction, no exponent) and fits in 64 bits.
///
/// Keeping the integer matters for sizes and ids above 2^53, which a `Double` would round.
public struct JSONNumber: Sendable, Equatable {
  public let double: Double
  public let integer: Int64?

  /// Two integers compare exactly; otherwise the values compare as doubles, so `1` equals `1.0`.
  public static func == (lhs: JSONNumber, rhs: JSONNumber) -> Bool {
    if let left = lhs.integer, let right = rhs.integer { return left == right }
    return lhs.double == rhs.double
  }

  /// An integer, as a literal without fraction or exponent would parse.
  public init(integer: Int64) {
    self.double = Double(integer)
    self.integer = integer
  }

  /// A number with no exact integer form recorded.
  public init(double: Double) {
    self.double = double
    self.integer = nil
  }

  init(double: Double, integer: Int64?) {
    self.double = double
    self.integer = integer
  }
}

extension JSONValue: Equatable {
  public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
    switch (lhs, rhs) {
    case (.null, .null): return true
    case (.bool(let a), .bool(let b)): return a == b
    case (.number(let a), .number(let b)): return a == b
    case (.string(let a), .string(let b)): return a == b
    case (.array(let a), .array(let b)): return a == b
    case (.object(let a), .object(let b)):
      return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    case (.null, _), (.bool, _), (.number, _), (.string, _), (.array, _), (.object, _):
      return false
    }
  }
}

extension JSONValue {
  /// The value as compact JSON text (no spaces), UTF-8 encoded.
  ///
  /// Non-ASCII characters are written as UTF-8, not `\u` escapes; `/` is not escaped.
  public func serializedBytes() -> [UInt8] {
    var output: [UInt8] = []
    serialize(into: &output)
    return output
  }

  /// The value as compact JSON text.
  public func serializedString() -> String {
    String(decoding: serializedBytes(), as: UTF8.self)
  }

  func serialize(into output: inout [UInt8]) {
    switch self {
    case .null:
      output.append(contentsOf: "null".utf8)
    case .bool(let value):
      output.append(contentsOf: (value ? "true" : "false").utf8)
    case .number(let number):
      if let integer = number.integer {
        output.append(contentsOf: String(integer).utf8)
      } else if number.double.isFinite, number.double == number.double.rounded(),
        let exact = Int64(exactly: number.double)
      {
        output.append(contentsOf: String(exact).utf8)
      } else if number.double.isFinite {
        // Swift prints the shortest text that reads back as the same Double, and its
        // exponent form ("1e-07") is valid JSON.
        output.append(contentsOf: number.double.description.utf8)
      } else {
        // The parser never produces these; a hand-built NaN has no JSON spelling.
        output.append(contentsOf: "null".utf8)
      }
    case .string(let string):
      JSONValue.serializeString(string, into: &output)
    case .array(let elements):
      output.append(UInt8(ascii: "["))
      for (index, element) in elements.enumerated() {
        if index > 0 { output.append(UInt8(ascii: ",")) }
        element.serialize(into: &output)
      }
      output.append(UInt8(ascii: "]"))
    case .object(let members):
      output.append(UInt8(ascii: "{"))
      for (index, member) in members.enumerated() {
        if index > 0 { output.append(UInt8(ascii: ",")) }
        JSONValue.serializeString(member.key, into: &output)
        output.append(UInt8(ascii: ":"))
        member.value.serialize(into: &output)
      }
      output.append(UInt8(ascii: "}"))
    }
  }

  static func serializeString(_ string: String, into output: inout [UInt8]) {
    let hexDigits = Array("0123456789abcdef".utf8)
    output.append(UInt8(ascii: "\""))
    for byte in string.utf8 {
      switch byte {
      case UInt8(ascii: "\""): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
      case UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
      case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
      case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
      case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
      case 0x00..<0x20:
        output.append(contentsOf: "\\u00".utf8)
        output.append(hexDigits[Int(byte >> 4)])
        output.append(hexDigits[Int(byte & 0x0F)])
      default:
        output.append(byte)
      }
    }
    output.append(UInt8(ascii: "\""))
  }
}

/// Shorthands for documents built in code (the admin API's answers).
extension JSONValue {
  package static func int(_ value: Int) -> JSONValue { .number(JSONNumber(integer: Int64(value))) }
  package static func int(_ value: UInt64) -> JSONValue { .number(JSONNumber(integer: Int64(clamping: value))) }
  package static func optionalString(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
}
