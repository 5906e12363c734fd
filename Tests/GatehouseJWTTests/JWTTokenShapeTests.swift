import GatehouseJWT
import Testing

/// The compact serialization itself (RFC 7515 §7.1, base64url per §2 and RFC 4648 §5).
@Suite struct JWTTokenShapeTests {
  static let keys = try! keySet([
    Keys.p256.jwk(kid: "k1"), Keys.p256.jwk(kid: "k"), Keys.p256.jwk(kid: "kk"), Keys.p256.jwk(kid: "kkk"),
  ])

  static func parts(_ token: String) -> [String] {
    token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
  }

  @Test func tokensOver8KiBAreTooLarge() {
    // A genuine token of exactly 8192 bytes passes; one byte more is refused unread.
    let base = mint("ES256", key: Keys.p256, payload: #"{"exp":\#(testNow + 60),"pad":""}"#)
    let padding = (8192 - base.count) * 3 / 4
    var padded = ""
    // base64url lengths move in steps, so a kid of 1 to 3 bytes fills the last gap.
    search: for extra in padding - 4...padding + 4 {
      for kid in ["k", "kk", "kkk"] {
        let pad = String(repeating: "x", count: extra)
        let token = mint("ES256", key: Keys.p256, kid: kid, payload: #"{"exp":\#(testNow + 60),"pad":"\#(pad)"}"#)
        if token.utf8.count == 8192 {
          padded = token
          break search
        }
      }
    }
    #expect(padded.utf8.count == 8192)
    #expect(verify(padded, keys: Self.keys).token != nil)
    #expect(verify(padded + "A", keys: Self.keys).refusal == .tooLarge)
    #expect(verify(String(repeating: ".", count: 9000), keys: Self.keys).refusal == .tooLarge)
  }

  @Test func exactlyThreeParts() {
    let token = mint("ES256", key: Keys.p256)
    let parts = Self.parts(token)
    for bad in ["", ".", "..", parts[0], parts[0] + "." + parts[1], token + ".", token + "." + parts[2], "." + token] {
      #expect(verify(bad, keys: Self.keys).refusal?.isMalformed == true, "\(bad.prefix(20))")
    }
  }

  @Test func base64urlIsStrict() {
    let token = mint("ES256", key: Keys.p256)
    let parts = Self.parts(token)
    #expect(verify(token, keys: Self.keys).token != nil)
    var broken: [String] = []
    for index in 0..<3 {
      for mutation in [
        { (part: String) in part + "=" }, { $0 + "==" }, { " " + $0 }, { $0 + "\n" },
        { String($0.dropLast()) + "+" }, { String($0.dropLast()) + "/" }, { String($0.dropLast()) + "*" },
      ] as [(String) -> String] {
        var copy = parts
        copy[index] = mutation(copy[index])
        broken.append(copy.joined(separator: "."))
      }
    }
    for bad in broken {
      #expect(verify(bad, keys: Self.keys).refusal == .malformed("bad base64url"), "\(bad.suffix(8))")
    }
  }

  /// RFC 4648 §3.5: the unused bits of the last character are zero, so an encoding is unique.
  @Test func nonCanonicalTrailingBitsAreRefused() {
    #expect(Base64URL.decode("QQ") == [0x41])
    #expect(Base64URL.decode("QR") == nil)
    #expect(Base64URL.decode("QUI") == [0x41, 0x42])
    #expect(Base64URL.decode("QUJ") == nil)
    #expect(Base64URL.decode("Q") == nil)
    #expect(Base64URL.decode("") == [])
    #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
    for length in 0..<8 {
      let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 200) }
      #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
    }
  }

  @Test func headerAndPayloadMustBeJSONObjects() {
    let parts = Self.parts(mint("ES256", key: Keys.p256))
    for header in ["[]", "\"ES256\"", "{", "{\"alg\":\"ES256\",\"alg\":\"ES256\"}", "nul", ""] {
      #expect(
        verify(b64(header) + "." + parts[1] + "." + parts[2], keys: Self.keys).refusal
          == .malformed("header is not a JSON object"))
    }
    let deep = #"{"alg":"ES256","x":"# + String(repeating: "[", count: 8) + String(repeating: "]", count: 8) + "}"
    #expect(
      verify(b64(deep) + "." + parts[1] + "." + parts[2], keys: Self.keys).refusal
        == .malformed("header is not a JSON object"))
    // A payload the key signed is still read as an object, after the signature.
    for payload in [
      "[1]", "1", "{\"exp\":1,}", "{\"a\":" + String(repeating: "[", count: 9) + String(repeating: "]", count: 9) + "}",
    ] {
      #expect(
        verify(mint("ES256", key: Keys.p256, payload: payload), keys: Self.keys).refusal
          == .malformed("payload is not a JSON object"))
    }
  }

  @Test func refusalsNeverRepeatTheToken() {
    let marker = "SECRETMARKER"
    let tokens = [
      b64(#"{"alg":"\#(marker)"}"#) + "." + b64(marker) + "." + b64(marker),
      b64(#"{"alg":"ES256","kid":"\#(marker)"}"#) + "." + b64(marker) + "." + b64(marker),
      marker + "." + marker + "." + marker, marker,
      mint("ES256", key: Keys.p256, kid: marker),
    ]
    for token in tokens {
      let refusal = verify(token, keys: Self.keys).refusal
      #expect(refusal != nil)
      #expect(refusal?.reason.contains(marker) == false)
      #expect(refusal?.reason.contains(String(token.prefix(12))) == false)
    }
  }
}

extension JWTRefusal {
  var isMalformed: Bool {
    if case .malformed = self { return true }
    return false
  }
}
