// libFuzzer target `response`: the response parser (`HTTPResponseParser`); byte 0 of each input is a control byte.
// Built by Fuzz/run.sh together with Fuzz/Support/FuzzInvariants.swift, which holds the checks.

/// Called by libFuzzer once per input; a broken invariant traps, which libFuzzer reports.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  FuzzInvariants.fuzz(.response, data, size)
  return 0
}
