import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// Settings that leave a secret exposed are warned about at start.
@Suite struct StartupWarningsTests {
  private let unencrypted = "store.secret_key is not set: token values are stored unencrypted"
  private let shortKey = "store.secret_key is short; use 32 random characters or more"

  private func oauth2(_ name: String, url: String) -> String {
    #""\#(name)": {"type": "oauth2_client_credentials", "token_url": "\#(url)", "client_id": "gw", "client_secret": "s"}"#
  }

  /// A config with these `tokens` members, the admin token when given, and `store` members.
  private func config(tokens: [String], adminToken: String? = nil, store: String = "") throws -> GatehouseConfig {
    let admin = adminToken.map { #", "admin": {"token": "\#($0)"}"# } ?? ""
    return try loadConfig(
      #"{"routes": [{"name": "r", "match": {"path": "/"}, "stub": {"mode": "always"}}], "#
        + #""tokens": {\#(tokens.joined(separator: ", "))}, "store": {\#(store)}\#(admin)}"#)
  }

  private func messages(_ config: GatehouseConfig, storeOpen: Bool = true) -> [String] {
    StartupWarnings.messages(for: config, storeOpen: storeOpen)
  }

  @Test func aFetchedTokenWithoutASecretKeyIsStoredUnencrypted() throws {
    let fetched = try config(tokens: [oauth2("partner", url: "https://auth.example/token")])
    #expect(messages(fetched) == [unencrypted])
    #expect(messages(fetched, storeOpen: false).isEmpty)  // nothing is written anywhere
  }

  @Test func aValueSetThroughTheAdminAPIIsStoredTooButOnlyWithAnAdminToken() throws {
    let fixed = #""api": {"type": "static", "value": ""}"#
    #expect(messages(try config(tokens: [fixed], adminToken: "admin-token-1234")) == [unencrypted])
    // Without an admin token nothing can be set, and a static value is never stored.
    #expect(messages(try config(tokens: [fixed])).isEmpty)
    #expect(messages(try config(tokens: [], adminToken: "admin-token-1234")).isEmpty)
  }

  @Test func aShortSecretKeyIsWarnedAboutAndALongOneIsNot() throws {
    let tokens = [oauth2("partner", url: "https://auth.example/token")]
    let short = try config(tokens: tokens, store: #""secret_key": "0123456789abcdef0123456789abcde""#)  // 31
    #expect(messages(short) == [shortKey])
    // Said even with no token to encrypt yet: one may be set later through the admin API.
    #expect(messages(try config(tokens: [], store: #""secret_key": "k""#)) == [shortKey])
    let long = try config(tokens: tokens, store: #""secret_key": "0123456789abcdef0123456789abcdef""#)  // 32
    #expect(messages(long).isEmpty)
  }

  @Test func anAdminListenerOffLoopbackWithoutTLSIsWarnedAbout() throws {
    func admin(_ members: String) throws -> GatehouseConfig {
      try loadConfig(
        #"{"routes": [{"name": "r", "match": {"path": "/"}, "stub": {"mode": "always"}}], "admin": {\#(members)}}"#)
    }
    let open = try admin(#""listen": "0.0.0.0:9901", "token": "0123456789abcdef0123456789""#)
    #expect(
      messages(open, storeOpen: false) == [
        "admin.listen 0.0.0.0:9901 is not loopback and admin.tls is not set: "
          + "the admin token travels unencrypted (keep the port on a private network)"
      ])
    #expect(messages(try admin(#""listen": "127.0.0.1:9901""#), storeOpen: false).isEmpty)
  }

  @Test func anHTTPTokenURLIsWarnedAboutUnlessItIsLoopback() throws {
    let key = #""secret_key": "0123456789abcdef0123456789abcdef""#
    let remote = try config(
      tokens: [
        oauth2("partner", url: "http://auth.example/token"), oauth2("secure", url: "https://auth.example/token"),
        oauth2("local", url: "http://127.0.0.1:9000/token"), oauth2("six", url: "http://[::1]:9000/token"),
        oauth2("named", url: "http://localhost:9000/token"), oauth2("lan", url: "http://10.1.2.3/token"),
      ], store: key)
    #expect(
      messages(remote) == [
        "tokens.partner.token_url is http://: the client secret travels unencrypted",
        "tokens.lan.token_url is http://: the client secret travels unencrypted",
      ])
    // Whatever the store does: the secret goes out on every fetch.
    #expect(messages(remote, storeOpen: false).count == 2)
  }
}
