import Foundation
import Testing

/// A backend that misbehaves in every way a proxy-fault tool can make it (latency, bandwidth
/// cap, slow close, black hole, reset, tiny segments, close after N bytes) or answers with
/// malformed bytes (CL+TE, bad chunk sizes, EOF mid-body, absurd heads, invalid status
/// lines). For each fault the gateway must answer the right envelope (502/504) on a route
/// without a store, the stale answer on a route with `stale_if_error_s`, in bounded time;
/// must never store a broken answer; and must give back every descriptor it opened.
///
/// Serialized: the cases measure time and descriptors, so they run one at a time.
@Suite(.serialized) struct FaultInjectionTests {
  static let adminToken = "fault-admin-token-1"
  static let answerTimeoutMs = 1500
  /// How long past the answer timeout an answer may take on this shared machine.
  static let slack = 5.0

  static let goodJSON = #"{"v":"good","n":1}"#
  /// The answer served while a fault is on, long enough that the slow toxics matter.
  static let freshJSON = #"{"v":"fresh","pad":"\#(String(repeating: "p", count: 1500))"}"#

  /// What the gateway must do while a fault is on.
  enum Outcome: Sendable {
    /// The answer gets through whole (`datas.v == "fresh"`) and replaces the stored one.
    case served
    /// The exchange fails: an error envelope with one of `statuses` without a store, the
    /// stale good answer with one.
    case failed(Set<Int>)
  }

  /// One fault and what it must lead to.
  struct Case: Sendable, CustomTestStringConvertible {
    let name: String
    /// The answer to give while the fault is on; the gate is opened once the checks are done.
    let answer: @Sendable (Gate) -> FaultAnswer
    let outcome: Outcome
    var testDescription: String { name }
  }

  static func fresh(_ extraHeaders: String = "") -> [UInt8] {
    Array(
      ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\(extraHeaders)Content-Length: \(freshJSON.utf8.count)\r\n\r\n"
        + freshJSON).utf8)
  }

  static func chunkedHead(_ extra: String = "") -> String {
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\(extra)Transfer-Encoding: chunked\r\n\r\n"
  }

  static let cases: [Case] = [
    // Toxics the gateway must ride through.
    Case(
      name: "latency 300 ms ± 200 ms",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.latency(.milliseconds(300), jitter: .milliseconds(200))])
      }, outcome: .served),
    Case(
      name: "bandwidth 8 KB/s",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.bandwidth(bytesPerSecond: 8 * 1024)])
      }, outcome: .served),
    Case(
      name: "tiny segments (1-byte writes)",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.slicer(size: 1, interval: .microseconds(300))])
      }, outcome: .served),
    Case(
      name: "slow close after a complete answer",
      answer: { gate in
        FaultAnswer([fresh("Connection: close\r\n")], toxics: [.slowClose(gate: gate, limit: .seconds(20))])
      }, outcome: .served),
    Case(
      name: "close-delimited body, close 400 ms late",
      answer: { _ in
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        return FaultAnswer([Array(head.utf8) + Array(freshJSON.utf8), []], pause: .milliseconds(400), keepAlive: false)
      }, outcome: .served),
    Case(
      name: "1xx answers before the answer",
      answer: { _ in
        let interim = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        return FaultAnswer([Array(interim.utf8), fresh()], pause: .milliseconds(50))
      }, outcome: .served),
    Case(
      name: "chunked in 1-byte chunks",
      answer: { _ in
        let chunks = freshJSON.utf8.map { "1\r\n" + String(UnicodeScalar($0)) + "\r\n" }.joined()
        return FaultAnswer.raw(chunkedHead() + chunks + "0\r\n\r\n", keepAlive: true)
      }, outcome: .served),
    // Toxics that must fail the exchange.
    Case(name: "black hole", answer: { _ in FaultAnswer([], toxics: [.blackHole]) }, outcome: .failed([504])),
    Case(
      name: "latency past the answer timeout",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.latency(.milliseconds(answerTimeoutMs + 1500))])
      }, outcome: .failed([504])),
    Case(name: "reset", answer: { _ in FaultAnswer([], toxics: [.resetPeer]) }, outcome: .failed([502])),
    Case(name: "close without an answer", answer: { _ in FaultAnswer([], keepAlive: false) }, outcome: .failed([502])),
    Case(
      name: "close after 20 bytes (mid-head)",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.limitData(bytes: 20)])
      }, outcome: .failed([502])),
    Case(
      name: "close after 300 bytes (mid-body)",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.limitData(bytes: 300)])
      }, outcome: .failed([502])),
    Case(
      name: "close mid-body in tiny segments",
      answer: { _ in
        FaultAnswer([fresh()], toxics: [.slicer(size: 7, interval: .microseconds(200)), .limitData(bytes: 900)])
      }, outcome: .failed([502])),
    // Malformed answers.
    Case(
      name: "Content-Length and Transfer-Encoding",
      answer: { _ in
        .raw(chunkedHead("Content-Length: 5\r\n") + "5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n")
      }, outcome: .failed([502])),
    Case(
      name: "two different Content-Lengths",
      answer: { _ in
        .raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\n{}")
      }, outcome: .failed([502])),
    Case(
      name: "bad chunk size", answer: { _ in .raw(chunkedHead() + "zz\r\n{}\r\n0\r\n\r\n") }, outcome: .failed([502])),
    Case(
      name: "chunk size overflow",
      answer: { _ in
        .raw(chunkedHead() + "FFFFFFFFFFFFFFFFF\r\n{}\r\n0\r\n\r\n")
      }, outcome: .failed([502])),
    Case(
      name: "chunk data longer than its size",
      answer: { _ in
        .raw(chunkedHead() + "2\r\n{}xx\r\n0\r\n\r\n")
      }, outcome: .failed([502])),
    Case(
      name: "EOF mid-body (Content-Length)",
      answer: { _ in
        .raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"v\":\"cut")
      }, outcome: .failed([502])),
    Case(
      name: "EOF mid-body (chunked)", answer: { _ in .raw(chunkedHead() + "a\r\n{\"v\":\"cu") }, outcome: .failed([502])
    ),
    Case(
      name: "EOF before the last chunk", answer: { _ in .raw(chunkedHead() + "2\r\n{}\r\n") }, outcome: .failed([502])),
    Case(
      name: "101 Switching Protocols",
      answer: { _ in
        .raw("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
      }, outcome: .failed([502])),
    Case(
      name: "1 MiB header value",
      answer: { _ in
        .raw("HTTP/1.1 200 OK\r\nX-Huge: \(String(repeating: "h", count: 1 << 20))\r\nContent-Length: 2\r\n\r\n{}")
      }, outcome: .failed([502])),
    Case(
      name: "10 000 header fields",
      answer: { _ in
        .raw("HTTP/1.1 200 OK\r\n" + (0..<10_000).map { "X-F\($0): v\r\n" }.joined() + "Content-Length: 2\r\n\r\n{}")
      }, outcome: .failed([502])),
    Case(
      name: "status 2000", answer: { _ in .raw("HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}") },
      outcome: .failed([502])),
    Case(
      name: "status line without a status",
      answer: { _ in
        .raw("HTTP/1.1 OK\r\nContent-Length: 2\r\n\r\n{}")
      }, outcome: .failed([502])),
    Case(
      name: "HTTP/2.0 status line",
      answer: { _ in
        .raw("HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\n{}")
      }, outcome: .failed([502])),
    Case(name: "not HTTP at all", answer: { _ in .raw("SSH-2.0-OpenSSH_9.2\r\n\r\n") }, outcome: .failed([502])),
    Case(
      name: "bare LF line ends",
      answer: { _ in
        .raw("HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 2\n\n{}")
      }, outcome: .failed([502])),
    Case(
      name: "obs-fold in the head",
      answer: { _ in
        .raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n folded\r\nContent-Length: 2\r\n\r\n{}")
      }, outcome: .failed([502])),
    Case(
      name: "NUL in a header value",
      answer: { _ in
        .raw(Array("HTTP/1.1 200 OK\r\nX-A: a".utf8) + [0] + Array("b\r\nContent-Length: 2\r\n\r\n{}".utf8))
      }, outcome: .failed([502])),
  ]

  /// A gateway with an enveloped stale-capable route (`/cached/*`), an enveloped route
  /// without a store (`/plain/*`) and a pass-through route (`/raw/*`), all in front of
  /// `backend`.
  static func startGateway(backend: FaultBackend) throws -> (GatewayProcess, AdminAccess) {
    var config = TestConfig.make(
      routes: [
        TestConfig.route(
          "cached", match: "/cached/*", extra: ["envelope": ["enabled": true], "cache": ["stale_if_error_s": 3600]]),
        TestConfig.route("plain", match: "/plain/*", extra: ["envelope": ["enabled": true]]),
        TestConfig.route("raw", match: "/raw/*"),
      ],
      upstreams: [
        "api": TestConfig.upstream(port: backend.port, answerTimeoutMs: answerTimeoutMs, connectTimeoutMs: 1000)
      ])
    config["admin"] = ["listen": "127.0.0.1:0", "token": adminToken]
    config["store"] = ["path": "store.sqlite"]
    let gateway = try GatewayProcess(config: config)
    return (gateway, try AdminAccess(gateway, token: adminToken))
  }

  static func good(_ request: ReceivedRequest) -> FaultAnswer { .json(goodJSON) }

  /// One request, timed; nil answer when the connection failed.
  static func timedGet(_ path: String, port: UInt16) -> (answer: ReceivedAnswer?, seconds: Double, error: Error?) {
    let start = ContinuousClock.now
    do {
      let answer = try send("GET", path, to: port, timeout: Double(answerTimeoutMs) / 1000 + slack + 5)
      return (answer, secondsSince(start), nil)
    } catch {
      return (nil, secondsSince(start), error)
    }
  }

  @Test(arguments: cases)
  func faultIsAnsweredInBoundedTimeAndNeverStored(_ fault: Case) throws {
    let backend = try FaultBackend(handler: Self.good)
    defer { backend.stop() }
    let (gateway, admin) = try Self.startGateway(backend: backend)
    defer { gateway.stopExpectingCleanExit() }
    let bound = Double(Self.answerTimeoutMs) / 1000 + Self.slack

    // A good answer is stored first.
    let warm = try send("GET", "/cached/item", to: gateway.port)
    #expect(warm.status == 200)
    #expect(envelopeDatas(warm)?["v"] as? String == "good")
    let stored = admin.waitForStoredBody(path: "/cached/item") { $0 == Array(Self.goodJSON.utf8) }
    try #require(stored != nil, "the good answer was never stored")
    let baseline = try #require(settledDescriptorCount(pid: gateway.pid))

    // The fault.
    let gate = Gate()
    defer { gate.open() }
    backend.setHandler { _ in fault.answer(gate) }
    let plain = Self.timedGet("/plain/item", port: gateway.port)
    let cached = Self.timedGet("/cached/item", port: gateway.port)
    gate.open()

    #expect(plain.seconds < bound, "\(fault.name): /plain answered after \(plain.seconds) s")
    #expect(cached.seconds < bound, "\(fault.name): /cached answered after \(cached.seconds) s")
    let plainAnswer = try #require(plain.answer, "\(fault.name): /plain: \(String(describing: plain.error))")
    let storedAnswer = try #require(cached.answer, "\(fault.name): /cached: \(String(describing: cached.error))")
    let expectedStored: String
    let expectedV: String
    switch fault.outcome {
    case .served:
      for answer in [plainAnswer, storedAnswer] {
        #expect(answer.status == 200, "\(fault.name): \(answer.status) \(answer.text)")
        #expect(envelopeDatas(answer)?["v"] as? String == "fresh", "\(fault.name): \(answer.text)")
        #expect((envelopeDatas(answer)?["pad"] as? String)?.count == 1500)
      }
      expectedStored = Self.freshJSON
      expectedV = "fresh"
    case .failed(let statuses):
      #expect(
        statuses.contains(plainAnswer.status) && isErrorEnvelope(plainAnswer, status: plainAnswer.status),
        "\(fault.name): /plain got \(plainAnswer.status) \(plainAnswer.text)")
      #expect(
        storedAnswer.status == 200, "\(fault.name): /cached got \(storedAnswer.status) \(storedAnswer.text)")
      #expect(storedAnswer.head.value("X-Gatehouse-Cache") == "STALE", "\(fault.name)")
      #expect(envelopeDatas(storedAnswer)?["v"] as? String == "good", "\(fault.name): \(storedAnswer.text)")
      expectedStored = Self.goodJSON
      expectedV = "good"
    }

    // An outage now serves what was last stored whole, and the store shows exactly that.
    backend.setHandler { _ in FaultAnswer([], toxics: [.resetPeer]) }
    let outage = try send("GET", "/cached/item", to: gateway.port, timeout: bound + 5)
    #expect(outage.head.value("X-Gatehouse-Cache") == "STALE", "\(fault.name): \(outage.status) \(outage.text)")
    #expect(envelopeDatas(outage)?["v"] as? String == expectedV, "\(fault.name): \(outage.text)")
    let finalStored = admin.waitForStoredBody(path: "/cached/item") { $0 == Array(expectedStored.utf8) }
    #expect(finalStored != nil, "\(fault.name): the store does not hold the last whole answer")

    // Every connection the fault cost is given back.
    backend.setHandler(Self.good)
    let settled = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      (openDescriptorCount(pid: gateway.pid) ?? .max) <= baseline + 2
    }
    #expect(
      settled, "\(fault.name): \(openDescriptorCount(pid: gateway.pid) ?? -1) descriptors open, baseline \(baseline)")
    #expect(gateway.isRunning)
  }
}

/// Answers that carry more bytes than they frame (a body on 204/304/HEAD, bytes after a
/// Content-Length), sent late so they reach a connection the gateway already put back in
/// its pool, and backends that keep an exchange alive without ever answering. None of it may
/// reach a later client or hold a request past the answer timeout.
@Suite struct UpstreamDesyncTests {
  static let smuggledJSON = #"{"v":"smuggled"}"#
  static let smuggledAnswer =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(smuggledJSON.utf8.count)\r\n\r\n"
    + smuggledJSON

  /// One answer with unframed extra bytes, and what the client must see for it.
  struct Case: Sendable, CustomTestStringConvertible {
    let name: String
    let method: String
    /// The first request's path (its route decides whether HEAD reaches the backend as HEAD).
    let path: String
    let head: String
    let expectedStatus: Int
    var testDescription: String { name }
  }

  static let cases: [Case] = [
    Case(
      name: "body on 204", method: "GET", path: "/plain/first", head: "HTTP/1.1 204 No Content\r\n\r\n",
      expectedStatus: 200),
    Case(
      name: "body on 304", method: "GET", path: "/plain/first",
      head: "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n", expectedStatus: 304),
    Case(
      name: "bytes after Content-Length", method: "GET", path: "/plain/first",
      head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", expectedStatus: 200),
    Case(
      name: "body on a HEAD answer", method: "HEAD", path: "/raw/first",
      head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(smuggledJSON.utf8.count)\r\n\r\n",
      expectedStatus: 200),
  ]

  @Test(arguments: cases, [false, true])
  func unframedBytesNeverBecomeTheNextAnswer(_ desync: Case, late: Bool) throws {
    let backend = try FaultBackend { request in
      guard request.path.hasSuffix("/first") else { return .json(FaultInjectionTests.goodJSON) }
      let head = Array(desync.head.utf8)
      let extra = Array(Self.smuggledAnswer.utf8)
      // Late: the extra bytes come once the gateway has the whole answer (and may have
      // pooled the connection); otherwise in the same write.
      return late ? FaultAnswer([head, extra], pause: .milliseconds(300)) : FaultAnswer([head + extra])
    }
    defer { backend.stop() }
    let (gateway, _) = try FaultInjectionTests.startGateway(backend: backend)
    defer { gateway.stopExpectingCleanExit() }

    let client = try RawClient(port: gateway.port)
    let first = try client.exchange(
      httpRequest(desync.method, desync.path), requestWasHEAD: desync.method == "HEAD")
    #expect(first.status == desync.expectedStatus, "\(desync.name): \(first.status) \(first.text)")
    #expect(!first.text.contains("smuggled"))
    if late { sleep(for: .milliseconds(600)) }
    // Later requests, on the same client connection and on new ones, get their own answers.
    var answers = [try client.exchange(httpRequest("GET", "/plain/second"))]
    for index in 0..<4 { answers.append(try send("GET", "/plain/next/\(index)", to: gateway.port)) }
    for answer in answers {
      #expect(answer.status == 200, "\(desync.name): \(answer.status) \(answer.text)")
      #expect(envelopeDatas(answer)?["v"] as? String == "good", "\(desync.name): \(answer.text)")
    }
  }

  /// A backend sends `100 Continue` every 300 ms and never the answer.
  @Test
  func endlessInterimAnswersAreCutAtTheAnswerTimeout() throws {
    let interim = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
    let backend = try FaultBackend { _ in FaultAnswer(Array(repeating: interim, count: 100), pause: .milliseconds(300))
    }
    defer { backend.stop() }
    let (gateway, _) = try FaultInjectionTests.startGateway(backend: backend)
    defer { gateway.stopExpectingCleanExit() }

    let outcome = FaultInjectionTests.timedGet("/plain/interim", port: gateway.port)

    let bound = Double(FaultInjectionTests.answerTimeoutMs) / 1000 + FaultInjectionTests.slack
    #expect(outcome.seconds < bound, "answered after \(outcome.seconds) s")
    let answer = try #require(outcome.answer, "\(String(describing: outcome.error))")
    #expect(isErrorEnvelope(answer, status: 504), "\(answer.status) \(answer.text)")
  }

  /// A backend sends its head one byte every 250 ms (a slowloris backend).
  @Test
  func headTrickledForeverIsCutAtTheAnswerTimeout() throws {
    let head = "HTTP/1.1 200 OK\r\nX-Slow: " + String(repeating: "s", count: 200) + "\r\nContent-Length: 2\r\n\r\n{}"
    let backend = try FaultBackend { _ in
      FaultAnswer([Array(head.utf8)], toxics: [.slicer(size: 1, interval: .milliseconds(250))])
    }
    defer { backend.stop() }
    let (gateway, _) = try FaultInjectionTests.startGateway(backend: backend)
    defer { gateway.stopExpectingCleanExit() }

    let outcome = FaultInjectionTests.timedGet("/plain/slow-head", port: gateway.port)

    let bound = Double(FaultInjectionTests.answerTimeoutMs) / 1000 + FaultInjectionTests.slack
    #expect(outcome.seconds < bound, "answered after \(outcome.seconds) s")
    let answer = try #require(outcome.answer, "\(String(describing: outcome.error))")
    #expect(isErrorEnvelope(answer, status: 504), "\(answer.status) \(answer.text)")
  }
}
