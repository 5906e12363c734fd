import Foundation
import Testing

/// Out of descriptors, every request that needs a new upstream connection fails the same
/// way: the log gets one `cannot open upstream connection` line per 10 s, not one per
/// request, and the next line says how many were held back.
@Suite struct UpstreamOpenFailureLogTests {
  /// The lowest descriptor number `pid` does not use: the next one it opens gets it.
  static func lowestFreeDescriptor(pid: Int32) -> Int? {
    guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return nil }
    let used = Set(names.compactMap { Int($0) })
    return (0...used.count).first { !used.contains($0) }
  }

  /// Sets `pid`'s soft descriptor limit (the hard one stays), with util-linux `prlimit`.
  static func setDescriptorLimit(pid: Int32, soft: Int) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
    process.arguments = ["--pid", "\(pid)", "--nofile=\(soft):"]
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
      throw ToolError(description: "prlimit exited \(process.terminationStatus)")
    }
  }

  /// `pid`'s soft descriptor limit, from /proc.
  static func descriptorLimit(pid: Int32) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8) else { return nil }
    let line = text.split(separator: "\n").first { $0.hasPrefix("Max open files") }
    return line?.split(separator: " ").dropFirst(3).first.flatMap { Int($0) }
  }

  static func isCannotOpenLine(_ line: [String: Any]) -> Bool {
    line["level"] as? String == "warn" && line["msg"] as? String == "cannot open upstream connection"
  }

  @Test func cannotOpenUpstreamConnectionIsLoggedOncePerIntervalWithACount() throws {
    // Each answer closes its connection, so every request needs a new one.
    var answer = BackendAnswer.text("{}")
    answer.closeAfter = true
    let backend = try TestBackend(always: .respond(answer))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    let client = try RawClient(port: gateway.port)
    defer { client.close() }
    #expect(try client.exchange(httpRequest("GET", "/warm")).status == 200)
    _ = settledDescriptorCount(pid: gateway.pid)

    // No descriptor left for anything new: the next upstream socket cannot be made.
    let free = try #require(Self.lowestFreeDescriptor(pid: gateway.pid))
    let limit = try #require(Self.descriptorLimit(pid: gateway.pid))
    try Self.setDescriptorLimit(pid: gateway.pid, soft: free)
    var statuses: [Int] = []
    for index in 0..<20 {
      guard let answer = try? client.exchange(httpRequest("GET", "/\(index)"), timeout: 10) else { break }
      statuses.append(answer.status)
    }
    let linesDuringBurst = gateway.logLines().filter(Self.isCannotOpenLine).count
    // The burst is reported once the interval has passed, with the count held back.
    let reported = gateway.waitForLogLine(timeout: 20) {
      Self.isCannotOpenLine($0) && ($0["suppressed_before"] as? Int ?? 0) > 0
    }
    try Self.setDescriptorLimit(pid: gateway.pid, soft: limit)
    let lines = gateway.logLines().filter(Self.isCannotOpenLine)
    let counted = lines.compactMap { $0["suppressed_before"] as? Int }.reduce(0, +) + lines.count

    #expect(statuses.count == 20)
    #expect(statuses.allSatisfy { $0 == 502 }, "\(statuses)")
    #expect(linesDuringBurst == 1, "\(linesDuringBurst) lines for 20 failures")
    #expect(reported)
    // Every failure is accounted for: logged, or counted in a later line.
    #expect(counted >= 20, "\(lines)")
    #expect(lines.first?["upstream"] as? String == "api")
  }
}
