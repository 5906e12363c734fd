import Foundation
import Testing

/// Requests of each method, with bodies framed by length or chunked, go through to the
/// backend intact, and the backend's answer comes back.
@Suite struct ProxyMethodTests {
  @Test func getIsProxiedWithItsAnswer() throws {
    let backend = try TestBackend(always: .respond(.text("hello from backend", headers: [("X-Backend", "yes")])))
    defer { backend.stop() }
    let gateway = try GatewayProcess(config: TestConfig.passThrough(to: backend.port))
    defer { gateway.stopExpectingCleanExit() }

    let response = try send("GET", "/items/1?x=1", to: gateway.port)

    #expect(response.status == 200)
    #expect(response.text == "hello from backend")
    #expect(response.head.value("X-Backend") == "yes")
    let request = try #require(backend.requests.first)
    #expect(request.method == "GET")
    #expect(request.target == "/items/1?x=1")
    #expect(request.bodyLength == 0)
  }
}
