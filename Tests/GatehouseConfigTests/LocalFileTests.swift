import Foundation
import Testing

@testable import GatehouseConfig

/// Reading config and token files, and the environment, without Foundation.
@Suite struct LocalFileTests {
  private func withTemporaryFile(_ bytes: [UInt8], _ body: (String) throws -> Void) throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-local-\(UUID())").path
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    defer { try? FileManager.default.removeItem(atPath: path) }
    try body(path)
  }

  @Test func readsTheWholeFileAcrossChunks() throws {
    // Larger than one read chunk, with every byte value, so nothing is lost at chunk edges.
    let bytes = (0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    try withTemporaryFile(bytes) { path in
      let read = try LocalFile.read(path: path, maxBytes: 40_000).get()
      #expect(read == bytes)
    }
  }

  @Test func aFileOverTheLimitIsRefusedNamingTheLimit() throws {
    try withTemporaryFile(Array(repeating: 0x41, count: 101)) { path in
      let result = LocalFile.read(path: path, maxBytes: 100)
      #expect(
        result
          == .failure(
            LocalFile.Failure(reason: "larger than 100 bytes", description: "\(path) is larger than 100 bytes")))
    }
  }

  @Test func filesThatReportNoSizeAreReadToTheEnd() throws {
    // /proc files say 0 in fstat and still have contents.
    let contents = try LocalFile.read(path: "/proc/self/status", maxBytes: 1 << 20).get()
    #expect(String(decoding: contents, as: UTF8.self).contains("Name:"))
  }

  @Test func failuresSayWhatFailedInShortWords() {
    #expect(
      LocalFile.read(path: "/nonexistent/f", maxBytes: 10)
        == .failure(LocalFile.Failure("open", "/nonexistent/f", "no such file")))
    let directory = LocalFile.read(path: "/tmp", maxBytes: 10)
    #expect(directory == .failure(LocalFile.Failure("read", "/tmp", "it is a directory")))
    if case .failure(let failure) = directory { #expect(failure.description == "cannot read /tmp: it is a directory") }
  }

  // Neither test below changes the process environment: tests run in parallel, and
  // another one reading TMPDIR (or getenv racing setenv) would see it.
  @Test func processEnvironmentMatchesGetenv() throws {
    let environment = LocalFile.processEnvironment()
    #expect(environment["PATH"] == ProcessInfo.processInfo.environment["PATH"])
    #expect(environment.count == ProcessInfo.processInfo.environment.count)
  }

  @Test func temporaryDirectoriesArePrivateAndFollowTMPDIR() throws {
    #expect(DefaultConfig.temporaryBase(tmpdir: nil) == "/tmp")
    #expect(DefaultConfig.temporaryBase(tmpdir: "") == "/tmp")
    #expect(DefaultConfig.temporaryBase(tmpdir: "/var/tmp//") == "/var/tmp")
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-tmpdir-\(UUID())").path
    try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: false)
    defer { try? FileManager.default.removeItem(atPath: base) }
    let directory = try DefaultConfig.makeTemporaryDirectory(under: DefaultConfig.temporaryBase(tmpdir: base + "/"))
    #expect(directory.hasPrefix(base + "/gatehouse-"))
    var info = stat()
    #expect(stat(directory, &info) == 0)
    #expect(info.st_mode & 0o777 == 0o700)
  }

  @Test func configPathsAreMadeAbsoluteWithoutTouchingTheFileSystem() {
    #expect(LocalFile.absolutePath("gh.json", workingDirectory: "/srv") == "/srv/gh.json")
    #expect(LocalFile.absolutePath("./conf//gh.json", workingDirectory: "/srv/") == "/srv/conf/gh.json")
    #expect(LocalFile.absolutePath("/etc/./gatehouse/gh.json", workingDirectory: "/srv") == "/etc/gatehouse/gh.json")
    #expect(LocalFile.absolutePath("../gh.json", workingDirectory: "/srv/a") == "/srv/a/../gh.json")
    #expect(LocalFile.absolutePath("gh.json", workingDirectory: "/") == "/gh.json")
  }
}
