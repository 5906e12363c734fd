import GatehouseJWT
import Testing

/// The registered claims (RFC 7519 §4.1), scopes, and claims forwarded as header values.
@Suite struct JWTClaimsTests {
  static let keys = try! keySet([Keys.ed25519.jwk(kid: "k1")])

  static func check(_ payload: String, policy: JWTPolicy = openPolicy, now: Int64 = testNow)
    -> Result<VerifiedToken, JWTRefusal>
  {
    verify(mint("EdDSA", key: Keys.ed25519, payload: payload), keys: keys, policy: policy, now: now)
  }

  static func leeway(_ seconds: Int64) -> JWTPolicy {
    JWTPolicy(issuer: nil, audiences: [], algorithms: Set(JWTAlgorithm.allCases), leewaySeconds: seconds)
  }

  @Test func expIsRequiredAndANumber() {
    #expect(Self.check(#"{"sub":"a"}"#).refusal == .malformed("exp missing"))
    #expect(Self.check(#"{"exp":"1700003600"}"#).refusal == .malformed("exp is not a number"))
    #expect(Self.check(#"{"exp":null}"#).refusal == .malformed("exp is not a number"))
    #expect(Self.check(#"{"exp":\#(testNow).5}"#).token?.expiresAt == testNow)
    #expect(Self.check(#"{"exp":1e300}"#).token?.expiresAt == Int64.max)
  }

  @Test func expiry() {
    let exp = testNow + 100
    let payload = #"{"exp":\#(exp)}"#
    #expect(Self.check(payload, now: exp).token?.expiresAt == exp)
    #expect(Self.check(payload, now: exp + 1).refusal == .expired)
    #expect(Self.check(payload, policy: Self.leeway(30), now: exp + 30).token != nil)
    #expect(Self.check(payload, policy: Self.leeway(30), now: exp + 31).refusal == .expired)
    // A fraction: now > 100.5 is expired at 101, not at 100.
    #expect(Self.check(#"{"exp":\#(exp).5}"#, now: exp).token != nil)
    #expect(Self.check(#"{"exp":\#(exp).5}"#, now: exp + 1).refusal == .expired)
    // Huge values saturate instead of overflowing.
    #expect(Self.check(#"{"exp":9223372036854775807}"#, policy: Self.leeway(.max), now: .max).token != nil)
    #expect(Self.check(#"{"exp":-9223372036854775808}"#, policy: Self.leeway(.max), now: .min).token != nil)
  }

  @Test func notBefore() {
    let nbf = testNow + 100
    let payload = #"{"exp":\#(testNow + 1000),"nbf":\#(nbf)}"#
    #expect(Self.check(payload, now: nbf).token != nil)
    #expect(Self.check(payload, now: nbf - 1).refusal == .notYetValid)
    #expect(Self.check(payload, policy: Self.leeway(10), now: nbf - 10).token != nil)
    #expect(Self.check(payload, policy: Self.leeway(10), now: nbf - 11).refusal == .notYetValid)
    #expect(Self.check(#"{"exp":\#(testNow + 1000),"nbf":\#(nbf - 1).5}"#, now: nbf - 1).refusal == .notYetValid)
    #expect(Self.check(#"{"exp":\#(testNow + 1000),"nbf":"soon"}"#).refusal == .malformed("nbf is not a number"))
  }

  @Test func issuedAt() {
    let payload = #"{"exp":\#(testNow + 1000),"iat":\#(testNow + 5)}"#
    #expect(Self.check(payload, now: testNow + 5).token != nil)
    #expect(Self.check(payload, now: testNow + 4).refusal == .issuedInFuture)
    #expect(Self.check(payload, policy: Self.leeway(5), now: testNow).token != nil)
    #expect(Self.check(payload, policy: Self.leeway(4), now: testNow).refusal == .issuedInFuture)
    #expect(Self.check(#"{"exp":\#(testNow + 1000),"iat":\#(testNow).25}"#).refusal == .issuedInFuture)
    #expect(Self.check(#"{"exp":\#(testNow + 1000),"iat":[]}"#).refusal == .malformed("iat is not a number"))
  }

  @Test func issuer() {
    let policy = JWTPolicy(issuer: "https://id.example.com/", audiences: [], algorithms: [.edDSA], leewaySeconds: 0)
    let exp = testNow + 60
    #expect(Self.check(#"{"exp":\#(exp),"iss":"https://id.example.com/"}"#, policy: policy).token != nil)
    #expect(Self.check(#"{"exp":\#(exp),"iss":"https://id.example.com"}"#, policy: policy).refusal == .wrongIssuer)
    #expect(Self.check(#"{"exp":\#(exp)}"#, policy: policy).refusal == .wrongIssuer)
    #expect(Self.check(#"{"exp":\#(exp),"iss":["https://id.example.com/"]}"#, policy: policy).refusal == .wrongIssuer)
    // Without a configured issuer any is accepted.
    #expect(Self.check(#"{"exp":\#(exp),"iss":"https://other.example/"}"#).token != nil)
  }

  @Test func audience() {
    let policy = JWTPolicy(issuer: nil, audiences: ["mobile-api", "web"], algorithms: [.edDSA], leewaySeconds: 0)
    let exp = testNow + 60
    #expect(Self.check(#"{"exp":\#(exp),"aud":"web"}"#, policy: policy).token != nil)
    #expect(Self.check(#"{"exp":\#(exp),"aud":["x","mobile-api"]}"#, policy: policy).token != nil)
    #expect(Self.check(#"{"exp":\#(exp),"aud":"mobile"}"#, policy: policy).refusal == .wrongAudience)
    #expect(Self.check(#"{"exp":\#(exp),"aud":[]}"#, policy: policy).refusal == .wrongAudience)
    #expect(Self.check(#"{"exp":\#(exp)}"#, policy: policy).refusal == .wrongAudience)
    #expect(
      Self.check(#"{"exp":\#(exp),"aud":7}"#, policy: policy).refusal == .malformed("aud is not a string or an array"))
    #expect(
      Self.check(#"{"exp":\#(exp),"aud":["web",7]}"#, policy: policy).refusal
        == .malformed("aud has a non-string element"))
    // No audiences configured: not checked.
    #expect(Self.check(#"{"exp":\#(exp),"aud":"anything"}"#).token != nil)
    #expect(Self.check(#"{"exp":\#(exp)}"#).token != nil)
  }

  @Test func subjectAndScopes() {
    let exp = testNow + 60
    let token = Self.check(#"{"exp":\#(exp),"sub":"ünïcode","scope":"profile:read  orders:write"}"#).token
    #expect(token?.subject == Array("ünïcode".utf8))
    #expect(token?.scopes == ["profile:read", "orders:write"])
    #expect(token?.hasScopes(["orders:write", "profile:read"]) == true)
    #expect(token?.hasScopes([]) == true)
    #expect(token?.hasScopes(["profile:read", "admin"]) == false)
    let scp = Self.check(#"{"exp":\#(exp),"sub":42,"scp":["a","b"]}"#).token
    #expect(scp?.subject == nil)
    #expect(scp?.scopes == ["a", "b"])
    #expect(Self.check(#"{"exp":\#(exp),"scp":"a b"}"#).token?.scopes == ["a", "b"])
    #expect(Self.check(#"{"exp":\#(exp)}"#).token?.scopes == [])
    #expect(Self.check(#"{"exp":\#(exp),"scope":["a"],"scp":"b"}"#).token?.scopes == ["a"])
    #expect(Self.check(#"{"exp":\#(exp),"scope":1}"#).refusal == .malformed("scope is not a string or an array"))
    #expect(Self.check(#"{"exp":\#(exp),"scp":[1]}"#).refusal == .malformed("scp has a non-string element"))
  }

  /// An empty or white-space-only `sub` names nobody: no subject (so the per-user cache key
  /// falls back to the token itself) and nothing forwarded; padding around a name keeps it.
  @Test func anEmptyOrBlankSubIsNoSubject() throws {
    let exp = testNow + 60
    for blank in ["", " ", "   ", #"\t"#, #"\n "#, #"\u00a0"#, #"\u3000\u2003"#] {
      let token = try #require(Self.check(#"{"exp":\#(exp),"sub":"\#(blank)"}"#).token, "\(blank)")
      #expect(token.subject == nil, "\(blank)")
      #expect(token.claimText("sub") == .absent, "\(blank)")
    }
    let padded = try #require(Self.check(#"{"exp":\#(exp),"sub":" alice "}"#).token)
    #expect(padded.subject == Array(" alice ".utf8))
    #expect(padded.claimText("sub") == .value(Array(" alice ".utf8)))
    // Only `sub` is read this way: another claim's empty string is forwarded as it is.
    let other = try #require(Self.check(#"{"exp":\#(exp),"sub":"","team":""}"#).token)
    #expect(other.claimText("team") == .value([]))
  }

  @Test func claimText() throws {
    let long = String(repeating: "y", count: 1024)
    let payload = #"""
      {"exp":\#(testNow + 60),"s":"user-1","i":-42,"f":1.5,"t":true,"n":null,"a":["x",1],"o":{"k":"v","z":[]},
       "cr":"a\r\nX-Admin: 1","nul":"a\u0000","del":"a\u007f","tab":"a\tb","long":"\#(long)","longer":"\#(long)z",
       "nested":["a\nb"]}
      """#
    let token = try #require(Self.check(payload).token)
    #expect(token.claimText("s") == .value(Array("user-1".utf8)))
    #expect(token.claimText("i") == .value(Array("-42".utf8)))
    #expect(token.claimText("f") == .value(Array("1.5".utf8)))
    #expect(token.claimText("t") == .value(Array("true".utf8)))
    #expect(token.claimText("a") == .value(Array(#"["x",1]"#.utf8)))
    #expect(token.claimText("o") == .value(Array(#"{"k":"v","z":[]}"#.utf8)))
    #expect(token.claimText("missing") == .absent)
    #expect(token.claimText("n") == .absent)
    for name in ["cr", "nul", "del", "tab"] {
      #expect(token.claimText(name) == .refused("claim has a control byte"), "\(name)")
    }
    #expect(token.claimText("long") == .value(Array(long.utf8)))
    #expect(token.claimText("longer") == .refused("claim over 1024 bytes"))
    // Inside JSON text a newline is escaped, so it cannot split a header.
    #expect(token.claimText("nested") == .value(Array(#"["a\nb"]"#.utf8)))
  }
}
