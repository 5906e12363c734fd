// The invariants every input of the `json` fuzz target must satisfy. This one file is compiled
// into Fuzz/build/fuzz-json (Fuzz/run.sh), which traps on a violation so libFuzzer saves the
// input, and into the GatehouseJSON tests through a symlink
// (Tests/GatehouseJSONTests/JSONFuzzInvariants.swift), where JSONFuzzReplayTests records a
// violation as a test failure. It uses only the public API.
//
// Foundation's JSONSerialization is deliberately not used as a second opinion: it guesses the
// encoding (a NUL byte early on makes it read UTF-16 or UTF-32), skips a byte order mark,
// refuses numbers outside the range of Double and has its own nesting limit, so its verdict is
// not RFC 8259's. The reference reading below states the grammar the validator promises.

import GatehouseJSON

/// A broken invariant, described well enough to act on from a crash log alone.
struct FuzzViolation: Error, CustomStringConvertible {
  var description: String

  init(_ description: String) {
    self.description = description
  }
}

/// Checks the JSON engine on one input: the input is a document (or not), validated whole and
/// in pieces under three sets of options, read by `JSONDocument` at key paths taken from its
/// own structure, and wrapped by `JSONEnvelopeWriter`. See `check(_:)` for the list.
enum JSONFuzzInvariants {
  /// Inputs up to this size are also fed one byte per call; longer ones would cost too many
  /// calls per run.
  static let bytewiseLimit = 1024

  /// Inputs up to this size are also split in two at every position, and the streaming
  /// validator's `isComplete` is checked after every byte; both cost time quadratic in the size.
  static let everySplitLimit = 256

  /// At most this many key paths are looked up per document: enough to reach every kind of
  /// step, few enough that a large document does not slow the run down.
  static let keyPathLimit = 48

  /// Message bytes taken from the input for the error envelope.
  static let messageLimit = 256

  /// libFuzzer entry: traps on a violation so libFuzzer reports it and saves the input.
  static func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) {
    let input = UnsafeRawBufferPointer(start: size > 0 ? data : nil, count: size)
    if let violation = check(input) {
      fatalError("fuzz invariant violated (json): \(violation)")
    }
  }

  /// Runs every check on one input and returns the first violation, or nil.
  ///
  /// Under the default options, with lone surrogates allowed, and with a depth limit of 0 to 4
  /// and lone surrogates allowed or not (both picked by a hash of the input):
  ///
  /// - `JSONValidator` gives exactly the error (offset and reason) of an independent
  ///   recursive-descent reading of RFC 8259 with the same options, or accepts when it does;
  /// - `JSONStreamingValidator` fed the input in three pieces (cut where the hash says), split
  ///   in two at every position and one byte at a time gives the same error as the whole
  ///   buffer; every piece is its own exact-size allocation, freed before the next is fed, so
  ///   reads past a piece or of an earlier one trip AddressSanitizer;
  /// - `bytesFed` counts the bytes of the pieces accepted so far; `isComplete` after each byte
  ///   says whether the bytes so far are a valid document; an error repeats on every later
  ///   `feed` and at `finish`.
  ///
  /// When the input is a valid document under the default options:
  ///
  /// - `JSONDocument.range(of:in:)` finds, for key paths built from the document's own
  ///   members and elements (and near misses: absent names, indexes past the end, `01`), the
  ///   same value as the reference tree (first member of a name, canonical indexes), and
  ///   every range found lies inside the input and is itself a valid document;
  /// - a path of plain names reads back from its dotted text through `JSONKeyPath(_:)`;
  /// - `isEnvelope` and `errorMessage` agree with the reference tree;
  /// - the success envelope around the whole value and around each value found is valid,
  ///   `successLength` long, an envelope by `isEnvelope`, and has the value at `datas`.
  ///
  /// For every input: the error envelope with the input as message and a code from the hash is
  /// valid JSON whose `errorMessage` is that message and whose `code` is that number; the
  /// input escaped by `JSONStringWriter` is a valid string exactly when it is UTF-8, and then
  /// reads back as the input; `JSONMediaType.isJSON` of the input's first line agrees with a
  /// reference reading of the media type rules.
  static func check(_ input: UnsafeRawBufferPointer) -> FuzzViolation? {
    do throws(FuzzViolation) {
      let hash = fnv1a(input)
      let cuts = [Int(hash % UInt64(input.count + 1)), Int((hash >> 32) % UInt64(input.count + 1))].sorted()
      let tight = JSONValidationOptions(maxDepth: Int((hash >> 20) % 5), allowsLoneSurrogates: hash & 1 != 0)
      for options in [JSONValidationOptions(), JSONValidationOptions(allowsLoneSurrogates: true), tight] {
        try checkValidation(input, options: options, cuts: cuts)
      }
      if case .success(let tree) = Reference.parse(input, options: JSONValidationOptions(), buildsTree: true) {
        try checkDocument(input, tree: tree)
      }
      try checkNullEnvelope()
      try checkFailureEnvelope(input, code: Int(truncatingIfNeeded: hash))
      try checkStringWriter(input)
      try checkMediaType(input)
      return nil
    } catch {
      return error
    }
  }

  /// FNV-1a, so that each input gets its own cuts and options, and a replay gets the same ones.
  static func fnv1a(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
    return hash
  }

  static func require(_ condition: Bool, _ message: @autoclosure () -> String) throws(FuzzViolation) {
    if !condition { throw FuzzViolation(message()) }
  }

  static func describe(_ error: JSONError?) -> String {
    error.map { "\($0.reason) at \($0.offset)" } ?? "no error"
  }

  static func describe(_ options: JSONValidationOptions) -> String {
    "[maxDepth \(options.maxDepth)\(options.allowsLoneSurrogates ? ", lone surrogates allowed" : "")] "
  }
}

// MARK: - Validation

extension JSONFuzzInvariants {
  static func checkValidation(_ input: UnsafeRawBufferPointer, options: JSONValidationOptions, cuts: [Int])
    throws(FuzzViolation)
  {
    let context = describe(options)
    let expected: JSONError?
    switch Reference.parse(input, options: options, buildsTree: false) {
    case .success: expected = nil
    case .failure(let error): expected = error
    }
    let whole = JSONValidator.firstError(in: input, options: options)
    try require(
      whole == expected, context + "JSONValidator gives \(describe(whole)), the reference \(describe(expected))")
    try require(
      JSONValidator.isValid(input, options: options) == (whole == nil),
      context + "isValid disagrees with firstError (\(describe(whole)))")

    try checkStreaming(input, options: options, cuts: cuts, expected: whole, context: context)
    let n = input.count
    if n >= 2 && n <= bytewiseLimit {
      try checkStreaming(
        input, options: options, cuts: Array(1..<n), expected: whole, context: context + "[byte by byte] ",
        checksEveryPrefix: n <= everySplitLimit)
    }
    if n <= everySplitLimit {
      for cut in 0...n {
        try checkStreaming(input, options: options, cuts: [cut], expected: whole, context: context)
      }
    }
  }

  /// Feeds `input` cut at `cuts` (sorted offsets) and checks the outcome against `expected`,
  /// the whole-buffer error.
  static func checkStreaming(
    _ input: UnsafeRawBufferPointer, options: JSONValidationOptions, cuts: [Int], expected: JSONError?,
    context: String, checksEveryPrefix: Bool = false
  ) throws(FuzzViolation) {
    let context = context + "split at \(cuts.count > 8 ? "\(cuts.count) points" : "\(cuts)"): "
    var validator = JSONStreamingValidator(options: options)
    var start = 0
    var error: JSONError?
    for end in cuts + [input.count] {
      // Exactly the piece's size, so AddressSanitizer flags any read past it; freed right
      // after, so it also flags a validator that kept a pointer into it.
      let piece = UnsafeMutableRawBufferPointer.allocate(byteCount: end - start, alignment: 1)
      defer { piece.deallocate() }
      if end > start { piece.copyMemory(from: UnsafeRawBufferPointer(rebasing: input[start..<end])) }
      do {
        try validator.feed(UnsafeRawBufferPointer(piece))
      } catch let rejected {
        try require(
          rejected.offset >= start && rejected.offset < end,
          context + "the piece \(start)..<\(end) failed at \(rejected.offset), outside it")
        error = rejected
        try require(
          validator.bytesFed == start, context + "bytesFed is \(validator.bytesFed) after the piece at \(start) failed")
        try require(!validator.isComplete, context + "isComplete after an error")
        break
      }
      try require(validator.bytesFed == end, context + "bytesFed is \(validator.bytesFed) after \(end) bytes")
      if checksEveryPrefix {
        let prefixIsValid = JSONValidator.isValid(UnsafeRawBufferPointer(rebasing: input[0..<end]), options: options)
        try require(
          validator.isComplete == prefixIsValid,
          context + "isComplete is \(validator.isComplete) after \(end) bytes, which are "
            + (prefixIsValid ? "a valid document" : "not a valid document"))
      }
      start = end
    }
    if error == nil {
      let complete = validator.isComplete
      if let atEnd = failure({ () throws(JSONError) in try validator.finish() }) {
        try require(!complete, context + "finish() failed (\(describe(atEnd))) after isComplete")
        try require(
          atEnd == JSONError(offset: input.count, reason: .unexpectedEnd),
          context + "finish() failed with \(describe(atEnd)), expected unexpectedEnd at \(input.count)")
        error = atEnd
      } else {
        try require(complete, context + "finish() accepted what isComplete called incomplete")
      }
    }
    try require(error == expected, context + "gives \(describe(error)), the whole buffer \(describe(expected))")
    guard let error else { return }
    // Sticky: every later call reports the same error and feeds nothing.
    let fed = validator.bytesFed
    for again in [[UInt8](), [0x20], [0x5D]] {
      let repeated = failure { () throws(JSONError) in try validator.feed(again) }
      try require(repeated == error, context + "feed(\(again)) after \(describe(error)) gave \(describe(repeated))")
    }
    let atFinish = failure { () throws(JSONError) in try validator.finish() }
    try require(atFinish == error, context + "finish() after \(describe(error)) gave \(describe(atFinish))")
    try require(validator.bytesFed == fed, context + "bytesFed moved after the error")
  }

  /// The error `body` throws, or nil.
  static func failure(_ body: () throws(JSONError) -> Void) -> JSONError? {
    do {
      try body()
      return nil
    } catch {
      return error
    }
  }
}

// MARK: - Reading a valid document

extension JSONFuzzInvariants {
  static func checkDocument(_ input: UnsafeRawBufferPointer, tree: Reference.Node) throws(FuzzViolation) {
    // Exact-size copy: a read past the document trips AddressSanitizer.
    let document = UnsafeMutableRawBufferPointer.allocate(byteCount: input.count, alignment: 1)
    defer { document.deallocate() }
    document.copyMemory(from: input)
    let bytes = UnsafeRawBufferPointer(document)

    let root = JSONDocument.range(of: .root, in: bytes)
    try require(root == tree.range, "range of the root is \(String(describing: root)), expected \(tree.range)")
    try checkSuccessEnvelope(datas: UnsafeRawBufferPointer(rebasing: bytes[tree.range]), context: "root")

    for names in keyPaths(tree) {
      let path = JSONKeyPath(
        segments: names.map { JSONKeyPath.Segment(Substring(String(decoding: $0, as: UTF8.self))) })
      let expected = tree.lookup(names)?.range
      let found = JSONDocument.range(of: path, in: bytes)
      try require(
        found == expected,
        "range of \(describe(names)) is \(String(describing: found)), expected \(String(describing: expected))")
      if let found {
        try require(!found.isEmpty, "range of \(describe(names)) is empty")
        let value = UnsafeRawBufferPointer(rebasing: bytes[found])
        let error = JSONValidator.firstError(in: value)
        try require(error == nil, "the value at \(describe(names)) is not valid JSON: \(describe(error))")
        try checkSuccessEnvelope(datas: value, context: describe(names))
      }
      // A dotted text of plain names parses into the same segments.
      if !names.isEmpty && names.allSatisfy({ !$0.isEmpty && !$0.contains(0x2E) }) {
        let text = names.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ".")
        let parsed = JSONKeyPath(text)
        try require(parsed == path, "JSONKeyPath(\(text)) is \(String(describing: parsed)), expected \(path)")
        try require(path.description == text, "\(describe(names)) prints as \(path.description)")
      }
    }

    let isEnvelope = JSONDocument.isEnvelope(bytes)
    try require(isEnvelope == tree.isEnvelope, "isEnvelope is \(isEnvelope), expected \(tree.isEnvelope)")
    let message = JSONDocument.errorMessage(bytes).map { Array($0.utf8) }
    let expectedMessage = tree.errorMessage
    try require(
      message == expectedMessage,
      "errorMessage is \(describe(message)), expected \(describe(expectedMessage))")
  }

  /// Key paths to look up: the path of each value in breadth-first order, up to
  /// `keyPathLimit`, and after each container a few that must miss (or hit something else).
  static func keyPaths(_ tree: Reference.Node) -> [[[UInt8]]] {
    var paths: [[[UInt8]]] = []
    var queue: [(path: [[UInt8]], node: Reference.Node)] = [([], tree)]
    var next = 0
    while next < queue.count && paths.count < keyPathLimit {
      let (path, node) = queue[next]
      next += 1
      paths.append(path)
      switch node {
      case .array(_, let elements):
        for (index, element) in elements.enumerated() { queue.append((path + [Array(String(index).utf8)], element)) }
        paths.append(path + [Array(String(elements.count).utf8)])
        paths.append(path + [Array("00".utf8)])
        paths.append(path + [Array("-1".utf8)])
      case .object(_, let members):
        for member in members { queue.append((path + [member.key], member.value)) }
        paths.append(path + [Array("0".utf8)])
        paths.append(path + [(members.first?.key ?? []) + [0x7E]])
      case .scalar, .string:
        paths.append(path + [Array("0".utf8)])
      }
    }
    return paths
  }

  static func describe(_ names: [[UInt8]]) -> String {
    "[" + names.map { "\"\(String(decoding: $0, as: UTF8.self))\"" }.joined(separator: ", ") + "]"
  }

  static func describe(_ utf8: [UInt8]?) -> String {
    utf8.map { "\"\(String(decoding: $0, as: UTF8.self))\"" } ?? "nil"
  }
}

// MARK: - Envelopes and escaping

extension JSONFuzzInvariants {
  static let successPrefix = Array(#"{"code":0,"datas":"#.utf8)
  static let successSuffix = Array(#","message":""}"#.utf8)

  /// `datas` is a valid value without surrounding whitespace.
  static func checkSuccessEnvelope(datas: UnsafeRawBufferPointer, context: String) throws(FuzzViolation) {
    let context = "success envelope of \(context): "
    var out: [UInt8] = [0x41]
    JSONEnvelopeWriter.appendSuccess(datas: datas, to: &out)
    try require(out.first == 0x41, context + "overwrote what was in the buffer")
    out.removeFirst()
    try require(
      out == successPrefix + Array(datas) + successSuffix, context + "wrote \(String(decoding: out, as: UTF8.self))")
    try require(
      out.count == JSONEnvelopeWriter.successLength(datasCount: datas.count),
      context + "\(out.count) bytes, successLength says \(JSONEnvelopeWriter.successLength(datasCount: datas.count))")
    var fromSlice: [UInt8] = []
    JSONEnvelopeWriter.appendSuccess(datas: ArraySlice(datas), to: &fromSlice)
    try require(fromSlice == out, context + "the ArraySlice overload writes other bytes")
    // The envelope adds one level around the value, so it may be one deeper than the default
    // limit allows when the value itself is at the limit.
    let error = out.withUnsafeBytes { JSONValidator.firstError(in: $0, options: JSONValidationOptions(maxDepth: 513)) }
    try require(error == nil, context + "not valid JSON: \(describe(error))")
    try require(JSONDocument.isEnvelope(out), context + "not an envelope by isEnvelope")
    let datasRange = JSONDocument.range(of: JSONKeyPath("datas")!, in: out)
    try require(
      datasRange == successPrefix.count..<(successPrefix.count + datas.count),
      context + "datas is at \(String(describing: datasRange))")
  }

  /// Docs/envelope.md: the success envelope without a value.
  static func checkNullEnvelope() throws(FuzzViolation) {
    var out: [UInt8] = []
    JSONEnvelopeWriter.appendSuccess(datas: UnsafeRawBufferPointer?.none, to: &out)
    try require(
      out == Array(#"{"code":0,"datas":null,"message":""}"#.utf8)
        && out.count == JSONEnvelopeWriter.successLength(datasCount: nil),
      "the null success envelope is \(String(decoding: out, as: UTF8.self))")
  }

  static func checkFailureEnvelope(_ input: UnsafeRawBufferPointer, code: Int) throws(FuzzViolation) {
    let message = String(decoding: input.prefix(messageLimit), as: UTF8.self)
    let out = JSONEnvelopeWriter.failure(code: code, message: message)
    let context = "failure envelope (code \(code)): "
    var appended: [UInt8] = [0x41]
    JSONEnvelopeWriter.appendFailure(code: code, message: message, to: &appended)
    try require(appended == [0x41] + out, context + "appendFailure and failure write other bytes")
    let error = out.withUnsafeBytes { JSONValidator.firstError(in: $0) }
    try require(error == nil, context + "not valid JSON: \(describe(error)) in \(String(decoding: out, as: UTF8.self))")
    try require(JSONDocument.isEnvelope(out), context + "not an envelope by isEnvelope")
    let codeRange = JSONDocument.range(of: JSONKeyPath("code")!, in: out)
    let codeText = codeRange.map { String(decoding: out[$0], as: UTF8.self) }
    try require(codeText == String(code), context + "code reads back as \(codeText ?? "nothing")")
    let datas = JSONDocument.range(of: JSONKeyPath("datas")!, in: out).map { Array(out[$0]) }
    try require(datas == Array("null".utf8), context + "datas is not null")
    let readBack = JSONDocument.errorMessage(out).map { Array($0.utf8) }
    try require(
      readBack == Array(message.utf8),
      context + "errorMessage reads back \(describe(readBack)), expected \(describe(Array(message.utf8)))")
  }

  /// Raw bytes, unlike a String, may be invalid UTF-8; the writer passes them through, so the
  /// result is a valid string exactly when they are UTF-8.
  static func checkStringWriter(_ input: UnsafeRawBufferPointer) throws(FuzzViolation) {
    let bytes = Array(input.prefix(messageLimit))
    var quoted: [UInt8] = [0x22]
    bytes.withUnsafeBufferPointer { JSONStringWriter.appendEscaped($0, to: &quoted) }
    quoted.append(0x22)
    let isUTF8 = String(validating: bytes, as: UTF8.self) != nil
    let parsed = quoted.withUnsafeBytes { Reference.parse($0, options: JSONValidationOptions(), buildsTree: true) }
    switch parsed {
    case .success(.string(_, let decoded)):
      try require(isUTF8, "escaped invalid UTF-8 \(bytes) is a valid string")
      try require(decoded == bytes, "escaped \(bytes) reads back as \(decoded)")
    case .success(let other):
      throw FuzzViolation("escaped \(bytes) reads as \(other)")
    case .failure(let error):
      try require(!isUTF8, "escaped UTF-8 \(bytes) is not a valid string: \(describe(error))")
    }
  }
}

// MARK: - Media types

extension JSONFuzzInvariants {
  static func checkMediaType(_ input: UnsafeRawBufferPointer) throws(FuzzViolation) {
    let line = Array(input.prefix(messageLimit).prefix { $0 != 0x0A })
    let isJSON = JSONMediaType.isJSON(line)
    let expected = referenceIsJSON(line)
    try require(
      isJSON == expected,
      "isJSON(\(String(decoding: line, as: UTF8.self))) is \(isJSON), expected \(expected)")
  }

  /// `application/json` or `application/<name>+json`, letters in any case, between optional
  /// spaces and tabs, optionally followed by `;` and anything.
  static func referenceIsJSON(_ value: [UInt8]) -> Bool {
    let isBlank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
    let withoutParameters = value.drop(while: isBlank).prefix { $0 != 0x3B }
    let mediaType = Array(withoutParameters.reversed().drop(while: isBlank).reversed())
    guard let slash = mediaType.firstIndex(of: 0x2F) else { return false }
    let type = String(decoding: mediaType[..<slash], as: UTF8.self).lowercased()
    let subtypeBytes = mediaType[(slash + 1)...]
    let tchars = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
    guard type == "application", !subtypeBytes.isEmpty, subtypeBytes.allSatisfy(tchars.contains) else {
      return false
    }
    let subtype = String(decoding: subtypeBytes, as: UTF8.self).lowercased()
    return subtype == "json" || (subtype.count > 5 && subtype.hasSuffix("+json"))
  }
}

// MARK: - Reference reading

extension JSONFuzzInvariants {
  /// RFC 8259 read by recursive descent, independently of the validator's state machine.
  ///
  /// The error is where the validator promises it: at the first byte that cannot continue a
  /// valid document, or at the end when the input stops early. One exception is inherited from
  /// the validator's tests: a `\u` escape that makes a lone surrogate is reported at its last
  /// hex digit, even when an earlier digit already ruled out every valid continuation.
  struct Reference {
    /// A parsed value with the input range it covers (without whitespace around it).
    indirect enum Node: CustomStringConvertible {
      case scalar(Range<Int>)
      /// The unescaped content as UTF-8.
      case string(Range<Int>, [UInt8])
      case array(Range<Int>, [Node])
      case object(Range<Int>, [(key: [UInt8], value: Node)])

      var range: Range<Int> {
        switch self {
        case .scalar(let range), .string(let range, _), .array(let range, _), .object(let range, _): range
        }
      }

      var description: String {
        switch self {
        case .scalar(let range): "scalar at \(range)"
        case .string(let range, _): "string at \(range)"
        case .array(let range, _): "array at \(range)"
        case .object(let range, _): "object at \(range)"
        }
      }

      /// What `JSONDocument.range(of:in:)` promises: the first member of each name; on an
      /// array, the element at a canonical decimal index (`0`, `12`, not `01`, at most 18 digits).
      func lookup(_ names: [[UInt8]]) -> Node? {
        var node = self
        for name in names {
          switch node {
          case .object(_, let members):
            guard let member = members.first(where: { $0.key == name }) else { return nil }
            node = member.value
          case .array(_, let elements):
            let isDecimal = name.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
            guard isDecimal, (1...18).contains(name.count), name.count == 1 || name[0] != 0x30,
              let index = Int(String(decoding: name, as: UTF8.self)), index < elements.count
            else { return nil }
            node = elements[index]
          case .scalar, .string:
            return nil
          }
        }
        return node
      }

      /// A top-level object with `code` and one of `datas` and `message`.
      var isEnvelope: Bool {
        guard case .object(_, let members) = self else { return false }
        let keys = members.map { String(decoding: $0.key, as: UTF8.self) }
        return keys.contains("code") && (keys.contains("datas") || keys.contains("message"))
      }

      /// The first usable member named `message`, else `error`, else `error_description`, else
      /// `detail`: a string, or for `error` an object whose first `message` member is a string.
      var errorMessage: [UInt8]? {
        guard case .object(_, let members) = self else { return nil }
        for name in ["message", "error", "error_description", "detail"] {
          for member in members where member.key == Array(name.utf8) {
            switch member.value {
            case .string(_, let text):
              return text
            case .object(_, let inner) where name == "error":
              if case .string(_, let text)? = inner.first(where: { $0.key == Array("message".utf8) })?.value {
                return text
              }
            default:
              break
            }
          }
        }
        return nil
      }
    }

    enum Position {
      case top, afterColon, afterComma, firstInArray
    }

    let bytes: UnsafeRawBufferPointer
    let options: JSONValidationOptions
    let buildsTree: Bool
    var position = 0
    var depth = 0

    static func parse(_ bytes: UnsafeRawBufferPointer, options: JSONValidationOptions, buildsTree: Bool)
      -> Result<Node, JSONError>
    {
      var reader = Reference(bytes: bytes, options: options, buildsTree: buildsTree)
      do throws(JSONError) {
        reader.skipWhitespace()
        let node = try reader.value(at: .top)
        reader.skipWhitespace()
        if reader.position < bytes.count { throw reader.failure(.trailingContent) }
        return .success(node)
      } catch {
        return .failure(error)
      }
    }

    func peek() -> UInt8? { position < bytes.count ? bytes[position] : nil }

    func failure(_ reason: JSONError.Reason) -> JSONError { JSONError(offset: position, reason: reason) }

    /// The next byte, or `unexpectedEnd` when there is none.
    func next() throws(JSONError) -> UInt8 {
      guard let byte = peek() else { throw JSONError(offset: bytes.count, reason: .unexpectedEnd) }
      return byte
    }

    mutating func skipWhitespace() {
      while let byte = peek(), byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { position += 1 }
    }

    /// Whitespace before the value has been skipped.
    mutating func value(at place: Position) throws(JSONError) -> Node {
      let start = position
      switch try next() {
      case UInt8(ascii: "{"): return try object()
      case UInt8(ascii: "["): return try array()
      case UInt8(ascii: "\""):
        let text = try string()
        return .string(start..<position, text)
      case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
        try number()
      case UInt8(ascii: "t"): try literal("true")
      case UInt8(ascii: "f"): try literal("false")
      case UInt8(ascii: "n"): try literal("null")
      case UInt8(ascii: "]") where place == .afterComma: throw failure(.trailingComma)
      case 0xEF where position == 0: throw failure(.byteOrderMark)
      default: throw failure(.unexpectedByte)
      }
      return .scalar(start..<position)
    }

    mutating func open() throws(JSONError) {
      if depth >= options.maxDepth { throw failure(.depthLimitExceeded) }
      depth += 1
      position += 1
    }

    mutating func object() throws(JSONError) -> Node {
      let start = position
      try open()
      var members: [(key: [UInt8], value: Node)] = []
      skipWhitespace()
      if peek() == UInt8(ascii: "}") {
        position += 1
        depth -= 1
        return .object(start..<position, members)
      }
      while true {
        let byte = try next()
        guard byte == UInt8(ascii: "\"") else {
          // `{` followed by `}` was handled above, so a `}` here follows a comma.
          throw failure(byte == UInt8(ascii: "}") ? .trailingComma : .expectedKey)
        }
        let key = try string()
        skipWhitespace()
        guard try next() == UInt8(ascii: ":") else { throw failure(.expectedColon) }
        position += 1
        skipWhitespace()
        let member = try value(at: .afterColon)
        if buildsTree { members.append((key, member)) }
        skipWhitespace()
        switch try next() {
        case UInt8(ascii: ","):
          position += 1
          skipWhitespace()
        case UInt8(ascii: "}"):
          position += 1
          depth -= 1
          return .object(start..<position, members)
        case UInt8(ascii: "]"):
          throw failure(.mismatchedClose)
        default:
          throw failure(.expectedCommaOrClose)
        }
      }
    }

    mutating func array() throws(JSONError) -> Node {
      let start = position
      try open()
      var elements: [Node] = []
      skipWhitespace()
      if peek() == UInt8(ascii: "]") {
        position += 1
        depth -= 1
        return .array(start..<position, elements)
      }
      var place = Position.firstInArray
      while true {
        let element = try value(at: place)
        if buildsTree { elements.append(element) }
        skipWhitespace()
        switch try next() {
        case UInt8(ascii: ","):
          position += 1
          skipWhitespace()
          place = .afterComma
        case UInt8(ascii: "]"):
          position += 1
          depth -= 1
          return .array(start..<position, elements)
        case UInt8(ascii: "}"):
          throw failure(.mismatchedClose)
        default:
          throw failure(.expectedCommaOrClose)
        }
      }
    }

    mutating func literal(_ word: String) throws(JSONError) {
      for expected in word.utf8 {
        guard try next() == expected else { throw failure(.invalidLiteral) }
        position += 1
      }
    }

    static func isDigit(_ byte: UInt8?) -> Bool { byte.map { $0 >= 0x30 && $0 <= 0x39 } ?? false }

    mutating func digits() {
      while Self.isDigit(peek()) { position += 1 }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; the byte after it is the caller's.
    mutating func number() throws(JSONError) {
      if peek() == UInt8(ascii: "-") { position += 1 }
      let first = try next()
      if first == UInt8(ascii: "0") {
        position += 1
        if Self.isDigit(peek()) { throw failure(.leadingZero) }
      } else if Self.isDigit(first) {
        digits()
      } else {
        throw failure(.invalidNumber)
      }
      if peek() == UInt8(ascii: ".") {
        position += 1
        guard Self.isDigit(try next()) else { throw failure(.invalidNumber) }
        digits()
      }
      if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
        position += 1
        if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { position += 1 }
        guard Self.isDigit(try next()) else { throw failure(.invalidNumber) }
        digits()
      }
    }

    /// At the opening quote; returns the unescaped content (empty when not building a tree).
    mutating func string() throws(JSONError) -> [UInt8] {
      position += 1
      var text: [UInt8] = []
      while true {
        let byte = try next()
        switch byte {
        case UInt8(ascii: "\""):
          position += 1
          return text
        case UInt8(ascii: "\\"):
          position += 1
          try escape(try next(), into: &text)
        case 0x00..<0x20:
          throw failure(.controlCharacterInString)
        case 0x80...:
          try utf8Sequence(into: &text)
        default:
          emit(byte, into: &text)
          position += 1
        }
      }
    }

    func emit(_ byte: UInt8, into text: inout [UInt8]) {
      if buildsTree { text.append(byte) }
    }

    func emit(scalar: UInt32, into text: inout [UInt8]) {
      guard buildsTree else { return }
      text.append(contentsOf: String(Character(Unicode.Scalar(scalar) ?? "\u{FFFD}")).utf8)
    }

    /// At the byte after a backslash.
    mutating func escape(_ letter: UInt8, into text: inout [UInt8]) throws(JSONError) {
      let simple: [UInt8: UInt8] = [
        0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09,
      ]
      if let plain = simple[letter] {
        emit(plain, into: &text)
        position += 1
      } else if letter == UInt8(ascii: "u") {
        position += 1
        try codeUnit(try hexQuad(), into: &text)
      } else {
        throw failure(.invalidEscape)
      }
    }

    mutating func hexQuad() throws(JSONError) -> UInt32 {
      var value: UInt32 = 0
      for _ in 0..<4 {
        guard let digit = UInt32(String(UnicodeScalar(try next())), radix: 16) else {
          throw failure(.invalidUnicodeEscape)
        }
        value = value << 4 | digit
        position += 1
      }
      return value
    }

    /// Right after the four digits of `\u`.
    mutating func codeUnit(_ unit: UInt32, into text: inout [UInt8]) throws(JSONError) {
      let lastDigit = JSONError(offset: position - 1, reason: .loneSurrogate)
      switch unit {
      case 0xD800...0xDBFF:
        // A high surrogate: `\u` and a low one must follow.
        guard try next() == UInt8(ascii: "\\") else {
          guard options.allowsLoneSurrogates else { throw failure(.loneSurrogate) }
          return emit(scalar: 0xFFFD, into: &text)
        }
        position += 1
        let letter = try next()
        guard letter == UInt8(ascii: "u") else {
          guard options.allowsLoneSurrogates else { throw failure(.loneSurrogate) }
          emit(scalar: 0xFFFD, into: &text)
          return try escape(letter, into: &text)
        }
        position += 1
        let low = try hexQuad()
        if (0xDC00...0xDFFF).contains(low) {
          return emit(scalar: 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), into: &text)
        }
        guard options.allowsLoneSurrogates else {
          throw JSONError(offset: position - 1, reason: .loneSurrogate)
        }
        emit(scalar: 0xFFFD, into: &text)
        try codeUnit(low, into: &text)
      case 0xDC00...0xDFFF:
        guard options.allowsLoneSurrogates else { throw lastDigit }
        emit(scalar: 0xFFFD, into: &text)
      default:
        emit(scalar: unit, into: &text)
      }
    }

    /// At a byte of 0x80 or more: one UTF-8 sequence, by RFC 3629's table of well-formed ones.
    mutating func utf8Sequence(into text: inout [UInt8]) throws(JSONError) {
      let lead = try next()
      let sequences: [(leads: ClosedRange<UInt8>, second: ClosedRange<UInt8>, length: Int)] = [
        (0xC2...0xDF, 0x80...0xBF, 2), (0xE0...0xE0, 0xA0...0xBF, 3), (0xE1...0xEC, 0x80...0xBF, 3),
        (0xED...0xED, 0x80...0x9F, 3), (0xEE...0xEF, 0x80...0xBF, 3), (0xF0...0xF0, 0x90...0xBF, 4),
        (0xF1...0xF3, 0x80...0xBF, 4), (0xF4...0xF4, 0x80...0x8F, 4),
      ]
      guard let sequence = sequences.first(where: { $0.leads.contains(lead) }) else {
        throw failure(.invalidUTF8)
      }
      emit(lead, into: &text)
      position += 1
      for index in 1..<sequence.length {
        let byte = try next()
        guard (index == 1 ? sequence.second : 0x80...0xBF).contains(byte) else { throw failure(.invalidUTF8) }
        emit(byte, into: &text)
        position += 1
      }
    }
  }
}
