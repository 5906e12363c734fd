import Testing

@testable import GatehouseStore

@Suite struct CacheKeyTests {
  @Test func reorderedQueryGivesTheSameKey() {
    let a = CacheKey(method: "GET", upstream: "api", path: "/users", query: "b=2&a=1&c=%20x")
    let b = CacheKey(method: "GET", upstream: "api", path: "/users", query: "?c=%20x&a=1&b=2")
    #expect(a.id == b.id)
    #expect(a.sortedQuery == "a=1&b=2&c=%20x")
  }

  /// Repeated names are not reordered among themselves: most backends take the first or the
  /// last value, so `role=admin&role=user` and `role=user&role=admin` are different requests.
  @Test func pairsOfOneNameKeepTheirOrder() {
    #expect(CacheKey.sortQuery("role=user&b=1&role=admin&a") == "a&b=1&role=user&role=admin")
    let first = CacheKey(method: "GET", upstream: "api", path: "/l", query: "role=admin&role=user")
    let second = CacheKey(method: "GET", upstream: "api", path: "/l", query: "role=user&role=admin")
    #expect(first.id != second.id)
  }

  @Test func aScopeMakesADifferentKeyAndNoScopeKeepsTheOldOne() {
    let plain = CacheKey(method: "GET", upstream: "api", path: "/u", query: "")
    let tokenA = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", scope: "token=a")
    let tokenB = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", scope: "token=b")
    let gzip = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", gzip: true)
    #expect(Set([plain.id, tokenA.id, tokenB.id, gzip.id]).count == 4)
    #expect(!plain.canonical.contains("scope="))
  }

  @Test func queryEncodingIsKept() {
    let encoded = CacheKey(method: "GET", upstream: "api", path: "/s", query: "q=a%20b")
    let plus = CacheKey(method: "GET", upstream: "api", path: "/s", query: "q=a+b")
    #expect(encoded.id != plus.id)
    #expect(CacheKey.sortQuery("b=1&&a=2&") == "a=2&b=1")
  }

  @Test func varyNamesAreCaseInsensitiveAndOrderFree() {
    let a = CacheKey(
      method: "GET", upstream: "api", path: "/u", query: "",
      vary: [("Accept-Language", "en"), ("X-Tenant", "7")])
    let b = CacheKey(
      method: "GET", upstream: "api", path: "/u", query: "",
      vary: [("x-tenant", "7"), ("ACCEPT-LANGUAGE", "en")])
    #expect(a.id == b.id)
  }

  @Test func differentVaryValuesOrClientsGiveDifferentKeys() {
    let en = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", vary: [("Accept-Language", "en")])
    let fr = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", vary: [("Accept-Language", "fr")])
    let absent = CacheKey(method: "GET", upstream: "api", path: "/u", query: "")
    let empty = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", vary: [("Accept-Language", "")])
    let ios = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", clientID: "ios-app")
    let web = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", clientID: "web")
    let ids = [en.id, fr.id, absent.id, empty.id, ios.id, web.id]
    #expect(Set(ids).count == ids.count)
  }

  @Test func everyComponentCounts() {
    let base = CacheKey(method: "GET", upstream: "api", path: "/u", query: "a=1")
    #expect(base.id != CacheKey(method: "HEAD", upstream: "api", path: "/u", query: "a=1").id)
    #expect(base.id != CacheKey(method: "GET", upstream: "other", path: "/u", query: "a=1").id)
    #expect(base.id != CacheKey(method: "GET", upstream: "api", path: "/v", query: "a=1").id)
    #expect(base.id != CacheKey(method: "GET", upstream: "api", path: "/u", query: "a=2").id)
  }

  /// Two virtual hosts behind one upstream are two resources; without a Host the key is
  /// what it always was (stored entries stay reachable).
  @Test func aRoutesHostCountsOnlyWhenSet() {
    let base = CacheKey(method: "GET", upstream: "api", path: "/u", query: "")
    let a = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", host: "a.internal")
    let b = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", host: "b.internal")
    let upperA = CacheKey(method: "GET", upstream: "api", path: "/u", query: "", host: "A.Internal")

    #expect(Set([base.id, a.id, b.id]).count == 3)
    #expect(a.id == upperA.id)
    #expect(base.canonical == "gatehouse-cache-v1 3:GET 3:api 2:/u 0: vary=0 client=-")
  }

  @Test func fieldsCannotBleedIntoEachOther() {
    // Without length prefixes these two would share a canonical string.
    let a = CacheKey(method: "GET", upstream: "api", path: "/a 1:b", query: "")
    let b = CacheKey(method: "GET", upstream: "api", path: "/a", query: "b")
    #expect(a.id != b.id)
  }

  @Test func idIsHexSHA256OfCanonicalForm() {
    let key = CacheKey(
      method: "GET", upstream: "api", path: "/users/1", query: "b=2&a=1", vary: [("Accept-Language", "en")])
    #expect(
      key.canonical == "gatehouse-cache-v1 3:GET 3:api 8:/users/1 7:a=1&b=2 vary=1 15:accept-language 2:en client=-")
    #expect(key.id == StoreCrypto.hex(StoreCrypto.sha256(key.canonical.utf8)))
    #expect(key.id.count == 64 && isCacheID(key.id))
  }
}

@Suite struct CryptoTests {
  @Test func sha256KnownAnswer() {
    #expect(
      StoreCrypto.hex(StoreCrypto.sha256(Array("abc".utf8)))
        == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  }

  @Test func hkdfMatchesRFC5869CaseOne() {
    let okm = StoreCrypto.hkdfSHA256(
      ikm: [UInt8](repeating: 0x0b, count: 22), salt: Array(0x00...0x0c), info: Array(0xf0...0xf9), length: 42)
    #expect(
      StoreCrypto.hex(okm)
        == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
  }

  @Test func sealOpenRoundTripAndRejections() throws {
    let key = StoreCrypto.tokenKey(secret: "s3cret")
    let sealed = try StoreCrypto.seal(Array("hello token".utf8), key: key, aad: Array("api".utf8))
    #expect(sealed.nonce.count == 12 && sealed.tag.count == 16)
    #expect(StoreCrypto.open(sealed, key: key, aad: Array("api".utf8)) == Array("hello token".utf8))
    #expect(StoreCrypto.open(sealed, key: StoreCrypto.tokenKey(secret: "other"), aad: Array("api".utf8)) == nil)
    #expect(StoreCrypto.open(sealed, key: key, aad: Array("partner".utf8)) == nil)
    var tampered = sealed
    tampered.ciphertext[0] ^= 1
    #expect(StoreCrypto.open(tampered, key: key, aad: Array("api".utf8)) == nil)
    let again = try StoreCrypto.seal(Array("hello token".utf8), key: key, aad: Array("api".utf8))
    #expect(again.nonce != sealed.nonce)
  }
}
