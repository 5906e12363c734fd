import CGatehouseHiredis

/// Encodes a command as a RESP2 array of bulk strings, the one form Redis accepts from clients.
///
/// Why not `redisFormatCommandArgv`: it wants a C pointer per argument and returns a malloc'd
/// copy, so a 1 MiB cached answer would be copied twice and freed once per write; here the
/// arguments are copied once, straight into the bytes the connection sends. The tests check
/// that both encodings are byte for byte the same.
public enum RedisCommandEncoder {
  public static func encode(_ arguments: [[UInt8]]) -> [UInt8] {
    var size = 1 + 20 + 2
    for argument in arguments { size += 1 + 20 + 2 + argument.count + 2 }
    var output: [UInt8] = []
    output.reserveCapacity(size)
    output.append(UInt8(ascii: "*"))
    appendDecimal(arguments.count, to: &output)
    output.append(contentsOf: crlf)
    for argument in arguments {
      output.append(UInt8(ascii: "$"))
      appendDecimal(argument.count, to: &output)
      output.append(contentsOf: crlf)
      output.append(contentsOf: argument)
      output.append(contentsOf: crlf)
    }
    return output
  }

  /// Strings are sent as their UTF-8 bytes.
  public static func encode(_ arguments: [String]) -> [UInt8] {
    encode(arguments.map { Array($0.utf8) })
  }

  private static let crlf: [UInt8] = [13, 10]

  private static func appendDecimal(_ value: Int, to output: inout [UInt8]) {
    precondition(value >= 0)
    if value < 10 {
      output.append(UInt8(ascii: "0") + UInt8(value))
      return
    }
    var digits: [UInt8] = []
    var rest = value
    while rest > 0 {
      digits.append(UInt8(ascii: "0") + UInt8(rest % 10))
      rest /= 10
    }
    output.append(contentsOf: digits.reversed())
  }
}

/// hiredis's incremental RESP reader: bytes in as they arrive, complete replies out, with a
/// bound on how many bytes one reply may take.
///
/// Owns its `redisReader` (created in init, freed in deinit). Not Sendable: it lives on one
/// connection's loop and is replaced, not reused, when that connection is reset, because a
/// reader that reported a protocol error cannot go on.
final class RedisReplyReader {
  enum Next {
    case reply(RedisReply)
    /// More bytes are needed.
    case incomplete
    /// The stream is not RESP (or a reply is over the limit): the connection must be reset.
    case invalid(String)
  }

  private let reader: UnsafeMutablePointer<redisReader>
  let maxReplyBytes: Int
  /// Bytes fed since the last complete reply, which all belong to the one being read.
  private(set) var bytesTowardNextReply = 0

  /// Nil only if hiredis cannot allocate its reader.
  init?(maxReplyBytes: Int) {
    guard let reader = redisReaderCreate() else { return nil }
    self.reader = reader
    self.maxReplyBytes = maxReplyBytes
    // Between replies, keep at most 64 KiB of buffer (hiredis's default is 16 KiB); a large
    // reply's buffer is given back after it.
    gh_redis_reader_set_max_buffer(reader, 64 * 1024)
  }

  deinit {
    redisReaderFree(reader)
  }

  /// Hands bytes to the reader (it copies them). False if the reader already failed.
  func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress, !bytes.isEmpty else { return true }
    bytesTowardNextReply += bytes.count
    return redisReaderFeed(reader, base.assumingMemoryBound(to: CChar.self), bytes.count) == REDIS_OK
  }

  func next() -> Next {
    var object: UnsafeMutableRawPointer?
    guard redisReaderGetReply(reader, &object) == REDIS_OK else {
      return .invalid("protocol error: \(String(cString: gh_redis_reader_error(reader)))")
    }
    guard let object else {
      if bytesTowardNextReply > maxReplyBytes {
        return .invalid("a reply larger than \(maxReplyBytes) bytes")
      }
      return .incomplete
    }
    let reply = object.assumingMemoryBound(to: redisReply.self)
    defer { freeReplyObject(object) }
    bytesTowardNextReply = Int(gh_redis_reader_unread(reader))
    return .reply(Self.convert(UnsafePointer(reply)))
  }

  /// hiredis limits nesting to a depth of 7, so the recursion is bounded.
  static func convert(_ reply: UnsafePointer<redisReply>) -> RedisReply {
    let value = reply.pointee
    switch value.type {
    case REDIS_REPLY_STRING:
      return .bulk(bytes(value.str, value.len))
    case REDIS_REPLY_STATUS:
      return .status(String(decoding: bytes(value.str, value.len), as: UTF8.self))
    case REDIS_REPLY_ERROR:
      return .error(String(decoding: bytes(value.str, value.len), as: UTF8.self))
    case REDIS_REPLY_INTEGER:
      return .integer(Int64(value.integer))
    case REDIS_REPLY_ARRAY:
      var elements: [RedisReply] = []
      elements.reserveCapacity(value.elements)
      for index in 0..<value.elements {
        guard let element = gh_redis_reply_element(reply, index) else {
          elements.append(.null)
          continue
        }
        elements.append(convert(element))
      }
      return .array(elements)
    default:  // REDIS_REPLY_NIL, the only type left in RESP2
      return .null
    }
  }

  private static func bytes(_ text: UnsafeMutablePointer<CChar>?, _ count: Int) -> [UInt8] {
    guard let text, count > 0 else { return [] }
    return Array(UnsafeRawBufferPointer(start: text, count: count))
  }
}
