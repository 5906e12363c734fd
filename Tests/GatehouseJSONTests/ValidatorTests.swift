import Foundation
import Testing

@testable import GatehouseJSON

@Suite struct ValidatorTests {
  @Test(arguments: allValidationCases)
  func wholeBuffer(_ testCase: ValidationCase) {
    let error = testCase.bytes.withUnsafeBytes { JSONValidator.firstError(in: $0) }
    if let reason = testCase.reason {
      #expect(error?.reason == reason, "\(testCase.name): \(String(describing: error))")
      if let offset = testCase.offset { #expect(error?.offset == offset, "\(testCase.name)") }
    } else {
      #expect(error == nil, "\(testCase.name): \(String(describing: error))")
    }
  }

  /// Every split into two pieces, and byte by byte, gives exactly the whole-buffer answer.
  @Test(arguments: allValidationCases)
  func streamingAtEverySplitPoint(_ testCase: ValidationCase) {
    let whole = testCase.bytes.withUnsafeBytes { JSONValidator.firstError(in: $0) }
    for split in 0...testCase.bytes.count {
      #expect(streamingError(testCase.bytes, splits: [split]) == whole, "\(testCase.name) split at \(split)")
    }
    #expect(streamingError(testCase.bytes, splits: Array(0...testCase.bytes.count)) == whole, "\(testCase.name)")
  }

  @Test func thereAreEnoughCases() {
    #expect(validCases.count + invalidCases.count >= 120)
  }

  @Test func loneSurrogatesWhenAllowed() {
    let options = JSONValidationOptions(allowsLoneSurrogates: true)
    for text in [
      #""\uD800""#, #""\uDC00""#, #""\uD800\uD800""#, #""\uD800\n""#, #""\uD800abc""#, #""\uDE00\uD83D""#,
      #""\uD800\u0041""#, #""\uD83D\uDE00""#,
    ] {
      let bytes = Array(text.utf8)
      #expect(JSONValidator.firstError(in: bytes, options: options) == nil, "\(text)")
      for split in 0...bytes.count {
        #expect(streamingError(bytes, splits: [split], options: options) == nil, "\(text) at \(split)")
      }
    }
    let badEscape = Array(#""\uD800\x""#.utf8)
    #expect(JSONValidator.firstError(in: badEscape, options: options) == JSONError(offset: 8, reason: .invalidEscape))
  }

  @Test func depthLimitIsConfigurable() {
    let two = JSONValidationOptions(maxDepth: 2)
    #expect(JSONValidator.firstError(in: Array("[[1]]".utf8), options: two) == nil)
    #expect(
      JSONValidator.firstError(in: Array("[[[]]]".utf8), options: two)
        == JSONError(offset: 2, reason: .depthLimitExceeded))
    let zero = JSONValidationOptions(maxDepth: 0)
    #expect(JSONValidator.firstError(in: Array("1".utf8), options: zero) == nil)
    #expect(JSONValidator.firstError(in: Array("{}".utf8), options: zero)?.reason == .depthLimitExceeded)
    // Past 64 levels the stack spans more than one word; objects and arrays alternate.
    let deep = String(repeating: #"[{"k":"#, count: 300) + "0" + String(repeating: "}]", count: 300)
    #expect(JSONValidator.firstError(in: Array(deep.utf8), options: JSONValidationOptions(maxDepth: 600)) == nil)
    #expect(JSONValidator.firstError(in: Array(deep.utf8))?.reason == .depthLimitExceeded)
    let mismatchedDeep = String(repeating: #"[{"k":"#, count: 100) + "0" + String(repeating: "]}", count: 100)
    #expect(JSONValidator.firstError(in: Array(mismatchedDeep.utf8))?.reason == .mismatchedClose)
  }

  @Test func errorsAreSticky() throws {
    var validator = JSONStreamingValidator()
    #expect(throws: JSONError(offset: 1, reason: .unexpectedByte)) { try validator.feed(Array("[,".utf8)) }
    #expect(throws: JSONError(offset: 1, reason: .unexpectedByte)) { try validator.feed(Array("1]".utf8)) }
    #expect(throws: JSONError(offset: 1, reason: .unexpectedByte)) { try validator.finish() }
  }

  @Test func streamingReportsErrorsAsEarlyAsPossible() throws {
    var validator = JSONStreamingValidator()
    try validator.feed(Array(#"{"a":[1,2,"#.utf8))
    #expect(!validator.isComplete)
    #expect(throws: JSONError(offset: 10, reason: .trailingComma)) { try validator.feed(Array("]".utf8)) }

    var complete = JSONStreamingValidator()
    try complete.feed(Array("12".utf8))
    #expect(complete.isComplete)  // a top-level number may end here, or continue
    try complete.feed(Array("3 ".utf8))
    #expect(complete.isComplete)
    #expect(complete.bytesFed == 4)
    try complete.finish()
  }

  /// Random documents, valid and mutated, fed in random pieces: streaming equals whole-buffer,
  /// and whatever we accept Foundation parses too.
  @Test func randomDocuments() throws {
    var generator = SplitMix64(seed: 0x5EED)
    for round in 0..<600 {
      var document = Array(randomValue(&generator, depth: 0).utf8)
      if round % 2 == 1 { mutate(&document, &generator) }
      let whole = JSONValidator.firstError(in: document)
      var splits: [Int] = []
      var position = 0
      while position < document.count {
        position += Int(generator.next() % 9)
        splits.append(min(position, document.count))
      }
      #expect(streamingError(document, splits: splits) == whole, "\(String(decoding: document, as: UTF8.self))")
      if round % 2 == 0 { #expect(whole == nil, "\(String(decoding: document, as: UTF8.self))") }
      if whole == nil {
        let parsed = try? JSONSerialization.jsonObject(with: Data(document), options: [.fragmentsAllowed])
        #expect(parsed != nil, "Foundation rejects \(String(decoding: document, as: UTF8.self))")
      }
    }
  }
}

func streamingError(_ bytes: [UInt8], splits: [Int], options: JSONValidationOptions = JSONValidationOptions())
  -> JSONError?
{
  var validator = JSONStreamingValidator(options: options)
  var start = 0
  for end in splits + [bytes.count] where end >= start {
    do {
      try validator.feed(Array(bytes[start..<end]))
    } catch {
      return error
    }
    start = end
  }
  do {
    try validator.finish()
  } catch {
    return error
  }
  return nil
}

let randomStringPieces = [
  "a", "hello", "", "\\n", "\\\"", "\\\\", "\\/", "\\u00e9", "\\uD83D\\uDE00", "é", "中", "😀", " ", "\\t", "x\\by",
]
let randomNumbers = ["0", "-0", "1", "-17", "3.25", "1e10", "-2.5E-3", "123456789012345678901234567890", "0.000"]
let randomSpaces = ["", "", "", " ", "\n  ", "\t"]

func randomString(_ generator: inout SplitMix64) -> String {
  let count = Int(generator.next() % 4)
  return "\"" + (0..<count).map { _ in randomStringPieces.randomElement(using: &generator)! }.joined() + "\""
}

func randomValue(_ generator: inout SplitMix64, depth: Int) -> String {
  let space = { (g: inout SplitMix64) in randomSpaces.randomElement(using: &g)! }
  switch generator.next() % (depth > 4 ? 4 : 7) {
  case 0: return randomString(&generator)
  case 1: return randomNumbers.randomElement(using: &generator)!
  case 2: return ["true", "false", "null"].randomElement(using: &generator)!
  case 3: return randomString(&generator)
  case 4, 5:
    let count = Int(generator.next() % 4)
    let members = (0..<count).map { _ in
      space(&generator) + randomString(&generator) + space(&generator) + ":" + space(&generator)
        + randomValue(&generator, depth: depth + 1) + space(&generator)
    }
    return "{" + members.joined(separator: ",") + space(&generator) + "}"
  default:
    let count = Int(generator.next() % 4)
    let elements = (0..<count).map { _ in
      space(&generator) + randomValue(&generator, depth: depth + 1) + space(&generator)
    }
    return "[" + elements.joined(separator: ",") + space(&generator) + "]"
  }
}

/// Flips, inserts or deletes one byte (which may or may not leave the document valid).
func mutate(_ document: inout [UInt8], _ generator: inout SplitMix64) {
  let interesting: [UInt8] = [
    0x22, 0x5C, 0x2C, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D, 0x30, 0x2E, 0x65, 0x2D, 0x80, 0xC3, 0x01, 0x20,
  ]
  let position = Int(generator.next() % UInt64(document.count + 1))
  let byte = interesting.randomElement(using: &generator)!
  switch generator.next() % 3 {
  case 0 where position < document.count: document[position] = byte
  case 1 where position < document.count: document.remove(at: position)
  default: document.insert(byte, at: position)
  }
}

extension JSONValidator {
  static func firstError(in bytes: [UInt8], options: JSONValidationOptions = JSONValidationOptions()) -> JSONError? {
    bytes.withUnsafeBytes { firstError(in: $0, options: options) }
  }
}
