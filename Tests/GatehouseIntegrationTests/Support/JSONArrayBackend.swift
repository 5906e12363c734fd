import Foundation
import Synchronization

/// A big JSON document produced while it is sent, so neither side holds it whole:
/// `[` + `record` repeated `recordCount` times + `null]`. `corruptRecord` replaces the first
/// byte of that record with `]`, which makes the document invalid at a known offset.
struct JSONArrayDocument: Sendable {
  /// One array element with its trailing comma.
  static let record = Array(#"{"id":12345,"name":"gatehouse","tags":["a","b"],"ok":true,"n":-1.5e3},"#.utf8)
  static let head = Array("[".utf8)
  static let tail = Array("null]".utf8)

  let recordCount: Int
  let corruptRecord: Int?

  /// A document of about `bytes` bytes.
  init(approximateBytes bytes: Int64, corruptRecord: Int? = nil) {
    recordCount = Int(bytes / Int64(Self.record.count))
    self.corruptRecord = corruptRecord
  }

  var length: Int64 { Int64(Self.head.count + recordCount * Self.record.count + Self.tail.count) }

  /// Byte offset of record `index` in the document.
  static func offset(ofRecord index: Int) -> Int64 { Int64(head.count + index * record.count) }

  /// Calls `body` with consecutive pieces of the document (whole records, about 64 KiB each).
  func stream(_ body: ([UInt8]) throws -> Void) rethrows {
    let perPiece = max(1, 64 * 1024 / Self.record.count)
    let block = Array([[UInt8]](repeating: Self.record, count: perPiece).joined())
    try body(Self.head)
    var next = 0
    while next < recordCount {
      let count = min(perPiece, recordCount - next)
      var piece = count == perPiece ? block : Array(block[0..<(count * Self.record.count)])
      if let corrupt = corruptRecord, (next..<(next + count)).contains(corrupt) {
        piece[(corrupt - next) * Self.record.count] = UInt8(ascii: "]")
      }
      try body(piece)
      next += count
    }
    try body(Self.tail)
  }
}

/// Checks, piece by piece, that received bytes are exactly `prefix` + a `JSONArrayDocument`
/// (uncorrupted) + `suffix`, comparing the repeated middle with `memcmp`.
struct WrappedDocumentVerifier {
  let prefix: [UInt8]
  let suffix: [UInt8]
  let document: JSONArrayDocument
  private let repeated: [UInt8]
  private(set) var count: Int64 = 0
  /// Offset of the first byte that differed, if one did.
  private(set) var firstMismatch: Int64?

  init(prefix: String, document: JSONArrayDocument, suffix: String) {
    self.prefix = Array(prefix.utf8) + JSONArrayDocument.head
    self.suffix = JSONArrayDocument.tail + Array(suffix.utf8)
    self.document = document
    let perBlock = 64 * 1024 / JSONArrayDocument.record.count + 2
    repeated = Array([[UInt8]](repeating: JSONArrayDocument.record, count: perBlock).joined())
  }

  var expectedLength: Int64 {
    Int64(prefix.count + document.recordCount * JSONArrayDocument.record.count + suffix.count)
  }

  mutating func check(_ bytes: UnsafeRawBufferPointer) {
    let middleEnd = Int64(prefix.count + document.recordCount * JSONArrayDocument.record.count)
    let recordLength = Int64(JSONArrayDocument.record.count)
    var done = 0
    while done < bytes.count {
      let position = count + Int64(done)
      var take = 1
      var equal: Bool
      if position < Int64(prefix.count) {
        equal = bytes[done] == prefix[Int(position)]
      } else if position < middleEnd {
        let phase = Int((position - Int64(prefix.count)) % recordLength)
        take = min(bytes.count - done, Int(middleEnd - position), repeated.count - phase - Int(recordLength))
        take = max(1, take)
        equal = repeated.withUnsafeBytes { memcmp(bytes.baseAddress! + done, $0.baseAddress! + phase, take) == 0 }
      } else {
        let index = Int(position - middleEnd)
        equal = index < suffix.count && bytes[done] == suffix[index]
      }
      if !equal && firstMismatch == nil { firstMismatch = position }
      done += take
    }
    count += Int64(bytes.count)
  }
}

/// A backend that answers every request with a `JSONArrayDocument` as
/// `application/json`, streamed with a Content-Length or chunked. One thread per connection;
/// `stop()` ends them. Counts the body bytes it sent.
final class JSONArrayBackend: Sendable {
  let port: UInt16
  let document: JSONArrayDocument
  let chunked: Bool
  private let listener: TestSocket
  private let stopped = Atomic<Bool>(false)
  private let acceptEnded = Atomic<Bool>(false)
  private let sockets = Mutex<[TestSocket]>([])
  private let sent = Atomic<Int64>(0)

  init(document: JSONArrayDocument, chunked: Bool) throws {
    listener = try TestSocket.listen()
    port = listener.localPort
    self.document = document
    self.chunked = chunked
    let thread = Thread { [self] in acceptLoop() }
    thread.name = "JSONArrayBackend.accept"
    thread.start()
  }

  deinit { stop() }

  /// Body bytes written so far.
  var bodyBytesSent: Int64 { sent.load(ordering: .relaxed) }

  func stop() {
    guard !stopped.exchange(true, ordering: .relaxed) else { return }
    for socket in sockets.withLock({ $0 }) { socket.shutdownBoth() }
    waitUntil(timeout: 5) { acceptEnded.load(ordering: .relaxed) }
  }

  private func acceptLoop() {
    defer {
      listener.close()
      acceptEnded.store(true, ordering: .relaxed)
    }
    while !stopped.load(ordering: .relaxed) {
      guard let socket = try? listener.accept(deadline: Deadline(seconds: 0.05)) else { continue }
      sockets.withLock { $0.append(socket) }
      let thread = Thread { [self] in serve(socket) }
      thread.name = "JSONArrayBackend.connection"
      thread.start()
    }
  }

  private func serve(_ socket: TestSocket) {
    defer { socket.close() }
    let reader = WireReader(socket: socket)
    while !stopped.load(ordering: .relaxed) {
      guard (try? reader.readHead(deadline: Deadline(seconds: 60))) != nil else { return }
      var head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
      head += chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "Content-Length: \(document.length)\r\n\r\n"
      do {
        try socket.send(Array(head.utf8), deadline: Deadline(seconds: 60))
        try document.stream { piece in
          if stopped.load(ordering: .relaxed) { throw TestSocketError.closedEarly("backend stopped") }
          let framed = chunked ? Array((String(piece.count, radix: 16) + "\r\n").utf8) + piece + [13, 10] : piece
          try socket.send(framed, deadline: Deadline(seconds: 60))
          sent.wrappingAdd(Int64(piece.count), ordering: .relaxed)
        }
        if chunked { try socket.send(Array("0\r\n\r\n".utf8), deadline: Deadline(seconds: 60)) }
      } catch {
        return
      }
    }
  }
}
