import Testing

extension SavedFuzzInput {
  /// Runs the `config` fuzz target's checks (`Fuzz/Support/ConfigFuzzInvariants.swift`) on this input.
  func violation() throws -> FuzzViolation? {
    try bytes().withUnsafeBytes { ConfigFuzzInvariants.check($0) }
  }
}

/// Replays what the `config` fuzz target saved through the same invariant checks, so
/// `swift test` catches a regression without a fuzzing build.
@Suite struct ConfigFuzzReplayTests {
  static let crashInputs = SavedFuzzInput.all(targets: ["config"], in: "crashes")
  static let corpusInputs = SavedFuzzInput.all(targets: ["config"], in: "corpus")
  static let pendingInputs = SavedFuzzInput.all(targets: ["config"], in: "crashes", subfolder: "pending")

  /// Guards against a wrong root path, which would otherwise pass by testing nothing.
  @Test func thereIsASeedCorpus() {
    #expect(!Self.corpusInputs.isEmpty, "no seeds found in Fuzz/corpus/config/")
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

  /// Reproducers of open bugs: expected to fail until the bug is fixed, when this reports that
  /// the known issue no longer occurs and the file belongs one level up.
  @Test(arguments: pendingInputs)
  func pendingReproducerStillFails(_ input: SavedFuzzInput) throws {
    let violation = try input.violation()
    withKnownIssue("an open bug, described in the README.md next to the file") {
      #expect(violation == nil, "\(violation?.description ?? "")")
    }
  }
}
