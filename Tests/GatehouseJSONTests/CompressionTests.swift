import Testing

@testable import GatehouseCompression

@Suite struct GzipTests {
  /// `gzip.compress(b"hello, gzip\n", mtime=0)` from Python: a stream zlib did not write here.
  static let helloFixture: [UInt8] = [
    0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xCB, 0x48, 0xCD, 0xC9, 0xC9, 0xD7, 0x51, 0x48,
    0xAF, 0xCA, 0x2C, 0xE0, 0x02, 0x00, 0x86, 0x1F, 0x82, 0xA4, 0x0C, 0x00, 0x00, 0x00,
  ]

  static func sampleText(_ size: Int) -> [UInt8] {
    var generator = SplitMix64(seed: 42)
    var out: [UInt8] = []
    let words = [#"{"id":"#, #","name":"user"#, #"","active":true},"#, "lorem ", "ipsum ", "\n"]
    while out.count < size {
      out.append(contentsOf: words.randomElement(using: &generator)!.utf8)
      out.append(contentsOf: String(generator.next() % 1000).utf8)
    }
    return Array(out.prefix(size))
  }

  static func randomBytes(_ size: Int) -> [UInt8] {
    var generator = SplitMix64(seed: 7)
    return (0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
  }

  @Test func decodesForeignFixture() throws {
    #expect(try GzipDecoder.decode(Self.helloFixture) == Array("hello, gzip\n".utf8))
  }

  @Test(arguments: [0, 1, 5, 6, 9])
  func roundTripsAtEveryLevel(_ level: Int) throws {
    for input in [[], Array("x".utf8), Self.sampleText(100_000), Self.randomBytes(70_000)] {
      let compressed = try GzipEncoder.encode(input, level: level)
      #expect(compressed.prefix(2) == [0x1F, 0x8B])
      #expect(try GzipDecoder.decode(compressed) == input)
    }
  }

  @Test func encoderIsReusable() throws {
    let encoder = try GzipEncoder()
    let input = Self.sampleText(20_000)
    var first: [UInt8] = []
    var second: [UInt8] = [0xAA]
    try encoder.encode(input, into: &first)
    try encoder.encode(input, into: &second)
    #expect(second.first == 0xAA)
    #expect(Array(second.dropFirst()) == first)
    #expect(first.count < input.count / 2)
  }

  @Test func streamingDecodeAtEverySplitPoint() throws {
    let input = Self.sampleText(3_000)
    let compressed = try GzipEncoder.encode(input)
    for split in 0...compressed.count {
      let decoder = try GzipDecoder()
      var output: [UInt8] = []
      try decoder.decode(Array(compressed[..<split]), into: &output)
      try decoder.decode(Array(compressed[split...]), into: &output)
      try decoder.finish()
      #expect(output == input, "split at \(split)")
    }
  }

  @Test func streamingDecodeInRandomPieces() throws {
    let input = Self.sampleText(2_000_000)
    let compressed = try GzipEncoder.encode(input, level: 1)
    var generator = SplitMix64(seed: 3)
    let decoder = try GzipDecoder()
    var output: [UInt8] = []
    var position = 0
    while position < compressed.count {
      let end = min(compressed.count, position + 1 + Int(generator.next() % 5000))
      try decoder.decode(Array(compressed[position..<end]), into: &output)
      position = end
    }
    try decoder.finish()
    #expect(output == input)
    #expect(decoder.totalOutput == input.count)
  }

  @Test func concatenatedMembers() throws {
    let stream = try GzipEncoder.encode(Array("first ".utf8)) + Self.helloFixture
    #expect(try GzipDecoder.decode(stream) == Array("first hello, gzip\n".utf8))
  }

  @Test func corruptInput() throws {
    // Not gzip at all.
    #expect(throws: GzipError.corruptData) { try GzipDecoder.decode(Array("{\"plain\":true}".utf8)) }
    // Wrong compression method in the header.
    var badMethod = Self.helloFixture
    badMethod[2] = 0x07
    #expect(throws: GzipError.corruptData) { try GzipDecoder.decode(badMethod) }
    // CRC and length trailer.
    var badCRC = Self.helloFixture
    badCRC[24] ^= 0xFF
    #expect(throws: GzipError.corruptData) { try GzipDecoder.decode(badCRC) }
    var badLength = Self.helloFixture
    badLength[28] ^= 0x01
    #expect(throws: GzipError.corruptData) { try GzipDecoder.decode(badLength) }
    // Deflate data damaged: a reserved block type.
    var compressed = try GzipEncoder.encode(Self.sampleText(50_000))
    compressed[10] = 0xFF
    #expect(throws: GzipError.corruptData) { try GzipDecoder.decode(compressed) }
    // Garbage after the last member.
    #expect(throws: GzipError.corruptData) { try GzipDecoder.decode(Self.helloFixture + Array("trailing".utf8)) }
  }

  @Test func errorsAreSticky() throws {
    let decoder = try GzipDecoder()
    var output: [UInt8] = []
    #expect(throws: GzipError.corruptData) { try decoder.decode(Array("nope".utf8), into: &output) }
    #expect(throws: GzipError.corruptData) { try decoder.decode(Self.helloFixture, into: &output) }
    #expect(throws: GzipError.corruptData) { try decoder.finish() }
  }

  @Test func truncatedInput() throws {
    #expect(throws: GzipError.truncated) { try GzipDecoder.decode([]) }
    for length in [1, 2, 10, 20, Self.helloFixture.count - 1] {
      #expect(throws: GzipError.truncated) { try GzipDecoder.decode(Array(Self.helloFixture.prefix(length))) }
    }
    let large = try GzipEncoder.encode(Self.sampleText(100_000))
    let decoder = try GzipDecoder()
    var output: [UInt8] = []
    try decoder.decode(Array(large.prefix(large.count / 2)), into: &output)
    #expect(!output.isEmpty)
    #expect(throws: GzipError.truncated) { try decoder.finish() }
  }

  @Test func outputLimitStopsABomb() throws {
    let zeros = [UInt8](repeating: 0, count: 20_000_000)
    let bomb = try GzipEncoder.encode(zeros, level: 9)
    #expect(bomb.count < 40_000)
    let decoder = try GzipDecoder(maxOutputBytes: 1_000_000)
    var output: [UInt8] = []
    #expect(throws: GzipError.outputLimitExceeded) { try decoder.decode(bomb, into: &output) }
    #expect(output.count <= 1_000_000)
    #expect(output.capacity < 4_000_000)
  }

  @Test func outputLimitIsExact() throws {
    let input = Self.sampleText(10_000)
    let compressed = try GzipEncoder.encode(input)
    #expect(try GzipDecoder.decode(compressed, maxOutputBytes: 10_000) == input)
    #expect(throws: GzipError.outputLimitExceeded) { try GzipDecoder.decode(compressed, maxOutputBytes: 9_999) }
    #expect(throws: GzipError.outputLimitExceeded) { try GzipDecoder.decode(compressed, maxOutputBytes: 0) }
  }

  @Test func invalidArguments() {
    #expect(throws: GzipError.invalidArgument) { try GzipEncoder(level: 10) }
    #expect(throws: GzipError.invalidArgument) { try GzipEncoder(level: -1) }
    #expect(throws: GzipError.invalidArgument) { try GzipDecoder(maxOutputBytes: -1) }
  }

  @Test func errorsDescribeThemselves() {
    do {
      _ = try GzipDecoder.decode(Array("nope".utf8))
      Issue.record("decoded garbage")
    } catch {
      #expect(error.description.hasPrefix("corrupt gzip data"))
      #expect(!error.detail.isEmpty)
    }
  }
}

@Suite struct AcceptEncodingTests {
  @Test(arguments: [
    ("gzip", true), ("GZIP", true), ("gzip, deflate, br", true), ("deflate, br", false), ("", false),
    ("*", true), ("*;q=0", false), ("gzip;q=0", false), ("gzip;q=0, *", false), ("gzip; q=0.000", false),
    ("gzip;q=0.001", true), ("gzip;q=1.0", true), ("gzip;q=1.000", true), ("gzip;Q=0", false),
    ("br;q=1, gzip;q=0.5", true), ("x-gzip", true), ("identity", false), ("gzip;q=2", false),
    ("gzip;q=0.5000", false), ("gzip;q=", false), ("gzip;q=1.5", false), (" gzip ; q=0.8 ", true),
    ("gzipx", false), ("deflate, *;q=0.1", true), ("*;q=0, gzip", true), ("gzip;level=1", true),
    ("deflate,gzip", true), ("gzip , br", true), ("br;q=0.9,\tgzip;q=0.8", true), (",,gzip,,", true),
    ("identity;q=1, *;q=0", false),
  ])
  func acceptsGzip(_ value: String, _ expected: Bool) {
    #expect(AcceptEncoding.acceptsGzip(value) == expected, "\(value)")
    #expect(AcceptEncoding.acceptsGzip(Array(value.utf8)[...]) == expected, "\(value)")
  }
}
