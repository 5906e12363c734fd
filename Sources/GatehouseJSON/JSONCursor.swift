/// Moves over the bytes of an already validated document without building anything: skips
/// whitespace, strings and whole values, and compares keys. Every read is bounds-checked, so
/// bytes that were not validated give a wrong answer (nil) rather than a crash.
struct JSONCursor {
  let p: UnsafePointer<UInt8>
  let n: Int

  init?(_ bytes: UnsafeRawBufferPointer) {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return nil }
    p = base.assumingMemoryBound(to: UInt8.self)
    n = bytes.count
  }

  /// The byte at `i`, or 0 (which matches nothing JSON cares about) past the end.
  @inline(__always)
  func byte(_ i: Int) -> UInt8 { i < n ? p[i] : 0 }

  @inline(__always)
  func skipWhitespace(_ start: Int) -> Int {
    var i = start
    while i < n && JSONScanner.isWhitespace(p[i]) { i &+= 1 }
    return i
  }

  /// `start` is at an opening quote. Returns the index after the closing quote and whether
  /// the string has escapes, or nil when it is not terminated.
  @inline(__always)
  func stringEnd(_ start: Int) -> (end: Int, hasEscapes: Bool)? {
    var i = start &+ 1
    var hasEscapes = false
    let ones: UInt64 = 0x0101_0101_0101_0101
    while true {
      // Eight bytes at a time while neither `"` nor `\` appears.
      while i &+ 8 <= n {
        let word = UInt64(littleEndian: UnsafeRawPointer(p + i).loadUnaligned(as: UInt64.self))
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let mask = ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash) & (ones &* 0x80)
        if mask != 0 {
          i &+= mask.trailingZeroBitCount &>> 3
          break
        }
        i &+= 8
      }
      while i < n && p[i] != 0x22 && p[i] != 0x5C { i &+= 1 }
      guard i < n else { return nil }
      if p[i] == 0x22 { return (i &+ 1, hasEscapes) }
      hasEscapes = true
      i &+= 2  // the escaped byte is never a quote that ends the string
    }
  }

  /// `start` is at the first byte of a value. Returns the index after it, or nil.
  func valueEnd(_ start: Int) -> Int? {
    guard start < n else { return nil }
    switch p[start] {
    case 0x22:
      return stringEnd(start)?.end
    case 0x7B, 0x5B:
      return containerEnd(start)
    default:
      // A number or literal runs to the next delimiter.
      var i = start
      while i < n {
        switch p[i] {
        case 0x2C, 0x5D, 0x7D, 0x20, 0x0A, 0x0D, 0x09: return i == start ? nil : i
        default: i &+= 1
        }
      }
      return i == start ? nil : i
    }
  }

  /// `start` is at `{` or `[`. Counts brackets, skipping strings, to the matching close.
  func containerEnd(_ start: Int) -> Int? {
    var depth = 0
    var i = start
    while i < n {
      switch p[i] {
      case 0x22:
        guard let string = stringEnd(i) else { return nil }
        i = string.end
      case 0x7B, 0x5B:
        depth &+= 1
        i &+= 1
      case 0x7D, 0x5D:
        depth &-= 1
        i &+= 1
        if depth == 0 { return i }
      default:
        i &+= 1
      }
    }
    return nil
  }

  /// Calls `body` with each member of the object whose `{` is at `start`: the key's content
  /// range (inside the quotes), whether it has escapes, and the index of the value. `body`
  /// returns false to stop. Returns false when the object is malformed.
  @discardableResult
  func forEachMember(
    ofObjectAt start: Int, _ body: (_ key: Range<Int>, _ keyHasEscapes: Bool, _ value: Int) -> Bool
  ) -> Bool {
    guard byte(start) == 0x7B else { return false }
    var i = skipWhitespace(start &+ 1)
    if byte(i) == 0x7D { return true }
    while true {
      let keyStart = i
      guard byte(i) == 0x22, let key = stringEnd(i) else { return false }
      i = skipWhitespace(key.end)
      guard byte(i) == 0x3A else { return false }
      let value = skipWhitespace(i &+ 1)
      if !body((keyStart &+ 1)..<(key.end &- 1), key.hasEscapes, value) { return true }
      guard let valueEnd = valueEnd(value) else { return false }
      i = skipWhitespace(valueEnd)
      switch byte(i) {
      case 0x2C: i = skipWhitespace(i &+ 1)
      case 0x7D: return true
      default: return false
      }
    }
  }

  /// The index of element `index` of the array whose `[` is at `start`, or nil.
  func element(_ index: Int, ofArrayAt start: Int) -> Int? {
    guard byte(start) == 0x5B else { return nil }
    var i = skipWhitespace(start &+ 1)
    if byte(i) == 0x5D { return nil }
    var position = 0
    while true {
      if position == index { return i }
      guard let end = valueEnd(i) else { return nil }
      i = skipWhitespace(end)
      guard byte(i) == 0x2C else { return nil }
      i = skipWhitespace(i &+ 1)
      position &+= 1
    }
  }

  /// Whether the key content `key` (inside the quotes) equals `name` once unescaped. Without
  /// escapes this is a byte compare; with them the key is decoded on the fly, still without
  /// allocating.
  func keyEquals(_ key: Range<Int>, hasEscapes: Bool, _ name: UnsafeBufferPointer<UInt8>) -> Bool {
    if !hasEscapes {
      guard key.count == name.count else { return false }
      var i = 0
      while i < name.count {
        if p[key.lowerBound &+ i] != name[i] { return false }
        i &+= 1
      }
      return true
    }
    var matched = 0
    let decodedFully = decodeString(key) { byte in
      guard matched < name.count, name[matched] == byte else { return false }
      matched &+= 1
      return true
    }
    return decodedFully && matched == name.count
  }

  /// Unescapes the string content `range` (inside the quotes), passing each UTF-8 byte to
  /// `emit`, which returns false to stop. A lone surrogate escape becomes U+FFFD. Returns
  /// false when stopped early or when an escape is malformed.
  func decodeString(_ range: Range<Int>, _ emit: (UInt8) -> Bool) -> Bool {
    var i = range.lowerBound
    let end = min(range.upperBound, n)
    while i < end {
      let c = p[i]
      if c != 0x5C {
        guard emit(c) else { return false }
        i &+= 1
        continue
      }
      guard i &+ 1 < end else { return false }
      let escaped = p[i &+ 1]
      i &+= 2
      let plain: UInt8
      switch escaped {
      case 0x22, 0x5C, 0x2F: plain = escaped
      case 0x62: plain = 0x08
      case 0x66: plain = 0x0C
      case 0x6E: plain = 0x0A
      case 0x72: plain = 0x0D
      case 0x74: plain = 0x09
      case 0x75:
        guard let unit = hexQuad(i, end) else { return false }
        i &+= 4
        var scalar = unit
        if unit & 0xFC00 == 0xD800, byte(i) == 0x5C, byte(i &+ 1) == 0x75, let low = hexQuad(i &+ 2, end),
          low & 0xFC00 == 0xDC00
        {
          scalar = 0x10000 &+ ((unit &- 0xD800) &<< 10) &+ (low &- 0xDC00)
          i &+= 6
        } else if unit & 0xF800 == 0xD800 {
          scalar = 0xFFFD
        }
        guard Self.emitUTF8(scalar, emit) else { return false }
        continue
      default:
        return false
      }
      guard emit(plain) else { return false }
    }
    return true
  }

  private func hexQuad(_ start: Int, _ end: Int) -> UInt32? {
    guard start &+ 4 <= end else { return nil }
    var value: UInt32 = 0
    for k in 0..<4 {
      let digit = JSONScanner.hexValue(p[start &+ k])
      guard digit < 16 else { return nil }
      value = value &<< 4 | digit
    }
    return value
  }

  private static func emitUTF8(_ scalar: UInt32, _ emit: (UInt8) -> Bool) -> Bool {
    switch scalar {
    case 0..<0x80:
      return emit(UInt8(scalar))
    case 0x80..<0x800:
      return emit(UInt8(0xC0 | scalar &>> 6)) && emit(UInt8(0x80 | scalar & 0x3F))
    case 0x800..<0x10000:
      return emit(UInt8(0xE0 | scalar &>> 12)) && emit(UInt8(0x80 | scalar &>> 6 & 0x3F))
        && emit(UInt8(0x80 | scalar & 0x3F))
    default:
      return emit(UInt8(0xF0 | scalar &>> 18)) && emit(UInt8(0x80 | scalar &>> 12 & 0x3F))
        && emit(UInt8(0x80 | scalar &>> 6 & 0x3F)) && emit(UInt8(0x80 | scalar & 0x3F))
    }
  }
}
