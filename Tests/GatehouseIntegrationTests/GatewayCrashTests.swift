import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The gateway process ending abruptly: SIGTERM under load must fail no request that it
/// accepted, and `kill -9` in the middle of heavy store writes must leave a store that the
/// next gateway opens as it is (no "moved aside"), serves stale answers from, and whose
/// entries are whole.
@Suite(.serialized) struct GatewayCrashTests {
  // MARK: SIGTERM under load

  /// What happened to one request of the load.
  enum Attempt: Sendable {
    /// A complete, correct answer, and when it was complete.
    case answered(at: ContinuousClock.Instant)
    /// The connection was refused, or ended before a byte of answer came back.
    case notServed(path: String)
    /// Anything else: a wrong or partial answer, or a stall.
    case failed(path: String, detail: String)
  }

  /// The outcomes of every request of the load threads.
  final class Attempts: Sendable {
    private let all = Mutex<[Attempt]>([])
    func add(_ attempt: Attempt) { all.withLock { $0.append(attempt) } }
    var list: [Attempt] { all.withLock { $0 } }
  }

  /// One request and how it ended. `client` is reused (keep-alive) when given.
  static func attempt(_ path: String, port: UInt16, client: inout RawClient?) -> Attempt {
    if client == nil {
      guard let connected = try? RawClient(port: port) else { return .notServed(path: path) }
      client = connected
    }
    guard let connection = client else { return .notServed(path: path) }
    do {
      try connection.send(httpRequest("GET", path))
    } catch {
      client = nil
      return .notServed(path: path)
    }
    do {
      let answer = try connection.readAnswer(timeout: 30)
      if answer.head.value("Connection")?.lowercased() == "close" { client = nil }
      guard answer.status == 200, answer.text == "done \(path)" else {
        return .failed(path: path, detail: "\(answer.status) \(answer.text)")
      }
      return .answered(at: .now)
    } catch TestSocketError.closedEarly(let what) where what == "before an answer" {
      client = nil
      return .notServed(path: path)
    } catch TestSocketError.connectionReset where connection.reader.bufferedCount == 0 {
      client = nil
      return .notServed(path: path)
    } catch {
      client = nil
      return .failed(path: path, detail: "\(error)")
    }
  }

  @Test func sigtermUnderLoadFailsNoAcceptedRequest() throws {
    let backend = try TestBackend { request in
      var answer = BackendAnswer.text("done \(request.path)")
      answer.delay = .milliseconds(150)
      return .respond(answer)
    }
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port, access: "off"))
    defer { gateway.kill() }

    let attempts = Attempts()
    let finished = SharedCounter()
    let stopAll = Gate()
    defer { stopAll.open() }
    let threads = 8
    let port = gateway.port
    for thread in 0..<threads {
      Thread { [attempts] in
        defer { finished.increment() }
        // Half the threads keep their connection alive, half connect for every request.
        let keepAlive = thread % 2 == 0
        var client: RawClient?
        var index = 0
        while !stopAll.opened && index < 500 {
          index += 1
          let outcome = Self.attempt("/load/\(thread)/\(index)", port: port, client: &client)
          if !keepAlive { client = nil }
          attempts.add(outcome)
          if case .notServed = outcome, !TestSocket.isListening(port: port) { break }
        }
      }.start()
    }
    // SIGTERM once requests are in flight on every thread.
    try #require(backend.waitForRequests(threads * 3, timeout: 20))
    let signalled = ContinuousClock.now
    gateway.send(signal: SIGTERM)
    let outcome = gateway.waitForExit(timeout: 30)
    stopAll.open()
    // Every load thread notices the gateway is gone within a request or two.
    #expect(waitUntil(timeout: 40) { finished.count == threads })

    let list = attempts.list
    let reachedBackend = Set(backend.requests.map(\.path))
    var answered = 0
    var answeredAfterSignal = 0
    for attempt in list {
      switch attempt {
      case .answered(let at):
        answered += 1
        if at > signalled { answeredAfterSignal += 1 }
      case .notServed(let path):
        // Not served is only clean when the gateway never passed the request on.
        #expect(!reachedBackend.contains(path), "\(path) reached the backend but its answer was lost")
      case .failed(let path, let detail):
        Issue.record("\(path): \(detail)")
      }
    }
    #expect(outcome == .success, "gateway exit: \(outcome.map(\.description) ?? "did not exit")")
    #expect(answered >= threads * 2, "only \(answered) requests answered")
    // Requests were in flight when the signal came, and they were answered.
    #expect(answeredAfterSignal >= 1, "no answer completed after SIGTERM")
    #expect(gateway.stderrText.isEmpty, "\(gateway.stderrText)")
  }

  // MARK: kill -9 during store writes

  static let runs = 50

  /// The body the backend gives for `path`: derived from the path only, about 2 KB, so a
  /// stored body can be checked whole.
  static func body(for path: String) -> [UInt8] {
    let seed = path.utf8.reduce(0) { ($0 &* 31 &+ Int($1)) & 0xFFFF }
    return Array(#"{"p":"\#(path)","pad":"\#(String(repeating: "x", count: 1500 + seed % 1000))"}"#.utf8)
  }

  static func config(upstreamPort: UInt16, store: String) -> [String: Any] {
    var config = TestConfig.make(
      routes: [
        TestConfig.route(
          "cached", match: "/cached/*", extra: ["envelope": ["enabled": true], "cache": ["stale_if_error_s": 86400]])
      ],
      upstreams: ["api": TestConfig.upstream(port: upstreamPort, answerTimeoutMs: 2000, connectTimeoutMs: 500)],
      access: "off", workers: 2)
    config["admin"] = ["listen": "127.0.0.1:0", "token": "crash-admin"]
    config["store"] = ["path": store, "max_bytes": 64 << 20]
    return config
  }

  /// The verify mode of the store's crash writer, used as an integrity check of any store
  /// file (`verify <db> 0 -1` checks `integrity_check` and that opening needed no repair).
  static func verifyStore(_ path: String) throws -> (ok: Bool, output: String) {
    let writer = gatehouseExecutable().deletingLastPathComponent().appendingPathComponent("GatehouseStoreCrashWriter")
    guard FileManager.default.isExecutableFile(atPath: writer.path) else { return (false, "no \(writer.path)") }
    let process = Process()
    process.executableURL = writer
    process.arguments = ["verify", path, "0", "-1"]
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try DescriptorCreation.lock.withLock { _ in try process.run() }
    guard waitUntil(timeout: 60, { !process.isRunning }) else {
      process.terminate()
      return (false, "verify did not finish")
    }
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    return (process.terminationStatus == 0, output)
  }

  @Test func killDashNineDuringStoreWritesLeavesAUsableStore() throws {
    let backend = try TestBackend { request in
      .respond(
        BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Self.body(for: request.path))))
    }
    defer { backend.stop() }
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "gatehouse-kill9-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = directory.appendingPathComponent("store.sqlite").path
    // The "unreachable backend" must stay unreachable for all runs. A port that was merely
    // free once (`unusedPort()`) can be handed by the kernel to a later listener: one of the
    // hundred gateways this test starts (its own listener or admin port), or a backend of a
    // test running beside it. The next gateway then gets real answers from "down" and stores
    // them over the entries checked below, which later runs report as stored differently.
    // Holding the port bound (never listening) keeps it refused and keeps everyone off it.
    let downHolder = try TestSocket.refusingPort()
    defer { downHolder.close() }
    let down = downHolder.localPort

    // An anchor answer, stored by a gateway that stops cleanly.
    do {
      let gateway = try GatewayProcess(config: Self.config(upstreamPort: backend.port, store: store))
      let admin = try AdminAccess(gateway, token: "crash-admin")
      #expect(try send("GET", "/cached/anchor", to: gateway.port).status == 200)
      try #require(admin.waitForStoredBody(path: "/cached/anchor") { $0 == Self.body(for: "/cached/anchor") } != nil)
      gateway.stopExpectingCleanExit()
    }

    var killedWhileWriting = 0
    var checkedEntries = 0
    for run in 1...Self.runs {
      // Heavy writes: four keep-alive clients storing new entries as fast as they can.
      let gateway = try GatewayProcess(config: Self.config(upstreamPort: backend.port, store: store))
      let stop = Gate()
      let port = gateway.port
      let written = SharedCounter()
      for writer in 0..<4 {
        Thread {
          guard let client = try? RawClient(port: port) else { return }
          var index = 0
          // Bounded so 50 runs stay under max_bytes: eviction must not take the anchor.
          while !stop.opened && index < 150 {
            index += 1
            guard (try? client.exchange(httpRequest("GET", "/cached/w/\(run)/\(writer)/\(index)"))) != nil else {
              return
            }
            written.increment()
          }
        }.start()
      }
      sleep(for: .milliseconds(Int.random(in: 50...400)))
      if written.count > 0 { killedWhileWriting += 1 }
      gateway.kill()
      stop.open()
      #expect(gateway.waitForExit(timeout: 10)?.bySignal == true, "run \(run): gateway was not killed")

      // The next gateway, with the backend unreachable, serves stale answers from that store.
      let next = try GatewayProcess(config: Self.config(upstreamPort: down, store: store))
      let admin = try AdminAccess(next, token: "crash-admin")
      let stale = try send("GET", "/cached/anchor", to: next.port)
      #expect(stale.status == 200, "run \(run): \(stale.status) \(stale.text)")
      #expect(stale.head.value("X-Gatehouse-Cache") == "STALE", "run \(run)")
      #expect(envelopeDatas(stale)?["p"] as? String == "/cached/anchor", "run \(run)")
      // A few surviving entries of the runs so far are whole, and served whole.
      let entries = (try? admin.cacheEntries(prefix: "/cached/w/")) ?? []
      for entry in entries.shuffled().prefix(3) {
        guard let id = entry["id"] as? String, let path = entry["path"] as? String else { continue }
        let stored = try admin.storedBody(id: id)
        #expect(
          stored == Self.body(for: path),
          "run \(run): \(path) stored differently: \(stored.count) bytes, \(String(decoding: stored.prefix(120), as: UTF8.self))"
        )
        let served = try send("GET", path, to: next.port)
        #expect(served.head.value("X-Gatehouse-Cache") == "STALE" && envelopeDatas(served)?["p"] as? String == path)
        checkedEntries += 1
      }
      next.stopExpectingCleanExit()
      #expect(!next.stdoutText.contains("moved it to"), "run \(run): the store had to be replaced")
      if run % 10 == 0 || run == Self.runs {
        let verified = try Self.verifyStore(store)
        #expect(verified.ok, "run \(run): \(verified.output)")
      }
    }
    #expect(killedWhileWriting >= Self.runs / 2, "only \(killedWhileWriting) kills came while writing")
    #expect(checkedEntries > 0)
  }
}
