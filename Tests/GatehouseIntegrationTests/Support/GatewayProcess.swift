import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// How a gateway process ended.
struct ExitOutcome: Equatable, CustomStringConvertible {
  /// The exit status, or the signal number when `bySignal`.
  let code: Int32
  let bySignal: Bool

  var description: String { bySignal ? "killed by signal \(code)" : "exit \(code)" }
  static let success = ExitOutcome(code: 0, bySignal: false)
}

/// Why a gateway process could not be started.
struct GatewayStartError: Error, CustomStringConvertible {
  let description: String
}

/// A `gatehouse` process run by a test: writes the config into a private temp directory,
/// starts the built binary there with its output captured, and waits (bounded) for its
/// `listening` log line to learn the port. `stop()` sends SIGTERM and reports the exit; when
/// a test ends early, `deinit` kills the process and removes the directory.
///
/// `@unchecked Sendable`: the Foundation `Process` is only started and polled, and all
/// captured output lives behind a `Mutex`.
final class GatewayProcess: @unchecked Sendable {
  /// The output read so far; shared with the reader threads (which must not keep the
  /// `GatewayProcess` itself alive, or `deinit` could never kill a forgotten process).
  private final class Capture: Sendable {
    struct Streams {
      var stdout: [UInt8] = []
      var stderr: [UInt8] = []
      var openStreams = 2
    }
    let streams = Mutex(Streams())
  }

  let process: Process
  /// The private working directory, holding the config file.
  let directory: URL
  /// The port of the first listener, once the `listening` line was seen.
  private(set) var port: UInt16 = 0
  private let capture = Capture()

  /// Starts `gatehouse serve --config <dir>/gatehouse-test.json` with `config` written as
  /// JSON, and waits until it listens. `environment` entries are added to the process
  /// environment (for `${ENV}` in the config).
  convenience init(config: [String: Any], environment: [String: String] = [:], startTimeout: Double = 30) throws {
    let directory = try Self.makeDirectory()
    let configURL = directory.appendingPathComponent("gatehouse-test.json")
    let data = try JSONSerialization.data(withJSONObject: config, options: [.prettyPrinted, .sortedKeys])
    try data.write(to: configURL)
    try self.init(
      arguments: ["serve", "--config", configURL.path], directory: directory, environment: environment,
      startTimeout: startTimeout)
  }

  /// Starts the binary with `arguments` in `directory` (a fresh temp directory when nil),
  /// with `environment` added to the inherited environment.
  /// With a `startTimeout`, waits for the `listening` line; with nil, returns at once.
  /// `TMPDIR` points into `directory`, so whatever the gateway puts in its temp directory
  /// goes away with it.
  init(
    arguments: [String], directory: URL? = nil, environment extraEnvironment: [String: String] = [:],
    startTimeout: Double? = 30
  ) throws {
    self.directory = try directory ?? Self.makeDirectory()
    process = Process()
    process.executableURL = gatehouseExecutable()
    process.arguments = arguments
    process.currentDirectoryURL = self.directory
    var environment = ProcessInfo.processInfo.environment
    for (name, value) in extraEnvironment { environment[name] = value }
    environment["TMPDIR"] = self.directory.path
    process.environment = environment
    process.standardInput = FileHandle.nullDevice
    // Own pipes with close-on-exec, so gateways started concurrently by other tests never
    // inherit their write ends (which would delay end of stream here).
    let out = try Self.makePipe()
    let err = try Self.makePipe()
    process.standardOutput = FileHandle(fileDescriptor: out.write, closeOnDealloc: true)
    process.standardError = FileHandle(fileDescriptor: err.write, closeOnDealloc: true)
    do {
      try DescriptorCreation.lock.withLock { _ in try process.run() }
    } catch {
      // The write ends belong to their FileHandles (closed here, not again when freed).
      try? (process.standardOutput as? FileHandle)?.close()
      try? (process.standardError as? FileHandle)?.close()
      for descriptor in [out.read, err.read] { Glibc.close(descriptor) }
      throw error
    }
    try (process.standardOutput as? FileHandle)?.close()
    try (process.standardError as? FileHandle)?.close()
    startReader(out.read, isStdout: true)
    startReader(err.read, isStdout: false)
    guard let startTimeout else { return }
    let listening = waitUntil(timeout: startTimeout) {
      if let found = listeningPort() {
        port = found
        return true
      }
      return !process.isRunning
    }
    guard listening, port != 0 else {
      kill()
      throw GatewayStartError(
        description:
          "gateway did not report listening in \(startTimeout) s; stdout: \(stdoutText) stderr: \(stderrText)")
    }
  }

  deinit {
    kill()
    try? FileManager.default.removeItem(at: directory)
  }

  private static func makeDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-itest-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
  }

  private static func makePipe() throws -> (read: Int32, write: Int32) {
    var descriptors: [Int32] = [0, 0]
    let result = DescriptorCreation.lock.withLock { _ in
      let result = pipe(&descriptors)
      if result == 0 { for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) } }
      return result
    }
    guard result == 0 else { throw TestSocketError.system(call: "pipe", errno: errno) }
    return (descriptors[0], descriptors[1])
  }

  private func startReader(_ descriptor: Int32, isStdout: Bool) {
    let thread = Thread { [capture] in
      var buffer = [UInt8](repeating: 0, count: 16 * 1024)
      while true {
        let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        if count <= 0 { break }
        capture.streams.withLock { output in
          if isStdout {
            output.stdout.append(contentsOf: buffer[0..<count])
          } else {
            output.stderr.append(contentsOf: buffer[0..<count])
          }
        }
      }
      Glibc.close(descriptor)
      capture.streams.withLock { $0.openStreams -= 1 }
    }
    thread.name = isStdout ? "GatewayProcess.stdout" : "GatewayProcess.stderr"
    thread.start()
  }

  private func listeningPort() -> UInt16? { listeningPorts.first }

  /// The ports of every `listening` line so far, in order.
  var listeningPorts: [UInt16] {
    logLines().filter { $0["msg"] as? String == "listening" }.compactMap { line in
      guard let address = line["address"] as? String, let colon = address.lastIndex(of: ":") else { return nil }
      return UInt16(address[address.index(after: colon)...])
    }
  }

  var pid: Int32 { process.processIdentifier }
  var isRunning: Bool { process.isRunning }

  /// Everything written to stdout so far.
  var stdoutText: String { capture.streams.withLock { String(decoding: $0.stdout, as: UTF8.self) } }

  /// Everything written to stderr so far.
  var stderrText: String { capture.streams.withLock { String(decoding: $0.stderr, as: UTF8.self) } }

  /// Complete stdout lines so far.
  var stdoutLines: [String] {
    let text = stdoutText
    var lines = text.components(separatedBy: "\n")
    lines.removeLast()  // empty after the last newline, or an incomplete line
    return lines
  }

  /// Stdout lines parsed as JSON objects (lines that are not JSON objects are left out;
  /// `nonJSONLines` lists them).
  func logLines() -> [[String: Any]] {
    stdoutLines.compactMap { line in
      (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }
  }

  /// Stdout lines that are not JSON objects.
  var nonJSONLines: [String] {
    stdoutLines.filter { line in
      ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]) == nil
    }
  }

  /// Access log lines so far.
  func accessLines() -> [[String: Any]] { logLines().filter { $0["msg"] as? String == "access" } }

  /// Waits until some log line satisfies `predicate`; false if none within `timeout`.
  @discardableResult
  func waitForLogLine(timeout: Double = 10, _ predicate: ([String: Any]) -> Bool) -> Bool {
    waitUntil(timeout: timeout) { logLines().contains(where: predicate) }
  }

  /// The process's resident set size in bytes (VmRSS), or nil once it is gone.
  var residentBytes: Int? { Self.residentBytes(pid: pid) }

  /// The resident set size (VmRSS in `/proc/<pid>/status`) of process `pid`, in bytes.
  static func residentBytes(pid: Int32) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    let line = text.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
    return line.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) }.map { $0 * 1024 }
  }

  /// Sends `signal` to the process.
  func send(signal: Int32) {
    if process.isRunning { _ = Glibc.kill(pid, signal) }
  }

  /// Waits up to `timeout` for the process to exit; its outcome, or nil if still running.
  /// Also waits (bounded) until its output streams are read to the end.
  func waitForExit(timeout: Double = 15) -> ExitOutcome? {
    guard waitUntil(timeout: timeout, { !process.isRunning }) else { return nil }
    waitUntil(timeout: 5) { capture.streams.withLock { $0.openStreams == 0 } }
    return ExitOutcome(code: process.terminationStatus, bySignal: process.terminationReason == .uncaughtSignal)
  }

  /// SIGTERM, then the exit outcome; kills the process (and returns nil) when it does not
  /// exit within `timeout`.
  @discardableResult
  func stop(timeout: Double = 20) -> ExitOutcome? {
    send(signal: SIGTERM)
    guard let outcome = waitForExit(timeout: timeout) else {
      kill()
      return nil
    }
    return outcome
  }

  /// SIGTERM, and a recorded test issue unless the process exits with status 0.
  func stopExpectingCleanExit(timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation) {
    let outcome = stop(timeout: timeout)
    #expect(
      outcome == .success, "gateway exit: \(outcome.map(\.description) ?? "did not exit"); stderr: \(stderrText)",
      sourceLocation: sourceLocation)
  }

  /// SIGKILL (if still running) and a bounded wait for the exit.
  func kill() {
    guard process.isRunning else { return }
    _ = Glibc.kill(pid, SIGKILL)
    waitUntil(timeout: 10) { !process.isRunning }
  }
}
