// libFuzzer target `json`: the JSON engine (`JSONValidator`, `JSONStreamingValidator`,
// `JSONDocument`, `JSONEnvelopeWriter`, `JSONMediaType`).
// Built by Fuzz/run.sh together with Fuzz/Support/JSONFuzzInvariants.swift, which holds the checks.

/// Called by libFuzzer once per input; a broken invariant traps, which libFuzzer reports.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  JSONFuzzInvariants.fuzz(data, size)
  return 0
}
