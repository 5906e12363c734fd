import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The admin side of a running gateway for reliability tests: its admin port (from the
/// `admin listening` log line), authorized admin calls over raw sockets, and the process's
/// open descriptor count from `/proc`.
struct AdminAccess {
  let gateway: GatewayProcess
  let port: UInt16
  let token: String

  /// Waits (bounded) for the gateway's `admin listening` line.
  init(_ gateway: GatewayProcess, token: String, timeout: Double = 15) throws {
    var found: UInt16 = 0
    waitUntil(timeout: timeout) {
      let line = gateway.logLines().first { $0["msg"] as? String == "admin listening" }
      guard let address = line?["address"] as? String, let colon = address.lastIndex(of: ":") else { return false }
      found = UInt16(address[address.index(after: colon)...]) ?? 0
      return found != 0
    }
    guard found != 0 else { throw GatewayStartError(description: "no admin listening line: \(gateway.stdoutText)") }
    self.gateway = gateway
    self.port = found
    self.token = token
  }

  /// One admin call with the admin token, on its own connection.
  func call(_ method: String, _ path: String, body: [UInt8]? = nil, timeout: Double = 10) throws -> ReceivedAnswer {
    var headers = [("Authorization", "Bearer \(token)"), ("Connection", "close")]
    if body != nil { headers.append(("Content-Type", "application/json")) }
    return try send(method, path, to: port, headers: headers, body: body, timeout: timeout)
  }

  /// `GET path` as a JSON object.
  func json(_ path: String) throws -> [String: Any] {
    let answer = try call("GET", path)
    guard answer.status == 200 else { throw TestSocketError.malformed("admin GET \(path): \(answer.status)") }
    return try answer.jsonObject()
  }

  /// The cache entries (`GET /admin/cache/entries`).
  func cacheEntries(prefix: String? = nil) throws -> [[String: Any]] {
    let path = "/admin/cache/entries" + (prefix.map { "?prefix=\($0)" } ?? "")
    return try json(path)["entries"] as? [[String: Any]] ?? []
  }

  /// The stored body of entry `id` (`GET /admin/cache/entries/{id}`), decoded from base64
  /// when the store kept it that way.
  func storedBody(id: String) throws -> [UInt8] {
    let entry = try json("/admin/cache/entries/\(id)")
    let body = entry["body"] as? String ?? ""
    if entry["body_encoding"] as? String == "base64" { return Array(Data(base64Encoded: body) ?? Data()) }
    return Array(body.utf8)
  }

  /// Polls until the entry for upstream path `path` exists and its stored body satisfies
  /// `check`; the body seen last.
  @discardableResult
  func waitForStoredBody(path: String, timeout: Double = 15, _ check: ([UInt8]) -> Bool) -> [UInt8]? {
    var last: [UInt8]?
    let found = waitUntil(timeout: timeout, interval: .milliseconds(50)) {
      guard let entry = try? cacheEntries().first(where: { $0["path"] as? String == path }),
        let id = entry["id"] as? String, let body = try? storedBody(id: id)
      else { return false }
      last = body
      return check(body)
    }
    return found ? last : nil
  }
}

/// Open file descriptors of process `pid` (entries of `/proc/<pid>/fd`), nil once it is gone.
func openDescriptorCount(pid: Int32) -> Int? {
  (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
}

/// A descriptor count that held for a few consecutive samples (connections being closed
/// settle first), or the last sample when it never settles within `timeout`.
func settledDescriptorCount(pid: Int32, timeout: Double = 10) -> Int? {
  var last = -1
  var stable = 0
  waitUntil(timeout: timeout, interval: .milliseconds(100)) {
    guard let count = openDescriptorCount(pid: pid) else { return true }
    stable = count == last ? stable + 1 : 0
    last = count
    return stable >= 4
  }
  return last < 0 ? nil : last
}

/// The envelope's `datas` member of a JSON answer, nil when absent or not an object.
func envelopeDatas(_ answer: ReceivedAnswer) -> [String: Any]? {
  (try? answer.jsonObject())?["datas"] as? [String: Any]
}

/// Seconds on the monotonic clock since `start`.
func secondsSince(_ start: ContinuousClock.Instant) -> Double {
  let elapsed = ContinuousClock.now - start
  return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

/// A counter that threads started by a test can share (an `Atomic` cannot be captured).
final class SharedCounter: Sendable {
  private let value = Atomic(0)

  init() {}

  func increment() { value.add(1, ordering: .relaxed) }
  var count: Int { value.load(ordering: .relaxed) }
}

/// The release build's `gatehouse` (`swift build -c release`), when there is one next to the
/// debug build the tests run; some faults only show with the optimized binary's timing.
func releaseGatewayExecutable() -> URL? {
  let debug = gatehouseExecutable()
  let url = debug.deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("release").appendingPathComponent("gatehouse")
  return FileManager.default.isExecutableFile(atPath: url.path) ? url : nil
}

/// A gateway process of any build (see `releaseGatewayExecutable`), run with `config` in a
/// private temp directory, its output in a file there. Killed and removed on `deinit`.
final class ExternalGateway {
  let process = Process()
  let directory: URL
  private(set) var port: UInt16 = 0

  init(executable: URL, config: [String: Any]) throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-ext-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let configURL = directory.appendingPathComponent("config.json")
    try JSONSerialization.data(withJSONObject: config).write(to: configURL)
    let logURL = directory.appendingPathComponent("out.log")
    _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
    let log = try FileHandle(forWritingTo: logURL)
    defer { try? log.close() }
    process.executableURL = executable
    process.arguments = ["serve", "--config", configURL.path]
    process.currentDirectoryURL = directory
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = log
    process.standardError = log
    try DescriptorCreation.lock.withLock { _ in try process.run() }
    waitUntil(timeout: 30) {
      let text = (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
      guard let line = text.split(separator: "\n").first(where: { $0.contains("\"msg\":\"listening\"") }),
        let range = line.range(of: #"127\.0\.0\.1:[0-9]+"#, options: .regularExpression)
      else { return !process.isRunning }
      port = UInt16(line[range].split(separator: ":")[1]) ?? 0
      return true
    }
    guard port != 0 else {
      process.terminate()
      throw GatewayStartError(description: "external gateway did not start")
    }
  }

  var pid: Int32 { process.processIdentifier }

  deinit {
    if process.isRunning {
      process.terminate()
      if !waitUntil(timeout: 10, { !process.isRunning }) {
        _ = Glibc.kill(process.processIdentifier, SIGKILL)
        waitUntil(timeout: 10) { !process.isRunning }
      }
    }
    try? FileManager.default.removeItem(at: directory)
  }
}
