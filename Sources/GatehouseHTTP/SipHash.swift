/// SipHash-2-4 (Aumasson and Bernstein), the keyed pseudorandom function request ids are
/// made with, and its 128-bit form, which entity tags are made with. Written out rather than
/// taken from `Hasher`: `Hasher` mixes the process's own seed in and costs a fresh state per
/// use, and an id needs four evaluations on every request. Checked against the reference
/// test vectors (`SipHashTests`).
package enum SipHash {
  /// The 64-bit SipHash-2-4 of `message` under the key `(k0, k1)` (the key's two
  /// little-endian halves).
  static func hash(_ message: UnsafeRawBufferPointer, k0: UInt64, k1: UInt64) -> UInt64 {
    var state = State(k0: k0, k1: k1)
    state.absorb(message)
    return state.finish()
  }

  /// The 128-bit SipHash-2-4 of `message` under the key `(k0, k1)`: its two little-endian
  /// halves, in output order.
  package static func hash128(_ message: UnsafeRawBufferPointer, k0: UInt64, k1: UInt64) -> (UInt64, UInt64) {
    var state = State(k0: k0, k1: k1)
    state.v1 ^= 0xee
    state.absorb(message)
    state.v2 ^= 0xee
    for _ in 0..<4 { state.round() }
    let first = state.v0 ^ state.v1 ^ state.v2 ^ state.v3
    state.v1 ^= 0xdd
    for _ in 0..<4 { state.round() }
    return (first, state.v0 ^ state.v1 ^ state.v2 ^ state.v3)
  }

  /// `hash` of a message of at most 7 bytes, given as the low `length` bytes of `message`
  /// (little-endian): one block, no buffer.
  @inline(__always)
  static func hash(short message: UInt64, length: Int, k0: UInt64, k1: UInt64) -> UInt64 {
    var state = State(k0: k0, k1: k1)
    state.compress(message | UInt64(truncatingIfNeeded: length) << 56)
    return state.finish()
  }

  struct State {
    var v0: UInt64
    var v1: UInt64
    var v2: UInt64
    var v3: UInt64

    @inline(__always)
    init(k0: UInt64, k1: UInt64) {
      // "somepseudorandomlygeneratedbytes", the algorithm's constants.
      v0 = k0 ^ 0x736f_6d65_7073_6575
      v1 = k1 ^ 0x646f_7261_6e64_6f6d
      v2 = k0 ^ 0x6c79_6765_6e65_7261
      v3 = k1 ^ 0x7465_6462_7974_6573
    }

    @inline(__always)
    mutating func round() {
      v0 &+= v1
      v1 = v1.rotatedLeft(13) ^ v0
      v0 = v0.rotatedLeft(32)
      v2 &+= v3
      v3 = v3.rotatedLeft(16) ^ v2
      v0 &+= v3
      v3 = v3.rotatedLeft(21) ^ v0
      v2 &+= v1
      v1 = v1.rotatedLeft(17) ^ v2
      v2 = v2.rotatedLeft(32)
    }

    /// The whole message: its 8-byte blocks, then the last one with the length in its top
    /// byte.
    @inline(__always)
    mutating func absorb(_ message: UnsafeRawBufferPointer) {
      var offset = 0
      while message.count - offset >= 8 {
        compress(message.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian)
        offset += 8
      }
      var last = UInt64(truncatingIfNeeded: message.count) << 56
      for index in 0..<(message.count - offset) {
        last |= UInt64(message[offset + index]) << (8 * UInt64(index))
      }
      compress(last)
    }

    /// One 8-byte block: two rounds.
    @inline(__always)
    mutating func compress(_ block: UInt64) {
      v3 ^= block
      round()
      round()
      v0 ^= block
    }

    /// Four finalization rounds.
    @inline(__always)
    mutating func finish() -> UInt64 {
      v2 ^= 0xff
      round()
      round()
      round()
      round()
      return v0 ^ v1 ^ v2 ^ v3
    }
  }
}

extension UInt64 {
  @inline(__always)
  fileprivate func rotatedLeft(_ count: UInt64) -> UInt64 {
    self << count | self >> (64 - count)
  }
}
