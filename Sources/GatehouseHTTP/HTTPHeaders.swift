/// Header fields as parsed: the raw bytes of the head plus one range pair per field, so a
/// parse makes two allocations however many fields there are. Names keep their casing;
/// lookups ignore case. Fields added later are appended to the same byte storage.
public struct HTTPHeaders: Sendable, Hashable {
  @usableFromInline
  struct FieldRange: Sendable, Hashable {
    @usableFromInline var nameStart: Int32
    @usableFromInline var nameEnd: Int32
    @usableFromInline var valueStart: Int32
    @usableFromInline var valueEnd: Int32

    @inlinable
    init(nameStart: Int, nameEnd: Int, valueStart: Int, valueEnd: Int) {
      self.nameStart = Int32(truncatingIfNeeded: nameStart)
      self.nameEnd = Int32(truncatingIfNeeded: nameEnd)
      self.valueStart = Int32(truncatingIfNeeded: valueStart)
      self.valueEnd = Int32(truncatingIfNeeded: valueEnd)
    }
  }

  @usableFromInline var storage: [UInt8]
  @usableFromInline var ranges: [FieldRange]
  /// False only when the parser saw that no Connection field names other fields (the usual
  /// `keep-alive` or `close`, or none): proxies then skip looking for connection options.
  /// Any change to the fields makes it true again.
  public private(set) var mayListConnectionOptions = true

  public init() {
    storage = []
    ranges = []
  }

  /// Builds headers from name/value pairs; values are taken as given (see `HTTPSerializer`
  /// for the check that refuses CR, LF and NUL on the way out).
  public init(_ pairs: [(String, String)]) {
    self.init()
    for (name, value) in pairs { add(name: name, value: value) }
  }

  @usableFromInline
  init(storage: [UInt8], ranges: [FieldRange], mayListConnectionOptions: Bool = true) {
    self.storage = storage
    self.ranges = ranges
    self.mayListConnectionOptions = mayListConnectionOptions
  }

  public var count: Int { ranges.count }

  /// The bytes all fields take written as `name: value\r\n` lines.
  @inlinable
  public var serializedFieldsLength: Int {
    var total = 0
    for r in ranges { total &+= Int(r.nameEnd &- r.nameStart) &+ Int(r.valueEnd &- r.valueStart) &+ 4 }
    return total
  }
  public var isEmpty: Bool { ranges.isEmpty }

  /// The name of field `index`, as sent.
  public func name(at index: Int) -> String {
    let r = ranges[index]
    return String(decoding: storage[Int(r.nameStart)..<Int(r.nameEnd)], as: UTF8.self)
  }

  /// The value of field `index`, without surrounding whitespace.
  public func value(at index: Int) -> String {
    let r = ranges[index]
    return String(decoding: storage[Int(r.valueStart)..<Int(r.valueEnd)], as: UTF8.self)
  }

  public func nameBytes(at index: Int) -> ArraySlice<UInt8> {
    let r = ranges[index]
    return storage[Int(r.nameStart)..<Int(r.nameEnd)]
  }

  public func valueBytes(at index: Int) -> ArraySlice<UInt8> {
    let r = ranges[index]
    return storage[Int(r.valueStart)..<Int(r.valueEnd)]
  }

  /// Case-insensitive name test without building a String.
  public func nameEquals(at index: Int, _ name: String) -> Bool {
    let r = ranges[index]
    let length = Int(r.nameEnd - r.nameStart)
    var name = name
    return name.withUTF8 { wanted in
      guard wanted.count == length else { return false }
      return storage.withUnsafeBufferPointer { bytes in
        var i = 0
        let start = Int(r.nameStart)
        while i < length {
          if ASCII.lower(bytes[start + i]) != ASCII.lower(wanted[i]) { return false }
          i += 1
        }
        return true
      }
    }
  }

  /// Index of the first field named `lowercaseName` (which must be lowercase ASCII),
  /// compared byte by byte without building a String.
  public func firstIndex(lowercaseName: StaticString) -> Int? {
    storage.withUnsafeBufferPointer { bytes in
      for index in ranges.indices {
        let r = ranges[index]
        if ASCII.equalsLowercase(bytes, Int(r.nameStart), Int(r.nameEnd), lowercaseName) { return index }
      }
      return nil
    }
  }

  /// Index of the next field named `lowercaseName` after field `index`, as `firstIndex`.
  public func nextIndex(lowercaseName: StaticString, after index: Int) -> Int? {
    storage.withUnsafeBufferPointer { bytes in
      var next = index + 1
      while next < ranges.count {
        let r = ranges[next]
        if ASCII.equalsLowercase(bytes, Int(r.nameStart), Int(r.nameEnd), lowercaseName) { return next }
        next += 1
      }
      return nil
    }
  }

  /// Whether a field's name starts with `lowercasePrefix` (lowercase ASCII): one pass over
  /// the names, for a family of fields most requests do not carry.
  public func containsName(lowercasePrefix: StaticString) -> Bool {
    let count = lowercasePrefix.utf8CodeUnitCount
    return storage.withUnsafeBufferPointer { bytes in
      for r in ranges where Int(r.nameEnd) - Int(r.nameStart) >= count {
        let start = Int(r.nameStart)
        if ASCII.equalsLowercase(bytes, start, start + count, lowercasePrefix) { return true }
      }
      return false
    }
  }

  /// The bytes of the first field named `lowercaseName` (lowercase ASCII), or nil.
  public func firstValue(lowercaseName: StaticString) -> ArraySlice<UInt8>? {
    firstIndex(lowercaseName: lowercaseName).map { valueBytes(at: $0) }
  }

  /// The first value of the named field, or nil.
  public subscript(name: String) -> String? {
    for index in ranges.indices where nameEquals(at: index, name) { return value(at: index) }
    return nil
  }

  /// Every value of the named field, in order.
  public func values(for name: String) -> [String] {
    ranges.indices.filter { nameEquals(at: $0, name) }.map { value(at: $0) }
  }

  public func contains(_ name: String) -> Bool {
    ranges.indices.contains { nameEquals(at: $0, name) }
  }

  /// Makes room for `fields` more fields of `bytes` more name and value bytes, so adding
  /// them grows neither array step by step.
  public mutating func reserveCapacity(bytes: Int, fields: Int) {
    storage.reserveCapacity(storage.count + bytes)
    ranges.reserveCapacity(ranges.count + fields)
  }

  public mutating func add(name: String, value: String) {
    mayListConnectionOptions = true
    let nameStart = storage.count
    storage.append(contentsOf: name.utf8)
    let nameEnd = storage.count
    storage.append(contentsOf: value.utf8)
    ranges.append(
      FieldRange(nameStart: nameStart, nameEnd: nameEnd, valueStart: nameEnd, valueEnd: storage.count))
  }

  /// Removes every field with this name; the bytes stay in storage until the next copy.
  public mutating func remove(name: String) {
    mayListConnectionOptions = true
    var kept: [FieldRange] = []
    kept.reserveCapacity(ranges.count)
    for index in ranges.indices where !nameEquals(at: index, name) { kept.append(ranges[index]) }
    ranges = kept
  }

  /// Replaces every field with this name by one with the given value.
  public mutating func replaceOrAdd(name: String, value: String) {
    remove(name: name)
    add(name: name, value: value)
  }

  /// Calls `body` with each field's name and value bytes, without copying them.
  @inlinable
  public func withEachField(_ body: (UnsafeBufferPointer<UInt8>, UnsafeBufferPointer<UInt8>) throws -> Void)
    rethrows
  {
    try storage.withUnsafeBufferPointer { bytes in
      for r in ranges {
        try body(
          UnsafeBufferPointer(rebasing: bytes[Int(r.nameStart)..<Int(r.nameEnd)]),
          UnsafeBufferPointer(rebasing: bytes[Int(r.valueStart)..<Int(r.valueEnd)]))
      }
    }
  }

  /// The pairs as Strings, for tests and diagnostics.
  public var pairs: [(name: String, value: String)] {
    ranges.indices.map { (name(at: $0), value(at: $0)) }
  }

  public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
    lhs.count == rhs.count
      && zip(lhs.ranges.indices, rhs.ranges.indices).allSatisfy {
        lhs.nameBytes(at: $0).elementsEqual(rhs.nameBytes(at: $1))
          && lhs.valueBytes(at: $0).elementsEqual(rhs.valueBytes(at: $1))
      }
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(count)
    for index in ranges.indices {
      hasher.combine(nameBytes(at: index).count)
      for byte in nameBytes(at: index) { hasher.combine(byte) }
      for byte in valueBytes(at: index) { hasher.combine(byte) }
    }
  }
}
