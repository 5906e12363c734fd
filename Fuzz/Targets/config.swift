// libFuzzer target `config`: the config loader (`ConfigLoader.load(json:environment:)`, with the
// JSON parser and `${...}` expansion it uses); the input is the bytes of a config file.
// Built by Fuzz/run.sh together with Fuzz/Support/ConfigFuzzInvariants.swift, which holds the checks.

/// Called by libFuzzer once per input; a broken invariant traps, which libFuzzer reports.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  ConfigFuzzInvariants.fuzz(data, size)
  return 0
}
