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
    let process = Process()
    process.executableURL = gatehouseExecutable()
    process.arguments = ["version"]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    process.waitUntilExit()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    #expect(process.terminationStatus == 0)
    #expect(output.hasPrefix("gatehouse "))
  }
}
