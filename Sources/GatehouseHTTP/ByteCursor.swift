/// Writes bytes into memory whose size was worked out beforehand: the head writers add up
/// an upper bound of what they will write, reserve it once in their output array
/// (`[UInt8].appendBytes(upTo:_:)`), then copy each piece with a bounds check and a
/// `memcpy`. Appending piece by piece to an array re-checks uniqueness and capacity on every
/// call, which made head assembly a visible share of a proxied request's CPU time.
public struct ByteCursor: ~Copyable {
  @usableFromInline let base: UnsafeMutablePointer<UInt8>
  @usableFromInline let capacity: Int
  /// Bytes written so far.
  @usableFromInline var written: Int
  public var count: Int { written }

  @inlinable
  init(base: UnsafeMutablePointer<UInt8>, capacity: Int) {
    self.base = base
    self.capacity = capacity
    written = 0
  }

  /// A write past the reserved size is a bug in the caller's bound, never input-dependent
  /// behaviour: the bound is computed from the same lengths that are written.
  @inlinable @inline(__always)
  mutating func reserve(_ length: Int) -> UnsafeMutablePointer<UInt8> {
    precondition(length <= capacity &- written, "ByteCursor: write past the reserved size")
    let at = base + written
    written &+= length
    return at
  }

  @inlinable @inline(__always)
  public mutating func write(_ byte: UInt8) {
    reserve(1).pointee = byte
  }

  @inlinable @inline(__always)
  public mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) {
    guard let source = bytes.baseAddress, bytes.count > 0 else { return }
    reserve(bytes.count).update(from: source, count: bytes.count)
  }

  @inlinable @inline(__always)
  public mutating func write(_ bytes: UnsafeRawBufferPointer) {
    write(bytes.assumingMemoryBound(to: UInt8.self))
  }

  @inlinable @inline(__always)
  public mutating func write(_ literal: StaticString) {
    write(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }

  @inlinable @inline(__always)
  public mutating func write(_ bytes: [UInt8]) {
    bytes.withUnsafeBufferPointer { write($0) }
  }

  @inlinable @inline(__always)
  public mutating func write(_ bytes: ArraySlice<UInt8>) {
    bytes.withUnsafeBufferPointer { write($0) }
  }

  /// The most bytes `writeDecimal` writes (`-9223372036854775808`).
  public static let maxDecimalLength = 20

  /// Writes `value` in decimal: counts the digits, reserves them, fills them in from the end.
  @inlinable
  public mutating func writeDecimal(_ value: Int64) {
    var magnitude = value.magnitude
    var length = value < 0 ? 2 : 1
    var rest = magnitude / 10
    while rest > 0 {
      length &+= 1
      rest /= 10
    }
    let start = reserve(length)
    var at = length
    repeat {
      at &-= 1
      start[at] = UInt8(truncatingIfNeeded: magnitude % 10) &+ 0x30
      magnitude /= 10
    } while magnitude > 0
    if value < 0 { start[0] = 0x2D }
  }
}

extension ByteCursor {
  /// The field that frames a body: `Content-Length` or `Transfer-Encoding: chunked`, nothing
  /// for no body or a close-delimited one, unless `headContentLength` gives the length an
  /// response to HEAD reports for a body it does not carry.
  public mutating func writeFramingField(_ framing: HTTPBodyFraming, headContentLength: Int64? = nil) {
    switch framing {
    case .none:
      if let length = headContentLength {
        write("Content-Length: ")
        writeDecimal(length)
        write("\r\n")
      }
    case .untilClose:
      break
    case .contentLength(let length):
      write("Content-Length: ")
      writeDecimal(length)
      write("\r\n")
    case .chunked:
      write("Transfer-Encoding: chunked\r\n")
    }
  }
}

extension Array where Element == UInt8 {
  /// Appends what `body` writes, at most `bound` bytes, with one capacity check for all of it.
  @inlinable
  public mutating func appendBytes(upTo bound: Int, _ body: (inout ByteCursor) -> Void) {
    append(addingCapacity: bound) { span in
      span.withUnsafeMutableBufferPointer { buffer, initialized in
        var cursor = ByteCursor(
          base: buffer.baseAddress! + initialized, capacity: buffer.count - initialized)
        body(&cursor)
        initialized += cursor.count
      }
    }
  }
}
