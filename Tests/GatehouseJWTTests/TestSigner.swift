// Keys and tokens minted at test time with OpenSSL: nothing secret lives in the repository,
// and each run signs with fresh keys.

import CGatehouseOpenSSL
import GatehouseJWT

/// A key pair made with `EVP_PKEY_generate`, which signs tokens and describes its public half
/// as a JWK.
final class TestKey: @unchecked Sendable {
  enum Kind: Sendable {
    case rsa(bits: Int32)
    case p256, p384, ed25519
  }

  let kind: Kind
  let key: OpaquePointer

  init(_ kind: Kind) {
    self.kind = kind
    let name =
      switch kind {
      case .rsa: "RSA"
      case .p256, .p384: "EC"
      case .ed25519: "ED25519"
      }
    let context = EVP_PKEY_CTX_new_from_name(nil, name, nil)!
    defer { EVP_PKEY_CTX_free(context) }
    precondition(EVP_PKEY_keygen_init(context) == 1)
    switch kind {
    case .rsa(let bits): precondition(EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1)
    case .p256: precondition(EVP_PKEY_CTX_set_group_name(context, "P-256") == 1)
    case .p384: precondition(EVP_PKEY_CTX_set_group_name(context, "P-384") == 1)
    case .ed25519: break
    }
    var key: OpaquePointer?
    precondition(EVP_PKEY_generate(context, &key) == 1)
    self.key = key!
  }

  deinit {
    EVP_PKEY_free(key)
  }

  /// The JWS signature of `input` (raw r‖s for ES*). `pssSaltLength` only for PS256.
  func sign(_ algorithm: String, _ input: [UInt8], pssSaltLength: Int32 = 32) -> [UInt8] {
    let digest: OpaquePointer? =
      switch algorithm {
      case "RS384", "ES384": EVP_sha384()
      case "RS512": EVP_sha512()
      case "EdDSA": nil
      default: EVP_sha256()
      }
    let context = EVP_MD_CTX_new()!
    defer { EVP_MD_CTX_free(context) }
    var keyContext: OpaquePointer?
    precondition(EVP_DigestSignInit(context, &keyContext, digest, nil, key) == 1)
    if algorithm == "PS256" {
      precondition(EVP_PKEY_CTX_set_rsa_padding(keyContext, gh_RSA_PKCS1_PSS_PADDING()) == 1)
      precondition(EVP_PKEY_CTX_set_rsa_mgf1_md(keyContext, EVP_sha256()) == 1)
      precondition(EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, pssSaltLength) == 1)
    }
    var length = 0
    precondition(EVP_DigestSign(context, nil, &length, input, input.count) == 1)
    var signature = [UInt8](repeating: 0, count: length)
    precondition(EVP_DigestSign(context, &signature, &length, input, input.count) == 1)
    signature.removeLast(signature.count - length)
    switch algorithm {
    case "ES256": return Self.rawRS(der: signature, half: 32)
    case "ES384": return Self.rawRS(der: signature, half: 48)
    default: return signature
    }
  }

  static func rawRS(der: [UInt8], half: Int) -> [UInt8] {
    let signature = der.withUnsafeBufferPointer { buffer in
      var cursor = buffer.baseAddress
      return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
    }!
    defer { ECDSA_SIG_free(signature) }
    var r: OpaquePointer?
    var s: OpaquePointer?
    ECDSA_SIG_get0(signature, &r, &s)
    var raw = [UInt8](repeating: 0, count: 2 * half)
    raw.withUnsafeMutableBufferPointer { buffer in
      precondition(BN_bn2binpad(r, buffer.baseAddress, Int32(half)) == half)
      precondition(BN_bn2binpad(s, buffer.baseAddress! + half, Int32(half)) == half)
    }
    return raw
  }

  /// A big-number parameter of the key ("n", "e", "qx", "qy"), big-endian, `size` bytes when
  /// given (leading zeros kept), else minimal.
  func parameter(_ name: String, size: Int? = nil) -> [UInt8] {
    var number: OpaquePointer?
    precondition(EVP_PKEY_get_bn_param(key, name, &number) == 1)
    defer { BN_free(number) }
    let length = size ?? Int((BN_num_bits(number) + 7) / 8)
    var bytes = [UInt8](repeating: 0, count: length)
    precondition(BN_bn2binpad(number, &bytes, Int32(length)) == length)
    return bytes
  }

  /// The raw public key (Ed25519).
  var rawPublicKey: [UInt8] {
    var length = 0
    precondition(EVP_PKEY_get_raw_public_key(key, nil, &length) == 1)
    var bytes = [UInt8](repeating: 0, count: length)
    precondition(EVP_PKEY_get_raw_public_key(key, &bytes, &length) == 1)
    return bytes
  }

  /// The SubjectPublicKeyInfo DER: what an attacker would use as an HMAC secret.
  var publicKeyDER: [UInt8] {
    let length = i2d_PUBKEY(key, nil)
    var bytes = [UInt8](repeating: 0, count: Int(length))
    bytes.withUnsafeMutableBufferPointer { buffer in
      var cursor = buffer.baseAddress
      precondition(i2d_PUBKEY(key, &cursor) == length)
    }
    return bytes
  }

  /// The members of the public JWK, without braces, so a test can add its own.
  func jwkMembers(kid: String?) -> String {
    var members: [String]
    switch kind {
    case .rsa:
      members = [
        #""kty":"RSA""#, #""n":"\#(b64(parameter("n")))""#, #""e":"\#(b64(parameter("e")))""#,
      ]
    case .p256, .p384:
      let size = if case .p256 = kind { 32 } else { 48 }
      members = [
        #""kty":"EC""#, #""crv":"\#(size == 32 ? "P-256" : "P-384")""#,
        #""x":"\#(b64(parameter("qx", size: size)))""#, #""y":"\#(b64(parameter("qy", size: size)))""#,
      ]
    case .ed25519:
      members = [#""kty":"OKP""#, #""crv":"Ed25519""#, #""x":"\#(b64(rawPublicKey))""#]
    }
    if let kid { members.append(#""kid":"\#(kid)""#) }
    return members.joined(separator: ",")
  }

  /// The public JWK as a JSON object, `extra` members appended (`"use":"sig"`).
  func jwk(kid: String?, extra: String = "") -> String {
    "{" + jwkMembers(kid: kid) + (extra.isEmpty ? "" : "," + extra) + "}"
  }
}

func b64(_ bytes: [UInt8]) -> String { Base64URL.encode(bytes) }
func b64(_ text: String) -> String { Base64URL.encode(Array(text.utf8)) }

/// A JWKS document of these JWK objects.
func jwks(_ keys: [String]) -> [UInt8] {
  Array(#"{"keys":[\#(keys.joined(separator: ","))]}"#.utf8)
}

/// The keys every test shares: RSA keygen takes a while, so each kind is made once.
enum Keys {
  static let rsa = TestKey(.rsa(bits: 2048))
  static let rsaOther = TestKey(.rsa(bits: 2048))
  static let rsaSmall = TestKey(.rsa(bits: 1024))
  static let p256 = TestKey(.p256)
  static let p256Other = TestKey(.p256)
  static let p384 = TestKey(.p384)
  static let ed25519 = TestKey(.ed25519)
  static let ed25519Other = TestKey(.ed25519)
}

/// The test clock: every token is checked at this Unix time unless a test says otherwise.
let testNow: Int64 = 1_700_000_000

/// A payload valid at `testNow` for an hour.
let validPayload = #"{"sub":"user-1","exp":\#(testNow + 3600),"iat":\#(testNow - 10)}"#

/// A compact JWS of `header` and `payload` (JSON texts) signed by `key` with `algorithm`.
func mint(header: String, payload: String = validPayload, key: TestKey, algorithm: String) -> String {
  let signingInput = b64(header) + "." + b64(payload)
  return signingInput + "." + b64(key.sign(algorithm, Array(signingInput.utf8)))
}

/// A token with header `{"alg":…,"kid":…}` plus `headerExtra` members.
func mint(
  _ algorithm: String, key: TestKey, kid: String? = "k1", payload: String = validPayload, headerExtra: String = ""
) -> String {
  var header = #"{"alg":"\#(algorithm)""#
  if let kid { header += #","kid":"\#(kid)""# }
  if !headerExtra.isEmpty { header += "," + headerExtra }
  return mint(header: header + "}", payload: payload, key: key, algorithm: algorithm)
}

/// Every algorithm, no issuer or audience.
let openPolicy = JWTPolicy(issuer: nil, audiences: [], algorithms: Set(JWTAlgorithm.allCases), leewaySeconds: 0)

func verify(_ token: String, keys: JWTKeySet, policy: JWTPolicy = openPolicy, now: Int64 = testNow)
  -> Result<VerifiedToken, JWTRefusal>
{
  var token = token
  return token.withUTF8 { JWTVerifier.verify(UnsafeRawBufferPointer($0), keys: keys, policy: policy, now: now) }
}

func keySet(_ keys: [String]) throws -> JWTKeySet {
  try JWTKeySet(jwks: jwks(keys))
}

extension Result where Success == VerifiedToken, Failure == JWTRefusal {
  /// The refusal, or nil on success: `#expect(verify(…).refusal == .expired)`.
  var refusal: JWTRefusal? {
    if case .failure(let refusal) = self { return refusal }
    return nil
  }

  var token: VerifiedToken? {
    if case .success(let token) = self { return token }
    return nil
  }
}
