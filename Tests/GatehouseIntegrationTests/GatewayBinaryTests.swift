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
}
