import Foundation
import Testing

@testable import GatehouseStore

/// kill -9 during heavy writes, many times, on one file: every restart must find a sound
/// file (integrity_check ok, no move-aside) holding every entry the killed writer had
/// reported as committed. The workload and its verifier are the `GatehouseStoreCrashWriter`
/// executable (also used by Scripts/store-crash-test.sh), built by `swift build --build-tests`.
@Suite struct CrashTests {
  static let kills = 24

  static func writerPath() -> String? {
    if let path = ProcessInfo.processInfo.environment["GATEHOUSE_CRASH_WRITER"] { return path }
    // The test bundle and the package's executables share one build directory.
    let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    let candidates = [
      bundle.deletingLastPathComponent().appendingPathComponent("GatehouseStoreCrashWriter"),
      Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("GatehouseStoreCrashWriter"),
    ]
    return candidates.map(\.path).first { FileManager.default.isExecutableFile(atPath: $0) }
  }

  private static func lastCommitted(in file: String) -> Int {
    let text = String(decoding: fileBytes(file), as: UTF8.self)
    let last = text.split(separator: "\n").last { $0.hasPrefix("committed ") }
    return last.flatMap { Int($0.dropFirst("committed ".count)) } ?? -1
  }

  /// Runs the verifier with a 60 s watchdog; returns its exit status and output.
  private static func verify(writer: String, db: String, run: Int, last: Int, output: String) throws -> (Int32, String)
  {
    try writeFile(output, [])
    let process = Process()
    process.executableURL = URL(fileURLWithPath: writer)
    process.arguments = ["verify", db, "\(run)", "\(last)"]
    process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
    process.standardError = FileHandle.nullDevice
    try process.run()
    let deadline = ContinuousClock.now + .seconds(60)
    while process.isRunning && ContinuousClock.now < deadline { usleep(5000) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: fileBytes(output), as: UTF8.self))
  }

  @Test(.timeLimit(.minutes(4))) func killNineDuringHeavyWritesNeverDamagesTheStore() throws {
    let writer = try #require(Self.writerPath(), "GatehouseStoreCrashWriter not built next to the tests")
    let directory = try TemporaryDirectory()
    let db = directory.file("crash.sqlite")
    let output = directory.file("writer.out")
    let started = ContinuousClock.now
    var kills = 0
    var killedAfterCommit = 0
    var committedTotal = 0

    for run in 1...Self.kills where ContinuousClock.now - started < .seconds(150) {
      try writeFile(output, [])
      let process = Process()
      process.executableURL = URL(fileURLWithPath: writer)
      process.arguments = ["write", db, "\(run)"]
      process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
      process.standardError = FileHandle.nullDevice
      try process.run()
      if run % 2 == 0 {
        // Even runs: wait (at most 10 s) for a first commit, then kill mid-stream.
        let deadline = ContinuousClock.now + .seconds(10)
        while Self.lastCommitted(in: output) < 0 && ContinuousClock.now < deadline { usleep(5000) }
        usleep(UInt32.random(in: 0...300_000))
      } else {
        // Odd runs: any moment, including during open, recovery or migration.
        usleep(UInt32.random(in: 1000...400_000))
      }
      kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
      #expect(process.terminationReason == .uncaughtSignal)
      kills += 1

      let last = Self.lastCommitted(in: output)
      if last >= 0 {
        killedAfterCommit += 1
        committedTotal += last + 1
      }
      let (status, text) = try Self.verify(
        writer: writer, db: db, run: run, last: last, output: directory.file("verify.out"))
      #expect(status == 0, "run \(run), last committed \(last): \(text)")
      if status != 0 { break }
    }

    #expect(kills >= 20)
    #expect(killedAfterCommit >= 10)
    print("store crash test: \(kills) kills, \(killedAfterCommit) after a commit, \(committedTotal) entries reported")

    // The file the kills left behind opens cleanly in this process too.
    let store = try Store.open(Store.Configuration(path: db, maxBytes: 8 << 20, secretKey: "crash-test-secret"))
    defer { store.close() }
    #expect(store.warnings.isEmpty)
    #expect(try store.checkIntegrity() == ["ok"])
    #expect(store.stats().entries > 0)
    let tokens = try store.loadTokens()
    #expect(tokens.warnings.isEmpty && tokens.tokens.map(\.name) == ["crash"])
  }
}
