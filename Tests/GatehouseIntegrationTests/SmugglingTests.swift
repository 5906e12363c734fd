import Foundation
import Testing

/// The request a smuggling attempt tries to slip past the gateway. It must never reach the
/// backend as a request of its own.
let smuggledRequest = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"

/// Transfer-Encoding disguises used by desync scanners. Each is one or more header lines
/// (without the final CRLF) that a lenient server may read as `chunked` while a strict one
/// does not.
let transferEncodingDisguises: [(name: String, line: [UInt8])] = {
  func text(_ name: String, _ line: String) -> (name: String, line: [UInt8]) { (name, Array(line.utf8)) }
  return [
    text("trailing space", "Transfer-Encoding: chunked "),
    text("tab after the colon", "Transfer-Encoding:\tchunked"),
    text("trailing tab", "Transfer-Encoding: chunked\t"),
    text("no space after the colon", "Transfer-Encoding:chunked"),
    text("vertical tab before the value", "Transfer-Encoding:\u{0B}chunked"),
    text("vertical tab after the value", "Transfer-Encoding: chunked\u{0B}"),
    text("form feed before the value", "Transfer-Encoding:\u{0C}chunked"),
    text("form feed after the value", "Transfer-Encoding: chunked\u{0C}"),
    text("control byte before the name", "\u{01}Transfer-Encoding: chunked"),
    text("control byte after the name", "Transfer-Encoding\u{01}: chunked"),
    text("control byte in the value", "Transfer-Encoding: chun\u{01}ked"),
    text("escape before the value", "Transfer-Encoding: \u{1B}chunked"),
    (name: "NUL before the value", line: Array("Transfer-Encoding: ".utf8) + [0] + Array("chunked".utf8)),
    (name: "NUL after the value", line: Array("Transfer-Encoding: chunked".utf8) + [0]),
    (
      name: "non-breaking space before the value",
      line: Array("Transfer-Encoding: ".utf8) + [0xC2, 0xA0] + Array("chunked".utf8)
    ),
    (name: "NEL after the value", line: Array("Transfer-Encoding: chunked".utf8) + [0xC2, 0x85]),
    text("space before the colon", "Transfer-Encoding : chunked"),
    text("tab before the colon", "Transfer-Encoding\t: chunked"),
    text("leading space (folded onto the line before)", " Transfer-Encoding: chunked"),
    text("leading tab (folded onto the line before)", "\tTransfer-Encoding: chunked"),
    text("value folded onto a new line", "Transfer-Encoding:\r\n chunked"),
    text("value folded with a tab", "Transfer-Encoding: x\r\n\tchunked"),
    text("folded after another field", "X-Pad: y\r\n Transfer-Encoding: chunked"),
    text("bare CR before the value", "Transfer-Encoding:\rchunked"),
    text("bare LF inside the line", "Transfer-Encoding:\nchunked"),
    text("bare LF ending the line", "X-Pad: y\nTransfer-Encoding: chunked"),
    text("mixed-case name", "Transfer-encoding: chunked"),
    text("upper-case name twice", "TRANSFER-ENCODING: chunked\r\nTRANSFER-ENCODING: chunked"),
    text("two names of different case", "Transfer-Encoding: chunked\r\ntransfer-encoding: chunked"),
    text("mixed-case value", "Transfer-Encoding: cHuNkEd"),
    text("chunked then identity", "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity"),
    text("identity then chunked", "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked"),
    text("identity, chunked", "Transfer-Encoding: identity, chunked"),
    text("chunked, identity", "Transfer-Encoding: chunked, identity"),
    text("empty then chunked", "Transfer-Encoding:\r\nTransfer-Encoding: chunked"),
    text("xchunked", "Transfer-Encoding: xchunked"),
    text("chunked with a parameter", "Transfer-Encoding: chunked;q=1"),
    text("quoted chunked", "Transfer-Encoding: \"chunked\""),
    text("single-quoted chunked", "Transfer-Encoding: 'chunked'"),
    text("chunk", "Transfer-Encoding: chunk"),
    text("comma before chunked", "Transfer-Encoding: ,chunked"),
    text("comma after chunked", "Transfer-Encoding: chunked,"),
    text("gzip, chunked", "Transfer-Encoding: gzip, chunked"),
    text("Content-Encoding posing", "Content-Encoding: chunked\r\nTransfer-Encoding: chunked"),
  ]
}()

/// A body that ends a chunked message at once and carries `smuggledRequest` after it.
let smugglingBody = Array(("0\r\n\r\n" + smuggledRequest).utf8)

/// The classic CL.TE and TE.CL shapes for every disguise, plus Content-Length disguises.
let disguiseCases: [RejectedRequest] = {
  var cases: [RejectedRequest] = []
  let head = Array("POST /desync HTTP/1.1\r\nHost: a\r\n".utf8)
  let crlf = Array("\r\n".utf8)
  for disguise in transferEncodingDisguises {
    let length = Array("Content-Length: \(smugglingBody.count)\r\n".utf8)
    cases.append(
      RejectedRequest(
        "CL.TE: \(disguise.name)", bytes: head + length + disguise.line + crlf + crlf + smugglingBody, [400, 501]))
    cases.append(
      RejectedRequest(
        "TE.CL: \(disguise.name)",
        bytes: head + disguise.line + crlf + Array("Content-Length: 4\r\n\r\n".utf8)
          + Array("5c\r\nGPOST /smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 15\r\n\r\nx=1\r\n0\r\n\r\n".utf8),
        [400, 501]))
  }
  let body = Array("hello".utf8) + Array(smuggledRequest.utf8)
  for (name, line) in [
    ("trailing comma", "Content-Length: 5,"), ("leading comma", "Content-Length: ,5"),
    ("list 5, 5", "Content-Length: 5, 5"),
    ("list 5, 50", "Content-Length: 5, 50"), ("vertical tab after", "Content-Length: 5\u{0B}"),
    ("form feed before", "Content-Length:\u{0C}5"), ("plus sign", "Content-Length: +5"),
    ("space inside", "Content-Length: 5 0"), ("hex", "Content-Length: 0x5"), ("dot", "Content-Length: 5.0"),
    ("space before the colon", "Content-Length : 5"), ("two fields", "Content-Length: 5\r\nContent-Length: 50"),
    ("two fields of different case", "Content-Length: 5\r\ncontent-length: 5"),
    ("folded value", "Content-Length:\r\n 5"), ("control byte before the name", "\u{01}Content-Length: 5"),
  ] {
    cases.append(RejectedRequest("CL: \(name)", bytes: head + Array(line.utf8) + crlf + crlf + body))
  }
  return cases
}()

/// A parsed view of the bytes a backend received on one connection.
struct BackendWire {
  /// Complete or cut-short request heads, in order.
  var heads: [MessageHead] = []
  /// Bytes that were not a complete head (a head cut short, or garbage).
  var unparsed: [UInt8] = []
  /// Whether the last request's body was cut short.
  var lastBodyCut = false

  init(_ bytes: [UInt8]) {
    var offset = 0
    while offset < bytes.count {
      guard let end = Self.find([13, 10, 13, 10], in: bytes, from: offset),
        let head = try? MessageHead(raw: Array(bytes[offset..<(end + 4)]))
      else {
        unparsed = Array(bytes[offset...])
        return
      }
      heads.append(head)
      offset = end + 4
      if head.isChunked {
        guard let next = Self.skipChunked(bytes, from: offset) else {
          lastBodyCut = true
          return
        }
        offset = next
      } else if let length = head.contentLength, length > 0 {
        guard offset + Int(length) <= bytes.count else {
          lastBodyCut = true
          return
        }
        offset += Int(length)
      }
    }
  }

  static func find(_ needle: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
    guard bytes.count >= needle.count, start <= bytes.count - needle.count else { return nil }
    for index in start...(bytes.count - needle.count) where bytes[index..<(index + needle.count)].elementsEqual(needle)
    {
      return index
    }
    return nil
  }

  /// The offset after a complete chunked body starting at `start`, nil when it is cut short.
  static func skipChunked(_ bytes: [UInt8], from start: Int) -> Int? {
    var offset = start
    while true {
      guard let lineEnd = find([13, 10], in: bytes, from: offset) else { return nil }
      let line = String(decoding: bytes[offset..<lineEnd], as: UTF8.self)
      guard let size = Int(line.split(separator: ";").first ?? "", radix: 16) else { return nil }
      offset = lineEnd + 2
      if size == 0 {
        // Trailer lines up to the empty one.
        while true {
          guard let end = find([13, 10], in: bytes, from: offset) else { return nil }
          let empty = end == offset
          offset = end + 2
          if empty { return offset }
        }
      }
      offset += size + 2
      guard offset <= bytes.count else { return nil }
    }
  }

  /// Problems with a head as forwarded by the gateway: every field line must be plain
  /// `token: value` without control bytes, and the body framing must be one clean field.
  static func problems(in head: MessageHead) -> [String] {
    var problems: [String] = []
    let tokenBytes = Set(Array("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8))
    for field in head.fields {
      if field.name.isEmpty || !field.name.utf8.allSatisfy({ tokenBytes.contains($0) }) {
        problems.append("field name \(Array(field.name.utf8))")
      }
      if field.value.utf8.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
        problems.append("control byte in \(field.name)")
      }
      let folded = field.name.lowercased().replacingOccurrences(of: "_", with: "-")
      if folded != field.name.lowercased() && ["transfer-encoding", "content-length"].contains(folded) {
        problems.append("framing look-alike \(field.name)")
      }
    }
    let lengths = head.values("Content-Length")
    let codings = head.values("Transfer-Encoding")
    if lengths.count + codings.count > 1 { problems.append("framing fields \(lengths) \(codings)") }
    if let coding = codings.first, coding.lowercased() != "chunked" { problems.append("Transfer-Encoding \(coding)") }
    if let length = lengths.first, Int64(length) == nil { problems.append("Content-Length \(length)") }
    return problems
  }
}

/// Request smuggling through the whole gateway: every request the parser refuses (the
/// `StrictnessTests` list), the Transfer-Encoding and Content-Length disguises of desync
/// scanners in CL.TE and TE.CL shapes, each followed by a smuggled request. The client must
/// get one 400/501 envelope and a closed connection; the backend must receive nothing, or
/// one cleanly framed request (possibly cut short), and never the smuggled one.
@Suite struct SmugglingTests {
  /// Sends `raw` followed by `smuggledRequest` and checks both sides.
  static func probe(_ probe: RejectedRequest, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let backend = try FaultBackend { _ in .http(headers: [("Content-Type", "text/plain")], body: Array("ok".utf8)) }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try? client.send(probe.raw + Array(smuggledRequest.utf8))
    let answer = try client.readAnswer()
    let rest = client.readUntilEnd()

    #expect(
      probe.statuses.contains(answer.status) && isErrorEnvelope(answer, status: answer.status),
      "\(probe.name): \(answer.status) \(answer.text)", sourceLocation: sourceLocation)
    #expect(answer.head.value("Connection")?.lowercased() == "close", sourceLocation: sourceLocation)
    #expect(rest.end != .stillOpen, "\(probe.name): connection left open", sourceLocation: sourceLocation)
    #expect(
      rest.bytes.isEmpty, "\(probe.name): more after the refusal: \(String(decoding: rest.bytes, as: UTF8.self))",
      sourceLocation: sourceLocation)

    // Whatever the gateway forwarded is over once it closed its upstream side.
    waitUntil(timeout: 3) { backend.openConnectionCount == 0 }
    let received = backend.receivedPerConnection
    let wires = received.map(BackendWire.init)
    let heads = wires.flatMap(\.heads)
    #expect(heads.count <= 1, "\(probe.name): the backend got \(heads.count) requests", sourceLocation: sourceLocation)
    #expect(
      wires.allSatisfy { $0.unparsed.isEmpty }, "\(probe.name): unparsable bytes at the backend",
      sourceLocation: sourceLocation)
    for head in heads {
      #expect(
        BackendWire.problems(in: head).isEmpty, "\(probe.name): \(BackendWire.problems(in: head))",
        sourceLocation: sourceLocation)
    }
    let all = received.flatMap { $0 }
    #expect(
      BackendWire.find(Array("/smuggled".utf8), in: all, from: 0) == nil,
      "\(probe.name): the smuggled request reached the backend", sourceLocation: sourceLocation)
  }

  @Test(arguments: rejectedRequests)
  func strictnessCaseIsRefusedEndToEnd(_ request: RejectedRequest) throws {
    try Self.probe(request)
  }

  @Test(arguments: disguiseCases)
  func desyncDisguiseIsRefusedEndToEnd(_ request: RejectedRequest) throws {
    try Self.probe(request)
  }

  /// Names that are valid tokens but only look like Transfer-Encoding. The gateway may
  /// refuse them, or take the request as framed by its Content-Length; then the whole body
  /// reaches the backend as the body of one request, and no look-alike that a CGI-style
  /// backend would map to `TRANSFER_ENCODING` (an underscore for the dash) is forwarded.
  @Test(arguments: ["Transfer-Encoding-", "Transfer-Encodings", "X-Transfer-Encoding"])
  func lookAlikeNameIsNeverReadAsFraming(_ name: String) throws {
    try Self.checkLookAlike(name)
  }

  @Test
  func underscoreTransferEncodingIsNotForwarded() throws {
    try Self.checkLookAlike("Transfer_Encoding")
  }

  static func checkLookAlike(_ name: String) throws {
    let backend = try FaultBackend { request in
      .http(headers: [("Content-Type", "text/plain")], body: Array("got \(request.path)".utf8))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let request = httpRequest(
      "POST", "/look-alike", headers: [("Content-Length", "\(smugglingBody.count)"), (name, "chunked")])
    let answer = try client.exchange(request + smugglingBody)

    if answer.status == 200 {
      #expect(answer.text == "got /look-alike")
      let first = try #require(backend.requests.first)
      #expect(first.path == "/look-alike")
      #expect(first.body == smugglingBody)
      #expect(!first.bodyWasChunked)
      #expect(BackendWire.problems(in: first.head).isEmpty, "\(BackendWire.problems(in: first.head))")
    } else {
      #expect([400, 501].contains(answer.status) && isErrorEnvelope(answer, status: answer.status))
      #expect(backend.requests.isEmpty)
    }
  }

  /// A request with framing the gateway accepts, whose body looks like a second request.
  struct Carrier: Sendable, CustomTestStringConvertible {
    let name: String
    let raw: [UInt8]
    var testDescription: String { name }
  }

  static let carriedBody = Array(("0\r\n\r\n" + smuggledRequest).utf8)
  static let carriers: [Carrier] = [
    Carrier(
      name: "chunked, one chunk",
      raw: httpRequest("POST", "/upload", headers: [("Transfer-Encoding", "chunked")]) + chunkedBody([carriedBody])),
    Carrier(
      name: "chunked, many small chunks",
      raw: httpRequest("POST", "/upload", headers: [("Transfer-Encoding", "chunked")])
        + chunkedBody(
          stride(from: 0, to: carriedBody.count, by: 5).map {
            Array(carriedBody[$0..<min($0 + 5, carriedBody.count)])
          })),
    Carrier(name: "Content-Length", raw: httpRequest("POST", "/upload", body: carriedBody)),
  ]

  @Test(arguments: carriers, [false, true])
  func requestInsideABodyStaysInsideTheBody(_ carrier: Carrier, byteByByte: Bool) throws {
    let backend = try FaultBackend { request in
      .http(headers: [("Content-Type", "text/plain")], body: Array("got \(request.path)".utf8))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    if byteByByte {
      for byte in carrier.raw { try client.send([byte]) }
    } else {
      try client.send(carrier.raw)
    }
    let answer = try client.readAnswer()
    // The connection still works and carries exactly one more answer for one more request.
    let next = try client.exchange(httpRequest("GET", "/after"))

    #expect(answer.status == 200)
    #expect(answer.text == "got /upload")
    #expect(next.text == "got /after")
    let requests = backend.requests
    #expect(requests.map(\.path) == ["/upload", "/after"])
    #expect(requests.first?.body == Self.carriedBody)
    let heads = backend.receivedPerConnection.map(BackendWire.init).flatMap(\.heads)
    #expect(heads.count == 2)
    for head in heads { #expect(BackendWire.problems(in: head).isEmpty, "\(BackendWire.problems(in: head))") }
  }
}
