import Foundation
import Synchronization
import Testing

/// A backend with validators: a JSON list at every path (`/image…`: bytes of an image) with `ETag: "v<version>"`
/// (`W/"v<version>"` when `weakTag`), a fixed
/// `Last-Modified`, `Cache-Control: max-age=60` and `Accept-Ranges: bytes`; a request whose
/// `If-None-Match` names the current tag gets `304`. It counts the body bytes it sends.
final class ValidatingBackend: Sendable {
  static let lastModified = "Sun, 06 Nov 1994 08:49:37 GMT"
  let version = Shared(1)
  let bodyBytesSent = Shared(0)
  /// When set, 304s wait for this gate (to hold a revalidation others wait for).
  let holdNotModified = Shared<Gate?>(nil)
  let server: TestBackend

  /// `items` entries of about 45 bytes each.
  init(items: Int = 8, weakTag: Bool = false) throws {
    let version = self.version
    let sent = self.bodyBytesSent
    let hold = self.holdNotModified
    server = try TestBackend { request in
      let current = version.value
      let tag = (weakTag ? "W/" : "") + "\"v\(current)\""
      var headers = [
        ("ETag", tag), ("Last-Modified", Self.lastModified), ("Cache-Control", "max-age=60"),
        ("Accept-Ranges", "bytes"),
      ]
      if request.head.value("If-None-Match") == tag {
        var answer = BackendAnswer(status: 304, reason: "Not Modified", headers: headers)
        answer.holdUntil = hold.value
        return .respond(answer)
      }
      if request.target.hasPrefix("/image") {
        let image = (0..<2000).map { UInt8($0 % 251) }
        sent.update { $0 += image.count }
        return .respond(BackendAnswer(headers: headers + [("Content-Type", "image/png")], body: .bytes(image)))
      }
      let entries = (0..<items).map { #"{"id":\#($0),"name":"item-\#(String(format: "%08d", $0))","v":\#(current)}"# }
      let body = Array(("[" + entries.joined(separator: ",") + "]").utf8)
      headers.append(("Content-Type", "application/json"))
      sent.update { $0 += body.count }
      return .respond(BackendAnswer(headers: headers, body: .bytes(body)))
    }
  }

  var port: UInt16 { server.port }
  var requests: [ReceivedRequest] { server.requests }
}

/// Conditional requests and validators (Docs/clients-and-cache.md): ETags on what the gateway builds or serves
/// from the store, 304s, no advertised ranges, and revalidation with the backend.
@Suite struct ConditionalRequestTests {
  static func gateway(
    backend: ValidatingBackend, envelope: Bool, cache: [String: Any]? = nil, admin: Bool = false,
    envelopeMaxBytes: Int? = nil
  ) throws -> GatewayProcess {
    var envelopeBlock: [String: Any] = ["enabled": envelope]
    if let envelopeMaxBytes { envelopeBlock["max_bytes"] = envelopeMaxBytes }
    var extra: [String: Any] = ["envelope": envelopeBlock]
    if let cache { extra["cache"] = cache }
    var config = TestConfig.make(
      routes: [TestConfig.route("list", match: "/*", extra: extra)],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    if cache != nil { config["store"] = ["path": "var/store.sqlite"] }
    if admin { config = TestConfig.withAdmin(config) }
    return try GatewayProcess(config: config)
  }

  /// The bytes of one request and its whole answer on a fresh connection.
  static func wireBytes(_ request: [UInt8], port: UInt16) throws -> (answer: [UInt8], total: Int) {
    let client = try RawClient(port: port)
    defer { client.close() }
    try client.send(request)
    let (bytes, end) = client.readUntilEnd()
    #expect(end == .closed)
    return (bytes, request.count + bytes.count)
  }

  static func isGatewayTag(_ value: String?) -> Bool {
    guard let value, value.count == 34, value.hasPrefix("\""), value.hasSuffix("\"") else { return false }
    return value.dropFirst().dropLast().allSatisfy { $0.isHexDigit && !$0.isUppercase }
  }

  /// An unchanged enveloped list of about 100 KiB: a client that revalidates it is told so in
  /// a few hundred bytes; its own validators never reach the backend (they are the gateway's,
  /// for the envelope).
  @Test func anUnchangedEnvelopedListCostsARevalidatingClientFewBytes() throws {
    let backend = try ValidatingBackend(items: 2600)
    let gateway = try Self.gateway(backend: backend, envelope: true)
    defer { gateway.stopExpectingCleanExit() }

    let first = try send("GET", "/list", to: gateway.port)
    let etag = try #require(first.head.value("ETag"))
    #expect(first.status == 200 && first.body.count > 100_000)
    #expect(Self.isGatewayTag(etag), "\(etag)")
    #expect(first.head.value("Last-Modified") == ValidatingBackend.lastModified)
    #expect(first.head.values("Accept-Ranges").isEmpty)

    let request = httpRequest(
      "GET", "/list", headers: [("If-None-Match", etag), ("Connection", "close")])
    let (answer, total) = try Self.wireBytes(request, port: gateway.port)
    let text = String(decoding: answer, as: UTF8.self)
    #expect(text.hasPrefix("HTTP/1.1 304 Not Modified\r\n"), "\(text)")
    #expect(total < 400, "\(total) bytes: \(text)")
    // The whole answer is its head: a 304 has no body.
    let head = try MessageHead(raw: answer)
    #expect(head.value("ETag") == etag)
    #expect(head.value("Cache-Control") == "max-age=60")
    #expect(head.value("Date") != nil)
    #expect(head.value("X-Request-Id") != nil)
    #expect(head.value("Content-Length") == nil && head.value("Content-Type") == nil)
    #expect(text.hasSuffix("\r\n\r\n"), "no body")
    #expect(backend.requests.allSatisfy { $0.head.value("If-None-Match") == nil })
    print("revalidating a \(first.body.count)-byte enveloped list: \(total) bytes on the wire")
  }

  /// If-None-Match decides before If-Modified-Since; a tag for another representation, or
  /// a date before the last change, gets the whole answer; HEAD has GET's validators.
  @Test func theEnvelopeMeetsConditionsInTheRFCsOrder() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(backend: backend, envelope: true)
    defer { gateway.stopExpectingCleanExit() }
    let first = try send("GET", "/list", to: gateway.port)
    let etag = try #require(first.head.value("ETag"))

    let since = try send(
      "GET", "/list", to: gateway.port, headers: [("If-Modified-Since", ValidatingBackend.lastModified)])
    let before = try send(
      "GET", "/list", to: gateway.port, headers: [("If-Modified-Since", "Sun, 06 Nov 1994 08:49:36 GMT")])
    let otherTag = try send(
      "GET", "/list", to: gateway.port,
      headers: [("If-None-Match", #""other""#), ("If-Modified-Since", ValidatingBackend.lastModified)])
    let listed = try send("GET", "/list", to: gateway.port, headers: [("If-None-Match", #""x", W/\#(etag)"#)])
    let star = try send("GET", "/list", to: gateway.port, headers: [("If-None-Match", "*")])
    let failed = try send("GET", "/list", to: gateway.port, headers: [("If-Match", #""other""#)])
    let client = try RawClient(port: gateway.port)
    let head = try client.exchange(httpRequest("HEAD", "/list"), requestWasHEAD: true)
    let headConditional = try client.exchange(
      httpRequest("HEAD", "/list", headers: [("If-None-Match", etag)]), requestWasHEAD: true)

    #expect(since.status == 304 && since.body.isEmpty)
    #expect(before.status == 200 && before.head.value("ETag") == etag && before.body == first.body)
    #expect(otherTag.status == 200)
    #expect(listed.status == 304 && star.status == 304)
    #expect(failed.status == 412)
    #expect(head.status == 200 && head.head.value("ETag") == etag)
    #expect(headConditional.status == 304 && headConditional.head.value("ETag") == etag)
  }

  /// The gzip and identity codings of one envelope are different bytes: different tags, and
  /// both say the answer varies by `Accept-Encoding`.
  @Test func gzipAndIdentityCodingsHaveTheirOwnTags() throws {
    let backend = try ValidatingBackend(items: 200)
    let gateway = try Self.gateway(backend: backend, envelope: true)
    defer { gateway.stopExpectingCleanExit() }
    let plain = try send("GET", "/list", to: gateway.port)
    let gzip = try send("GET", "/list", to: gateway.port, headers: [("Accept-Encoding", "gzip")])
    let gzipAgain = try send("GET", "/list", to: gateway.port, headers: [("Accept-Encoding", "gzip")])
    let crossed = try send(
      "GET", "/list", to: gateway.port, headers: [("If-None-Match", gzip.head.value("ETag") ?? "")])

    #expect(gzip.head.value("Content-Encoding") == "gzip")
    #expect(Self.isGatewayTag(plain.head.value("ETag")) && Self.isGatewayTag(gzip.head.value("ETag")))
    #expect(plain.head.value("ETag") != gzip.head.value("ETag"))
    #expect(gzipAgain.head.value("ETag") == gzip.head.value("ETag"))
    #expect(plain.head.value("Vary") == "Accept-Encoding" && gzip.head.value("Vary") == "Accept-Encoding")
    #expect(crossed.status == 200, "the gzip tag does not name the identity answer")
  }

  /// Answers from the store of a pass-through route carry the backend's tag (their bytes are
  /// the backend's) and no `Accept-Ranges`: a range request gets the whole answer. A 304 from
  /// the store repeats `X-Gatehouse-Cache` and `Age`.
  @Test func storedAnswersMeetConditionsAndAdvertiseNoRanges() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(backend: backend, envelope: false, cache: ["fresh_s": 60])
    defer { gateway.stopExpectingCleanExit() }
    let miss = try send("GET", "/list", to: gateway.port)
    let hit = try send("GET", "/list", to: gateway.port)
    let etag = try #require(hit.head.value("ETag"))
    let notModified = try send("GET", "/list", to: gateway.port, headers: [("If-None-Match", "W/" + etag)])
    let ranged = try send("GET", "/list", to: gateway.port, headers: [("Range", "bytes=0-4")])

    #expect(miss.head.value("X-Gatehouse-Cache") == "MISS" && miss.head.value("ETag") == "\"v1\"")
    #expect(hit.head.value("X-Gatehouse-Cache") == "HIT" && etag == "\"v1\"")
    #expect(hit.head.values("Accept-Ranges").isEmpty)
    #expect(hit.head.value("Last-Modified") == ValidatingBackend.lastModified)
    #expect(notModified.status == 304 && notModified.body.isEmpty)
    #expect(notModified.head.value("X-Gatehouse-Cache") == "HIT" && notModified.head.value("Age") != nil)
    #expect(notModified.head.value("ETag") == etag && notModified.head.value("Cache-Control") == "max-age=60")
    #expect(ranged.status == 200 && ranged.body == hit.body && ranged.head.values("Accept-Ranges").isEmpty)
    #expect(backend.requests.count == 1)
  }

  /// A gateway with two pass-through routes to `backend`: `/fresh/…` stored for a minute,
  /// `/aging/…` fresh for a second (then revalidated) and served stale when the backend fails.
  static func agingGateway(backend: ValidatingBackend) throws -> GatewayProcess {
    let envelope: [String: Any] = ["enabled": false]
    var config = TestConfig.make(
      routes: [
        TestConfig.route("fresh", match: "/fresh/*", extra: ["envelope": envelope, "cache": ["fresh_s": 60]]),
        TestConfig.route(
          "aging", match: "/aging/*",
          extra: ["envelope": envelope, "cache": ["fresh_s": 1, "stale_if_error_s": 3600]]),
      ],
      upstreams: ["api": TestConfig.upstream(port: backend.port)])
    config["store"] = ["path": "var/store.sqlite"]
    return try GatewayProcess(config: config)
  }

  /// Requests `path` every 100 ms (15 s at most) until an answer says `result` in
  /// `X-Gatehouse-Cache`; that answer.
  static func firstAnswer(_ result: String, _ path: String, port: UInt16, headers: [(String, String)] = [])
    -> ReceivedAnswer?
  {
    var found: ReceivedAnswer?
    _ = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      guard let answer = try? send("GET", path, to: port, headers: headers) else { return false }
      if answer.head.value("X-Gatehouse-Cache") == result { found = answer }
      return found != nil
    }
    return found
  }

  /// On a route without an envelope the store keeps the backend's bytes, and every answer made
  /// of them carries the backend's own `ETag`, strong or weak as it came: the `MISS` that
  /// stored it, a `HIT`, a `REVALIDATED` and a `STALE` one alike. A client's copy from any of
  /// them is current against the others (`If-None-Match` gets 304), and `If-Match` compares
  /// strongly against the same tag (a weak one never matches).
  @Test(arguments: [false, true]) func passThroughAnswersFromTheStoreKeepTheBackendsTag(weak: Bool) throws {
    let backend = try ValidatingBackend(weakTag: weak)
    let gateway = try Self.agingGateway(backend: backend)
    defer { gateway.stopExpectingCleanExit() }
    let tag = (weak ? "W/" : "") + "\"v1\""

    let miss = try send("GET", "/fresh/list", to: gateway.port)
    let hit = try #require(Self.firstAnswer("HIT", "/fresh/list", port: gateway.port))
    let client = try RawClient(port: gateway.port)
    let headHit = try client.exchange(httpRequest("HEAD", "/fresh/list"), requestWasHEAD: true)
    let notModified = try send("GET", "/fresh/list", to: gateway.port, headers: [("If-None-Match", tag)])
    let matched = try send("GET", "/fresh/list", to: gateway.port, headers: [("If-Match", "\"v1\"")])
    let unmatched = try send("GET", "/fresh/list", to: gateway.port, headers: [("If-Match", "\"v0\"")])
    #expect(miss.status == 200 && miss.head.value("X-Gatehouse-Cache") == "MISS" && miss.head.value("ETag") == tag)
    #expect(hit.body == miss.body && hit.head.values("ETag") == [tag])
    #expect(headHit.status == 200 && headHit.head.value("X-Gatehouse-Cache") == "HIT")
    #expect(headHit.head.values("ETag") == [tag])
    #expect(notModified.status == 304 && notModified.body.isEmpty)
    #expect(notModified.head.value("X-Gatehouse-Cache") == "HIT" && notModified.head.value("ETag") == tag)
    #expect(matched.status == (weak ? 412 : 200) && unmatched.status == 412)
    #expect(backend.requests.count == 1)

    // Past `fresh_s` the backend confirms the entry with a 304 (asked with the stored tag).
    _ = try send("GET", "/aging/list", to: gateway.port)
    let revalidated = try #require(Self.firstAnswer("REVALIDATED", "/aging/list", port: gateway.port))
    #expect(revalidated.body == miss.body && revalidated.head.values("ETag") == [tag])
    #expect(backend.requests.last?.head.value("If-None-Match") == tag)
    // The backend gone, the entry past `fresh_s` again is served stale, with the same tag.
    backend.server.stop()
    let stale = try #require(Self.firstAnswer("STALE", "/aging/list", port: gateway.port))
    let staleNotModified = try send("GET", "/aging/list", to: gateway.port, headers: [("If-None-Match", tag)])
    #expect(stale.body == miss.body && stale.head.values("ETag") == [tag])
    #expect(staleNotModified.status == 304 && staleNotModified.head.value("ETag") == tag)
  }

  /// A gzip body the backend sent unasked is kept decoded for clients without gzip: those
  /// bytes are the gateway's, so answers made of them carry its tag of them, not the
  /// backend's (which names the gzip bytes), and the store's note that says so never
  /// reaches a client. A client that takes gzip has its own entry, the backend's bytes:
  /// the backend's tag.
  @Test func aBodyKeptDecodedCarriesTheGatewaysTag() throws {
    let plain = Array(#"{"items":[1,2,3],"note":"kept decoded"}"#.utf8)
    let backend = try TestBackend(
      always: .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip"), ("ETag", "\"z1\"")],
          body: .bytes(try ExternalTool.gzip(plain)))))
    defer { backend.stop() }
    let config = StoreTests.config(port: backend.port, cache: ["fresh_s": 60], envelope: ["enabled": false])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let miss = try send("GET", "/unasked", to: gateway.port)
    #expect(admin.waitForStoredEntries(1))
    let hit = try send("GET", "/unasked", to: gateway.port)
    let etag = try #require(hit.head.value("ETag"))
    let crossed = try send("GET", "/unasked", to: gateway.port, headers: [("If-None-Match", "\"z1\"")])
    let current = try send("GET", "/unasked", to: gateway.port, headers: [("If-None-Match", etag)])
    let gzipMiss = try send("GET", "/unasked", to: gateway.port, headers: [("Accept-Encoding", "gzip")])
    let gzipHit = try #require(
      Self.firstAnswer("HIT", "/unasked", port: gateway.port, headers: [("Accept-Encoding", "gzip")]))

    // The MISS passes the backend's answer on as it came.
    #expect(miss.head.value("Content-Encoding") == "gzip" && miss.head.value("ETag") == "\"z1\"")
    #expect(StoreTests.cacheHeader(hit) == "HIT" && hit.body == plain && Self.isGatewayTag(etag))
    #expect(hit.head.values("ETag").count == 1 && hit.head.value("X-Gatehouse-Decoded") == nil)
    #expect(crossed.status == 200 && current.status == 304 && current.head.value("ETag") == etag)
    #expect(StoreTests.cacheHeader(gzipMiss) == "MISS" && gzipMiss.head.value("ETag") == "\"z1\"")
    #expect(gzipHit.head.value("Content-Encoding") == "gzip" && gzipHit.head.value("ETag") == "\"z1\"")
  }

  /// A non-JSON success on an enveloped route passes through with the backend's validators;
  /// the client's conditions, which the backend does not see there, are met against them.
  @Test func passedThroughFilesOnEnvelopedRoutesMeetConditionsToo() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(backend: backend, envelope: true)
    defer { gateway.stopExpectingCleanExit() }
    let image = try send("GET", "/image", to: gateway.port)
    let notModified = try send("GET", "/image", to: gateway.port, headers: [("If-None-Match", "\"v1\"")])
    let ranged = try send("GET", "/image", to: gateway.port, headers: [("Range", "bytes=0-9")])
    let client = try RawClient(port: gateway.port)
    let pipelined = try client.exchange(
      httpRequest("GET", "/image", headers: [("If-Modified-Since", ValidatingBackend.lastModified)]))
    let after = try client.exchange(httpRequest("GET", "/image"))

    #expect(image.status == 200 && image.body.count == 2000 && image.head.value("ETag") == "\"v1\"")
    #expect(image.head.values("Accept-Ranges").isEmpty)
    #expect(notModified.status == 304 && notModified.body.isEmpty && notModified.head.value("ETag") == "\"v1\"")
    #expect(ranged.status == 200 && ranged.body.count == 2000)
    // The body the client did not get is read off the upstream: the connection's next answer is whole.
    #expect(pipelined.status == 304 && after.status == 200 && after.body == image.body)
    #expect(backend.requests.allSatisfy { $0.head.value("If-None-Match") == nil && $0.head.value("Range") == nil })
  }

  /// The one exception: an envelope too large to hold is wrapped as it streams, its head
  /// sent before its body is known. It carries no tag (nor the backend's), and a client's
  /// tag cannot be met: the whole answer comes.
  @Test func streamedEnvelopesCarryNoTag() throws {
    let backend = try ValidatingBackend(items: 200)
    let gateway = try Self.gateway(backend: backend, envelope: true, envelopeMaxBytes: 1024)
    defer { gateway.stopExpectingCleanExit() }
    let streamed = try send("GET", "/list", to: gateway.port)
    let conditional = try send("GET", "/list", to: gateway.port, headers: [("If-None-Match", "\"v1\"")])

    #expect(streamed.status == 200 && streamed.head.isChunked && streamed.body.count > 1024)
    #expect(streamed.head.value("ETag") == nil && streamed.head.values("Accept-Ranges").isEmpty)
    #expect(conditional.status == 200 && conditional.body == streamed.body)
  }

  /// On a route with a `cache` block the client's conditions do not reach the backend (the
  /// answer is fetched for everyone): a MISS meets them against the backend's validators,
  /// and the body, read all the same, is stored.
  @Test func aMissOnACachedRouteMeetsConditionsAndStillStores() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(backend: backend, envelope: false, cache: ["fresh_s": 60])
    defer { gateway.stopExpectingCleanExit() }
    let miss = try send("GET", "/list", to: gateway.port, headers: [("If-None-Match", "\"v1\"")])
    // The 304 leaves as the head arrives; the body is stored once it has been read (a
    // request before that shares the exchange instead).
    var hit: ReceivedAnswer?
    let stored = waitUntil(timeout: 10, interval: .milliseconds(20)) {
      guard let answer = try? send("GET", "/list", to: gateway.port) else { return false }
      if answer.head.value("X-Gatehouse-Cache") == "HIT" { hit = answer }
      return hit != nil
    }

    #expect(miss.status == 304 && miss.head.value("X-Gatehouse-Cache") == "MISS" && miss.head.value("ETag") == "\"v1\"")
    #expect(stored && hit?.status == 200 && hit?.body.isEmpty == false)
    #expect(backend.requests.count == 1 && backend.requests[0].head.value("If-None-Match") == nil)
  }

  /// A success without a type or a length is read whole on an enveloped route and passed
  /// through as it is: the client's conditions are met on it too.
  @Test func aBufferedPassThroughMeetsConditions() throws {
    let backend = try TestBackend(
      always: .respond(
        BackendAnswer(
          headers: [("ETag", "\"raw1\""), ("Accept-Ranges", "bytes")], body: .chunked([Array("plain".utf8)]))))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [TestConfig.route("raw", match: "/*", extra: ["envelope": ["enabled": true]])],
        upstreams: ["api": TestConfig.upstream(port: backend.port)]))
    defer { gateway.stopExpectingCleanExit() }
    let whole = try send("GET", "/raw", to: gateway.port)
    let notModified = try send("GET", "/raw", to: gateway.port, headers: [("If-None-Match", "\"raw1\"")])
    #expect(whole.status == 200 && whole.text == "plain" && whole.head.values("Accept-Ranges").isEmpty)
    #expect(notModified.status == 304 && notModified.body.isEmpty && notModified.head.value("ETag") == "\"raw1\"")
  }

  /// Stubs are answers the gateway builds: they carry a tag and meet conditions.
  @Test func stubsCarryValidators() throws {
    let route = StubTests.stubRoute(mode: "always", envelope: true)
    let gateway = try GatewayProcess(
      config: TestConfig.make(routes: [route], upstreams: ["api": TestConfig.upstream(port: 9)]))
    defer { gateway.stopExpectingCleanExit() }
    let first = try send("GET", "/stubbed/a", to: gateway.port)
    let etag = try #require(first.head.value("ETag"))
    let again = try send("GET", "/stubbed/a", to: gateway.port, headers: [("If-None-Match", etag)])
    #expect(Self.isGatewayTag(etag))
    #expect(again.status == 304 && again.head.value("ETag") == etag)
  }

  /// A stored entry past `fresh_s` is revalidated with the stored answer's validators: the
  /// backend's 304 renews it without a body (`REVALIDATED`, counted); once the backend's
  /// representation changes, the new one comes whole with a new tag.
  @Test func anExpiredEntryIsRevalidatedAndAChangedOneReplaced() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(backend: backend, envelope: true, cache: ["fresh_s": 1], admin: true)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let first = try send("GET", "/list", to: gateway.port)
    let sentFirst = backend.bodyBytesSent.value

    var revalidated: ReceivedAnswer?
    let renewed = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      guard let answer = try? send("GET", "/list", to: gateway.port) else { return false }
      if answer.head.value("X-Gatehouse-Cache") == "REVALIDATED" { revalidated = answer }
      return revalidated != nil
    }
    #expect(renewed)
    #expect(revalidated?.body == first.body && revalidated?.head.value("ETag") == first.head.value("ETag"))
    #expect(revalidated?.head.value("Age") == "0")
    #expect(backend.bodyBytesSent.value == sentFirst, "a 304 sends no body")
    #expect(backend.requests.last?.head.value("If-None-Match") == "\"v1\"")
    #expect(backend.requests.last?.head.value("If-Modified-Since") == ValidatingBackend.lastModified)
    let metrics = try MetricsPage(try admin.request("GET", "/metrics").text)
    #expect(metrics.value("gatehouse_cache_total", ["result": "revalidated"]) >= 1)

    backend.version.value = 2
    var changed: ReceivedAnswer?
    let replaced = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      guard let answer = try? send("GET", "/list", to: gateway.port) else { return false }
      if answer.text.contains(#""v":2"#) { changed = answer }
      return changed != nil
    }
    #expect(replaced)
    #expect(changed?.status == 200 && changed?.head.value("X-Gatehouse-Cache") == "MISS")
    #expect(Self.isGatewayTag(changed?.head.value("ETag")) && changed?.head.value("ETag") != first.head.value("ETag"))
  }

  /// Requests that wait for one revalidation share its outcome: one conditional request,
  /// and the confirmed stored answer for all of them.
  @Test func requestsWaitingForARevalidationShareTheConfirmedAnswer() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(backend: backend, envelope: true, cache: ["fresh_s": 1], admin: true)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let first = try send("GET", "/list", to: gateway.port)
    let hold = Gate()
    backend.holdNotModified.value = hold
    // Past `fresh_s` (a second): the next request revalidates.
    sleep(for: .milliseconds(1500))

    let leader = try CollapseTests.start("/list", id: "c0", port: gateway.port)
    #expect(backend.server.waitForRequests(2))
    let waiters = try (1...3).map { try CollapseTests.start("/list", id: "c\($0)", port: gateway.port) }
    try #require(CollapseTests.waitForWaiters(3, admin: admin))
    hold.open()
    let answers = try ([leader] + waiters).map { try $0.readAnswer() }

    #expect(backend.requests.count == 2)
    #expect(backend.requests.last?.head.value("If-None-Match") == "\"v1\"")
    #expect(answers.allSatisfy { $0.status == 200 && $0.body == first.body })
    #expect(answers.allSatisfy { $0.head.value("ETag") == first.head.value("ETag") })
    #expect(answers[0].head.value("X-Gatehouse-Cache") == "REVALIDATED")
  }

  /// During `stale_while_revalidate_s` the background refresh asks conditionally: the
  /// backend's 304 renews the entry (it is served fresh again) without a body transfer.
  @Test func aBackend304DuringStaleWhileRevalidateKeepsServingWithoutABody() throws {
    let backend = try ValidatingBackend()
    let gateway = try Self.gateway(
      backend: backend, envelope: false, cache: ["fresh_s": 1, "stale_while_revalidate_s": 60], admin: true)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let first = try send("GET", "/list", to: gateway.port)
    let sentFirst = backend.bodyBytesSent.value

    var stale: ReceivedAnswer?
    let staled = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      guard let answer = try? send("GET", "/list", to: gateway.port) else { return false }
      if answer.head.value("X-Gatehouse-Cache") == "STALE" { stale = answer }
      return stale != nil
    }
    #expect(staled && stale?.body == first.body)
    // The refresh's 304 renews the entry, and is counted.
    let counted = waitUntil(timeout: 10, interval: .milliseconds(50)) {
      guard let page = try? MetricsPage(try admin.request("GET", "/metrics").text) else { return false }
      return page.value("gatehouse_cache_total", ["result": "revalidated"]) >= 1
    }
    #expect(counted)
    #expect(backend.requests.count >= 2)
    #expect(backend.requests.dropFirst().allSatisfy { $0.head.value("If-None-Match") == "\"v1\"" })
    #expect(backend.bodyBytesSent.value == sentFirst, "no body after the first")
  }
}
