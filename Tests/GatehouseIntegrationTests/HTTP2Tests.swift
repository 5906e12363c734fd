import Foundation
import Synchronization
import Testing

/// Runs the HTTP/2 clients of these tests: `Tests/Tools/h2probe.py` (Python `h2`, Debian
/// `python3-h2`, which `Scripts/install-deps.sh` installs), `curl` and `nghttp`.
enum HTTP2Client {
  static let probe = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Tools/h2probe.py").path

  /// Debian's interpreter, where `python3-h2` is installed (a `python3` earlier on PATH may
  /// be another one).
  static let python = "/usr/bin/python3"

  /// Runs the probe in `mode` with `spec` against `port`; its JSON report.
  static func run(_ port: UInt16, _ mode: String, _ spec: [String: Any] = [:], tls: Bool = false) throws
    -> [String: Any]
  {
    try parse(try runText(port, mode, spec, tls: tls))
  }

  /// The probe's report as text (what a thread hands back to its test).
  static func runText(_ port: UInt16, _ mode: String, _ spec: [String: Any] = [:], tls: Bool = false) throws
    -> String
  {
    let specText = String(decoding: try JSONSerialization.data(withJSONObject: spec), as: UTF8.self)
    let output = try ExternalTool.run(
      python, [probe, String(port), mode, specText] + (tls ? ["--tls"] : []), input: [], timeout: 60)
    return String(decoding: output, as: UTF8.self)
  }

  static func parse(_ text: String) throws -> [String: Any] {
    guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
      throw ToolError(description: "h2probe printed \(text)")
    }
    return object
  }

  /// The probe's per-stream reports.
  static func streams(_ report: [String: Any]) -> [[String: Any]] {
    report["streams"] as? [[String: Any]] ?? []
  }

  /// `curl` with `arguments`; its stdout.
  static func curl(_ arguments: [String]) throws -> String {
    String(decoding: try ExternalTool.run("/usr/bin/curl", ["-s", "-m", "20"] + arguments, input: []), as: UTF8.self)
  }
}

/// HTTP/2 to clients (Docs/http2.md) through the real binary: h2c with prior knowledge and h2 over
/// TLS by ALPN, every stream an exchange like an HTTP/1.1 request, flow control both ways,
/// cancellation, the abuses that end a connection, and drain.
@Suite struct HTTP2Tests {
  /// `config` with its listener taking h2c (prior knowledge) besides HTTP/1.1.
  static func h2c(_ config: [String: Any]) -> [String: Any] {
    var config = config
    config["listen"] = [["address": "127.0.0.1:0", "h2c": true]]
    return config
  }

  /// A backend answering `/slow…` after `gate` opens, `/big…` with 2 MB, `/echo…` with the
  /// request body, and everything else with a small JSON object naming the path.
  static func backend(gate: Gate = Gate()) throws -> TestBackend {
    try TestBackend(options: .init(noDelay: true)) { request in
      if request.path.hasPrefix("/slow") {
        var answer = BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array("{}".utf8)))
        answer.holdUntil = gate
        return .respond(answer)
      }
      if request.path.hasPrefix("/big") {
        return .respond(BackendAnswer(body: .generated(length: 2_000_000, chunked: request.path.hasSuffix("chunked"))))
      }
      if request.path.hasPrefix("/echo") {
        return .respond(BackendAnswer(body: .echo))
      }
      return jsonAnswer(#"{"path":"\#(request.path)"}"#)
    }
  }

  static func gateway(_ backend: TestBackend, extra: [String: Any] = [:], limits: [String: Any]? = nil)
    throws -> GatewayProcess
  {
    var route = TestConfig.route("all", match: "/*")
    for (key, value) in extra { route[key] = value }
    let config = TestConfig.make(
      routes: [route], upstreams: ["api": TestConfig.upstream(port: backend.port)], limits: limits)
    return try GatewayProcess(config: h2c(TestConfig.withAdmin(config)))
  }

  @Test func curlSpeaksH2WithPriorKnowledgeAndHTTP11OnTheSameListener() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend, extra: ["envelope": ["enabled": true]])
    let url = "http://127.0.0.1:\(gateway.port)/users/7"
    let h2 = try HTTP2Client.curl(["--http2-prior-knowledge", "-w", "\n%{http_version} %{http_code}", url])
    #expect(h2.hasSuffix("\n2 200"), "\(h2)")
    #expect(h2.hasPrefix(#"{"code":0,"datas":{"path":"/users/7"},"message":""}"#))
    let h1 = try HTTP2Client.curl(["--http1.1", "-w", "\n%{http_version} %{http_code}", url])
    #expect(h1.hasSuffix("\n1.1 200"), "\(h1)")
    // Both protocols are told apart in the access log and in the metrics.
    #expect(
      gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["protocol"] as? String == "HTTP/2" })
    #expect(
      gateway.waitForLogLine { $0["msg"] as? String == "access" && $0["protocol"] as? String == "HTTP/1.1" })
    let page = try MetricsPage(try gateway.admin().request("GET", "/metrics").text)
    #expect(page.value("gatehouse_requests_total", ["route": "all", "code": "200", "protocol": "HTTP/2"]) == 1)
    #expect(page.value("gatehouse_requests_total", ["route": "all", "code": "200", "protocol": "HTTP/1.1"]) == 1)
    gateway.stopExpectingCleanExit()
  }

  /// A cleartext listener without `h2c` is HTTP/1.1 only: the preface is a bad request.
  @Test func withoutH2cThePrefaceIsABadHTTP11Request() throws {
    let backend = try Self.backend()
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    let client = try RawClient(port: gateway.port)
    defer { client.close() }
    try client.send(Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8))
    let (bytes, _) = client.readUntilEnd()
    #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 400"))
    #expect(backend.requests.isEmpty)
  }

  @Test func tlsListenersOfferH2ByALPNUnlessHTTP2IsOff() throws {
    let certificates = try TLSGatewayTests.Certificates()
    let backend = try Self.backend()
    for http2 in [true, false] {
      var config = TestConfig.make(
        routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: backend.port)])
      config["listen"] = certificates.tlsListen(["http2": http2])
      let gateway = try GatewayProcess(config: config)
      let out = try HTTP2Client.curl([
        "--http2", "--cacert", certificates.path + "/ca.pem", "-w", "\n%{http_version}",
        "https://localhost:\(gateway.port)/hello",
      ])
      #expect(out == #"{"path":"/hello"}"# + "\n" + (http2 ? "2" : "1.1"), "http2: \(http2)")
      gateway.stopExpectingCleanExit()
    }
  }

  /// Many streams at once on one connection, fast ones beside a held one, a large download
  /// and large uploads without `content-length` (chunked to the upstream).
  @Test func manyConcurrentStreamsMixedSizesAndUploads() throws {
    let gate = Gate()
    let backend = try Self.backend(gate: gate)
    let gateway = try Self.gateway(backend)
    var requests: [[String: Any]] = (0..<60).map { ["path": "/item/\($0)"] }
    requests.append(["path": "/slow/1"])
    requests.append(["path": "/big/chunked"])
    requests.append(["path": "/big/plain"])
    requests.append(["path": "/echo/1", "method": "POST", "body_bytes": 1_000_000])
    requests.append([
      "path": "/echo/2", "method": "POST", "body_bytes": 300_000, "headers": [["content-length", "300000"]],
    ])
    // The held answer comes once the others are all in.
    let opener = Thread {
      _ = waitUntil(timeout: 20) { backend.requests.count >= 64 }
      gate.open()
    }
    opener.start()
    let report = try HTTP2Client.run(gateway.port, "requests", ["requests": requests])
    #expect(report["outcome"] as? String == "done", "\(report["outcome"] ?? "-")")
    let streams = HTTP2Client.streams(report)
    #expect(streams.count == requests.count)
    for (index, stream) in streams.enumerated() {
      #expect(stream["status"] as? Int == 200 && stream["ended"] as? Bool == true, "stream \(index): \(stream)")
    }
    for index in 0..<60 {
      #expect(streams[index]["body"] as? String == #"{"path":"/item/\#(index)"}"#)
    }
    #expect(streams[61]["length"] as? Int == 2_000_000 && streams[62]["length"] as? Int == 2_000_000)
    // Echoed uploads: the same bytes back (the probe sums them), framed as the client did.
    let expectedSum = { (count: Int) in (0..<count).reduce(0) { ($0 + $1 % 251) % 65521 } }
    #expect(streams[63]["length"] as? Int == 1_000_000 && streams[63]["sum"] as? Int == expectedSum(1_000_000))
    #expect(streams[64]["length"] as? Int == 300_000 && streams[64]["sum"] as? Int == expectedSum(300_000))
    let uploads = backend.requests.filter { $0.path.hasPrefix("/echo") }.sorted { $0.path < $1.path }
    #expect(uploads.map(\.bodyLength) == [1_000_000, 300_000])
    #expect(uploads.map(\.bodyWasChunked) == [true, false])
    gateway.stopExpectingCleanExit()
  }

  /// Streams of one connection that follow one another: the channel and session of a
  /// stream whose exchange finished serve the next stream (`HTTP2ServerConnection` keeps a
  /// few), and nothing of one stream reaches the next. A HEAD, a refused request, an upload,
  /// a 2 MB answer and plain GETs each get their own answer and request id, and each
  /// exchange is counted once.
  @Test func streamsThatFollowOneAnotherEachGetTheirOwnAnswer() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend)
    let requests: [[String: Any]] = [
      ["path": "/first"],
      ["path": "/head", "method": "HEAD"],
      // A dot segment: refused at the door with a 400, its session not kept.
      ["path": "/a/../b"],
      ["path": "/echo/1", "method": "POST", "body": "hello"],
      ["path": "/second"],
      ["path": "/big/chunked"],
      ["path": "/third"],
    ]
    let report = try HTTP2Client.run(gateway.port, "requests", ["requests": requests, "one_at_a_time": true])
    #expect(report["outcome"] as? String == "done", "\(report)")
    let streams = HTTP2Client.streams(report)
    try #require(streams.count == requests.count)
    #expect(streams.map { $0["status"] as? Int } == [200, 200, 400, 200, 200, 200, 200])
    #expect(streams[0]["body"] as? String == #"{"path":"/first"}"#)
    #expect(streams[1]["length"] as? Int == 0)
    #expect((streams[2]["body"] as? String)?.contains(#""code":400"#) == true, "\(streams[2])")
    #expect(streams[3]["body"] as? String == "hello")
    #expect(streams[4]["body"] as? String == #"{"path":"/second"}"#)
    #expect(streams[5]["length"] as? Int == 2_000_000)
    #expect(streams[6]["body"] as? String == #"{"path":"/third"}"#)
    let ids = streams.compactMap { ($0["headers"] as? [String: Any])?["x-request-id"] as? String }
    #expect(ids.count == requests.count && Set(ids).count == ids.count, "\(ids)")
    #expect(backend.requests.map(\.path) == ["/first", "/head", "/echo/1", "/second", "/big/chunked", "/third"])
    let page = try MetricsPage(try gateway.admin().request("GET", "/metrics").text)
    #expect(page.value("gatehouse_requests_total", ["route": "all", "code": "200", "protocol": "HTTP/2"]) == 6)
    gateway.stopExpectingCleanExit()
  }

  /// An upstream head as large as the gateway takes from an upstream (here 40 KiB of
  /// fields, past the 16 KiB a client's head may have) reaches an HTTP/2 client whole, as
  /// it reaches an HTTP/1.1 one: reading the answer back for HEADERS does not cut it.
  @Test func aLargeUpstreamHeadReachesTheStream() throws {
    let big = String(repeating: "v", count: 4000)
    let backend = try TestBackend(options: .init(noDelay: true)) { _ in
      .respond(
        BackendAnswer(
          headers: [("Content-Type", "application/json")] + (0..<10).map { ("X-Big-\($0)", big) },
          body: .bytes(Array("{}".utf8))))
    }
    let gateway = try Self.gateway(backend)
    let report = try HTTP2Client.run(gateway.port, "requests", ["requests": [["path": "/large"]]])
    let stream = try #require(HTTP2Client.streams(report).first)
    #expect(stream["status"] as? Int == 200 && stream["body"] as? String == "{}", "\(stream)")
    let headers = stream["headers"] as? [String: Any] ?? [:]
    #expect((0..<10).allSatisfy { headers["x-big-\($0)"] as? String == big })
    gateway.stopExpectingCleanExit()
  }

  @Test func nghttpFetchesSeveralResourcesOnOneConnection() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend)
    let base = "http://127.0.0.1:\(gateway.port)"
    let out = String(
      decoding: try ExternalTool.run(
        "/usr/bin/nghttp", ["-n", "-s", "\(base)/a", "\(base)/b", "\(base)/big/plain"], input: [], timeout: 30),
      as: UTF8.self)
    // nghttp's statistics: one line per stream with its status and size.
    #expect(out.contains(" 200 ") && out.contains("/a") && out.contains("/b") && out.contains("/big/plain"), "\(out)")
    #expect(backend.connectionCount >= 1 && backend.requests.count == 3)
  }

  /// A stream whose client never reads holds the answer its window allows and no more; the
  /// connection's other streams go on.
  @Test func aStreamThatIsNotReadDoesNotHoldTheOthers() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend)
    let report = try HTTP2Client.run(
      gateway.port, "slow-reader", ["slow": "/big/plain", "fast": ["/a", "/big/chunked", "/b"]])
    #expect(report["outcome"] as? String == "done")
    #expect(report["slow_bytes"] as? Int == 65_535)
    let streams = HTTP2Client.streams(report)
    #expect(streams.map { $0["status"] as? Int } == [200, 200, 200])
    #expect(streams.map { $0["ended"] as? Bool } == [true, true, true])
    #expect(streams[1]["length"] as? Int == 2_000_000)
  }

  /// RST_STREAM while the upstream works on the request: its connection is closed (the
  /// answer can go nowhere), and the next stream is served.
  @Test(arguments: ["wait", "head", "body"])
  func cancellingAStreamClosesItsUpstreamConnection(phase: String) throws {
    let gate = Gate()
    let backend = try Self.backend(gate: gate)
    let gateway = try Self.gateway(backend)
    let path = phase == "wait" ? "/slow/cancel" : "/big/chunked"
    let report = try HTTP2Client.run(gateway.port, "cancel", ["path": path, "phase": phase, "then": "/after"])
    #expect(report["outcome"] as? String == "done")
    #expect(HTTP2Client.streams(report).first?["body"] as? String == #"{"path":"/after"}"#)
    // The cancelled exchange's upstream connection is closed, not kept for another request:
    // once the held answer is let go, only the connection `/after` used is left open.
    gate.open()
    #expect(waitUntil(timeout: 10) { backend.openConnectionCount <= 1 })
    #expect(
      gateway.waitForLogLine {
        $0["msg"] as? String == "access" && $0["path"] as? String == path && $0["protocol"] as? String == "HTTP/2"
      })
  }

  /// Trailers after a request body are not forwarded; the body is.
  @Test func requestTrailersAreDroppedSafely() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend)
    let report = try HTTP2Client.run(
      gateway.port, "requests",
      [
        "requests": [
          ["path": "/echo/t", "method": "POST", "body": "hello", "trailers": [["x-checksum", "abc"]]]
        ]
      ])
    let stream = try #require(HTTP2Client.streams(report).first)
    #expect(stream["status"] as? Int == 200 && stream["body"] as? String == "hello")
    let received = try #require(backend.requests.first)
    #expect(received.bodyText == "hello")
    #expect(!String(decoding: received.raw, as: UTF8.self).lowercased().contains("x-checksum"))
  }

  /// A request HTTP/1.1 would refuse is refused the same way; `Host` and `:authority` that
  /// disagree are a 400 (RFC 9113 §8.3.1); connection-specific fields reset the stream.
  @Test func malformedRequestsAreRefusedPerStream() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend)
    let report = try HTTP2Client.run(
      gateway.port, "requests",
      [
        "requests": [
          ["path": "/a/../b"],
          ["path": "/x", "headers": [["host", "other.example"]]],
          ["path": "/y", "headers": [["connection", "keep-alive"]]],
          ["path": "/fine"],
        ]
      ])
    let streams = HTTP2Client.streams(report)
    #expect(streams.count == 4)
    #expect(streams[0]["status"] as? Int == 400)
    #expect(streams[1]["status"] as? Int == 400)
    #expect((streams[0]["body"] as? String)?.contains(#""code":400"#) == true)
    #expect(streams[2]["reset"] as? Int == 1, "PROTOCOL_ERROR")
    #expect(streams[3]["status"] as? Int == 200)
    #expect(backend.requests.map(\.path) == ["/fine"])
  }

  /// Each abuse ends its connection with GOAWAY (ENHANCE_YOUR_CALM, 11) and a throttled
  /// warning, and other clients are served meanwhile.
  @Test(arguments: [
    "ping", "settings", "priority", "empty-data", "window-update", "rapid-reset", "continuation", "header-list",
    "streams",
  ])
  func abuseEndsTheConnection(kind: String) throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend, limits: ["max_header_bytes": 8192])
    let count = kind == "window-update" ? 5000 : 1000
    let report = try HTTP2Client.run(gateway.port, "abuse", ["kind": kind, "count": count])
    #expect(report["goaway"] as? Int == 11, "\(kind): \(report)")
    #expect(report["closed"] as? Bool == true)
    #expect(
      gateway.waitForLogLine {
        $0["level"] as? String == "warn" && ($0["msg"] as? String)?.contains("HTTP/2") == true
      })
    let other = try send("GET", "/still", to: gateway.port)
    #expect(other.status == 200)
  }

  /// A client that shuts its windows and never opens them is cut after the idle timeout.
  @Test func aClientThatNeverOpensItsWindowIsCut() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend, limits: ["idle_timeout_ms": 500])
    let report = try HTTP2Client.run(
      gateway.port, "abuse", ["kind": "window-shut", "path": "/big/plain", "wait_s": 15])
    #expect(report["closed"] as? Bool == true, "\(report)")
    #expect(report["goaway"] as? Int == 3, "FLOW_CONTROL_ERROR")
  }

  /// SIGTERM: GOAWAY at once, the stream in flight still gets its answer, then the exit.
  /// (nghttp, whose client goes on with open streams after a GOAWAY as RFC 9113 §6.8 asks.)
  @Test func drainSendsGoAwayAndLetsStreamsFinish() throws {
    let gate = Gate()
    let backend = try Self.backend(gate: gate)
    let gateway = try Self.gateway(backend, limits: ["drain_timeout_ms": 10_000])
    let result = Shared<String?>(nil)
    let port = gateway.port
    let client = Thread {
      let out = try? ExternalTool.run(
        "/usr/bin/nghttp", ["-v", "http://127.0.0.1:\(port)/slow/drain"], input: [], timeout: 30)
      result.value = out.map { String(decoding: $0, as: UTF8.self) } ?? "failed"
    }
    client.start()
    #expect(waitUntil(timeout: 10) { backend.requests.count == 1 })
    gateway.send(signal: SIGTERM)
    // The gateway stops accepting while the stream is still open; then the answer comes.
    #expect(waitUntil(timeout: 10) { (try? send("GET", "/x", to: port, timeout: 1)) == nil })
    gate.open()
    #expect(waitUntil(timeout: 20) { result.value != nil })
    let out = try #require(result.value)
    #expect(out.contains("recv GOAWAY frame"), "\(out)")
    #expect(out.contains(":status: 200") && out.contains("{}"))
    #expect(gateway.waitForExit(timeout: 20) == .success)
  }

  /// A reload that removes a listener sends its HTTP/2 connections GOAWAY; their streams in
  /// flight finish. (HTTP/1.1 connections of that listener go on; Docs/behaviour.md, "Reload".)
  @Test func aReloadRemovingTheListenerSendsGoAway() throws {
    let gate = Gate()
    let backend = try Self.backend(gate: gate)
    let extraPort = try TestSocket.unusedPort()
    func config(extra: Bool) -> [String: Any] {
      var config = TestConfig.withAdmin(
        TestConfig.make(
          routes: [TestConfig.route("all", match: "/*")], upstreams: ["api": TestConfig.upstream(port: backend.port)]))
      config["listen"] =
        [["address": "127.0.0.1:0", "h2c": true]] + (extra ? [["address": "127.0.0.1:\(extraPort)", "h2c": true]] : [])
      return config
    }
    let gateway = try GatewayProcess(config: config(extra: true))
    let admin = try gateway.admin()
    let result = Shared<String?>(nil)
    let client = Thread {
      let out = try? ExternalTool.run(
        "/usr/bin/nghttp", ["-v", "http://127.0.0.1:\(extraPort)/slow/reload"], input: [], timeout: 30)
      result.value = out.map { String(decoding: $0, as: UTF8.self) } ?? "failed"
    }
    client.start()
    #expect(waitUntil(timeout: 10) { backend.requests.count == 1 })
    try gateway.rewriteConfig(config(extra: false))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    gate.open()
    #expect(waitUntil(timeout: 20) { result.value != nil })
    let out = try #require(result.value)
    #expect(out.contains("recv GOAWAY frame"), "\(out)")
    #expect(out.contains(":status: 200"))
    gateway.stopExpectingCleanExit()
  }

  /// A connection with no stream open closes (GOAWAY) after `idle_timeout_ms`; one that is
  /// busy does not.
  @Test func idleConnectionsAreClosedAfterTheIdleTimeout() throws {
    let backend = try Self.backend()
    let gateway = try Self.gateway(backend, limits: ["idle_timeout_ms": 300])
    let started = Date()
    let report = try HTTP2Client.run(gateway.port, "abuse", ["kind": "idle", "wait_s": 10])
    #expect(report["goaway"] as? Int == 0 && report["closed"] as? Bool == true, "\(report)")
    #expect(Date().timeIntervalSince(started) < 9)
  }

  /// A fast upstream and a client that does not read: the gateway holds the stream's window
  /// and about one read, so the backend is stopped long before its whole 64 MB answer.
  @Test func aClientThatDoesNotReadStopsTheUpstream() throws {
    let backend = try TestBackend(options: .init(noDelay: true)) { request in
      request.path == "/huge"
        ? .respond(BackendAnswer(body: .generated(length: 64 << 20, chunked: false))) : jsonAnswer("{}")
    }
    let gateway = try Self.gateway(backend)
    let report = try HTTP2Client.run(gateway.port, "slow-reader", ["slow": "/huge", "fast": ["/a"]])
    #expect(report["outcome"] as? String == "done")
    #expect(report["slow_bytes"] as? Int == 65_535)
    // Socket buffers on both sides hold some megabytes; a whole answer held would be 64.
    sleep(for: .milliseconds(500))
    #expect(backend.bodyBytesSent < 24 << 20, "\(backend.bodyBytesSent) bytes sent")
    let resident = GatewayProcess.residentBytes(pid: gateway.pid) ?? 0
    #expect(resident < 64 << 20, "\(resident) bytes resident")
  }

  /// HTTP/2 connections count against `max_connections` like HTTP/1.1 ones.
  @Test func http2ConnectionsCountAgainstMaxConnections() throws {
    let gate = Gate()
    let backend = try Self.backend(gate: gate)
    let gateway = try Self.gateway(backend, limits: ["max_connections": 1])
    let port = gateway.port
    let first = Shared<String?>(nil)
    let holder = Thread {
      first.value = try? HTTP2Client.runText(port, "requests", ["requests": [["path": "/slow/a"]]])
    }
    holder.start()
    #expect(waitUntil(timeout: 10) { backend.requests.count == 1 })
    // The second connection is closed at once: no answer on it.
    let second = try? HTTP2Client.run(port, "requests", ["requests": [["path": "/b"]]])
    #expect(second?["outcome"] as? String != "done")
    #expect(backend.requests.count == 1)
    gate.open()
    #expect(waitUntil(timeout: 20) { first.value != nil })
    let report = try HTTP2Client.parse(try #require(first.value))
    #expect(HTTP2Client.streams(report).first?["status"] as? Int == 200)
  }
}

/// Every feature of an HTTP/1.1 request on an HTTP/2 stream (Docs/http2.md): token injection and
/// its retry, the envelope, stale answers from the store, collapsed requests, client keys
/// and rate limits, stubs, and limits on bodies.
@Suite struct HTTP2FeatureTests {
  /// Token routes (`/tok/*`, enveloped, the backend rejects the first token), a cached route
  /// (`/cached/*`, its answers held by `gate` while `holding`, refused while `down`), a stub
  /// (`/stub`) and a limited client key.
  final class Setup {
    let oauth: OAuth2TestServer
    let backend: TestBackend
    let gateway: GatewayProcess
    let gate = Gate()
    let holding = Shared(false)
    let down = Shared(false)
    static let key = "h2-client-key-1"

    init(rate: Double = 100, maxBodyBytes: Int? = nil) throws {
      let oauth = try OAuth2TestServer()
      self.oauth = oauth
      let gate = self.gate
      let holding = self.holding
      let down = self.down
      backend = try TestBackend(options: .init(noDelay: true)) { request in
        if request.path.hasPrefix("/tok") {
          guard bearerToken(of: request) == oauth.token(2) else {
            return .respond(BackendAnswer(status: 401, reason: "Unauthorized", body: .bytes(Array("no".utf8))))
          }
          return jsonAnswer(#"{"token":"ok"}"#)
        }
        if request.path == "/echo" { return .respond(BackendAnswer(body: .echo)) }
        if down.value { return .respond(BackendAnswer(status: 503, reason: "Down")) }
        var answer = BackendAnswer(
          headers: [("Content-Type", "application/json")], body: .bytes(Array(#"{"p":"\#(request.path)"}"#.utf8)))
        if holding.value { answer.holdUntil = gate }
        return .respond(answer)
      }
      var config = TestConfig.withTokens(
        upstreamPort: backend.port, tokens: ["partner": oauth.tokenConfig()],
        routes: [
          TestConfig.tokenRoute("tok", match: "/tok/*", token: "partner", extra: ["envelope": ["enabled": true]]),
          TestConfig.route("cached", match: "/cached/*", extra: ["cache": ["stale_if_error_s": 3600]]),
          TestConfig.route(
            "stub", match: "/stub", extra: ["stub": ["mode": "always", "status": 200, "body": ["s": 1]]]),
          TestConfig.route("echo", match: "/echo"),
        ], store: ["path": "var/store.sqlite"])
      config["clients"] = [
        "required": true,
        "keys": [
          [
            "id": "app", "sha256": try ExternalTool.sha256Hex(Self.key), "rate_per_s": rate,
            "burst": rate >= 1 ? 10 : 1,
          ]
        ],
      ]
      if let maxBodyBytes { config["limits"] = ["max_body_bytes": maxBodyBytes] }
      gateway = try GatewayProcess(config: HTTP2Tests.h2c(config))
    }

    func request(_ path: String, key: Bool = true, extra: [String: Any] = [:]) -> [String: Any] {
      var request: [String: Any] = ["path": path, "headers": key ? [["x-api-key", Self.key]] : []]
      for (name, value) in extra { request[name] = value }
      return request
    }

    func run(_ requests: [[String: Any]]) throws -> [[String: Any]] {
      HTTP2Client.streams(try HTTP2Client.run(gateway.port, "requests", ["requests": requests]))
    }
  }

  @Test func tokensAndTheirRetryTheEnvelopeAndStubs() throws {
    let setup = try Setup()
    let streams = try setup.run([
      setup.request("/tok/a", extra: ["headers": [["x-api-key", Setup.key], ["authorization", "Bearer mine"]]]),
      setup.request("/stub"),
    ])
    #expect(streams[0]["status"] as? Int == 200)
    #expect(streams[0]["body"] as? String == #"{"code":0,"datas":{"token":"ok"},"message":""}"#)
    // The first token was rejected, the refreshed one taken; the client's never went on.
    #expect(setup.backend.requests.compactMap(bearerToken) == [setup.oauth.token(1), setup.oauth.token(2)])
    #expect(streams[1]["body"] as? String == #"{"s":1}"#, "a stub without the envelope")
    setup.gateway.stopExpectingCleanExit()
  }

  @Test func staleAnswersAndCollapsedStreams() throws {
    let setup = try Setup()
    // Two streams for one key while the backend holds the first: one upstream request.
    setup.holding.value = true
    let backend = setup.backend
    let gate = setup.gate
    let opener = Thread {
      _ = waitUntil(timeout: 10) { backend.requests.count >= 1 }
      sleep(for: .milliseconds(300))
      gate.open()
    }
    opener.start()
    let first = try setup.run([setup.request("/cached/x"), setup.request("/cached/x")])
    #expect(first.map { $0["status"] as? Int } == [200, 200])
    #expect(first.map { $0["body"] as? String } == [#"{"p":"/cached/x"}"#, #"{"p":"/cached/x"}"#])
    #expect(setup.backend.requests.filter { $0.path == "/cached/x" }.count == 1)
    #expect(try setup.gateway.admin().waitForStoredEntries(1))
    // The backend fails: the stored answer is served on a stream too.
    setup.holding.value = false
    setup.down.value = true
    let stale = try setup.run([setup.request("/cached/x")])
    #expect(stale.first?["status"] as? Int == 200)
    #expect((stale.first?["headers"] as? [String: String])?["x-gatehouse-cache"] == "STALE")
    setup.gateway.stopExpectingCleanExit()
  }

  /// HEAD gets GET's head without a body; a conditional GET the gateway can meet gets 304.
  @Test func headAndConditionalRequests() throws {
    let setup = try Setup()
    let first = try setup.run([setup.request("/stub"), setup.request("/stub", extra: ["method": "HEAD"])])
    let tag = try #require((first[0]["headers"] as? [String: String])?["etag"])
    #expect(first[1]["status"] as? Int == 200 && first[1]["length"] as? Int == 0 && first[1]["ended"] as? Bool == true)
    #expect((first[1]["headers"] as? [String: String])?["content-length"] == "7")
    let again = try setup.run([
      setup.request("/stub", extra: ["headers": [["x-api-key", Setup.key], ["if-none-match", tag]]])
    ])
    #expect(again.first?["status"] as? Int == 304 && again.first?["length"] as? Int == 0)
    #expect((again.first?["headers"] as? [String: String])?["etag"] == tag)
    setup.gateway.stopExpectingCleanExit()
  }

  @Test func clientKeysAndRateLimits() throws {
    let setup = try Setup(rate: 0.01)
    let streams = try setup.run([setup.request("/stub", key: false), setup.request("/stub"), setup.request("/stub")])
    #expect(streams.map { $0["status"] as? Int } == [401, 200, 429])
    #expect((streams[2]["headers"] as? [String: String])?["retry-after"] != nil)
    setup.gateway.stopExpectingCleanExit()
  }

  /// A body without `content-length` is counted as it comes: past `max_body_bytes`, a 413
  /// envelope on its stream, as the HTTP/1.1 parser answers a chunked one.
  @Test func bodiesPastTheLimitAre413() throws {
    let setup = try Setup(maxBodyBytes: 10_000)
    let streams = try setup.run([
      setup.request("/echo", extra: ["method": "POST", "body_bytes": 50_000]),
      setup.request("/echo", extra: ["method": "POST", "body_bytes": 5_000]),
      setup.request(
        "/echo", extra: ["method": "POST", "body_bytes": 20_000, "headers": [["content-length", "20000"]]]),
    ])
    #expect(streams.map { $0["status"] as? Int } == [413, 200, 413])
    #expect(streams[1]["length"] as? Int == 5_000)
    #expect(setup.backend.requests.filter { $0.path == "/echo" }.count <= 2)
    setup.gateway.stopExpectingCleanExit()
  }
}
