import Foundation
import Testing

/// What the gateway takes from a backend's answer into its own answers and its store: not
/// the fields it sets itself, not bytes sent while no request was outstanding, and a gzip
/// body for clients without gzip decoded once when stored, not at every hit.
@Suite struct UpstreamAnswerTrustTests {
  /// The stored headers of the only entry in the store, lowercased names.
  static func storedFieldNames(_ admin: AdminClient) throws -> [String] {
    let entry = try #require(try admin.allEntries().first)
    let stored = try admin.json("/admin/cache/entries/\(try #require(entry["id"] as? String))")
    return (stored["headers"] as? [[String]] ?? []).compactMap { $0.first?.lowercased() }
  }

  // MARK: X-Gatehouse-Cache

  /// `X-Gatehouse-Cache` is the gateway's to set: a backend's own is neither passed on nor
  /// stored, so clients see one value, the gateway's (not a `HIT` the backend made up).
  @Test func aBackendsOwnCacheFieldIsNeitherPassedOnNorStored() throws {
    let backend = try ModalBackend()
    defer { backend.stop() }
    backend.extraHeaders.value = [("X-Gatehouse-Cache", "HIT"), ("x-gatehouse-cache", "STALE")]
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try send("GET", "/own", to: gateway.port)
    #expect(admin.waitForStoredEntries(1))
    let second = try send("GET", "/own", to: gateway.port)

    #expect(first.head.values("X-Gatehouse-Cache") == ["MISS"])
    #expect(second.head.values("X-Gatehouse-Cache") == ["HIT"])
    #expect(!(try Self.storedFieldNames(admin)).contains("x-gatehouse-cache"))
  }

  // MARK: Gzip kept for clients without gzip

  /// A backend that answers gzip to a request that did not ask for it: the entry for
  /// clients without gzip keeps the body decoded (once, when stored), so hits are served
  /// without inflating it again; clients that take gzip have their own entry, kept as sent.
  @Test func gzipSentUnaskedIsStoredDecodedForClientsWithoutGzip() throws {
    let plain = Array(#"{"items":[1,2,3],"note":"kept decoded"}"#.utf8)
    let gzipped = try ExternalTool.gzip(plain)
    let backend = try TestBackend(
      always: .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")], body: .bytes(gzipped))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let miss = try send("GET", "/unasked", to: gateway.port)
    #expect(admin.waitForStoredEntries(1))
    let hits = try (0..<2).map { _ in try send("GET", "/unasked", to: gateway.port) }
    let entry = try #require(try admin.allEntries().first)
    let stored = try admin.json("/admin/cache/entries/\(try #require(entry["id"] as? String))")
    let names = (stored["headers"] as? [[String]] ?? []).compactMap { $0.first?.lowercased() }

    #expect(miss.status == 200)
    for hit in hits {
      #expect(StoreTests.cacheHeader(hit) == "HIT")
      #expect(hit.body == plain)
      #expect(hit.head.value("Content-Encoding") == nil)
    }
    #expect(!names.contains("content-encoding"))
    #expect(stored["body"] as? String == String(decoding: plain, as: UTF8.self))
    #expect(backend.requests.count == 1)
  }

  /// A gzip body that does not decode is not kept for clients without gzip, and no answer
  /// made of it is labelled as coming from the store: each request asks the backend.
  @Test func undecodableGzipForClientsWithoutGzipIsNeverAHit() throws {
    let backend = try TestBackend(
      always: .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")],
          body: .bytes(Array("definitely not gzip".utf8)))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let answers = try (0..<3).map { index -> ReceivedAnswer in
      if index > 0 { sleep(for: .milliseconds(300)) }
      return try send("GET", "/broken", to: gateway.port)
    }

    for answer in answers {
      #expect(StoreTests.cacheHeader(answer) != "HIT", "\(answer.status) \(answer.text)")
      #expect(StoreTests.cacheHeader(answer) != "STALE")
    }
    #expect((try admin.cacheEntryCount()) == 0)
    #expect(backend.requests.count == 3)
  }

  // MARK: Bytes nobody asked for

  /// A backend that sends a second, unasked answer right behind the first (in the same
  /// write): a client's next request, pipelined on the same client connection and handled
  /// the moment the first answer ended, must not get those bytes as its answer, nor are they
  /// stored. (Bytes that arrive on an idle connection before a request reuses it are caught
  /// before the reuse; `UndeliveredInputTests` checks that they are seen.)
  @Test func aStrayAnswerBehindAnotherIsNobodysAnswer() throws {
    let stray = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n\"STRAYED\""
    let backend = try FaultBackend { request in
      let body = #"{"target":"\#(request.target)"}"#
      var answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
      answer += body
      // Only the first answer on each connection drags a stray one along.
      return FaultAnswer([Array((request.indexOnConnection == 0 ? answer + stray : answer).utf8)])
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let client = try RawClient(port: gateway.port)
    defer { client.close() }
    try client.send(httpRequest("GET", "/first") + httpRequest("GET", "/second"))
    let first = try client.readAnswer()
    let second = try client.readAnswer()
    _ = admin.waitForStoredEntries(2, timeout: 5)
    let again = try send("GET", "/second", to: gateway.port)

    #expect(first.text == #"{"target":"/first"}"#)
    #expect(second.text == #"{"target":"/second"}"#)
    #expect(again.text == #"{"target":"/second"}"#)
  }

  /// An answer to HEAD announces a body it does not carry; a backend that sends that body
  /// anyway leaves it on the connection, where the next request on it reads it as its
  /// answer (nothing on the wire tells them apart). That answer is passed on, but never
  /// stored: the next client asking gets the backend's real answer.
  @Test func theAnswerAfterADoubtfulOneIsNotStored() throws {
    let stray = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n\"STRAYED\""
    let backend = try FaultBackend { request in
      if request.method == "HEAD" {
        // The head, then (after a pause, so it arrives on its own) the "body": a whole answer.
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(stray.utf8.count)\r\n\r\n"
        return FaultAnswer([Array(head.utf8), Array(stray.utf8)], pause: .milliseconds(300))
      }
      return .json(#"{"target":"\#(request.target)"}"#)
    }
    defer { backend.stop() }
    var config = StoreTests.config(port: backend.port, cache: ["fresh_s": 60])
    config["routes"] = [
      TestConfig.route("head", match: "/h/*"),
      TestConfig.route("cached", match: "/*", extra: ["cache": ["fresh_s": 60]]),
    ]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    // HEAD, then the GET on the same client connection: the gateway reuses its upstream
    // connection for it, and the "body" of the HEAD answer arrives after the GET was sent.
    let client = try RawClient(port: gateway.port)
    defer { client.close() }
    let head = try client.exchange(httpRequest("HEAD", "/h/doc"), requestWasHEAD: true)
    let got = try client.exchange(httpRequest("GET", "/doc"))
    sleep(for: .milliseconds(500))
    let entries = try admin.cacheEntryCount()
    let again = try send("GET", "/doc", to: gateway.port)

    #expect(head.status == 200)
    // Whatever the reused connection gave the GET, it was not kept for others.
    if got.text == #""STRAYED""# { #expect(entries == 0) }
    #expect(again.text == #"{"target":"/doc"}"#)
  }

  /// An answer nobody asked for that arrives on an idle connection shows that the upstream
  /// sends strays: the answer stored last from that connection is forgotten (it may have
  /// been an earlier stray read as a request's own), and for a while connections are not
  /// reused, so one stray cannot shift the answers after it onto the wrong clients.
  @Test func aStrayAnswerOnAnIdleConnectionStopsReuseAndUnstoresTheLastAnswer() throws {
    let stray = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n\"STRAYED\""
    let backend = try FaultBackend { request in
      let body = #"{"target":"\#(request.target)"}"#
      let answer =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
      guard request.target == "/a" else { return FaultAnswer([Array(answer.utf8)]) }
      // The answer, then a stray one once the gateway holds the connection idle.
      return FaultAnswer([Array(answer.utf8), Array(stray.utf8)], pause: .milliseconds(300))
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: StoreTests.config(port: backend.port, cache: ["fresh_s": 60]))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let first = try send("GET", "/a", to: gateway.port)
    #expect(admin.waitForStoredEntries(1))
    sleep(for: .milliseconds(800))
    let again = try send("GET", "/a", to: gateway.port)
    let others = try ["/b", "/c", "/d"].map { try send("GET", $0, to: gateway.port) }

    #expect(first.text == #"{"target":"/a"}"#)
    #expect(StoreTests.cacheHeader(again) == "MISS", "the entry stored from that connection was forgotten")
    #expect(others.map(\.text) == ["/b", "/c", "/d"].map { #"{"target":"\#($0)"}"# })
    // Each went on a connection of its own.
    #expect(backend.requests.dropFirst(2).allSatisfy { $0.indexOnConnection == 0 })
  }
}
