import Testing

@testable import GatehouseAdmin
@testable import GatehouseConfig
@testable import GatehouseCore

/// What a reload reports beyond the new snapshot (`ConfigChange`), and who the admin API
/// lets in under a config (`AdminAccess`).
@Suite struct ConfigChangeTests {
  static func config(admin: String = "", store: String = "") throws -> GatehouseConfig {
    var members: [String] = []
    if !admin.isEmpty { members.append(#""admin": {\#(admin)}"#) }
    if !store.isEmpty { members.append(#""store": {\#(store)}"#) }
    return try loadConfig(configJSON(extra: members.joined(separator: ", ")))
  }

  @Test func anUnchangedConfigWaitsForNothing() throws {
    let config = try Self.config(admin: #""listen": "127.0.0.1:9901", "token": "a""#)
    #expect(ConfigChange(from: config, to: config).awaitingRestart == [])
  }

  @Test func settingsThatNeedARestartAreNamedTogetherInOrder() throws {
    let old = try Self.config(
      admin: #""listen": "127.0.0.1:9901""#, store: #""path": "var/a.sqlite", "secret_key": "k1""#)
    let new = try Self.config(
      admin: #""listen": "127.0.0.1:9902""#, store: #""path": "var/b.sqlite", "secret_key": "k2""#)
    #expect(ConfigChange(from: old, to: new).awaitingRestart == ["admin.listen", "store.path", "store.secret_key"])
    let onlyListen = try Self.config(
      admin: #""listen": "localhost:9901""#, store: #""path": "var/a.sqlite", "secret_key": "k1""#)
    #expect(ConfigChange(from: old, to: onlyListen).awaitingRestart == ["admin.listen"])
  }

  /// Compared with what runs (the config the process started with), not the last reload:
  /// a change still waiting is named again, one reverted to what runs is not.
  @Test func restartSettingsAreComparedWithWhatRuns() throws {
    let started = try Self.config(admin: #""listen": "127.0.0.1:9901""#)
    let moved = try Self.config(admin: #""listen": "127.0.0.1:9902""#)
    let otherChange = try Self.config(admin: #""listen": "127.0.0.1:9902", "token": "t""#)

    #expect(ConfigChange(from: moved, to: started, running: started).awaitingRestart == [])
    #expect(ConfigChange(from: moved, to: otherChange, running: started).awaitingRestart == ["admin.listen"])
  }

  @Test func theWorkerCountWaitsForARestart() throws {
    let one = try loadConfig(configJSON(extra: #""workers": 1"#))
    let two = try loadConfig(configJSON(extra: #""workers": 2"#))
    #expect(ConfigChange(from: one, to: two).awaitingRestart == ["workers"])
  }

  /// The admin token, `metrics_public` and `store.max_bytes` apply at once: not listed.
  @Test func settingsThatApplyAtOnceAreNotListed() throws {
    let old = try Self.config(admin: #""token": "a", "metrics_public": false"#, store: #""max_bytes": 1000000"#)
    let new = try Self.config(admin: #""token": "b", "metrics_public": true"#, store: #""max_bytes": 2000000"#)
    #expect(ConfigChange(from: old, to: new).awaitingRestart == [])
  }

  @Test func aMissingAdminTokenIsSaidAtStartAndWhenAReloadRemovesIt() throws {
    let withToken = try Self.config(admin: #""token": "a""#)
    let withoutToken = try Self.config(admin: #""token": """#)
    #expect(ConfigChange(from: nil, to: withoutToken).adminTokenMissing)
    #expect(!ConfigChange(from: nil, to: withToken).adminTokenMissing)
    #expect(ConfigChange(from: withToken, to: withoutToken).adminTokenMissing)
    #expect(!ConfigChange(from: withoutToken, to: withoutToken).adminTokenMissing)
    #expect(!ConfigChange(from: withoutToken, to: withToken).adminTokenMissing)
    #expect(ConfigChange(from: nil, to: withoutToken).awaitingRestart == [])
  }

  /// A short admin token is warned about only where other machines can reach the listener,
  /// at start and on each reload, judged on the address the listener runs on.
  @Test func aShortAdminTokenIsSaidOnlyOffLoopback() throws {
    let short = #""token": "fifteen-chars15""#
    let long = #""token": "sixteen-chars-16""#
    let publicShort = try Self.config(admin: #""listen": "0.0.0.0:9901", \#(short)"#)
    let publicLong = try Self.config(admin: #""listen": "0.0.0.0:9901", \#(long)"#)
    let loopbackShort = try Self.config(admin: #""listen": "127.0.0.1:9901", \#(short)"#)
    let loopbackNoToken = try Self.config(admin: #""listen": "127.0.0.1:9901""#)

    #expect(ConfigChange(from: nil, to: publicShort).adminTokenShort)
    #expect(!ConfigChange(from: nil, to: publicLong).adminTokenShort)
    #expect(!ConfigChange(from: nil, to: loopbackShort).adminTokenShort)
    #expect(!ConfigChange(from: nil, to: loopbackNoToken).adminTokenShort)
    #expect(ConfigChange(from: publicShort, to: publicShort, running: publicShort).adminTokenShort)
    #expect(ConfigChange(from: publicLong, to: publicShort, running: publicLong).adminTokenShort)
    #expect(!ConfigChange(from: publicShort, to: publicLong, running: publicShort).adminTokenShort)
    // A moved `admin.listen` waits for a restart: the running listener is what counts.
    #expect(!ConfigChange(from: loopbackNoToken, to: publicShort, running: loopbackNoToken).adminTokenShort)
    #expect(ConfigChange(from: publicLong, to: loopbackShort, running: publicLong).adminTokenShort)
    #expect(
      ConfigChange.isShortAdminToken(SecretValue("é" + String(repeating: "x", count: 14)), on: publicShort.admin.listen)
    )
  }

  @Test func adminAccessLetsTheRightTokenInAndOpenEndpointsThrough() throws {
    let access = AdminAccess(try Self.config(admin: #""token": "right""#).admin)
    let status = AdminRouter.route(method: .get, path: "/admin/status")
    let unknown = AdminRouter.route(method: .get, path: "/admin/nothing")
    #expect(access.allows(status, authorizationHeader: "Bearer right"))
    #expect(access.allows(status, authorizationHeader: "bearer right"))
    #expect(!access.allows(status, authorizationHeader: "Bearer wrong"))
    #expect(!access.allows(status, authorizationHeader: nil))
    #expect(access.allows(unknown, authorizationHeader: "Bearer right"))
    #expect(!access.allows(unknown, authorizationHeader: nil))
    #expect(access.allows(AdminRouter.route(method: .get, path: "/healthz"), authorizationHeader: nil))
    #expect(!access.allows(AdminRouter.route(method: .get, path: "/metrics"), authorizationHeader: nil))
  }

  @Test func withoutATokenOnlyTheOpenEndpointsAnswer() throws {
    let access = AdminAccess(try Self.config(admin: #""metrics_public": true"#).admin)
    #expect(!access.allows(AdminRouter.route(method: .get, path: "/admin/status"), authorizationHeader: nil))
    #expect(!access.allows(AdminRouter.route(method: .get, path: "/admin/status"), authorizationHeader: "Bearer "))
    #expect(!access.allows(AdminRouter.route(method: .post, path: "/admin/reload"), authorizationHeader: "Bearer x"))
    #expect(access.allows(AdminRouter.route(method: .get, path: "/metrics"), authorizationHeader: nil))
    #expect(access.allows(AdminRouter.route(method: .get, path: "/readyz"), authorizationHeader: nil))
  }
}
