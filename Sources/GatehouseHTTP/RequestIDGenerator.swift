/// Makes request ids: 32 lowercase hex digits, a random per-generator prefix and a counter
/// that is put through a keyed permutation, so ids are unique across loops and restarts,
/// and one id tells nothing about the next (a client that sees its own cannot guess
/// another's to look it up in the logs or to forge a correlation). The key is drawn once
/// per generator; an id costs four SipHash-2-4 evaluations of a 5-byte message (`SipHash`),
/// no system call.
public struct RequestIDGenerator: Sendable {
  private var counter: UInt64
  /// The random prefix's 16 digits, worked out once.
  private let prefixDigits: (UInt64, UInt64)
  /// The permutation's secret key.
  private let key: (UInt64, UInt64)

  public init<R: RandomNumberGenerator>(using random: inout R) {
    prefixDigits = Self.hexDigits(of: random.next())
    counter = random.next()
    key = (random.next(), random.next())
  }

  public init() {
    var random = SystemRandomNumberGenerator()
    self.init(using: &random)
  }

  public mutating func next() -> [UInt8] {
    counter &+= 1
    // Digits on the stack, then one copy into the array: `Array(repeating:count:)` goes
    // through the standard library's unspecialized allocation entry point, which looks the
    // array's type metadata up in the runtime's cache on every call.
    var digits = (prefixDigits.0, prefixDigits.1, Self.hexDigits(of: Self.permute(counter, key: key)))
    return withUnsafeBytes(of: &digits) { Array($0.assumingMemoryBound(to: UInt8.self)) }
  }

  /// A keyed permutation of 64-bit values: a four-round Feistel network whose round
  /// function is SipHash-2-4 keyed with `key`, of the round's number and the right half.
  /// A permutation, so distinct counters never give the same id; four rounds of a
  /// pseudorandom function make it a strong pseudorandom permutation (Luby–Rackoff).
  static func permute(_ value: UInt64, key: (UInt64, UInt64)) -> UInt64 {
    var left = UInt32(truncatingIfNeeded: value >> 32)
    var right = UInt32(truncatingIfNeeded: value)
    for round in 0..<UInt64(4) {
      let message = round | UInt64(right) << 8
      let output = SipHash.hash(short: message, length: 5, k0: key.0, k1: key.1)
      (left, right) = (right, left ^ UInt32(truncatingIfNeeded: output))
    }
    return UInt64(left) << 32 | UInt64(right)
  }

  /// The 16 lowercase hex digits of `value`, most significant first, as they lie in memory
  /// (little-endian words): eight digits per 32-bit half, computed without a loop or table.
  static func hexDigits(of value: UInt64) -> (UInt64, UInt64) {
    (hexDigits32(UInt32(truncatingIfNeeded: value >> 32)), hexDigits32(UInt32(truncatingIfNeeded: value)))
  }

  @inline(__always)
  static func hexDigits32(_ value: UInt32) -> UInt64 {
    // Spread the eight nibbles into the eight bytes, most significant nibble in the low byte.
    var x = UInt64(value.byteSwapped)
    x = (x | x << 16) & 0x0000_FFFF_0000_FFFF
    x = (x | x << 8) & 0x00FF_00FF_00FF_00FF
    // Each byte now holds two nibbles, high one first in memory order: split them.
    x = ((x & 0x0F0F_0F0F_0F0F_0F0F) << 8) | ((x >> 4) & 0x0F0F_0F0F_0F0F_0F0F)
    // 0–9 → '0'–'9', 10–15 → 'a'–'f' (0x27 = 'a' − '9' − 1), for all bytes at once.
    let letters = ((x &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
    return x &+ 0x3030_3030_3030_3030 &+ letters &* 0x27
  }

  /// A client-sent id is kept only when it is short and plain (letters, digits, `-_.:`),
  /// so it is safe in logs and headers: no space, quote, comma, `;`, `=` or control byte
  /// that could split a field or forge one. `:` is not an RFC 9110 token byte, but it is
  /// kept: it is as harmless in a header value and a JSON string, and tracers write ids
  /// with it (Jaeger's `trace:span:parent:flags`).
  public static func isAcceptable(_ id: some Collection<UInt8>) -> Bool {
    guard !id.isEmpty && id.count <= 128 else { return false }
    for byte in id {
      switch byte {
      case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x5F, 0x2E, 0x3A: continue
      default: return false
      }
    }
    return true
  }
}
