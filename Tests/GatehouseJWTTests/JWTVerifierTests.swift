import CGatehouseOpenSSL
import GatehouseJWT
import Testing

/// Signatures and header rules (RFC 7515, RFC 7518 §3, RFC 8037 §3.1, RFC 8725).
@Suite struct JWTVerifierTests {
  /// One key of each kind, kid "k1" … "k5".
  static let allKinds: [(algorithm: String, key: TestKey, kid: String)] = [
    ("RS256", Keys.rsa, "rsa"), ("RS384", Keys.rsa, "rsa"), ("RS512", Keys.rsa, "rsa"), ("PS256", Keys.rsa, "rsa"),
    ("ES256", Keys.p256, "p256"), ("ES384", Keys.p384, "p384"), ("EdDSA", Keys.ed25519, "ed"),
  ]

  static func everyKind() throws -> JWTKeySet {
    try keySet([
      Keys.rsa.jwk(kid: "rsa"), Keys.p256.jwk(kid: "p256"), Keys.p384.jwk(kid: "p384"), Keys.ed25519.jwk(kid: "ed"),
    ])
  }

  @Test(arguments: JWTAlgorithm.allCases)
  func everyAlgorithmVerifies(_ algorithm: JWTAlgorithm) throws {
    let (name, key, kid) = Self.allKinds.first { $0.algorithm == algorithm.rawValue }!
    let keys = try Self.everyKind()
    let result = verify(mint(name, key: key, kid: kid), keys: keys)
    #expect(result.token?.subject == Array("user-1".utf8), "\(result)")
    // Without a kid, the keys that fit the algorithm are tried.
    #expect(verify(mint(name, key: key, kid: nil), keys: keys).token != nil)
  }

  @Test(arguments: JWTAlgorithm.allCases)
  func everyAlgorithmRefusesATamperedToken(_ algorithm: JWTAlgorithm) throws {
    let (name, key, kid) = Self.allKinds.first { $0.algorithm == algorithm.rawValue }!
    let keys = try Self.everyKind()
    let token = mint(name, key: key, kid: kid)
    let parts = token.split(separator: ".").map(String.init)
    // A payload the key did not sign.
    let otherPayload = b64(#"{"sub":"admin","exp":\#(testNow + 3600)}"#)
    #expect(verify(parts[0] + "." + otherPayload + "." + parts[2], keys: keys).refusal == .badSignature)
    // A signature with one bit flipped.
    var signature = Base64URL.decode(parts[2])!
    signature[signature.count / 2] ^= 0x01
    #expect(verify(parts[0] + "." + parts[1] + "." + b64(signature), keys: keys).refusal == .badSignature)
    // Signed by another key of the same kind.
    let other: TestKey =
      switch key.kind {
      case .rsa: Keys.rsaOther
      case .p256: Keys.p256Other
      case .p384: TestKey(.p384)
      case .ed25519: Keys.ed25519Other
      }
    #expect(verify(mint(name, key: other, kid: kid), keys: keys).refusal == .badSignature)
  }

  @Test func ecdsaSignaturesOfTheWrongLengthAreBad() throws {
    let keys = try Self.everyKind()
    let parts = mint("ES256", key: Keys.p256, kid: "p256").split(separator: ".").map(String.init)
    let raw = Base64URL.decode(parts[2])!
    for wrong in [Array(raw.dropLast()), raw + [0], [], raw + raw] {
      #expect(verify(parts[0] + "." + parts[1] + "." + b64(wrong), keys: keys).refusal == .badSignature)
    }
    // The DER form OpenSSL makes is not what JWS carries (RFC 7518 §3.4).
    let signingInput = Array((parts[0] + "." + parts[1]).utf8)
    var der = [UInt8]()
    let context = EVP_MD_CTX_new()!
    defer { EVP_MD_CTX_free(context) }
    #expect(EVP_DigestSignInit(context, nil, EVP_sha256(), nil, Keys.p256.key) == 1)
    var length = 0
    #expect(EVP_DigestSign(context, nil, &length, signingInput, signingInput.count) == 1)
    der = [UInt8](repeating: 0, count: length)
    #expect(EVP_DigestSign(context, &der, &length, signingInput, signingInput.count) == 1)
    der.removeLast(der.count - length)
    #expect(verify(parts[0] + "." + parts[1] + "." + b64(der), keys: keys).refusal == .badSignature)
    // An ES384 signature is 96 bytes; a 64-byte one is refused before OpenSSL sees it.
    let p384 = mint("ES384", key: Keys.p384, kid: "p384").split(separator: ".").map(String.init)
    let short = Array(Base64URL.decode(p384[2])!.prefix(64))
    #expect(verify(p384[0] + "." + p384[1] + "." + b64(short), keys: keys).refusal == .badSignature)
  }

  @Test func ps256NeedsPSSWithASaltOf32Bytes() throws {
    let keys = try keySet([Keys.rsa.jwk(kid: "rsa")])
    let header = #"{"alg":"PS256","kid":"rsa"}"#
    let signingInput = b64(header) + "." + b64(validPayload)
    func token(_ signature: [UInt8]) -> String { signingInput + "." + b64(signature) }
    #expect(verify(token(Keys.rsa.sign("PS256", Array(signingInput.utf8))), keys: keys).token != nil)
    #expect(
      verify(token(Keys.rsa.sign("PS256", Array(signingInput.utf8), pssSaltLength: 20)), keys: keys).refusal
        == .badSignature)
    // PKCS#1 v1.5 under a PS256 header, and PSS under an RS256 header.
    #expect(verify(token(Keys.rsa.sign("RS256", Array(signingInput.utf8))), keys: keys).refusal == .badSignature)
    let rsHeader = b64(#"{"alg":"RS256","kid":"rsa"}"#) + "." + b64(validPayload)
    #expect(
      verify(rsHeader + "." + b64(Keys.rsa.sign("PS256", Array(rsHeader.utf8))), keys: keys).refusal == .badSignature)
  }

  // MARK: - Algorithms

  @Test func noneAndHMACAreAlwaysRefused() throws {
    let keys = try Self.everyKind()
    let unsigned = b64(#"{"alg":"none"}"#) + "." + b64(validPayload) + "."
    #expect(verify(unsigned, keys: keys).refusal == .algorithmNotAllowed("none"))
    for name in ["HS256", "HS384", "HS512"] {
      let token = b64(#"{"alg":"\#(name)","kid":"rsa"}"#) + "." + b64(validPayload) + "." + b64([1, 2, 3])
      #expect(verify(token, keys: keys).refusal == .algorithmNotAllowed(name))
    }
  }

  /// The classic forgery: HS256 with the RSA public key's bytes as the HMAC secret.
  @Test func hmacWithThePublicKeyAsSecretIsRefused() throws {
    let keys = try keySet([Keys.rsa.jwk(kid: "rsa")])
    for secret in [Keys.rsa.publicKeyDER, Array(Keys.rsa.jwk(kid: "rsa").utf8), Keys.rsa.parameter("n")] {
      for kid in ["rsa", nil] as [String?] {
        let header = kid.map { #"{"alg":"HS256","kid":"\#($0)"}"# } ?? #"{"alg":"HS256"}"#
        let signingInput = Array((b64(header) + "." + b64(validPayload)).utf8)
        var mac = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        #expect(HMAC(EVP_sha256(), secret, Int32(secret.count), signingInput, signingInput.count, &mac, &length) != nil)
        let token = String(decoding: signingInput, as: UTF8.self) + "." + b64(mac)
        #expect(verify(token, keys: keys).refusal == .algorithmNotAllowed("HS256"))
      }
    }
  }

  @Test func algorithmsOutsideThePolicyAreRefused() throws {
    let keys = try Self.everyKind()
    let onlyES256 = JWTPolicy(issuer: nil, audiences: [], algorithms: [.es256], leewaySeconds: 0)
    #expect(verify(mint("ES256", key: Keys.p256, kid: "p256"), keys: keys, policy: onlyES256).token != nil)
    #expect(
      verify(mint("RS256", key: Keys.rsa, kid: "rsa"), keys: keys, policy: onlyES256).refusal
        == .algorithmNotAllowed("RS256"))
    #expect(
      verify(mint("EdDSA", key: Keys.ed25519, kid: "ed"), keys: keys, policy: onlyES256).refusal
        == .algorithmNotAllowed("EdDSA"))
    // A name this module does not know is not repeated in the refusal.
    let odd = b64(#"{"alg":"XQ9Secret"}"#) + "." + b64(validPayload) + "." + b64([1])
    #expect(verify(odd, keys: keys).refusal == .algorithmNotAllowed("unsupported"))
    #expect(verify(odd, keys: keys).refusal?.reason.contains("XQ9") == false)
    let numeric = b64(#"{"alg":256}"#) + "." + b64(validPayload) + "." + b64([1])
    #expect(verify(numeric, keys: keys).refusal == .malformed("alg missing or not a string"))
    let missing = b64(#"{"kid":"rsa"}"#) + "." + b64(validPayload) + "." + b64([1])
    #expect(verify(missing, keys: keys).refusal == .malformed("alg missing or not a string"))
  }

  @Test func theKeyTypeMustFitTheAlgorithm() throws {
    let keys = try Self.everyKind()
    // The header names a key of another type: refused before any signature check.
    #expect(
      verify(mint("ES256", key: Keys.p256, kid: "rsa"), keys: keys).refusal
        == .algorithmNotAllowed("the key does not fit ES256"))
    #expect(verify(mint("ES384", key: Keys.p384, kid: "p256"), keys: keys).refusal != nil)
    #expect(verify(mint("RS256", key: Keys.rsa, kid: "ed"), keys: keys).refusal != nil)
    #expect(verify(mint("EdDSA", key: Keys.ed25519, kid: "p384"), keys: keys).refusal != nil)
    // No key of the type at all.
    let rsaOnly = try keySet([Keys.rsa.jwk(kid: "rsa")])
    #expect(
      verify(mint("ES256", key: Keys.p256, kid: nil), keys: rsaOnly).refusal == .algorithmNotAllowed("no key for ES256")
    )
  }

  @Test func aJWKsOwnAlgMustEqualTheTokens() throws {
    let keys = try keySet([Keys.rsa.jwk(kid: "rsa", extra: #""alg":"PS256""#)])
    #expect(verify(mint("PS256", key: Keys.rsa, kid: "rsa"), keys: keys).token != nil)
    #expect(
      verify(mint("RS256", key: Keys.rsa, kid: "rsa"), keys: keys).refusal
        == .algorithmNotAllowed("the key does not fit RS256"))
    #expect(
      verify(mint("RS256", key: Keys.rsa, kid: nil), keys: keys).refusal == .algorithmNotAllowed("no key for RS256"))
  }

  // MARK: - Header members

  /// RFC 8725 §3.10: the key comes from the provider's set, never from the token.
  @Test func keysCarriedInTheHeaderAreIgnored() throws {
    let keys = try keySet([Keys.p256.jwk(kid: "p256")])
    let attacker = Keys.p256Other
    let embedded = #""jwk":\#(attacker.jwk(kid: nil))"#
    #expect(verify(mint("ES256", key: attacker, kid: nil, headerExtra: embedded), keys: keys).refusal == .badSignature)
    #expect(
      verify(mint("ES256", key: attacker, kid: "p256", headerExtra: embedded), keys: keys).refusal == .badSignature)
    let pointers = #""jku":"https://evil.example/jwks","x5u":"https://evil.example/x5","x5c":["MIIB"]"#
    #expect(verify(mint("ES256", key: attacker, kid: nil, headerExtra: pointers), keys: keys).refusal == .badSignature)
    // The same members on a genuine token change nothing.
    #expect(
      verify(mint("ES256", key: Keys.p256, kid: "p256", headerExtra: pointers + "," + embedded), keys: keys).token
        != nil)
  }

  @Test func criticalHeadersAreRefused() throws {
    let keys = try keySet([Keys.p256.jwk(kid: "p256")])
    let token = mint("ES256", key: Keys.p256, kid: "p256", headerExtra: #""crit":["exp"],"exp":1"#)
    #expect(verify(token, keys: keys).refusal == .unsupportedCritical)
    let b64false = mint("ES256", key: Keys.p256, kid: "p256", headerExtra: #""b64":false,"crit":["b64"]"#)
    #expect(verify(b64false, keys: keys).refusal == .unsupportedCritical)
  }

  @Test func keyIDsAreOnlyCompared() throws {
    let keys = try keySet([Keys.p256.jwk(kid: "p256")])
    for kid in ["../../etc/passwd", "' OR 1=1 --", "p256 ", "P256", "", "p256\\u0000"] {
      #expect(verify(mint("ES256", key: Keys.p256, kid: kid), keys: keys).refusal == .unknownKey, "\(kid)")
    }
    let long = String(repeating: "a", count: 257)
    #expect(verify(mint("ES256", key: Keys.p256, kid: long), keys: keys).refusal == .malformed("kid too long"))
    let longest = String(repeating: "a", count: 256)
    #expect(verify(mint("ES256", key: Keys.p256, kid: longest), keys: keys).refusal == .unknownKey)
    let number = mint(header: #"{"alg":"ES256","kid":7}"#, key: Keys.p256, algorithm: "ES256")
    #expect(verify(number, keys: keys).refusal == .malformed("kid is not a string"))
  }

  @Test func withoutAKidAtMostFourKeysAreTried() throws {
    let others = (0..<4).map { _ in TestKey(.p256) }
    let keys = try keySet(others.map { $0.jwk(kid: nil) } + [Keys.p256.jwk(kid: nil)] + [Keys.rsa.jwk(kid: nil)])
    #expect(keys.count == 6)
    #expect(keys.keyIDs.isEmpty)
    #expect(verify(mint("ES256", key: others[3], kid: nil), keys: keys).token != nil)
    #expect(verify(mint("ES256", key: others[0], kid: nil), keys: keys).token != nil)
    // The fifth key that fits is never tried.
    #expect(verify(mint("ES256", key: Keys.p256, kid: nil), keys: keys).refusal == .badSignature)
    // RSA keys do not count against the four.
    #expect(verify(mint("RS256", key: Keys.rsa, kid: nil), keys: keys).token != nil)
  }

  @Test func theKeyIsChosenByKid() throws {
    let keys = try keySet([Keys.p256.jwk(kid: "a"), Keys.p256Other.jwk(kid: "b")])
    #expect(keys.keyIDs == ["a", "b"])
    #expect(verify(mint("ES256", key: Keys.p256Other, kid: "b"), keys: keys).token != nil)
    #expect(verify(mint("ES256", key: Keys.p256Other, kid: "a"), keys: keys).refusal == .badSignature)
    #expect(verify(mint("ES256", key: Keys.p256Other, kid: "c"), keys: keys).refusal == .unknownKey)
  }

  @Test func anEmptySetHasNoKeys() throws {
    let empty = try keySet([])
    #expect(verify(mint("ES256", key: Keys.p256, kid: "p256"), keys: empty).refusal == .noKeys)
    let unusable = try keySet([#"{"kty":"oct","k":"c2VjcmV0"}"#])
    #expect(unusable.count == 0)
    #expect(verify(mint("ES256", key: Keys.p256, kid: nil), keys: unusable).refusal == .noKeys)
  }

  /// A refusal leaves OpenSSL's per-thread error queue empty: TLS on the same event-loop thread
  /// reads that queue (`SSL_get_error`).
  @Test func refusalsLeaveNoOpenSSLErrors() throws {
    ERR_clear_error()
    let offCurveY = b64(Keys.p256.parameter("qy", size: 32).map { $0 ^ 0x5A })
    let x = b64(Keys.p256.parameter("qx", size: 32))
    let keys = try keySet([
      #"{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(offCurveY)"}"#, Keys.rsaSmall.jwk(kid: "small"),
      #"{"kty":"RSA","n":"AAAA","e":"AQAB"}"#, Keys.p256.jwk(kid: "p256"), Keys.rsa.jwk(kid: "rsa"),
      Keys.ed25519.jwk(kid: "ed"),
    ])
    #expect(keys.skipped.count == 3)
    #expect(ERR_peek_error() == 0)
    let refused = [
      mint("ES256", key: Keys.p256Other, kid: "p256"), mint("RS256", key: Keys.rsaOther, kid: "rsa"),
      mint("PS256", key: Keys.rsaOther, kid: "rsa"), mint("EdDSA", key: Keys.ed25519Other, kid: "ed"),
      b64(#"{"alg":"ES256","kid":"p256"}"#) + "." + b64(validPayload) + "." + b64([UInt8](repeating: 0xFF, count: 64)),
      b64(#"{"alg":"RS256","kid":"rsa"}"#) + "." + b64(validPayload) + "." + b64([UInt8](repeating: 0xFF, count: 256)),
    ]
    for token in refused {
      #expect(verify(token, keys: keys).refusal == .badSignature)
      #expect(ERR_peek_error() == 0)
    }
  }

  /// Two threads verify with one key set at once (the set is shared by the event loops).
  @Test func oneSetServesTwoThreads() async throws {
    let keys = try Self.everyKind()
    let tokens = Self.allKinds.map { mint($0.algorithm, key: $0.key, kid: $0.kid) }
    await withTaskGroup(of: Int.self) { group in
      for _ in 0..<2 {
        group.addTask {
          var good = 0
          for _ in 0..<20 {
            for token in tokens where verify(token, keys: keys).token != nil { good += 1 }
          }
          return good
        }
      }
      for await good in group { #expect(good == 20 * tokens.count) }
    }
  }
}
