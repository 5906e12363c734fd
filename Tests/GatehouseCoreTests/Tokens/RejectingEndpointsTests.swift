import Testing

@testable import GatehouseCore

/// The memory of which endpoints rejected which token values: bounded, least recently seen
/// forgotten first, keys cut to a bounded length.
@Suite struct RejectingEndpointsTests {
  @Test func keysNameRouteAndPathAndAreBounded() {
    #expect(RejectingEndpoints.key(route: "all", path: Array("/users/7".utf8)) == "all /users/7")
    let long = Array(repeating: UInt8(ascii: "a"), count: 10_000)
    #expect(
      RejectingEndpoints.key(route: "r", path: long).utf8.count == 2 + RejectingEndpoints.maximumPathLength)
  }

  @Test func anEndpointAnswersOnItsOwnUntilItAccepts() {
    var endpoints = RejectingEndpoints()
    endpoints.noteCausedRefresh(of: 1, "r /a")
    #expect(endpoints.causedRefresh(of: 1, "r /a"))
    #expect(!endpoints.causedRefresh(of: 2, "r /a"))
    #expect(!endpoints.isOwnAnswer("r /a"))
    endpoints.noteOwnAnswer("r /a")
    #expect(endpoints.isOwnAnswer("r /a"))
    let wasOwn = endpoints.noteAccepted("r /a")
    #expect(wasOwn)
    #expect(!endpoints.isOwnAnswer("r /a"))
    #expect(!endpoints.causedRefresh(of: 1, "r /a"))
    let unknown = endpoints.noteAccepted("r /b")
    #expect(!unknown)
  }

  @Test func theTableKeepsAtMostItsCapacityForgettingTheLeastRecentlySeen() {
    var endpoints = RejectingEndpoints()
    endpoints.noteOwnAnswer("r /first")
    for index in 0..<(RejectingEndpoints.capacity * 3) {
      endpoints.noteCausedRefresh(of: 1, "r /\(index)")
      // Seen again now and then: kept while others come and go.
      if index % 50 == 0 { endpoints.noteOwnAnswer("r /kept") }
    }
    #expect(!endpoints.isOwnAnswer("r /first"))
    #expect(endpoints.isOwnAnswer("r /kept"))
    #expect(endpoints.ownAnswers == ["r /kept"])
    let remembered = (0..<(RejectingEndpoints.capacity * 3)).filter { endpoints.causedRefresh(of: 1, "r /\($0)") }
    #expect(remembered.count == RejectingEndpoints.capacity - 1)
    #expect(remembered.last == RejectingEndpoints.capacity * 3 - 1)
  }
}
