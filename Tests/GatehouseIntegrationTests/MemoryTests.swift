import Foundation
import Synchronization
import Testing

/// Bodies stream through the gateway with bounded memory: 100 MB each way, and a client
/// that stops reading holds the backend back instead of filling the gateway's memory.
/// Serialized so the big transfers do not compete with each other for the two cores.
@Suite(.serialized) struct MemoryTests {
  static let bigLength: Int64 = 100 * 1024 * 1024
  /// The gateway's resident memory must stay below this while 100 MB pass through it.
  static let residentLimit = 100 * 1024 * 1024

  /// Samples a process's resident memory on a thread until stopped; keeps the peak.
  final class ResidentSampler: Sendable {
    private let peak = Mutex(0)
    private let stopped = Atomic<Bool>(false)
    private let ended = Atomic<Bool>(false)

    init(_ gateway: GatewayProcess) {
      let pid = gateway.pid
      let thread = Thread { [self] in
        while !stopped.load(ordering: .relaxed) {
          if let bytes = GatewayProcess.residentBytes(pid: pid) { peak.withLock { $0 = max($0, bytes) } }
          sleep(for: .milliseconds(20))
        }
        ended.store(true, ordering: .relaxed)
      }
      thread.start()
    }

    /// Stops sampling; the highest value seen, in bytes.
    func finish() -> Int {
      stopped.store(true, ordering: .relaxed)
      waitUntil(timeout: 5) { ended.load(ordering: .relaxed) }
      return peak.withLock { $0 }
    }
  }

  @Test func hundredMegabyteRequestBodyPassesThroughInBoundedMemory() throws {
    let backend = try TestBackend(
      options: TestBackend.Options(keepBodies: false), always: .respond(.text("stored")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.passThrough(to: backend.port, limits: ["max_body_bytes": Self.bigLength]))
    defer { gateway.stopExpectingCleanExit() }
    let sampler = ResidentSampler(gateway)

    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("PUT", "/upload", headers: [("Content-Length", "\(Self.bigLength)")]))
    try BodyPattern.stream(length: Self.bigLength) { piece in
      try client.socket.send(piece, deadline: Deadline(seconds: 60))
    }
    let answer = try client.readAnswer(timeout: 60)
    let peak = sampler.finish()

    #expect(answer.status == 200)
    #expect(answer.text == "stored")
    let request = try #require(backend.requests.first)
    #expect(request.bodyLength == Self.bigLength)
    #expect(request.bodyMatchedPattern == true)
    #expect(peak > 0)
    #expect(peak < Self.residentLimit, "gateway resident memory peaked at \(peak / 1024 / 1024) MB")
  }

  @Test func hundredMegabyteAnswerBodyPassesThroughInBoundedMemory() throws {
    let backend = try TestBackend(
      always: .respond(BackendAnswer(body: .generated(length: Self.bigLength, chunked: false))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let sampler = ResidentSampler(gateway)

    var verifier = BodyPattern.Verifier()
    let client = try RawClient(port: gateway.port)
    try client.send(httpRequest("GET", "/download"))
    let answer = try client.readAnswer(timeout: 120) { verifier.check($0) }
    let peak = sampler.finish()

    #expect(answer.status == 200)
    #expect(answer.head.contentLength == Self.bigLength)
    #expect(verifier.count == Self.bigLength)
    #expect(verifier.firstMismatch == nil)
    #expect(peak > 0)
    #expect(peak < Self.residentLimit, "gateway resident memory peaked at \(peak / 1024 / 1024) MB")
  }

  @Test func clientThatStopsReadingHoldsTheBackendBack() throws {
    let backend = try TestBackend(
      always: .respond(BackendAnswer(body: .generated(length: Self.bigLength, chunked: true))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let sampler = ResidentSampler(gateway)

    let client = try RawClient(port: gateway.port, receiveBufferSize: 64 * 1024)
    try client.send(httpRequest("GET", "/download"))
    // Read nothing. The backend's progress must come to a halt well short of the whole body.
    var last: Int64 = -1
    var stableSamples = 0
    let stalled = waitUntil(timeout: 30, interval: .milliseconds(100)) {
      let sent = backend.bodyBytesSent
      stableSamples = sent == last && sent > 0 ? stableSamples + 1 : 0
      last = sent
      return stableSamples >= 10 || sent >= Self.bigLength
    }
    let sentWhileStalled = backend.bodyBytesSent
    let peakWhileStalled = sampler.finish()

    #expect(stalled)
    #expect(sentWhileStalled < Self.bigLength / 4, "backend sent \(sentWhileStalled) bytes to a client reading none")
    #expect(
      peakWhileStalled < Self.residentLimit, "gateway resident memory peaked at \(peakWhileStalled / 1024 / 1024) MB")

    // Reading again lets the transfer go on where it stopped.
    var verifier = BodyPattern.Verifier()
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 10))))
    #expect(head.isChunked)
    let target = sentWhileStalled + 4 * 1024 * 1024
    while verifier.count < target {
      let line = String(decoding: try client.reader.readLine(deadline: Deadline(seconds: 10)), as: UTF8.self)
      let size = try #require(Int64(line, radix: 16))
      try client.reader.readBody(length: size, deadline: Deadline(seconds: 10)) { verifier.check($0) }
      _ = try client.reader.readLine(deadline: Deadline(seconds: 10))
    }
    #expect(verifier.firstMismatch == nil)
    #expect(backend.bodyBytesSent > sentWhileStalled)
    client.close()
    // The gateway still serves after the abandoned transfer.
    #expect(waitUntil(timeout: 10) { (try? send("GET", "/ping", to: gateway.port).status) == 200 })
  }

  @Test()
  func pauseByAReadingClientLongerThanTheAnswerTimeoutDoesNotCutTheAnswer() throws {
    // The backend is quick; only the client pauses. The gateway stops reading the upstream
    // to hold it back, and that pause is not the upstream being slow.
    let length: Int64 = 32 * 1024 * 1024
    let backend = try TestBackend(always: .respond(BackendAnswer(body: .generated(length: length, chunked: false))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, answerTimeoutMs: 500))
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port, receiveBufferSize: 64 * 1024)
    try client.send(httpRequest("GET", "/download"))
    let head = try MessageHead(raw: try #require(try client.reader.readHead(deadline: Deadline(seconds: 10))))
    var verifier = BodyPattern.Verifier()
    try client.reader.readBody(length: 1024 * 1024, deadline: Deadline(seconds: 10)) { verifier.check($0) }
    // A slow client: it reads nothing for four answer timeouts.
    sleep(for: .seconds(2))
    let rest = Result {
      try client.reader.readBody(length: length - verifier.count, deadline: Deadline(seconds: 30)) {
        verifier.check($0)
      }
    }

    #expect(head.contentLength == length)
    #expect(throws: Never.self) { try rest.get() }
    #expect(verifier.count == length)
    #expect(verifier.firstMismatch == nil)
  }
}
