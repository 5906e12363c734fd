import Foundation
import Testing

/// The built `gatehouse` executable, next to the test bundle in the build directory.
func gatehouseExecutable() -> URL {
  var directory = Bundle.main.bundleURL
  if directory.pathExtension == "xctest" { directory.deleteLastPathComponent() }
  for candidate in [directory, Bundle.main.bundleURL.deletingLastPathComponent()] {
    let url = candidate.appendingPathComponent("gatehouse")
    if FileManager.default.isExecutableFile(atPath: url.path) { return url }
  }
  return directory.appendingPathComponent("gatehouse")
}

@Suite struct GatewayBinaryTests {
  @Test func versionCommandPrintsTheVersion() throws {
    // Through GatewayProcess, so its pipes are never inherited by gateways other tests start.
    let process = try GatewayProcess(arguments: ["version"], startTimeout: nil)
    let outcome = process.waitForExit(timeout: 30)
    #expect(outcome == .success)
    #expect(process.stdoutText.hasPrefix("gatehouse "))
  }

  /// The gateway runs on the C library and the Swift runtime alone: Foundation (and the ICU
  /// data it maps) would add about 10 MiB of resident memory to every process and slow its
  /// start. A file that imports Foundation again makes this fail.
  @Test func runningGatewayMapsNeitherFoundationNorICU() throws {
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }
    // Read to the end: /proc files report no size, and a sized read would stop early.
    let handle = try #require(FileHandle(forReadingAtPath: "/proc/\(gateway.pid)/maps"))
    defer { try? handle.close() }
    let maps = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
    let libraries = Set(maps.split(separator: "\n").compactMap { $0.split(separator: " ").last.map(String.init) })
    #expect(libraries.contains { $0.contains("libswiftCore") }, "the check reads the right process")
    #expect(!libraries.contains { $0.contains("Foundation") || $0.contains("ICU") }, "\(libraries.sorted())")
  }
}
