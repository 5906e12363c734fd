/// Byte comparisons of field names and tokens, shared by the proxy writers, the cache rules
/// and the HTTP/2 stream (which drops connection-specific fields).
package enum ASCIIBytes {
  /// `bytes` are `lowercase` (lowercase ASCII) in any case.
  @inline(__always)
  package static func equalsLowercase(_ bytes: UnsafeBufferPointer<UInt8>, _ lowercase: StaticString) -> Bool {
    guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
    let expected = lowercase.utf8Start
    for i in 0..<bytes.count {
      let byte = bytes[i]
      if (byte &- 0x41 < 26 ? byte | 0x20 : byte) != expected[i] { return false }
    }
    return true
  }
}
