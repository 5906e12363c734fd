import Testing

@testable import GatehouseAdmin

/// The admin API's query parsing (`AdminRouter.queryParameters`): only the parameters an
/// endpoint takes, each once, with valid escapes.
@Suite struct AdminQueryTests {
  static let listing = AdminEndpoint.cacheEntries.queryParameters

  @Test func acceptedParametersAreDecoded() throws {
    let parsed = try AdminRouter.queryParameters("prefix=%2Fa%20b/&limit=5&cursor=c+d", accepted: Self.listing).get()
    #expect(parsed == ["prefix": "/a b/", "limit": "5", "cursor": "c d"])
    #expect(try AdminRouter.queryParameters("", accepted: []).get() == [:])
    #expect(try AdminRouter.queryParameters("&&limit=1&", accepted: Self.listing).get() == ["limit": "1"])
    #expect(try AdminRouter.queryParameters("prefix", accepted: Self.listing).get() == ["prefix": ""])
    #expect(try AdminRouter.queryParameters("prefix=a=b", accepted: Self.listing).get() == ["prefix": "a=b"])
  }

  @Test func anUnknownParameterIsNamed() {
    #expect(
      AdminRouter.queryParameters("prefix=/a/", accepted: AdminEndpoint.purgeCache.queryParameters)
        == .failure(AdminQueryProblem(parameter: "prefix", kind: .unknown(accepted: []))))
    #expect(
      AdminRouter.queryParameters("prefix=/a/&pre%66ixx=1", accepted: ["prefix"])
        == .failure(AdminQueryProblem(parameter: "prefixx", kind: .unknown(accepted: ["prefix"]))))
    #expect(
      AdminRouter.queryParameters("=1", accepted: ["prefix"])
        == .failure(AdminQueryProblem(parameter: "", kind: .unknown(accepted: ["prefix"]))))
  }

  @Test func aRepeatedParameterIsRefused() {
    #expect(
      AdminRouter.queryParameters("prefix=/a/&prefix=", accepted: ["prefix"])
        == .failure(AdminQueryProblem(parameter: "prefix", kind: .repeated)))
  }

  @Test func badEscapesAreRefusedNotReadAsEmpty() {
    for (query, parameter) in [
      ("prefix=/p/%ZZ", "prefix"), ("prefix=%E2%82", "prefix"), ("limit=%3", "limit"), ("cursor=%", "cursor"),
      ("pre%ZZfix=1", "pre%ZZfix"),
    ] {
      #expect(
        AdminRouter.queryParameters(query, accepted: Self.listing)
          == .failure(AdminQueryProblem(parameter: parameter, kind: .badEncoding)), "\(query)")
    }
  }

  @Test func messagesNameTheParameterAndWhatIsTaken() {
    #expect(
      AdminQueryProblem(parameter: "x", kind: .unknown(accepted: ["prefix", "limit"])).message
        == #"unknown query parameter "x" (this endpoint takes prefix, limit)"#)
    #expect(
      AdminQueryProblem(parameter: "x", kind: .unknown(accepted: [])).message
        == #"unknown query parameter "x" (this endpoint takes no query parameters)"#)
    #expect(AdminQueryProblem(parameter: "limit", kind: .repeated).message.contains(#""limit""#))
    #expect(AdminQueryProblem(parameter: "prefix", kind: .badEncoding).message.contains(#""prefix""#))
  }

  /// Only the two listing and purging endpoints take parameters.
  @Test func onlyTheEntryEndpointsTakeParameters() {
    #expect(AdminEndpoint.cacheEntries.queryParameters == ["prefix", "limit", "cursor"])
    #expect(AdminEndpoint.purgeCacheEntries.queryParameters == ["prefix"])
    for endpoint: AdminEndpoint in [.purgeCache, .cacheStats, .reload, .purgeCacheEntry(id: "a"), .status, .healthz] {
      #expect(endpoint.queryParameters == [], "\(endpoint)")
    }
  }
}
