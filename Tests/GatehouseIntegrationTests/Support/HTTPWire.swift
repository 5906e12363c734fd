import Foundation

/// One header field as it appeared on the wire (name case kept).
struct HeaderField: Sendable, Equatable {
  let name: String
  let value: String
}

/// A parsed HTTP/1.1 start line and header block, with the raw bytes it came from. Parsing
/// here is deliberately independent of the gateway's own parser.
struct MessageHead: Sendable {
  /// The head as received, up to and including the empty line.
  let raw: [UInt8]
  let startLine: String
  let fields: [HeaderField]

  /// Parses `raw` (which ends with CRLF CRLF).
  init(raw: [UInt8]) throws {
    self.raw = raw
    let text = String(decoding: raw, as: UTF8.self)
    var lines = text.components(separatedBy: "\r\n")
    while lines.last == "" { lines.removeLast() }
    guard let first = lines.first else { throw TestSocketError.malformed("empty head") }
    startLine = first
    fields = try lines.dropFirst().map { line in
      guard let colon = line.firstIndex(of: ":") else { throw TestSocketError.malformed("field line '\(line)'") }
      let name = String(line[..<colon])
      let value = line[line.index(after: colon)...].trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
      return HeaderField(name: name, value: value)
    }
  }

  /// Every value of the field `name` (case-insensitive), in order.
  func values(_ name: String) -> [String] {
    fields.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
  }

  /// The first value of the field `name`, or nil.
  func value(_ name: String) -> String? { values(name).first }

  /// Whether the field `name` is present at all.
  func has(_ name: String) -> Bool { !values(name).isEmpty }

  /// Whether Transfer-Encoding ends with `chunked`.
  var isChunked: Bool {
    values("Transfer-Encoding").joined(separator: ",").lowercased()
      .split(separator: ",").last?.trimmingCharacters(in: .whitespaces) == "chunked"
  }

  /// The Content-Length, when there is one valid value.
  var contentLength: Int64? {
    guard let text = value("Content-Length") else { return nil }
    return Int64(text)
  }
}

/// A function that receives body bytes as they arrive (for bodies too big to keep).
typealias BodySink = (UnsafeRawBufferPointer) throws -> Void

/// Reads HTTP/1.1 messages from a `TestSocket`: heads, bodies framed by length, chunked or
/// until close. Buffered, single-threaded, and every read bounded by a deadline.
final class WireReader {
  let socket: TestSocket
  private var pending: [UInt8] = []
  private var pendingStart = 0
  private var scratch = [UInt8](repeating: 0, count: 64 * 1024)
  /// When set, every byte consumed is appended here (the raw wire bytes of a message).
  var transcript: [UInt8]?
  private(set) var sawEOF = false

  init(socket: TestSocket) {
    self.socket = socket
  }

  /// Bytes received but not yet consumed.
  var bufferedCount: Int { pending.count - pendingStart }

  /// Reads more into the buffer; false at end of stream.
  private func fill(deadline: Deadline) throws -> Bool {
    if sawEOF { return false }
    let count = try scratch.withUnsafeMutableBytes { try socket.receive(into: $0, deadline: deadline) }
    if count == 0 {
      sawEOF = true
      return false
    }
    pending.append(contentsOf: scratch[0..<count])
    return true
  }

  private func consume(_ count: Int) -> ArraySlice<UInt8> {
    let slice = pending[pendingStart..<(pendingStart + count)]
    transcript?.append(contentsOf: slice)
    pendingStart += count
    if pendingStart == pending.count {
      pending.removeAll(keepingCapacity: true)
      pendingStart = 0
    }
    return slice
  }

  /// Reads a head up to and including CRLF CRLF. Nil when the stream ended cleanly before
  /// any byte of it; throws when it ended in the middle.
  func readHead(deadline: Deadline, limit: Int = 1 << 20) throws -> [UInt8]? {
    var searchFrom = pendingStart
    while true {
      if pending.count - pendingStart >= 4 {
        var index = max(searchFrom, pendingStart)
        while index + 3 < pending.count {
          if pending[index] == 13 && pending[index + 1] == 10 && pending[index + 2] == 13 && pending[index + 3] == 10 {
            return Array(consume(index + 4 - pendingStart))
          }
          index += 1
        }
        searchFrom = max(pendingStart, pending.count - 3)
      }
      if pending.count - pendingStart > limit { throw TestSocketError.malformed("head over \(limit) bytes") }
      guard try fill(deadline: deadline) else {
        if bufferedCount == 0 { return nil }
        throw TestSocketError.closedEarly("inside a head after \(bufferedCount) bytes")
      }
    }
  }

  /// Reads one CRLF-terminated line (without the CRLF).
  func readLine(deadline: Deadline) throws -> [UInt8] {
    while true {
      if let end = pending[pendingStart...].firstIndex(of: 10), end > pendingStart, pending[end - 1] == 13 {
        let line = consume(end + 1 - pendingStart)
        return Array(line.dropLast(2))
      }
      guard try fill(deadline: deadline) else { throw TestSocketError.closedEarly("inside a line") }
    }
  }

  /// Reads exactly `length` bytes, handing them to `sink` as they come.
  func readBody(length: Int64, deadline: Deadline, into sink: BodySink) throws {
    var left = length
    while left > 0 {
      if bufferedCount == 0 {
        guard try fill(deadline: deadline) else {
          throw TestSocketError.closedEarly("\(left) of \(length) body bytes missing")
        }
      }
      let take = Int(min(Int64(bufferedCount), left))
      let slice = consume(take)
      try slice.withUnsafeBytes { try sink($0) }
      left -= Int64(take)
    }
  }

  /// Reads a chunked body, handing the decoded data to `sink`; returns the trailer lines.
  func readChunkedBody(deadline: Deadline, into sink: BodySink) throws -> [String] {
    while true {
      let line = String(decoding: try readLine(deadline: deadline), as: UTF8.self)
      let sizeText = line.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""
      guard let size = Int64(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else {
        throw TestSocketError.malformed("chunk size line '\(line)'")
      }
      if size == 0 { break }
      try readBody(length: size, deadline: deadline, into: sink)
      guard try readLine(deadline: deadline).isEmpty else {
        throw TestSocketError.malformed("chunk data not followed by CRLF")
      }
    }
    var trailers: [String] = []
    while true {
      let line = try readLine(deadline: deadline)
      if line.isEmpty { return trailers }
      trailers.append(String(decoding: line, as: UTF8.self))
    }
  }

  /// Reads until the peer closes, handing everything to `sink`.
  func readToEnd(deadline: Deadline, into sink: BodySink) throws {
    while true {
      if bufferedCount > 0 {
        let slice = consume(bufferedCount)
        try slice.withUnsafeBytes { try sink($0) }
      }
      guard try fill(deadline: deadline) else { return }
    }
  }
}

/// A body pattern for big transfers: byte `i` of a body is `i % 251`, so any slice can be
/// produced and checked with `memcmp` against one precomputed block instead of byte loops.
enum BodyPattern {
  static let period = 251
  static let blockSize = 64 * 1024
  /// `blockSize + period` bytes of the pattern starting at offset 0.
  static let block: [UInt8] = (0..<(blockSize + period)).map { UInt8($0 % period) }

  /// The first `count` bytes of the pattern (for small bodies).
  static func bytes(_ count: Int) -> [UInt8] { (0..<count).map { UInt8($0 % period) } }

  /// Calls `body` with consecutive slices of the pattern covering `length` bytes.
  static func stream(length: Int64, _ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
    var offset: Int64 = 0
    try block.withUnsafeBytes { block in
      while offset < length {
        let start = Int(offset % Int64(period))
        let count = Int(min(Int64(blockSize), length - offset))
        try body(UnsafeRawBufferPointer(rebasing: block[start..<(start + count)]))
        offset += Int64(count)
      }
    }
  }

  /// Checks received bytes against the pattern as they arrive.
  struct Verifier {
    private(set) var count: Int64 = 0
    /// The offset of the first byte that differed, if any did.
    private(set) var firstMismatch: Int64?

    init() {}

    mutating func check(_ bytes: UnsafeRawBufferPointer) {
      var done = 0
      block.withUnsafeBytes { block in
        while done < bytes.count {
          let start = Int((count + Int64(done)) % Int64(period))
          let length = min(blockSize, bytes.count - done)
          if firstMismatch == nil && memcmp(bytes.baseAddress! + done, block.baseAddress! + start, length) != 0 {
            firstMismatch = count + Int64(done)
          }
          done += length
        }
      }
      count += Int64(bytes.count)
    }
  }
}
