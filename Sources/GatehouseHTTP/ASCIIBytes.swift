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

  /// Whether `match` holds for an element of a comma-separated field value (RFC 9110 §5.6.1),
  /// each element without its surrounding spaces and tabs; empty elements are skipped. Stops
  /// at the first match.
  @inline(__always)
  package static func anyListElement(
    _ value: UnsafeBufferPointer<UInt8>, _ match: (UnsafeBufferPointer<UInt8>) -> Bool
  ) -> Bool {
    var start = 0
    while start < value.count {
      var end = start
      while end < value.count && value[end] != 0x2C { end += 1 }
      var low = start
      var high = end
      while low < high && (value[low] == 0x20 || value[low] == 0x09) { low += 1 }
      while high > low && (value[high - 1] == 0x20 || value[high - 1] == 0x09) { high -= 1 }
      if high > low && match(UnsafeBufferPointer(rebasing: value[low..<high])) { return true }
      start = end + 1
    }
    return false
  }

  /// `bytes` start with `lowercase` (lowercase ASCII) in any case: an auth scheme and its
  /// space (`bearer `, `apikey `). No array is made per call.
  @inline(__always)
  package static func startsWithLowercase(_ bytes: some Collection<UInt8>, _ lowercase: StaticString) -> Bool {
    guard bytes.count >= lowercase.utf8CodeUnitCount else { return false }
    var offset = 0
    for byte in bytes.prefix(lowercase.utf8CodeUnitCount) {
      if (byte &- 0x41 < 26 ? byte | 0x20 : byte) != lowercase.utf8Start[offset] { return false }
      offset += 1
    }
    return true
  }
}
