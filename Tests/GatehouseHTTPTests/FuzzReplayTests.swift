import GatehouseHTTP
import Testing

extension SavedFuzzInput {
  /// Runs the fuzz targets' checks (`Fuzz/Support/FuzzInvariants.swift`) on this input.
  func violation() throws -> FuzzViolation? {
    guard let target = FuzzTarget(rawValue: target) else { return FuzzViolation("no fuzz target \(self.target)") }
    return try bytes().withUnsafeBytes { FuzzInvariants.check(target, $0) }
  }
}

/// Replays what the fuzzers saved through the same invariant checks as the fuzz targets, so
/// `swift test` catches a regression without a fuzzing build.
@Suite struct FuzzReplayTests {
  static let targets = FuzzTarget.allCases.map(\.rawValue)
  static let crashInputs = SavedFuzzInput.all(targets: targets, in: "crashes")
  static let corpusInputs = SavedFuzzInput.all(targets: targets, in: "corpus")
  static let pendingInputs = SavedFuzzInput.all(targets: targets, in: "crashes", subfolder: "pending")

  /// Guards against a wrong root path, which would otherwise pass by testing nothing.
  @Test func everyTargetHasASeedCorpus() {
    for target in Self.targets {
      #expect(Self.corpusInputs.contains { $0.target == target }, "no seeds found for \(target)")
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
