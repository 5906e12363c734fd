// libFuzzer target `http2`: an HTTP/2 server connection (`HTTP2ServerConnection`, `HTTP2Codec`,
// `HTTP2StreamChannel`) fed what a client sends. Built by Fuzz/run.sh together with
// Fuzz/Support/HTTP2FuzzHarness.swift, which holds the connection's owner and the checks.

/// Called by libFuzzer once per input; a broken invariant traps, which libFuzzer reports.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
  HTTP2FuzzHarness.fuzz(data, size)
  return 0
}
