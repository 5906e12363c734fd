import GatehouseJWT
import Testing

/// Reading a JWKS (RFC 7517 §4–5, RFC 7518 §6, RFC 8037 §2): which keys are used, which are
/// skipped and why.
@Suite struct JWTKeySetTests {
  @Test func usableKeysAreListedInDocumentOrder() throws {
    let keys = try keySet([
      Keys.ed25519.jwk(kid: "ed"), Keys.rsa.jwk(kid: nil), Keys.p384.jwk(kid: "p384"),
      Keys.p256.jwk(kid: "", extra: #""use":"sig","key_ops":["verify","sign"]"#),
    ])
    #expect(keys.count == 4)
    #expect(keys.keyIDs == ["ed", "p384"])
    #expect(keys.skipped.isEmpty)
    // A key with an empty kid is used as one without.
    #expect(verify(mint("ES256", key: Keys.p256, kid: nil), keys: keys).token != nil)
  }

  @Test func privateMembersAreIgnored() throws {
    // A set that (wrongly) publishes private parts still works, and only the public parts count.
    let keys = try keySet([Keys.p256.jwk(kid: "k1", extra: #""d":"bm90LXVzZWQ""#)])
    #expect(keys.count == 1)
    #expect(verify(mint("ES256", key: Keys.p256), keys: keys).token != nil)
  }

  /// Each skipped key is named with its index and one reason; the others stay usable.
  @Test func skippedKeysSayWhy() throws {
    let good = Keys.p256.jwk(kid: "good")
    let offCurveY = b64(Keys.p256.parameter("qy", size: 32).map { $0 ^ 0x5A })
    let offCurve = #"{"kty":"EC","crv":"P-256","x":"\#(b64(Keys.p256.parameter("qx", size: 32)))","y":"\#(offCurveY)"}"#
    let cases: [(jwk: String, reason: String)] = [
      (#"{"kty":"oct","k":"c2VjcmV0"}"#, "kty oct not supported"),
      ("[1]", "not an object"),
      (#"{"n":"AQAB"}"#, "no kty"),
      (#"{"kty":7}"#, "kty is not a string"),
      (Keys.rsaSmall.jwk(kid: "small"), "RSA key of 1024 bits, under 2048"),
      (offCurve, "point not on the curve"),
      (Keys.p256.jwk(kid: "enc", extra: #""use":"enc""#), "use enc is not sig"),
      (Keys.p256.jwk(kid: "ops", extra: #""key_ops":["encrypt"]"#), "key_ops without verify"),
      (Keys.p256.jwk(kid: "ops2", extra: #""key_ops":"verify""#), "key_ops without verify"),
      (Keys.rsa.jwk(kid: "oaep", extra: #""alg":"RSA-OAEP""#), "alg RSA-OAEP not supported"),
      (Keys.rsa.jwk(kid: "hs", extra: #""alg":"HS256""#), "alg HS256 not supported"),
      (Keys.rsa.jwk(kid: "mix", extra: #""alg":"ES256""#), "alg ES256 does not fit kty RSA"),
      (Keys.p256.jwk(kid: "mix2", extra: #""alg":"ES384""#), "alg ES384 does not fit kty EC"),
      (#"{"kty":"EC","crv":"P-521","x":"AA","y":"AA"}"#, "crv P-521 not supported"),
      (#"{"kty":"EC","x":"AA","y":"AA"}"#, "crv missing or not a string"),
      (#"{"kty":"OKP","crv":"X25519","x":"AA"}"#, "crv X25519 not supported"),
      (#"{"kty":"RSA","e":"AQAB"}"#, "n missing or not a string"),
      (#"{"kty":"RSA","n":"AQ=B","e":"AQAB"}"#, "n is not base64url"),
      (#"{"kty":"RSA","n":"","e":"AQAB"}"#, "empty n or e"),
      (#"{"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"}"#, "x or y is not 32 bytes"),
      (#"{"kty":"OKP","crv":"Ed25519","x":"AAAA"}"#, "x is not 32 bytes"),
      (Keys.p256.jwk(kid: nil, extra: #""kid":5"#), "kid is not a string"),
      (Keys.p256.jwk(kid: "u", extra: #""use":1"#), "use is not a string"),
      (Keys.p256.jwk(kid: "a", extra: #""alg":true"#), "alg is not a string"),
      (
        #"{"kty":"\#(String(repeating: "z", count: 40))\u0001"}"#,
        "kty \(String(repeating: "z", count: 32))… not supported"
      ),
    ]
    for (index, item) in cases.enumerated() {
      let keys = try keySet([good, item.jwk])
      #expect(keys.count == 1, "case \(index)")
      #expect(keys.keyIDs == ["good"], "case \(index)")
      #expect(keys.skipped == ["key 1: \(item.reason)"], "case \(index)")
    }
  }

  @Test func atMost64KeysAreConsidered() throws {
    let jwk = Keys.ed25519.jwk(kid: nil)
    let keys = try keySet(Array(repeating: jwk, count: 63) + [Keys.p256.jwk(kid: "last"), Keys.p256.jwk(kid: "over")])
    #expect(keys.count == 64)
    #expect(keys.keyIDs == ["last"])
    #expect(keys.skipped == ["key 64: over the limit of 64 keys"])
  }

  @Test func documentErrors() throws {
    #expect(throws: JWKSError.notJSON) { try JWTKeySet(jwks: Array("{\"keys\":[}".utf8)) }
    #expect(throws: JWKSError.notJSON) { try JWTKeySet(jwks: []) }
    #expect(throws: JWKSError.notAnObject) { try JWTKeySet(jwks: Array("[]".utf8)) }
    #expect(throws: JWKSError.noKeysArray) { try JWTKeySet(jwks: Array("{}".utf8)) }
    #expect(throws: JWKSError.noKeysArray) { try JWTKeySet(jwks: Array("{\"keys\":{}}".utf8)) }
    let deep = "{\"keys\":[{\"x\":" + String(repeating: "[", count: 20) + String(repeating: "]", count: 20) + "}]}"
    #expect(throws: JWKSError.notJSON) { try JWTKeySet(jwks: Array(deep.utf8)) }
    // 512 KiB is read (here: padded with whitespace); one byte more is not.
    var large = Array("{\"keys\":[]}".utf8)
    large += Array(repeating: 0x20, count: JWTKeySet.maxDocumentBytes - large.count)
    #expect(try JWTKeySet(jwks: large).count == 0)
    #expect(throws: JWKSError.tooLarge) { try JWTKeySet(jwks: large + [0x20]) }
    #expect(JWKSError.tooLarge.description.contains("524288"))
  }
}
