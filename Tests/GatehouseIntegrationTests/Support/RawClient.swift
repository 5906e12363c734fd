import Foundation

/// An answer as a test client received it.
struct ReceivedAnswer: Sendable {
  let head: MessageHead
  let status: Int
  /// The decoded body (empty when the caller streamed it to a sink).
  let body: [UInt8]
  /// Body bytes received (after de-chunking).
  let bodyLength: Int64
  /// Trailer lines of a chunked body.
  let trailers: [String]

  var text: String { String(decoding: body, as: UTF8.self) }

  /// The body parsed as a JSON object.
  func jsonObject() throws -> [String: Any] {
    guard
      let object = try JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed]) as? [String: Any]
    else { throw TestSocketError.malformed("body is not a JSON object: \(text)") }
    return object
  }
}

/// How a connection ended when a test waited for the gateway to end it.
enum ConnectionEnd: Equatable {
  /// A FIN (orderly close).
  case closed
  /// An RST.
  case reset
  /// Still open when the deadline passed.
  case stillOpen
}

/// A test client that writes raw bytes and reads raw answers over one TCP connection, for
/// pipelining, malformed requests and slow clients. Every read has a deadline.
final class RawClient {
  let socket: TestSocket
  let reader: WireReader

  /// Connects to the gateway (or any server) on `host`:`port`, from `sourceHost` if given.
  init(port: UInt16, host: String = "127.0.0.1", sourceHost: String? = nil, receiveBufferSize: Int32? = nil) throws {
    socket = try TestSocket.connect(
      port: port, host: host, sourceHost: sourceHost, receiveBufferSize: receiveBufferSize)
    reader = WireReader(socket: socket)
  }

  deinit { socket.close() }

  func send(_ text: String, timeout: Double = 10) throws {
    try socket.send(Array(text.utf8), deadline: Deadline(seconds: timeout))
  }

  func send(_ bytes: [UInt8], timeout: Double = 10) throws {
    try socket.send(bytes, deadline: Deadline(seconds: timeout))
  }

  /// Reads one answer. `requestWasHEAD` means no body follows whatever the head says.
  /// With `sink`, body bytes go there and are not kept.
  func readAnswer(requestWasHEAD: Bool = false, timeout: Double = 10, sink: BodySink? = nil) throws
    -> ReceivedAnswer
  {
    let deadline = Deadline(seconds: timeout)
    guard let raw = try reader.readHead(deadline: deadline) else {
      throw TestSocketError.closedEarly("before an answer")
    }
    let head = try MessageHead(raw: raw)
    let parts = head.startLine.split(separator: " ", maxSplits: 2)
    guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
      throw TestSocketError.malformed("status line '\(head.startLine)'")
    }
    var body: [UInt8] = []
    var length: Int64 = 0
    var trailers: [String] = []
    let collect: BodySink = { bytes in
      length += Int64(bytes.count)
      if let sink { try sink(bytes) } else { body.append(contentsOf: bytes) }
    }
    if requestWasHEAD || (100..<200).contains(status) || status == 204 || status == 304 {
      // No body.
    } else if head.isChunked {
      trailers = try reader.readChunkedBody(deadline: deadline, into: collect)
    } else if let contentLength = head.contentLength {
      try reader.readBody(length: contentLength, deadline: deadline, into: collect)
    } else {
      try reader.readToEnd(deadline: deadline, into: collect)
    }
    return ReceivedAnswer(head: head, status: status, body: body, bodyLength: length, trailers: trailers)
  }

  /// Sends `request` and reads its answer.
  func exchange(_ request: [UInt8], requestWasHEAD: Bool = false, timeout: Double = 10) throws -> ReceivedAnswer {
    try send(request, timeout: timeout)
    return try readAnswer(requestWasHEAD: requestWasHEAD, timeout: timeout)
  }

  /// Reads and drops whatever comes until the peer ends the connection or `timeout` passes.
  func waitForEnd(timeout: Double = 10) -> ConnectionEnd {
    let deadline = Deadline(seconds: timeout)
    do {
      try reader.readToEnd(deadline: deadline) { _ in }
      return .closed
    } catch TestSocketError.connectionReset {
      return .reset
    } catch {
      return .stillOpen
    }
  }

  /// Reads everything until the peer ends the connection: the bytes and how it ended.
  func readUntilEnd(timeout: Double = 10) -> (bytes: [UInt8], end: ConnectionEnd) {
    let deadline = Deadline(seconds: timeout)
    var bytes: [UInt8] = []
    do {
      try reader.readToEnd(deadline: deadline) { bytes.append(contentsOf: $0) }
      return (bytes, .closed)
    } catch TestSocketError.connectionReset {
      return (bytes, .reset)
    } catch {
      return (bytes, .stillOpen)
    }
  }

  func close() { socket.close() }
}

/// Builds request bytes: a request line, `Host`, the given fields in order, and the body
/// with a Content-Length (unless `fields` already frame it or there is no body).
func httpRequest(
  _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
  host: String? = "gateway.test"
) -> [UInt8] {
  var text = "\(method) \(target) HTTP/1.1\r\n"
  if let host { text += "Host: \(host)\r\n" }
  for (name, value) in headers { text += "\(name): \(value)\r\n" }
  let framed = headers.contains { ["content-length", "transfer-encoding"].contains($0.0.lowercased()) }
  if let body, !framed { text += "Content-Length: \(body.count)\r\n" }
  text += "\r\n"
  return Array(text.utf8) + (body ?? [])
}

/// Encodes `chunks` as a chunked body, with optional trailer lines.
func chunkedBody(_ chunks: [[UInt8]], trailers: [String] = []) -> [UInt8] {
  var out: [UInt8] = []
  for chunk in chunks where !chunk.isEmpty {
    out += Array((String(chunk.count, radix: 16) + "\r\n").utf8) + chunk + Array("\r\n".utf8)
  }
  out += Array("0\r\n".utf8)
  for line in trailers { out += Array((line + "\r\n").utf8) }
  out += Array("\r\n".utf8)
  return out
}

/// One request on a fresh connection to the gateway; the answer.
func send(
  _ method: String, _ target: String, to port: UInt16, headers: [(String, String)] = [], body: [UInt8]? = nil,
  timeout: Double = 10
) throws -> ReceivedAnswer {
  let client = try RawClient(port: port)
  defer { client.close() }
  return try client.exchange(
    httpRequest(method, target, headers: headers, body: body), requestWasHEAD: method == "HEAD", timeout: timeout)
}
