import Foundation

/// RFC 6455 framing for the tests, written out here (independent of the gateway, which
/// never parses frames): the handshake's key and accept value, frames built and read.
enum WebSocketWire {
  enum Opcode: UInt8, Sendable {
    case continuation = 0x0
    case text = 0x1
    case binary = 0x2
    case close = 0x8
    case ping = 0x9
    case pong = 0xA
  }

  struct Frame: Sendable, Equatable {
    var fin: Bool
    var opcode: Opcode
    var payload: [UInt8]
  }

  static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

  /// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64.
  static func makeKey() -> String {
    Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
  }

  /// The `Sec-WebSocket-Accept` a server answers `key` with (RFC 6455 §4.2.2).
  static func accept(for key: String) -> String {
    Data(SHA1Digest.hash(Array((key + guid).utf8))).base64EncodedString()
  }

  /// The client's handshake for `path` (extra fields as given, CRLF-terminated each).
  static func handshake(path: String, key: String, extra: [String] = []) -> String {
    var text = "GET \(path) HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    text += "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n"
    for line in extra { text += line + "\r\n" }
    return text + "\r\n"
  }

  /// One frame; `masked` for a client's (RFC 6455 §5.3), with a random key.
  static func encode(_ opcode: Opcode, _ payload: [UInt8], fin: Bool = true, masked: Bool) -> [UInt8] {
    var out: [UInt8] = [(fin ? 0x80 : 0) | opcode.rawValue]
    let maskBit: UInt8 = masked ? 0x80 : 0
    if payload.count < 126 {
      out.append(maskBit | UInt8(payload.count))
    } else if payload.count <= 0xFFFF {
      out.append(maskBit | 126)
      out.append(UInt8(payload.count >> 8))
      out.append(UInt8(payload.count & 0xFF))
    } else {
      out.append(maskBit | 127)
      for shift in stride(from: 56, through: 0, by: -8) {
        out.append(UInt8((UInt64(payload.count) >> UInt64(shift)) & 0xFF))
      }
    }
    guard masked else { return out + payload }
    let key = (0..<4).map { _ in UInt8.random(in: 0...255) }
    out += key
    out.reserveCapacity(out.count + payload.count)
    for (index, byte) in payload.enumerated() { out.append(byte ^ key[index & 3]) }
    return out
  }

  /// Reads one frame (unmasking a client's); nil at a clean end of stream before it.
  static func readFrame(_ reader: WireReader, deadline: Deadline, maxPayload: Int = 64 << 20) throws -> Frame? {
    var header: [UInt8] = []
    func take(_ count: Int) throws -> [UInt8] {
      var bytes: [UInt8] = []
      bytes.reserveCapacity(count)
      try reader.readBody(length: Int64(count), deadline: deadline) { bytes.append(contentsOf: $0) }
      return bytes
    }
    if reader.bufferedCount == 0 && reader.sawEOF { return nil }
    do {
      header = try take(2)
    } catch TestSocketError.closedEarly {
      return nil
    }
    guard let opcode = Opcode(rawValue: header[0] & 0x0F) else { throw TestSocketError.malformed("opcode") }
    var length = Int(header[1] & 0x7F)
    if length == 126 {
      let bytes = try take(2)
      length = Int(bytes[0]) << 8 | Int(bytes[1])
    } else if length == 127 {
      length = try take(8).reduce(0) { $0 << 8 | Int($1) }
    }
    guard length <= maxPayload else { throw TestSocketError.malformed("frame of \(length) bytes") }
    let key = header[1] & 0x80 != 0 ? try take(4) : nil
    var payload = try take(length)
    if let key { for index in payload.indices { payload[index] ^= key[index & 3] } }
    return Frame(fin: header[0] & 0x80 != 0, opcode: opcode, payload: payload)
  }
}

/// SHA-1 (FIPS 180-4), only for `Sec-WebSocket-Accept` in the tests. Small inputs only.
enum SHA1Digest {
  static func hash(_ message: [UInt8]) -> [UInt8] {
    var h: [UInt32] = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0]
    var data = message + [0x80]
    while data.count % 64 != 56 { data.append(0) }
    let bits = UInt64(message.count) * 8
    for shift in stride(from: 56, through: 0, by: -8) { data.append(UInt8((bits >> UInt64(shift)) & 0xFF)) }
    for block in stride(from: 0, to: data.count, by: 64) {
      var w = [UInt32](repeating: 0, count: 80)
      for i in 0..<16 {
        let j = block + i * 4
        w[i] = UInt32(data[j]) << 24 | UInt32(data[j + 1]) << 16 | UInt32(data[j + 2]) << 8 | UInt32(data[j + 3])
      }
      for i in 16..<80 {
        let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
        w[i] = x << 1 | x >> 31
      }
      var (a, b, c, d, e) = (h[0], h[1], h[2], h[3], h[4])
      for i in 0..<80 {
        let (f, k): (UInt32, UInt32) =
          switch i {
          case 0..<20: ((b & c) | (~b & d), 0x5A82_7999)
          case 20..<40: (b ^ c ^ d, 0x6ED9_EBA1)
          case 40..<60: ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
          default: (b ^ c ^ d, 0xCA62_C1D6)
          }
        let temp = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[i]
        (e, d, c, b, a) = (d, c, b << 30 | b >> 2, a, temp)
      }
      h[0] = h[0] &+ a
      h[1] = h[1] &+ b
      h[2] = h[2] &+ c
      h[3] = h[3] &+ d
      h[4] = h[4] &+ e
    }
    return h.flatMap { value in stride(from: 24, through: 0, by: -8).map { UInt8((value >> UInt32($0)) & 0xFF) } }
  }
}
