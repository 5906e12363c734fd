/// Reading an `Accept-Encoding` request header (RFC 9110 §12.5.3).
public enum AcceptEncoding {
  /// Whether the client accepts a gzip answer: `gzip` (or its alias `x-gzip`) listed with a
  /// weight above zero, or else `*` with a weight above zero. `gzip;q=0` refuses it even when
  /// `*` is listed. A malformed weight counts as zero: identity is always safe to send.
  public static func acceptsGzip<Bytes: Collection<UInt8>>(_ value: Bytes) -> Bool {
    if let answer = value.withContiguousStorageIfAvailable(acceptsGzip(contiguous:)) { return answer }
    return Array(value).withUnsafeBufferPointer(acceptsGzip(contiguous:))
  }

  /// `acceptsGzip` over a String.
  public static func acceptsGzip(_ value: String) -> Bool { acceptsGzip(value.utf8) }

  private static func acceptsGzip(contiguous bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    var gzipWeight: Int?
    var anyWeight: Int?
    var i = 0
    let n = bytes.count
    while i < n {
      // One list element: coding *( OWS ";" OWS parameter ).
      let elementEnd = bytes[i...].firstIndex(of: 0x2C) ?? n
      var parts = bytes[i..<elementEnd].split(separator: 0x3B, omittingEmptySubsequences: false).makeIterator()
      let coding = trim(parts.next() ?? bytes[i..<i])
      var weight = 1000
      while let parameter = parts.next() {
        let parameter = trim(parameter)
        guard parameter.count >= 2, parameter.first! | 0x20 == 0x71, parameter[parameter.startIndex + 1] == 0x3D else {
          continue  // not a weight: ignored
        }
        weight = parseWeight(parameter.dropFirst(2)) ?? 0
      }
      if equalsIgnoringCase(coding, "gzip") || equalsIgnoringCase(coding, "x-gzip") {
        if gzipWeight == nil { gzipWeight = weight }
      } else if coding.count == 1 && coding.first == 0x2A {
        if anyWeight == nil { anyWeight = weight }
      }
      i = elementEnd + 1
    }
    if let gzipWeight { return gzipWeight > 0 }
    return (anyWeight ?? 0) > 0
  }

  /// A qvalue in thousandths: `0`, `0.5`, `0.001`, `1`, `1.000`; nil when malformed.
  private static func parseWeight(_ text: Slice<UnsafeBufferPointer<UInt8>>) -> Int? {
    guard let first = text.first, first == 0x30 || first == 0x31 else { return nil }
    var thousandths = first == 0x31 ? 1000 : 0
    let rest = text.dropFirst()
    if rest.isEmpty { return thousandths }
    guard rest.first == 0x2E, rest.count <= 4 else { return nil }
    var scale = 100
    for digit in rest.dropFirst() {
      guard digit &- 0x30 < 10 else { return nil }
      thousandths += Int(digit &- 0x30) * scale
      scale /= 10
    }
    return thousandths <= 1000 ? thousandths : nil
  }

  private static func trim(_ text: Slice<UnsafeBufferPointer<UInt8>>) -> Slice<UnsafeBufferPointer<UInt8>> {
    var text = text
    while let first = text.first, first == 0x20 || first == 0x09 { text = text.dropFirst() }
    while let last = text.last, last == 0x20 || last == 0x09 { text = text.dropLast() }
    return text
  }

  private static func equalsIgnoringCase(_ text: Slice<UnsafeBufferPointer<UInt8>>, _ word: StaticString) -> Bool {
    guard text.count == word.utf8CodeUnitCount else { return false }
    var k = 0
    for byte in text {
      let lower = byte &- 0x41 < 26 ? byte | 0x20 : byte
      if lower != word.utf8Start[k] { return false }
      k += 1
    }
    return true
  }
}
