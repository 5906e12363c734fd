import Foundation
import Testing

/// `gatehouse demo` walks through the product on loopback and says whether every step
/// behaved as described (README.md).
@Suite struct DemoCommandTests {
  @Test func demoWalksThroughEveryStepAndEndsWithTheDashboard() throws {
    let process = Process()
    process.executableURL = gatehouseExecutable()
    process.arguments = ["demo"]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    // Bounded: the demo takes well under a second; a minute means it hangs.
    let deadline = Date().addingTimeInterval(60)
    while process.isRunning && Date() < deadline { usleep(50_000) }
    if process.isRunning { process.terminate() }
    process.waitUntilExit()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    #expect(process.terminationStatus == 0, "\(text)")
    // 1. the enveloped list with key_path
    #expect(text.contains(#"{"code":0,"datas":[{"id":1,"name":"hoge"},{"id":2,"name":"fuga"}],"message":""}"#))
    // 2. the injected token the backend saw
    // Step 2 shows the client's own Authorization going in and the gateway's coming out.
    #expect(text.contains("  Authorization: Bearer what-the-app-sent\n< 200 OK"))
    #expect(text.contains("backend saw Authorization: Bearer demo-token-1"))
    // 3. the expired token refreshed
    #expect(text.contains("backend saw Bearer demo-token-2"))
    // 4. the stale answer during the outage
    #expect(text.contains("X-Gatehouse-Cache: STALE"))
    #expect(text.contains(#"Warning: 110 - "Response is Stale""#))
    // 5. the purge through the admin API, then the error envelope
    #expect(text.contains(#"{"purged":1}"#))
    #expect(text.contains(#"{"code":502,"datas":null,"message":"upstream unavailable"}"#))
    #expect(text.contains("Every step behaved as described."))
    #expect(text.contains("/admin/"))
  }
}
