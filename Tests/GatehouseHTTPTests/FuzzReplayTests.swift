import Foundation
import GatehouseHTTP
import Testing

/// One input saved by the fuzzers: a seed in `Fuzz/corpus/<target>/` or a regression input
/// in `Fuzz/crashes/<target>/`.
struct SavedFuzzInput: Sendable, CustomTestStringConvertible {
  let target: FuzzTarget
  /// Relative to the repository root.
  let path: String

  var testDescription: String { path }

  /// The repository root, found from this file's place in `Tests/GatehouseHTTPTests/`.
  static let repositoryRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

  /// Every input in `Fuzz/<folder>/<target>/` (then in `subfolder` of that), READMEs and
  /// hidden files aside.
  static func all(in folder: String, subfolder: String? = nil) -> [SavedFuzzInput] {
    FuzzTarget.allCases.flatMap { target in
      let directory = "Fuzz/\(folder)/\(target.rawValue)" + (subfolder.map { "/\($0)" } ?? "")
      let names =
        (try? FileManager.default.contentsOfDirectory(
          atPath: repositoryRoot.appendingPathComponent(directory).path)) ?? []
      return names.sorted().compactMap { name -> SavedFuzzInput? in
        guard !name.hasPrefix("."), !name.hasPrefix("README") else { return nil }
        let path = "\(directory)/\(name)"
        var isDirectory: ObjCBool = false
        guard
          FileManager.default.fileExists(
            atPath: repositoryRoot.appendingPathComponent(path).path, isDirectory: &isDirectory),
          !isDirectory.boolValue
        else { return nil }
        return SavedFuzzInput(target: target, path: path)
      }
    }
  }

  func bytes() throws -> [UInt8] {
    let url = SavedFuzzInput.repositoryRoot.appendingPathComponent(path)
    return [UInt8](try Data(contentsOf: url))
  }

  /// Runs the fuzz targets' checks (`Fuzz/Support/FuzzInvariants.swift`) on this input.
  func violation() throws -> FuzzViolation? {
    try bytes().withUnsafeBytes { FuzzInvariants.check(target, $0) }
  }
}

/// Replays what the fuzzers saved through the same invariant checks as the fuzz targets, so
/// `swift test` catches a regression without a fuzzing build.
@Suite struct FuzzReplayTests {
  static let crashInputs = SavedFuzzInput.all(in: "crashes")
  static let corpusInputs = SavedFuzzInput.all(in: "corpus")
  static let pendingInputs = SavedFuzzInput.all(in: "crashes", subfolder: "pending")

  /// Guards against a wrong root path, which would otherwise pass by testing nothing.
  @Test func everyTargetHasASeedCorpus() {
    for target in FuzzTarget.allCases {
      #expect(Self.corpusInputs.contains { $0.target == target }, "no seeds found for \(target.rawValue)")
    }
  }

  @Test(arguments: crashInputs)
  func savedCrashInputHoldsTheInvariants(_ input: SavedFuzzInput) throws {
    let violation = try input.violation()
    #expect(violation == nil, "\(violation?.description ?? "")")
  }

  @Test(arguments: corpusInputs)
  func corpusInputHoldsTheInvariants(_ input: SavedFuzzInput) throws {
    let violation = try input.violation()
    #expect(violation == nil, "\(violation?.description ?? "")")
  }

  /// Reproducers of open parser bugs: expected to fail until the bug is fixed, when this
  /// reports that the known issue no longer occurs and the file belongs one level up.
  @Test(arguments: pendingInputs)
  func pendingReproducerStillFails(_ input: SavedFuzzInput) throws {
    let violation = try input.violation()
    withKnownIssue("an open parser bug, described in the README.md next to the file") {
      #expect(violation == nil, "\(violation?.description ?? "")")
    }
  }
}
