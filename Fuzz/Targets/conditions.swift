// libFuzzer target `conditions`: conditional fields' values (`HTTPDate`, `EntityTagList`,
// `HTTPPreconditions`). Built by Fuzz/run.sh together with Fuzz/Support/FuzzInvariants.swift,
// which holds the checks.

/// Called by libFuzzer once per input; a broken invariant traps, which libFuzzer reports.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  FuzzInvariants.fuzz(.conditions, data, size)
  return 0
}
