import Testing

@testable import GatehouseConfig

/// `jwt` providers and route `jwt` blocks (Docs/jwt.md): what `check` refuses, and why.
@Suite struct JWTConfigTests {
  /// A public Ed25519 key (32 bytes of base64url): config checks need a parseable one.
  static let jwk = #"{"kty": "OKP", "crv": "Ed25519", "x": "Gbt6ePDvbnZmXckeHAfa-EwwRUUrA2Rz4CBVvaBiUEc", "kid": "e1"}"#

  static func issues(provider: String, route: String = #""jwt": {"provider": "app"}"#) -> [String] {
    issueLines(configJSON(route: route, extra: #""jwt": {"providers": {"app": {\#(provider)}}}"#))
  }

  @Test func aProviderWithInlineKeysOrAnHTTPSURLLoads() throws {
    #expect(Self.issues(provider: #""keys": {"keys": [\#(Self.jwk)]}"#) == ["loaded"])
    #expect(Self.issues(provider: #""jwks_url": "https://id.example.com/jwks.json""#) == ["loaded"])
    // On this machine (a sidecar, a test identity provider) http is allowed.
    #expect(Self.issues(provider: #""jwks_url": "http://127.0.0.1:5556/keys""#) == ["loaded"])
    let config = try loadConfig(
      configJSON(
        route: #""jwt": {"provider": "app", "required": false, "scopes": ["a", "b"]}, "cache": {"shared": true}"#,
        extra: #""jwt": {"providers": {"app": {"keys": {"keys": [\#(Self.jwk)]}, "algorithms": ["EdDSA"]}}}"#))
    let provider = try #require(config.jwt.provider(named: "app"))
    #expect(provider.algorithms == [.edDSA] && provider.leewaySeconds == 30 && provider.jwksRefresh == .seconds(600))
    #expect(config.routes[0].jwt == RouteJWTConfig(provider: "app", required: false, scopes: ["a", "b"]))
    #expect(config.routes[0].cache?.shared == true)
  }

  @Test func keysMustBeFetchedSafelyOrWrittenValid() {
    #expect(
      Self.issues(provider: #""jwks_url": "http://id.example.com/jwks.json""#) == [
        "jwt.providers.app.jwks_url: must be https: signing keys fetched in clear could be replaced on the way (http only for loopback hosts)"
      ])
    #expect(Self.issues(provider: #""jwks_url": "http://127.example.com/jwks.json""#).count == 1)
    #expect(
      Self.issues(provider: #""issuer": "x""#) == [
        "jwt.providers.app.jwks_url: missing: a provider needs jwks_url or keys"
      ])
    #expect(
      Self.issues(provider: #""jwks_url": "https://a/k", "keys": {"keys": [\#(Self.jwk)]}"#) == [
        "jwt.providers.app.keys: give either jwks_url or keys, not both"
      ])
    #expect(
      Self.issues(provider: #""keys": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).first?.contains(
        "no usable signing key") == true)
    #expect(Self.issues(provider: #""keys": [1]"#).first?.contains("expected a JWKS object") == true)
  }

  @Test func noneAndHMACAreNeverAccepted() {
    for name in ["none", "HS256", "HS512"] {
      let lines = Self.issues(provider: #""keys": {"keys": [\#(Self.jwk)]}, "algorithms": ["\#(name)"]"#)
      #expect(lines.count == 1 && lines[0].contains("is never accepted"), "\(lines)")
    }
    #expect(
      Self.issues(provider: #""keys": {"keys": [\#(Self.jwk)]}, "algorithms": ["ES256", "ES256"]"#) == [
        "jwt.providers.app.algorithms[1]: ES256 is listed twice"
      ])
  }

  @Test func claimsGoOnlyToHeadersTheGatewayDoesNotManage() {
    for header in ["Authorization", "Host", "X-Request-Id", "Content-Length", "Cookie"] {
      let lines = Self.issues(
        provider: #""keys": {"keys": [\#(Self.jwk)]}, "forward_claims": {"sub": "\#(header)"}"#)
      #expect(lines.count == 1, "\(header): \(lines)")
    }
    #expect(
      Self.issues(
        provider: #""keys": {"keys": [\#(Self.jwk)]}, "forward_claims": {"sub": "X-User", "uid": "x-user"}"#
      ).count == 1)
  }

  @Test func routesNameAKnownProvider() {
    let keys = #""keys": {"keys": [\#(Self.jwk)]}"#
    #expect(
      Self.issues(provider: keys, route: #""jwt": {"provider": "ap"}"#).first?.hasPrefix(
        "routes[0].jwt.provider: unknown jwt provider \"ap\"") == true)
    #expect(
      Self.issues(provider: keys, route: #""jwt": {"provider": "app", "scopes": ["a b"]}"#) == [
        "routes[0].jwt.scopes[0]: a scope is one word, without spaces"
      ])
    #expect(
      issueLines(configJSON(route: #""cache": {"shared": true}"#)) == [
        "routes[0].cache.shared: has no effect without \"jwt\" in this route"
      ])
  }
}
