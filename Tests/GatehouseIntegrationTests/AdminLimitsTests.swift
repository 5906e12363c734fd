import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The admin listener's protections (Config/README.md, "Admin listener limits"): backpressure on
/// pipelined requests, the header, idle and send timeouts, and the connection cap. Its
/// open endpoints need no token, so every one of these is reachable by anyone who can
/// connect. Serialized: the memory and descriptor figures are per process and the big
/// transfers compete for the two cores.
@Suite(.serialized) struct AdminLimitsTests {
  static let headerTimeoutMs = 800
  static let idleTimeoutMs = 800

  /// A gateway with a stub route `/stub` and the admin API (with a token).
  static func gateway(limits: [String: Any]? = nil) throws -> GatewayProcess {
    let stub = TestConfig.route(
      "stub", match: "/stub", upstream: nil, extra: ["stub": ["mode": "always", "status": 200, "body": ["ok": true]]])
    return try GatewayProcess(
      config: TestConfig.withAdmin(TestConfig.make(routes: [stub], limits: limits, access: "off")))
  }

  /// Whether the peer has ended `client`'s connection (FIN or RST), read from the socket's
  /// TCP state, so neither waiting nor reading the answer bytes queued ahead of the end.
  static func hasEnded(_ client: RawClient) -> Bool {
    var info = tcp_info()
    var length = socklen_t(MemoryLayout<tcp_info>.size)
    guard getsockopt(client.socket.descriptor, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return true }
    // 1 is TCP_ESTABLISHED; after the peer's FIN it is CLOSE_WAIT, after its RST CLOSE.
    return info.tcpi_state != 1
  }

  // MARK: Backpressure (audit finding 3)

  /// 8,000 pipelined `/admin/openapi.json` (about 40 KB each, no token needed) on one
  /// connection that does not read: before, every answer was made and queued, about
  /// 330 MB; now parsing stops once the queue is full, and memory stays put.
  @Test func pipelinedAnswersThatAreNotReadDoNotPileUp() throws {
    let gateway = try Self.gateway()
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try admin.request("GET", "/admin/openapi.json", credential: .none).status == 200)
    let before = try #require(gateway.residentBytes)
    let sampler = MemoryTests.ResidentSampler(gateway)

    let client = try RawClient(port: admin.port, receiveBufferSize: 4096)
    defer { client.close() }
    let batch = Array(repeating: httpRequest("GET", "/admin/openapi.json"), count: 100).flatMap { $0 }
    var sent = 0
    for _ in 0..<80 {
      // Once both kernels' buffers are full a send cannot finish: that is the backpressure.
      guard (try? client.send(batch, timeout: 2)) != nil else { break }
      sent += 100
    }
    // Give an unbounded gateway time to answer what it read (it did so in about a second).
    waitUntil(timeout: 3, interval: .milliseconds(100)) {
      (gateway.residentBytes ?? 0) > before + 200 * 1024 * 1024
    }
    let peak = sampler.finish()

    #expect(sent > 0)
    #expect(
      peak < before + 64 * 1024 * 1024,
      "resident memory grew from \(before / 1024 / 1024) MB to \(peak / 1024 / 1024) MB")
    // The connection still works: its first answers come once the client reads.
    for _ in 0..<3 {
      let answer = try client.readAnswer(timeout: 10)
      #expect(answer.status == 200)
      #expect(answer.bodyLength > 10_000)
    }
    #expect(gateway.isRunning)
  }

  /// Many pipelined requests, synchronous (`/healthz`, big `/admin/openapi.json`) and
  /// answered later (`/admin/status`, `/metrics`), are all answered in order when the
  /// client reads: parsing stops and resumes without losing or reordering any.
  @Test func pipelinedRequestsAreAllAnsweredInOrder() throws {
    let gateway = try Self.gateway()
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    let auth = [("Authorization", "Bearer \(TestConfig.adminToken)")]
    let kinds: [(path: String, headers: [(String, String)])] = [
      ("/healthz", []), ("/admin/openapi.json", []), ("/admin/status", auth), ("/metrics", auth),
    ]
    let count = 400
    var requests: [UInt8] = []
    for index in 0..<count {
      let kind = kinds[index % kinds.count]
      requests += httpRequest("GET", kind.path, headers: kind.headers)
    }
    requests += httpRequest("GET", "/healthz", headers: [("Connection", "close")])

    let client = try RawClient(port: admin.port)
    defer { client.close() }
    // Sent from a thread: the gateway reads only as fast as this side takes the answers.
    let sender = Thread { [socket = client.socket, requests] in
      try? socket.send(requests, deadline: Deadline(seconds: 60))
    }
    sender.start()
    var answered = 0
    for index in 0..<count {
      guard let answer = try? client.readAnswer(timeout: 20) else { break }
      let path = kinds[index % kinds.count].path
      let matches =
        switch path {
        case "/healthz": answer.text == #"{"status":"ok"}"#
        case "/admin/openapi.json": answer.text.hasPrefix("{") && answer.bodyLength > 10_000
        case "/admin/status": (try? answer.jsonObject())?["version"] != nil
        default: answer.text.contains("# TYPE")
        }
      guard answer.status == 200, matches else {
        Issue.record("answer \(index) (\(path)): \(answer.status) \(answer.text.prefix(80))")
        break
      }
      answered += 1
    }
    let last = try client.readAnswer(timeout: 20)

    #expect(answered == count)
    #expect(last.status == 200)
    #expect(last.head.value("Connection") == "close")
    #expect(client.waitForEnd(timeout: 10) == .closed)
  }

  // MARK: Timeouts (audit finding 4)

  /// Connections that send nothing, half a request, or a request and then nothing more
  /// are closed after the header or idle timeout; one that never reads its answers is reset
  /// once it has taken nothing for the idle timeout. The gateway gets its descriptors back
  /// while the clients still hold theirs open.
  @Test func idleHalfSentAndNonReadingAdminConnectionsAreClosed() throws {
    let gateway = try Self.gateway(
      limits: ["header_timeout_ms": Self.headerTimeoutMs, "idle_timeout_ms": Self.idleTimeoutMs])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try admin.request("GET", "/healthz").status == 200)
    let baseline = try #require(settledDescriptorCount(pid: gateway.pid))

    let silent = try RawClient(port: admin.port)
    let halfSent = try RawClient(port: admin.port)
    try halfSent.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
    let idle = try RawClient(port: admin.port)
    let answered = try idle.exchange(httpRequest("GET", "/healthz"))
    let nonReader = try RawClient(port: admin.port, receiveBufferSize: 4096)
    try? nonReader.send(Array(repeating: httpRequest("GET", "/admin/openapi.json"), count: 200).flatMap { $0 })
    let clients = [silent, halfSent, idle, nonReader]
    defer { for client in clients { client.close() } }

    let allEnded = waitUntil(timeout: 20, interval: .milliseconds(100)) { clients.allSatisfy(Self.hasEnded) }
    let descriptorsBack = waitUntil(timeout: 10, interval: .milliseconds(100)) {
      (openDescriptorCount(pid: gateway.pid) ?? .max) <= baseline
    }

    #expect(answered.status == 200)
    #expect(allEnded, "still open: \(clients.map { !Self.hasEnded($0) })")
    #expect(descriptorsBack, "gateway descriptors: \(openDescriptorCount(pid: gateway.pid) ?? -1), before \(baseline)")
    let timedOut = halfSent.readUntilEnd(timeout: 5)
    #expect(String(decoding: timedOut.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 408 "))
    #expect(timedOut.end == .closed)
    #expect(silent.readUntilEnd(timeout: 5).bytes.isEmpty)
    // The admin API still answers.
    #expect(try admin.request("GET", "/healthz").status == 200)
  }

  /// A body that stops coming is cut by the header timeout too: a request must arrive
  /// whole within it.
  @Test func adminRequestBodyThatStopsIsCut() throws {
    let gateway = try Self.gateway(
      limits: ["header_timeout_ms": Self.headerTimeoutMs, "idle_timeout_ms": Self.idleTimeoutMs])
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    let client = try RawClient(port: admin.port)
    defer { client.close() }
    try client.send(
      "PUT /admin/tokens/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(TestConfig.adminToken)\r\n"
        + "Content-Length: 100\r\n\r\n{\"value\":")

    let ended = client.readUntilEnd(timeout: 15)
    #expect(String(decoding: ended.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 408 "))
    #expect(ended.end == .closed)
  }

  // MARK: Connection cap (audit finding 4)

  /// Past 64 admin connections new ones are closed at once, with a warning in the log; the
  /// gateway port and, once connections go, the admin API go on answering.
  @Test func adminConnectionsBeyondTheCapAreClosed() throws {
    let cap = 64
    let extra = 10
    let gateway = try Self.gateway()
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try admin.request("GET", "/healthz").status == 200)
    let baseline = try #require(settledDescriptorCount(pid: gateway.pid))

    var held: [RawClient] = []
    defer { for client in held { client.close() } }
    // From five addresses, under the per-peer cap, so the total cap is what refuses.
    for index in 0..<(cap + extra) {
      held.append(try RawClient(port: admin.port, sourceHost: "127.0.0.\(1 + index % 5)"))
    }
    let refusedSeen = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      held.filter(Self.hasEnded).count >= extra
    }
    let warned = gateway.waitForLogLine {
      $0["level"] as? String == "warn" && $0["msg"] as? String == "too many admin connections; closing new ones"
        && $0["limit"] as? Int == cap
    }
    // The first 64 stay (their timeouts are the defaults, far away).
    let open = held.filter { !Self.hasEnded($0) }.count
    let descriptors = openDescriptorCount(pid: gateway.pid) ?? .max

    #expect(refusedSeen)
    #expect(open == cap)
    #expect(warned)
    #expect(descriptors <= baseline + cap, "gateway descriptors: \(descriptors), before \(baseline)")
    #expect(try send("GET", "/stub", to: gateway.port).status == 200)

    for client in held { client.close() }
    let answersAgain = waitUntil(timeout: 15, interval: .milliseconds(100)) {
      (try? admin.request("GET", "/healthz", timeout: 2).status) == 200
    }
    #expect(answersAgain)
  }

  /// One address flooding the admin port with keep-alive `/healthz` requests (64
  /// connections, each re-sending every second and reconnecting when closed) holds only
  /// its per-peer share: probes from another address, each on a new connection as the
  /// kubelet sends them, keep being answered while the flood runs. Before, the flood held
  /// the whole cap and every probe was closed unanswered.
  @Test func oneAddressFloodingTheAdminPortDoesNotLockOutProbes() throws {
    let gateway = try Self.gateway()
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    #expect(try admin.request("GET", "/healthz").status == 200)

    let flood = AdminFlood(port: admin.port, connections: 64, sourceHost: "127.0.0.2")
    flood.start()
    defer { flood.stop() }
    // The flood is in place: its first round has been made.
    #expect(waitUntil(timeout: 20, interval: .milliseconds(50)) { flood.rounds >= 1 })

    var outcomes: [String] = []
    for index in 0..<24 {
      let path = index % 2 == 0 ? "/healthz" : "/readyz"
      let outcome: String
      do {
        let client = try RawClient(port: admin.port, sourceHost: "127.0.0.1")
        defer { client.close() }
        let answer = try client.exchange(
          httpRequest("GET", path, headers: [("Connection", "close")], host: "10.0.0.1:9901"), timeout: 5)
        outcome = answer.status == 200 ? "ok" : "\(path): \(answer.status)"
      } catch {
        outcome = "\(path): \(error)"
      }
      outcomes.append(outcome)
      Thread.sleep(forTimeInterval: 0.25)
    }
    let roundsDuringProbes = flood.rounds
    flood.stop()

    #expect(outcomes.filter { $0 != "ok" }.isEmpty, "failed probes: \(outcomes.filter { $0 != "ok" })")
    #expect(roundsDuringProbes >= 2, "the flood ran \(roundsDuringProbes) rounds")
    #expect(flood.mostAnsweredInOneRound <= 16, "one address held \(flood.mostAnsweredInOneRound) connections")
    #expect(
      gateway.waitForLogLine {
        $0["level"] as? String == "warn"
          && $0["msg"] as? String == "too many admin connections from one address; closing new ones"
          && $0["limit"] as? Int == 16 && $0["peer"] as? String == "127.0.0.2"
      })
  }
}

/// Keep-alive admin connections from one address that each send `GET /healthz` once a
/// round (a second) and reconnect when closed, on a thread of their own until stopped
/// (at most 120 rounds).
final class AdminFlood: @unchecked Sendable {
  let port: UInt16
  let connections: Int
  let sourceHost: String
  private let lock = NSLock()
  private var stopped = false
  private var finishedRounds = 0
  private var mostAnswered = 0
  private var thread: Thread?
  private let done = DispatchSemaphore(value: 0)

  init(port: UInt16, connections: Int, sourceHost: String) {
    self.port = port
    self.connections = connections
    self.sourceHost = sourceHost
  }

  var rounds: Int { lock.withLock { finishedRounds } }
  /// The most flood connections answered in one round.
  var mostAnsweredInOneRound: Int { lock.withLock { mostAnswered } }
  private var isStopped: Bool { lock.withLock { stopped } }

  func start() {
    let thread = Thread { [self] in
      run()
      done.signal()
    }
    self.thread = thread
    thread.start()
  }

  func stop() {
    let wasRunning = lock.withLock {
      defer { stopped = true }
      return !stopped && thread != nil
    }
    if wasRunning { _ = done.wait(timeout: .now() + 30) }
  }

  private func run() {
    var clients: [RawClient?] = Array(repeating: nil, count: connections)
    defer { for client in clients { client?.close() } }
    for _ in 0..<120 {
      guard !isStopped else { return }
      let started = Date()
      var answered = 0
      for index in clients.indices {
        if clients[index] == nil { clients[index] = try? RawClient(port: port, sourceHost: sourceHost) }
        guard let client = clients[index] else { continue }
        if let answer = try? client.exchange(httpRequest("GET", "/healthz"), timeout: 1), answer.status == 200 {
          answered += 1
        } else {
          client.close()
          clients[index] = nil
        }
      }
      lock.withLock {
        finishedRounds += 1
        mostAnswered = max(mostAnswered, answered)
      }
      let rest = 1 - Date().timeIntervalSince(started)
      if rest > 0 { Thread.sleep(forTimeInterval: rest) }
    }
  }
}
