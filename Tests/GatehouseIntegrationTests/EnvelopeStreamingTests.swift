import Foundation
import Testing

/// JSON bodies over `envelope.max_bytes` are wrapped while they stream (Docs/envelope.md): 100 MB
/// passes with bounded gateway memory, and invalid JSON mid-stream cuts the connection
/// before the last chunk. Serialized: the big transfers would compete for the two cores.
@Suite(.serialized) struct EnvelopeStreamingTests {
  static let prefix = #"{"code":0,"datas":"#
  static let suffix = #","message":""}"#

  static func gateway(for port: UInt16, maxBytes: Int? = nil) throws -> GatewayProcess {
    var envelope: [String: Any] = [:]
    if let maxBytes { envelope["max_bytes"] = maxBytes }
    let config = TestConfig.make(
      routes: [TestConfig.envelopedRoute("big", match: "/*", envelope: envelope)],
      upstreams: ["api": TestConfig.upstream(port: port, answerTimeoutMs: 30_000)])
    return try GatewayProcess(config: config)
  }

  /// Reads a chunked body to its end or until the connection fails; whether the last
  /// (zero-size) chunk arrived.
  static func readChunks(
    _ client: RawClient, deadline: Deadline, into verifier: inout WrappedDocumentVerifier
  ) -> (sawLastChunk: Bool, error: Error?) {
    do {
      while !deadline.hasPassed {
        let line = String(decoding: try client.reader.readLine(deadline: deadline), as: UTF8.self)
        guard let size = Int64(line, radix: 16) else { throw TestSocketError.malformed("chunk size '\(line)'") }
        if size == 0 {
          _ = try client.reader.readLine(deadline: deadline)
          return (true, nil)
        }
        try client.reader.readBody(length: size, deadline: deadline) { verifier.check($0) }
        guard try client.reader.readLine(deadline: deadline).isEmpty else {
          throw TestSocketError.malformed("chunk not followed by CRLF")
        }
      }
      return (false, TestSocketError.malformed("deadline passed"))
    } catch {
      return (false, error)
    }
  }

  @Test func hundredMegabyteJSONIsWrappedWhileStreamingInBoundedMemory() throws {
    let document = JSONArrayDocument(approximateBytes: 100 * 1024 * 1024)
    let backend = try JSONArrayBackend(document: document, chunked: false)
    defer { backend.stop() }
    let gateway = try Self.gateway(for: backend.port)
    defer { gateway.stopExpectingCleanExit() }
    let sampler = MemoryTests.ResidentSampler(gateway)

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/everything"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 30))))
    var verifier = WrappedDocumentVerifier(prefix: Self.prefix, document: document, suffix: Self.suffix)
    let outcome = Self.readChunks(client, deadline: Deadline(seconds: 150), into: &verifier)
    let peak = sampler.finish()

    #expect(head.startLine.hasPrefix("HTTP/1.1 200"))
    #expect(head.value("Content-Type") == "application/json")
    #expect(head.isChunked)
    #expect(!head.has("Content-Length"))
    #expect(outcome.sawLastChunk, "ended with \(String(describing: outcome.error))")
    #expect(verifier.count == verifier.expectedLength)
    #expect(verifier.firstMismatch == nil, "first wrong byte at \(verifier.firstMismatch ?? -1)")
    #expect(document.length > 100 * 1000 * 1000)
    #expect(peak > 0)
    #expect(peak < MemoryTests.residentLimit, "gateway resident memory peaked at \(peak / 1024 / 1024) MB")
    // The connection is still good for another request.
    let next = try client.exchange(httpRequest("GET", "/again", headers: [("Connection", "close")]), timeout: 150)
    #expect(next.status == 200)
  }

  @Test func chunkedJSONThatOutgrowsTheBufferSwitchesToAWrappedStream() throws {
    let document = JSONArrayDocument(approximateBytes: 8 * 1024 * 1024)
    let backend = try JSONArrayBackend(document: document, chunked: true)
    defer { backend.stop() }
    let gateway = try Self.gateway(for: backend.port, maxBytes: 1024 * 1024)
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/chunked"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 30))))
    var verifier = WrappedDocumentVerifier(prefix: Self.prefix, document: document, suffix: Self.suffix)
    let outcome = Self.readChunks(client, deadline: Deadline(seconds: 60), into: &verifier)

    #expect(head.startLine.hasPrefix("HTTP/1.1 200"))
    #expect(head.isChunked)
    #expect(outcome.sawLastChunk, "ended with \(String(describing: outcome.error))")
    #expect(verifier.count == verifier.expectedLength)
    #expect(verifier.firstMismatch == nil)
  }

  @Test(arguments: [false, true])
  func invalidByteMidStreamAbortsTheConnectionWithoutTheLastChunk(backendChunked: Bool) throws {
    let clean = JSONArrayDocument(approximateBytes: 16 * 1024 * 1024)
    let corruptRecord = clean.recordCount / 2
    let document = JSONArrayDocument(approximateBytes: 16 * 1024 * 1024, corruptRecord: corruptRecord)
    let backend = try JSONArrayBackend(document: document, chunked: backendChunked)
    defer { backend.stop() }
    let gateway = try Self.gateway(for: backend.port, maxBytes: 1024 * 1024)
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/broken"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 30))))
    var verifier = WrappedDocumentVerifier(prefix: Self.prefix, document: clean, suffix: Self.suffix)
    let outcome = Self.readChunks(client, deadline: Deadline(seconds: 60), into: &verifier)

    #expect(head.startLine.hasPrefix("HTTP/1.1 200"))
    #expect(head.isChunked)
    #expect(!outcome.sawLastChunk)
    // The stream ended by the connection failing, not by our deadline.
    let ended: Bool
    switch outcome.error as? TestSocketError {
    case .connectionReset?, .closedEarly?: ended = true
    default: ended = false
    }
    #expect(ended, "stream ended with \(String(describing: outcome.error))")
    // Everything before the bad byte was sent as it was; nothing at or after it.
    let badOffset = Int64(Self.prefix.utf8.count) + JSONArrayDocument.offset(ofRecord: corruptRecord)
    #expect(verifier.firstMismatch == nil)
    #expect(verifier.count <= badOffset)
    #expect(gateway.isRunning)
    // The cut answer's line says why.
    #expect(waitUntil { gateway.accessLines().contains { $0["path"] as? String == "/broken" } })
    #expect(gateway.accessLines().first { $0["path"] as? String == "/broken" }?["reason"] as? String == "bad_response")
  }
}
