import GatehouseJWT
import Testing

@Suite struct JWTVerificationCacheTests {
  static func token(_ subject: String, exp: Int64 = testNow + 100) -> VerifiedToken {
    VerifiedToken(subject: Array(subject.utf8), expiresAt: exp, scopes: [])
  }

  static func lookUp(_ cache: JWTVerificationCache, _ bytes: String, provider: Int = 0, now: Int64 = testNow)
    -> VerifiedToken?
  {
    var bytes = bytes
    return bytes.withUTF8 { cache.lookUp(UnsafeRawBufferPointer($0), provider: provider, now: now) }
  }

  static func insert(
    _ cache: JWTVerificationCache, _ bytes: String, _ verified: VerifiedToken, provider: Int = 0, leeway: Int64 = 0
  ) {
    var bytes = bytes
    bytes.withUTF8 {
      cache.insert(UnsafeRawBufferPointer($0), provider: provider, verified: verified, leewaySeconds: leeway)
    }
  }

  @Test func aHitReturnsTheVerifiedToken() {
    let cache = JWTVerificationCache(capacity: 10)
    #expect(Self.lookUp(cache, "a.b.c") == nil)
    Self.insert(cache, "a.b.c", Self.token("alice"))
    #expect(Self.lookUp(cache, "a.b.c")?.subject == Array("alice".utf8))
    #expect(Self.lookUp(cache, "a.b.d") == nil)
    #expect(Self.lookUp(cache, "a.b.c ") == nil)
    #expect(Self.lookUp(cache, "") == nil)
    Self.insert(cache, "", Self.token("empty"))
    #expect(Self.lookUp(cache, "")?.subject == Array("empty".utf8))
  }

  @Test func entriesExpireAtExpPlusLeeway() {
    let cache = JWTVerificationCache(capacity: 10)
    Self.insert(cache, "t", Self.token("alice", exp: testNow + 100), leeway: 30)
    #expect(Self.lookUp(cache, "t", now: testNow + 130) != nil)
    #expect(Self.lookUp(cache, "t", now: testNow + 131) == nil)
    // Gone for good, not only hidden.
    #expect(cache.count == 0)
    #expect(Self.lookUp(cache, "t", now: testNow) == nil)
    Self.insert(cache, "max", Self.token("m", exp: .max), leeway: 60)
    #expect(Self.lookUp(cache, "max", now: .max) != nil)
  }

  @Test func providersAreSeparate() {
    let cache = JWTVerificationCache(capacity: 10)
    Self.insert(cache, "t", Self.token("one"), provider: 1)
    #expect(Self.lookUp(cache, "t", provider: 1)?.subject == Array("one".utf8))
    #expect(Self.lookUp(cache, "t", provider: 2) == nil)
    Self.insert(cache, "t", Self.token("two"), provider: 2)
    #expect(Self.lookUp(cache, "t", provider: 1)?.subject == Array("one".utf8))
    #expect(Self.lookUp(cache, "t", provider: 2)?.subject == Array("two".utf8))
  }

  @Test func theLeastRecentlyUsedEntryIsEvicted() {
    let cache = JWTVerificationCache(capacity: 2)
    Self.insert(cache, "a", Self.token("a"))
    Self.insert(cache, "b", Self.token("b"))
    #expect(Self.lookUp(cache, "a") != nil)  // b is now the oldest
    Self.insert(cache, "c", Self.token("c"))
    #expect(cache.count == 2)
    #expect(Self.lookUp(cache, "b") == nil)
    #expect(Self.lookUp(cache, "a") != nil)
    #expect(Self.lookUp(cache, "c") != nil)
    // Inserting a present key updates it without evicting.
    Self.insert(cache, "a", Self.token("a2"))
    #expect(cache.count == 2)
    #expect(Self.lookUp(cache, "a")?.subject == Array("a2".utf8))
    #expect(Self.lookUp(cache, "c") != nil)
    // Many more than the capacity: the newest two stay.
    for index in 0..<1000 { Self.insert(cache, "k\(index)", Self.token("k\(index)")) }
    #expect(cache.count == 2)
    #expect(Self.lookUp(cache, "k999") != nil)
    #expect(Self.lookUp(cache, "k998") != nil)
    #expect(Self.lookUp(cache, "k997") == nil)
  }

  @Test func removeAllForgetsOneProvider() {
    let cache = JWTVerificationCache(capacity: 100)
    for index in 0..<30 { Self.insert(cache, "t\(index)", Self.token("t"), provider: index % 3) }
    cache.removeAll(provider: 1)
    #expect(cache.count == 20)
    for index in 0..<30 {
      #expect((Self.lookUp(cache, "t\(index)", provider: index % 3) != nil) == (index % 3 != 1))
    }
    // The freed slots are reused.
    for index in 0..<10 { Self.insert(cache, "u\(index)", Self.token("u"), provider: 1) }
    #expect(cache.count == 30)
    #expect(Self.lookUp(cache, "u9", provider: 1) != nil)
  }

  @Test func aZeroCapacityCachesNothing() {
    let cache = JWTVerificationCache(capacity: 0)
    Self.insert(cache, "a", Self.token("a"))
    #expect(Self.lookUp(cache, "a") == nil)
  }

  /// The cache is keyed by what the verifier accepted: a real token round-trips.
  @Test func aVerifiedTokenRoundTrips() throws {
    let keys = try keySet([Keys.p256.jwk(kid: "k1")])
    let token = mint("ES256", key: Keys.p256)
    let verified = try #require(verify(token, keys: keys).token)
    let cache = JWTVerificationCache(capacity: 4)
    Self.insert(cache, token, verified, provider: 3, leeway: 0)
    #expect(Self.lookUp(cache, token, provider: 3)?.claimText("sub") == .value(Array("user-1".utf8)))
    #expect(Self.lookUp(cache, token, provider: 3, now: verified.expiresAt + 1) == nil)
  }
}
