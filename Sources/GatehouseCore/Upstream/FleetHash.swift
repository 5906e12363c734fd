/// Deterministic 64-bit hashing for fleets: the same bytes give the same value in every
/// process, on every machine and in every build. Swift's `Hasher` is seeded anew in each
/// process, so it cannot be used: gateways in front of one fleet (and one gateway across a
/// restart) must agree on which endpoint a hash key goes to, or every restart would move
/// every client's key.
enum FleetHash {
  /// FNV-1a over the bytes, then a 64-bit finalizer so that keys differing in one bit (two
  /// neighbouring client addresses, say) land far apart.
  static func hash(_ bytes: some Sequence<UInt8>) -> UInt64 {
    var state: UInt64 = 0xCBF2_9CE4_8422_2325
    for byte in bytes {
      state ^= UInt64(byte)
      state &*= 0x0000_0100_0000_01B3
    }
    return mix(state)
  }

  /// The hash of a string's UTF-8 bytes (an endpoint address, a path, a header value).
  static func hash(_ string: String) -> UInt64 {
    hash(string.utf8)
  }

  /// The finalizer of SplitMix64 (Stafford's variant 13 of MurmurHash3's fmix64): every
  /// input bit flips each output bit with probability about 1/2.
  @inline(__always)
  static func mix(_ value: UInt64) -> UInt64 {
    var z = value
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  /// A hash mapped onto the open interval (0, 1): its top 52 bits, centred in their step,
  /// so the result is never 0 (whose logarithm is -infinity) nor 1 (whose is 0). 52 and not
  /// 53: with 53 bits the half step of the top value is not representable and rounds to 1.
  @inline(__always)
  static func unitInterval(_ value: UInt64) -> Double {
    (Double(value >> 12) + 0.5) * 0x1p-52
  }

  /// The score of an endpoint for a key in weighted rendezvous hashing: `-weight / ln(u)`
  /// with `u` the hash of the key and the endpoint's identity in (0, 1). The endpoint with
  /// the highest score takes the key. `-ln(u)` is an exponential variable, so the winner is
  /// endpoint i with probability weight_i / total weight, and removing an endpoint moves
  /// only the keys it had won (every other score stays the same).
  @inline(__always)
  static func rendezvousScore(key: UInt64, identity: UInt64, weight: Int) -> Double {
    let u = unitInterval(mix(key ^ identity))
    return Double(weight) / -naturalLog(u)
  }

  /// ln(x) for a positive finite x, with the standard library only (the standard library
  /// has no logarithm without Foundation or Glibc). Accurate to a few ulps, and the same
  /// on every machine: plain IEEE arithmetic with a fixed number of steps, where libm's
  /// `log` may differ in the last bit between C libraries, and rendezvous scores must not.
  static func naturalLog(_ x: Double) -> Double {
    precondition(x > 0 && x.isFinite, "naturalLog needs a positive finite number")
    // x = m × 2^e with m in [1, 2) (subnormal numbers are normalized by `significand`).
    var m = x.significand
    var e = Double(x.exponent)
    // Centre m on 1 (m in [√½, √2)) so the series below converges fast.
    if m > 1.414_213_562_373_095_1 {
      m *= 0.5
      e += 1
    }
    // ln(m) = 2 atanh(s) = 2 (s + s³/3 + s⁵/5 + …) with s = (m - 1) / (m + 1), |s| < 0.172:
    // each term is below 0.03 of the one before, so ten terms reach 1e-17.
    let s = (m - 1) / (m + 1)
    let s2 = s * s
    var power = s
    var sum = s
    var divisor = 3.0
    for _ in 0..<10 {
      power *= s2
      sum += power / divisor
      divisor += 2
    }
    return e * 0.693_147_180_559_945_3 + 2 * sum
  }
}
