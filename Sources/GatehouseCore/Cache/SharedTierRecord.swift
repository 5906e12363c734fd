import GatehouseStore

/// A stored answer as the shared tier keeps it: a small versioned binary record, written by
/// one replica and read by any other, so the parser treats every byte as hostile (another
/// program may write under the prefix, a server may hand back garbage). What it decodes is
/// then held to the store's own rules (`StoreEntryRules.refusal(ofShared:)`).
///
/// Layout, big-endian: `"GH"`, version `2`, flags (bit 0: sealed with `store.secret_key`), then
/// the payload, sealed or not: the cache key id it was written under (length u8, id), status
/// (u16), stored_at in ms since the epoch (i64), header count (u16), each header as name length
/// (u16), name, value length (u32), value, then body length (u32) and body. Nothing may
/// follow. Why not JSON: bodies are bytes, and the read path must be bounded and cheap.
///
/// The id binds a record to its key: one copied or renamed to another key (another path,
/// another user's entry) is refused. A sealed record was bound already (the id is the
/// seal's additional data) and carries it all the same, so one layout serves both. Version
/// 1 records (no id) are refused as `unknownVersion`: a miss, written again by the next
/// answer stored.
enum SharedTierRecord {
  static let magic: [UInt8] = [0x47, 0x48]
  static let version: UInt8 = 2
  static let sealedFlag: UInt8 = 1
  /// Bounds the parser holds whatever the record claims.
  static let maxHeaders = 256
  static let maxNameBytes = 256
  static let maxValueBytes = 64 << 10
  /// Cache key ids are 64 hex digits; anything up to a length byte's worth is read.
  static let maxIDBytes = 255

  /// The record for `answer` under `id`; nil when sealing fails or the id is too long.
  static func encode(_ answer: StoredAnswer, id: String, sealer: SharedRecordSealer?) -> [UInt8]? {
    let idBytes = Array(id.utf8)
    guard idBytes.count <= maxIDBytes else { return nil }
    var payload: [UInt8] = []
    payload.reserveCapacity(answer.body.count + 64 + idBytes.count + answer.headers.count * 32)
    payload.append(UInt8(idBytes.count))
    payload += idBytes
    append(UInt64(UInt16(clamping: answer.status)), bytes: 2, to: &payload)
    append(UInt64(bitPattern: answer.storedAtMs), bytes: 8, to: &payload)
    let headers = answer.headers.prefix(maxHeaders)
    append(UInt64(headers.count), bytes: 2, to: &payload)
    for (name, value) in headers {
      let nameBytes = Array(name.utf8.prefix(maxNameBytes))
      let valueBytes = Array(value.utf8.prefix(maxValueBytes))
      append(UInt64(nameBytes.count), bytes: 2, to: &payload)
      payload += nameBytes
      append(UInt64(valueBytes.count), bytes: 4, to: &payload)
      payload += valueBytes
    }
    append(UInt64(answer.body.count), bytes: 4, to: &payload)
    payload += answer.body
    var record = magic + [version, sealer == nil ? 0 : sealedFlag]
    if let sealer {
      guard let sealed = sealer.seal(payload, id: id) else { return nil }
      record += sealed
    } else {
      record += payload
    }
    return record
  }

  /// Why a record was refused (for the `result` of a lookup and tests).
  enum Refusal: Error, Equatable {
    case notARecord
    case unknownVersion
    /// Sealed and no key, not sealed and a key is set, or the seal does not verify.
    case seal
    /// Written under another key (copied or renamed here).
    case otherKey
    case malformed

    /// The `reason` label of `gatehouse_shared_records_refused_total` and of the log line.
    var label: String {
      switch self {
      case .notARecord, .malformed: "record"
      case .unknownVersion: "version"
      case .seal: "seal"
      case .otherKey: "key"
      }
    }
  }

  /// The answer in `bytes`, or why not. Bounded: at most `maxBytes` are looked at, every
  /// length is checked against what is left, and nothing traps.
  static func decode(_ bytes: [UInt8], id: String, sealer: SharedRecordSealer?, maxBytes: Int) -> Result<
    StoredAnswer, Refusal
  > {
    guard bytes.count >= 4, bytes.count <= maxBytes + 4 + SharedRecordSealer.overhead, bytes[0] == magic[0],
      bytes[1] == magic[1]
    else { return .failure(.notARecord) }
    guard bytes[2] == version else { return .failure(.unknownVersion) }
    let sealed = bytes[3] == sealedFlag
    guard bytes[3] & ~sealedFlag == 0 else { return .failure(.malformed) }
    // A record written without the secret is not read by a replica that has one (and the
    // other way round): a secret means the operator wants only sealed answers served.
    let payload: [UInt8]
    switch (sealed, sealer) {
    case (true, let sealer?):
      guard let opened = sealer.open(Array(bytes[4...]), id: id) else { return .failure(.seal) }
      payload = opened
    case (false, nil):
      payload = Array(bytes[4...])
    case (true, nil), (false, _?):
      return .failure(.seal)
    }
    var reader = Reader(bytes: payload)
    guard let idLength = reader.integer(1), let writtenID = reader.bytes(idLength) else { return .failure(.malformed) }
    guard writtenID.elementsEqual(id.utf8) else { return .failure(.otherKey) }
    // Only what the store keeps (2xx): a 1xx or an error served as a stored answer would break
    // the client's framing or stand for a good answer. (The rest of the store's rules are
    // `StoreEntryRules.refusal(ofShared:)`'s, which know the route.)
    // stored_at is a time this gateway could have written: from the epoch to the year 10000.
    // Anything else is no answer of ours, and ages worked out from it could overflow.
    guard let status = reader.integer(2), (200...299).contains(status), let storedAt = reader.integer(8),
      (0...Self.latestStoredAtMs).contains(storedAt), let headerCount = reader.integer(2), headerCount <= maxHeaders
    else { return .failure(.malformed) }
    var headers: StoredHeaders = []
    headers.reserveCapacity(headerCount)
    for _ in 0..<headerCount {
      guard let nameLength = reader.integer(2), nameLength > 0, nameLength <= maxNameBytes,
        let name = reader.text(nameLength), name.utf8.allSatisfy(isTokenByte),
        let valueLength = reader.integer(4), valueLength <= maxValueBytes, let value = reader.text(valueLength),
        !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 })
      else { return .failure(.malformed) }
      headers.append((name, value))
    }
    guard let bodyLength = reader.integer(4), let body = reader.bytes(bodyLength), reader.atEnd else {
      return .failure(.malformed)
    }
    return .success(
      StoredAnswer(status: status, headers: headers, body: body, storedAtMs: Int64(storedAt)))
  }

  /// 9999-12-31T23:59:59.999Z in milliseconds since the epoch.
  static let latestStoredAtMs = 253_402_300_799_999

  private static func append(_ value: UInt64, bytes count: Int, to output: inout [UInt8]) {
    for index in stride(from: count - 1, through: 0, by: -1) {
      output.append(UInt8(truncatingIfNeeded: value >> (UInt64(index) * 8)))
    }
  }

  /// RFC 9110 field-name characters: a header name from a record never smuggles a line.
  private static func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"):
      true
    default:
      "!#$%&'*+-.^_`|~".utf8.contains(byte)
    }
  }

  private struct Reader {
    let bytes: [UInt8]
    var offset = 0

    var atEnd: Bool { offset == bytes.count }

    /// A big-endian unsigned integer of `count` bytes (at most 8), as an Int when it fits.
    mutating func integer(_ count: Int) -> Int? {
      guard count <= bytes.count - offset else { return nil }
      var value: UInt64 = 0
      for byte in bytes[offset..<offset + count] { value = value << 8 | UInt64(byte) }
      offset += count
      // stored_at is an i64 carried as its bit pattern; lengths must fit an Int anyway.
      return Int(bitPattern: UInt(value))
    }

    mutating func bytes(_ count: Int) -> [UInt8]? {
      guard count >= 0, count <= bytes.count - offset else { return nil }
      defer { offset += count }
      return Array(bytes[offset..<offset + count])
    }

    mutating func text(_ count: Int) -> String? {
      guard let raw = bytes(count) else { return nil }
      return String(validating: raw, as: UTF8.self)
    }
  }
}
