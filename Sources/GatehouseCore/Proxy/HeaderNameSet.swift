/// A set of lowercase header names, bucketed by length so a lookup compares only names of
/// the right size, without hashing or building a String.
public struct HeaderNameSet: Sendable {
  private var buckets: [[[UInt8]]]

  public init<S: Sequence>(_ names: S) where S.Element == String {
    buckets = []
    for name in names { insert(name) }
  }

  public mutating func insert(_ name: String) {
    let lower = Array(name.utf8).map(Self.lower)
    if buckets.count <= lower.count {
      buckets.append(contentsOf: Array(repeating: [], count: lower.count + 1 - buckets.count))
    }
    if !buckets[lower.count].contains(lower) { buckets[lower.count].append(lower) }
  }

  public var isEmpty: Bool { buckets.allSatisfy(\.isEmpty) }

  /// Case-insensitive membership of raw name bytes.
  @inlinable
  public func contains(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    containsLowercased(name)
  }

  @usableFromInline
  func containsLowercased(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    guard name.count < buckets.count else { return false }
    for candidate in buckets[name.count] where Self.equal(name, candidate) { return true }
    return false
  }

  public func contains(_ name: String) -> Bool {
    var name = name
    return name.withUTF8 { contains($0) }
  }

  @inline(__always)
  static func lower(_ byte: UInt8) -> UInt8 { byte &- 0x41 < 26 ? byte | 0x20 : byte }

  @inline(__always)
  static func equal(_ name: UnsafeBufferPointer<UInt8>, _ lowercase: [UInt8]) -> Bool {
    var i = 0
    while i < lowercase.count {
      if lower(name[i]) != lowercase[i] { return false }
      i += 1
    }
    return true
  }
}
