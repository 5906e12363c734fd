import Foundation
import Testing

/// Paths that a backend decoding them would read differently from the gateway are refused
/// with the 400 envelope before any route sends them on.
@Suite struct PathRefusalTests {
  @Test func disguisedDotSegmentsAndEncodedDelimitersInRewrittenParametersAreRefused() throws {
    let backend = try TestBackend(always: .respond(.text("{}")))
    defer { backend.stop() }
    let gateway = try GatewayProcess(
      config: TestConfig.make(
        routes: [
          TestConfig.route("users", match: "/users/:id", rewrite: "/v2/users/:id/profile"),
          TestConfig.route("all", match: "/*"),
        ], upstreams: ["api": TestConfig.upstream(port: backend.port)]))
    defer { gateway.stopExpectingCleanExit() }

    let refused = [
      "/a/..%3B/admin", "/a/..%3bx/admin", "/a/..%00/admin", "/a/..%00", "/%c0%ae%c0%ae/admin",
      "/a/%C0%AE%C0%AE/admin", "/a/%e0%80%ae%e0%80%ae/admin", "/users/1%23", "/users/1%3Fadmin=1",
      "/users/1%3f", "/users/%23",
    ]
    for path in refused {
      let answer = try send("GET", path, to: gateway.port)
      #expect(isErrorEnvelope(answer, status: 400), "\(path): \(answer.status) \(answer.text)")
    }
    let kept = try send("GET", "/users/7", to: gateway.port)
    let plain = try send("GET", "/files/caf%C3%A9%3F", to: gateway.port)

    #expect(kept.status == 200)
    #expect(plain.status == 200)
    #expect(backend.waitForRequests(2))
    #expect(backend.requests.map(\.target) == ["/v2/users/7/profile", "/files/caf%C3%A9%3F"])
  }
}
