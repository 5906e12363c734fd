/// Makes request ids: 32 lowercase hex digits, a random per-generator prefix and a counter,
/// so ids are unique across loops and restarts without a random draw per request.
public struct RequestIDGenerator: Sendable {
  private let prefix: UInt64
  private var counter: UInt64

  public init<R: RandomNumberGenerator>(using random: inout R) {
    prefix = random.next()
    counter = random.next() >> 16
  }

  public init() {
    var random = SystemRandomNumberGenerator()
    self.init(using: &random)
  }

  public mutating func next() -> [UInt8] {
    counter &+= 1
    let (prefix, counter) = (prefix, counter)
    // Digits on the stack, then one copy into the array: `Array(repeating:count:)` goes
    // through the standard library's unspecialized allocation entry point, which looks the
    // array's type metadata up in the runtime's cache on every call.
    return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { digits in
      Self.writeHex(prefix, into: digits, at: 0)
      Self.writeHex(counter, into: digits, at: 16)
      return Array(UnsafeBufferPointer(digits))
    }
  }

  static func writeHex(_ value: UInt64, into out: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
    let digits = hexDigits.utf8Start
    for i in 0..<16 {
      out[offset + i] = digits[Int(truncatingIfNeeded: (value >> UInt64(60 - 4 * i)) & 0xF)]
    }
  }

  private static let hexDigits: StaticString = "0123456789abcdef"

  /// A client-sent id is kept only when it is short and plain (letters, digits, `-_.:`),
  /// so it is safe in logs and headers.
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
