/// A set of lowercase header names, looked up by raw name bytes without hashing or building
/// a String. A 64-bit mask of the lengths present turns most lookups (a name of a length no
/// member has) into one bit test; the rest compare against the members of that length,
/// stored back to back in one array, so a lookup touches no nested arrays.
public struct HeaderNameSet: Sendable {
  /// Bit n is set when a member has n bytes; bit 63 stands for 63 bytes and more.
  private var lengthMask: UInt64 = 0
  /// The members' lowercase bytes, back to back.
  private var bytes: [UInt8] = []
  /// Per byte of `bytes`: 0x20 for a letter, 0 otherwise. A name byte OR its mask equals the
  /// member byte exactly when the two are the same letter in either case, or the same other
  /// byte; that lets a lookup compare eight bytes at a time.
  private var caseMasks: [UInt8] = []
  /// Where each member starts in `bytes`, and its length.
  private var members: [(start: Int, count: Int)] = []

  public init<S: Sequence>(_ names: S) where S.Element == String {
    for name in names { insert(name) }
  }

  /// Adds `name` (an empty name is never a field's name and is not added).
  public mutating func insert(_ name: String) {
    guard !name.isEmpty else { return }
    let lower = Array(name.utf8).map(Self.lower)
    let present = lower.withUnsafeBufferPointer { containsLowercased($0) }
    guard !present else { return }
    members.append((bytes.count, lower.count))
    bytes.append(contentsOf: lower)
    caseMasks.append(contentsOf: lower.map { $0 &- 0x61 < 26 ? 0x20 : 0 })
    lengthMask |= Self.lengthBit(lower.count)
  }

  public var isEmpty: Bool { members.isEmpty }

  /// Case-insensitive membership of raw name bytes.
  @inlinable
  public func contains(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    containsLowercased(name)
  }

  /// Inlined: it runs for every field of every answer head, and a call per field costs
  /// more than the comparison.
  @usableFromInline @inline(__always)
  func containsLowercased(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    guard lengthMask & Self.lengthBit(name.count) != 0 else { return false }
    return bytes.withUnsafeBufferPointer { stored in
      caseMasks.withUnsafeBufferPointer { masks in
        members.withUnsafeBufferPointer { members in
          for member in members where member.count == name.count {
            if Self.equal(name, stored.baseAddress! + member.start, masks.baseAddress! + member.start) {
              return true
            }
          }
          return false
        }
      }
    }
  }

  /// Whether `name`, with each `_` read as `-`, equals a member ignoring case: how CGI,
  /// WSGI and PHP backends compare names (both become `HTTP_X_NAME`). Byte by byte and
  /// allocation-free; callers ask only for names that contain `_`, which are rare.
  public func containsReadingUnderscoreAsDash(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    guard lengthMask & Self.lengthBit(name.count) != 0 else { return false }
    return bytes.withUnsafeBufferPointer { stored in
      members.withUnsafeBufferPointer { members in
        for member in members where member.count == name.count {
          var index = 0
          while index < name.count {
            let byte = name[index] == 0x5F ? 0x2D : Self.lower(name[index])
            if byte != stored[member.start + index] { break }
            index += 1
          }
          if index == name.count { return true }
        }
        return false
      }
    }
  }

  public func contains(_ name: String) -> Bool {
    var name = name
    return name.withUTF8 { contains($0) }
  }

  @inline(__always)
  static func lengthBit(_ count: Int) -> UInt64 {
    1 << UInt64(min(count, 63))
  }

  @inline(__always)
  static func lower(_ byte: UInt8) -> UInt8 { byte &- 0x41 < 26 ? byte | 0x20 : byte }

  /// `name` equals the `name.count` bytes at `lowercase` ignoring ASCII case, given the
  /// member's case masks; eight bytes per step, then byte by byte.
  @inline(__always)
  static func equal(
    _ name: UnsafeBufferPointer<UInt8>, _ lowercase: UnsafePointer<UInt8>, _ masks: UnsafePointer<UInt8>
  ) -> Bool {
    guard let source = name.baseAddress else { return true }  // both empty
    let count = name.count
    let member = UnsafeRawPointer(lowercase)
    let mask = UnsafeRawPointer(masks)
    let raw = UnsafeRawPointer(source)
    var i = 0
    while i &+ 8 <= count {
      let word = raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
      if word | mask.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        != member.loadUnaligned(fromByteOffset: i, as: UInt64.self)
      {
        return false
      }
      i &+= 8
    }
    while i < count {
      if source[i] | masks[i] != lowercase[i] { return false }
      i &+= 1
    }
    return true
  }
}
