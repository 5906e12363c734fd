// libFuzzer target `jwt`: a JWKS document read by `JWTKeySet`, or a bearer token checked by
// `JWTVerifier` against a fixed key set (and cached by `JWTVerificationCache`). Built by
// Fuzz/run.sh together with Fuzz/Support/JWTFuzzInvariants.swift, which holds the checks.

/// Called by libFuzzer once per input; a broken invariant traps, which libFuzzer reports.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  JWTFuzzInvariants.fuzz(data, size)
  return 0
}
