import Testing

@testable import GatehouseHTTP

/// SipHash-2-4 against the reference implementation's vectors: key `00 01 … 0f`, message
/// `00 01 … n-1`.
@Suite struct SipHashTests {
  static let k0: UInt64 = 0x0706_0504_0302_0100
  static let k1: UInt64 = 0x0F0E_0D0C_0B0A_0908
  static let vectors: [(length: Int, hash: UInt64)] = [
    (0, 0x726f_db47_dd0e_0e31), (1, 0x74f8_39c5_93dc_67fd), (2, 0x0d6c_8009_d9a9_4f5a),
    (3, 0x8567_6696_d7fb_7e2d), (4, 0xcf27_94e0_2771_87b7), (5, 0x1876_5564_cd99_a68d),
    (8, 0x93f5_f579_9a93_2462), (15, 0xa129_ca61_49be_45e5),
  ]

  /// The 128-bit form's reference vectors (output bytes in order).
  static let vectors128: [(length: Int, hash: String)] = [
    (0, "a3817f04ba25a8e66df67214c7550293"), (1, "da87c1d86b99af44347659119b22fc45"),
    (2, "8177228da4a45dc7fca38bdef60affe4"), (7, "a1f1ebbed8dbc153c0b84aa61ff08239"),
    (8, "3b62a9ba6258f5610f83e264f31497b4"), (15, "5493e99933b0a8117e08ec0f97cfc3d9"),
    (16, "6ee2a4ca67b054bbfd3315bf85230577"), (63, "5150d1772f50834a503e069a973fbd7c"),
  ]

  @Test func the128BitFormMatchesTheReferenceVectors() {
    for vector in Self.vectors128 {
      let message = (0..<vector.length).map { UInt8($0) }
      let (first, second) = message.withUnsafeBytes { SipHash.hash128($0, k0: Self.k0, k1: Self.k1) }
      var hex = ""
      for word in [first, second] {
        for index in 0..<8 {
          let byte = UInt8(truncatingIfNeeded: word >> (8 * UInt64(index)))
          hex += (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }
      }
      #expect(hex == vector.hash, "length \(vector.length)")
    }
  }

  @Test func matchesTheReferenceVectors() {
    for vector in Self.vectors {
      let message = (0..<vector.length).map { UInt8($0) }
      let hash = message.withUnsafeBytes { SipHash.hash($0, k0: Self.k0, k1: Self.k1) }
      #expect(hash == vector.hash, "length \(vector.length)")
    }
  }

  @Test func theShortFormMatchesTheBufferForm() {
    for vector in Self.vectors where vector.length < 8 {
      var packed: UInt64 = 0
      for index in 0..<vector.length { packed |= UInt64(index) << (8 * UInt64(index)) }
      #expect(SipHash.hash(short: packed, length: vector.length, k0: Self.k0, k1: Self.k1) == vector.hash)
    }
  }
}
