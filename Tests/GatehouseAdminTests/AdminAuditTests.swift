import Testing

@testable import GatehouseAdmin
@testable import GatehouseLogging

/// The log line of a state-changing admin call (`AdminAudit`): which calls get one, and
/// what it carries.
@Suite struct AdminAuditTests {
  /// The line's fields as `key=value` (values as they are written to the log).
  static func fields(
    _ endpoint: AdminEndpoint, _ parameters: [String: String] = [:], answer: AdminAnswer = .json(.null)
  ) -> [String]? {
    AdminAudit(endpoint, parameters: parameters).map { audit in
      audit.fields(requestID: "r1", answer: answer).map { field in
        var value: [UInt8] = []
        Logger.append(field.value, to: &value)
        return "\(field.key)=\(String(decoding: value, as: UTF8.self))"
      }
    }
  }

  @Test func purgesNameTheirTargetAndCount() {
    var purged = AdminAnswer.json(.null)
    purged.auditFacts = [("purged", .int(3))]
    #expect(
      Self.fields(.purgeCache, answer: purged)
        == [#"action="cache purge""#, #"target="all""#, "status=200", "purged=3", #"request_id="r1""#])
    #expect(
      Self.fields(.purgeCacheEntries, ["prefix": "/api/k/"])
        == [#"action="cache purge""#, #"target="prefix""#, #"prefix="/api/k/""#, "status=200", #"request_id="r1""#])
    #expect(
      Self.fields(.purgeCacheEntry(id: "ab12"), answer: .error(404, "no cache entry ab12"))
        == [#"action="cache purge""#, #"target="id""#, #"id="ab12""#, "status=404", #"request_id="r1""#])
    // A refused query leaves no prefix to name.
    #expect(Self.fields(.purgeCacheEntries)?.contains("prefix=null") == true)
  }

  @Test func reloadsAndTokenCallsNameTheAction() {
    #expect(Self.fields(.reload) == [#"action="reload""#, "status=200", #"request_id="r1""#])
    #expect(Self.fields(.setToken(name: "api"))?.prefix(2) == [#"action="token set""#, #"token="api""#])
    #expect(Self.fields(.refreshToken(name: "api"))?.first == #"action="token refresh""#)
    #expect(Self.fields(.invalidateToken(name: "api"))?.first == #"action="token invalidate""#)
  }

  @Test func aRoutePurgeNamesTheRoute() {
    #expect(
      Self.fields(.purgeRouteCache(name: "users"))?.prefix(3) == [
        #"action="cache purge""#, #"target="route""#, #"route="users""#,
      ])
  }

  @Test func readOnlyEndpointsAreNotLogged() {
    let readOnly: [AdminEndpoint] = [
      .healthz, .readyz, .metrics, .status, .cacheStats, .cacheEntries, .cacheEntry(id: "a"), .tokens, .routes,
      .upstreams, .history, .dashboard, .openAPI,
    ]
    for endpoint in readOnly { #expect(AdminAudit(endpoint, parameters: [:]) == nil, "\(endpoint)") }
  }

  /// The answer's body (for a refused token set, an error that could quote the request)
  /// never reaches the line: only its status.
  @Test func theAnswerBodyIsNotLogged() {
    let answer = AdminAnswer.error(400, "body must be a JSON object: near SECRET")
    let text = Self.fields(.setToken(name: "api"), answer: answer)?.joined(separator: " ") ?? ""
    #expect(!text.contains("SECRET"))
    #expect(text.contains("status=400"))
  }
}
