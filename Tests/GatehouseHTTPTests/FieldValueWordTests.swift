import Testing

@testable import GatehouseHTTP

/// The eight-bytes-a-step test of a field value (`ASCII.allPlainValueBytes`) against the
/// byte-by-byte rule it stands for: every byte value in every position, and random words.
@Suite struct FieldValueWordTests {
  /// The byte rule the word test must agree with: a field-value byte, HTAB left to the byte loop.
  static func plain(_ byte: UInt8) -> Bool { ASCII.isFieldValueByte(byte) && byte != ASCII.tab }

  static func word(_ bytes: [UInt8]) -> UInt64 {
    bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
  }

  @Test func everyByteInEveryPositionIsJudgedAsByItself() {
    for position in 0..<8 {
      for value in 0...255 {
        var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 8)
        bytes[position] = UInt8(value)
        #expect(ASCII.allPlainValueBytes(Self.word(bytes)) == Self.plain(UInt8(value)), "0x\(value) at \(position)")
      }
    }
  }

  @Test func randomWordsAgreeWithTheByteRule() {
    var random = SplitMix64(seed: 0x5eed_f1e1d)
    // Bytes drawn mostly from around the edges (controls, space, DEL, 0x80) so both answers come up.
    let edges: [UInt8] = [0x00, 0x09, 0x0A, 0x0D, 0x1F, 0x20, 0x21, 0x7E, 0x7F, 0x80, 0xFF]
    for _ in 0..<200_000 {
      let bytes = (0..<8).map { _ in
        random.next() % 4 == 0 ? edges[Int(random.next() % UInt64(edges.count))] : UInt8(0x20 + random.next() % 0x5F)
      }
      #expect(ASCII.allPlainValueBytes(Self.word(bytes)) == bytes.allSatisfy(Self.plain), "\(bytes)")
    }
  }
}
