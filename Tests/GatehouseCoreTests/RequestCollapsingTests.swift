import GatehouseHTTP
import Testing

@testable import GatehouseCore

@Suite struct RequestCollapsingTests {
  @Test func onlyBodilessGetsOnRoutesThatAllowItCollapse() {
    #expect(RequestCollapsing.isCollapsible(method: .get, hasBody: false, enabled: true))
    #expect(!RequestCollapsing.isCollapsible(method: .get, hasBody: false, enabled: false))
    #expect(!RequestCollapsing.isCollapsible(method: .get, hasBody: true, enabled: true))
    #expect(!RequestCollapsing.isCollapsible(method: .head, hasBody: false, enabled: true))
    #expect(!RequestCollapsing.isCollapsible(method: .post, hasBody: false, enabled: true))
    #expect(!RequestCollapsing.isCollapsible(method: .delete, hasBody: false, enabled: true))
  }

  @Test func requestsWaitOnlyWhileTheUpstreamLooksSound() {
    var circuit = CircuitBreaker(threshold: 2, openNanoseconds: 100)
    #expect(RequestCollapsing.mayWait(circuit: circuit, healthy: nil))
    #expect(RequestCollapsing.mayWait(circuit: circuit, healthy: true))
    #expect(!RequestCollapsing.mayWait(circuit: circuit, routeSound: false, healthy: true))
    #expect(!RequestCollapsing.mayWait(circuit: circuit, healthy: false))
    // One failure: still closed, but requests go one by one so each failure counts.
    circuit.recordFailure(now: 0)
    #expect(circuit.state == .closed(failures: 1))
    #expect(!RequestCollapsing.mayWait(circuit: circuit, healthy: true))
    circuit.recordFailure(now: 0)
    #expect(!RequestCollapsing.mayWait(circuit: circuit, healthy: true))
    // The open time is over: the next exchange is the trial, and nobody waits for it.
    #expect(circuit.decide(now: 200) == .attemptAsTrial)
    #expect(!RequestCollapsing.mayWait(circuit: circuit, healthy: true))
    circuit.recordSuccess()
    #expect(RequestCollapsing.mayWait(circuit: circuit, healthy: true))
  }

  @Test func waitersOutwaitALeaderThatRetriesOnce() {
    #expect(
      RequestCollapsing.waiterPatience(connectTimeout: .milliseconds(500), answerTimeout: .seconds(2))
        == .seconds(5))
  }

  @Test func collapseIsOnByDefaultAndCanBeTurnedOff() throws {
    let on = try loadConfig(configJSON(route: #""cache": {}"#)).routes[0].cache
    let off = try loadConfig(configJSON(route: #""cache": {"collapse": false}"#)).routes[0].cache
    #expect(on?.collapse == true)
    #expect(off?.collapse == false)
    #expect(CachePolicy(off!).collapse == false)
    #expect(
      issueLines(configJSON(route: #""cache": {"collapse": "no"}"#))
        == ["routes[0].cache.collapse: expected true or false, got a string"])
  }
}
