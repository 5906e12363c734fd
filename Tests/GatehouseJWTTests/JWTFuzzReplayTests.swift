import GatehouseJWT
import Testing

extension SavedFuzzInput {
  /// Runs the `jwt` fuzz target's checks (`Fuzz/Support/JWTFuzzInvariants.swift`) on this input.
  func violation() throws -> FuzzViolation? {
    try bytes().withUnsafeBytes { JWTFuzzInvariants.check($0) }
  }
}

/// Replays what the `jwt` fuzz target saved through the same invariant checks, so
/// `swift test` catches a regression without a fuzzing build.
@Suite struct JWTFuzzReplayTests {
  static let crashInputs = SavedFuzzInput.all(targets: ["jwt"], in: "crashes")
  static let corpusInputs = SavedFuzzInput.all(targets: ["jwt"], in: "corpus")
  static let pendingInputs = SavedFuzzInput.all(targets: ["jwt"], in: "crashes", subfolder: "pending")

  /// Guards against a wrong root path, which would otherwise pass by testing nothing.
  @Test func thereIsASeedCorpus() {
    #expect(!Self.corpusInputs.isEmpty, "no seeds found in Fuzz/corpus/jwt/")
  }

  /// The seeds that carry genuine tokens are accepted, so the fuzzer starts from the accepting
  /// path as well as the refusing ones (and the fixed keys in the checks match the seeds).
  @Test func theGenuineSeedsAreAccepted() throws {
    for name in ["verify-es256", "verify-eddsa", "verify-no-kid-scp"] {
      let bytes = try #require(Self.corpusInputs.first { $0.path.hasSuffix("/" + name) }).bytes()
      let result = bytes.withUnsafeBytes {
        JWTVerifier.verify(
          UnsafeRawBufferPointer(rebasing: $0[1...]), keys: JWTFuzzInvariants.keys,
          policy: JWTFuzzInvariants.policy(bytes[0]), now: JWTFuzzInvariants.now)
      }
      #expect(result.token != nil, "\(name): \(result)")
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
