import CGatehouseOpenSSL

/// One usable public key of a JWKS, as an OpenSSL `EVP_PKEY`, with the JWK members that decide
/// which tokens it may verify (RFC 7517 §4: `kid`, `alg`).
///
/// Owns its `EVP_PKEY` (freed in deinit) and never changes after init. Why `@unchecked
/// Sendable`: openssl-threads(7) allows several threads to use one object at once when the
/// calls do not modify it; verification only reads the key (OpenSSL 3 guards the key's
/// internal provider cache with the key's own lock), and every call makes its own
/// `EVP_MD_CTX` and `EVP_PKEY_CTX` (see `verify`), which are the parts that must not be
/// shared. So the event-loop threads share the key without a lock.
final class JWTPublicKey: @unchecked Sendable {
  let kind: JWTKeyKind
  /// The JWK's `kid`, or nil when it has none (or an empty one).
  let keyID: String?
  /// The JWK's `alg`: when present, the only algorithm this key verifies (RFC 7517 §4.4).
  let algorithm: JWTAlgorithm?
  private let key: OpaquePointer

  private init(kind: JWTKeyKind, keyID: String?, algorithm: JWTAlgorithm?, key: OpaquePointer) {
    self.kind = kind
    self.keyID = keyID
    self.algorithm = algorithm
    self.key = key
  }

  deinit {
    EVP_PKEY_free(key)
  }

  /// Whether this key may verify a token signed with `algorithm`: the type fits and the JWK's
  /// own `alg`, if any, is the same (RFC 8725 §3.1: each key is used with one algorithm).
  func fits(_ algorithm: JWTAlgorithm) -> Bool {
    kind == algorithm.keyKind && (self.algorithm == nil || self.algorithm == algorithm)
  }

  // MARK: - Making keys (RFC 7518 §6.2, §6.3; RFC 8037 §2)

  /// Why a JWK was not turned into a key: a short text for `JWTKeySet.skipped`.
  struct Unusable: Error {
    var reason: String
  }

  /// The smallest RSA modulus accepted (RFC 7518 §3.3: "2048 bits or larger MUST be used").
  static let minimumRSABits: Int32 = 2048

  /// An RSA key from the big-endian modulus and exponent (`n`, `e`).
  static func rsa(modulus: [UInt8], exponent: [UInt8], keyID: String?, algorithm: JWTAlgorithm?)
    throws(Unusable) -> JWTPublicKey
  {
    guard !modulus.isEmpty, !exponent.isEmpty else { throw Unusable(reason: "empty n or e") }
    guard let builder = OSSL_PARAM_BLD_new() else { throw openSSLFailure() }
    defer { OSSL_PARAM_BLD_free(builder) }
    guard let n = BN_bin2bn(modulus, Int32(modulus.count), nil) else { throw openSSLFailure() }
    defer { BN_free(n) }
    guard let e = BN_bin2bn(exponent, Int32(exponent.count), nil) else { throw openSSLFailure() }
    defer { BN_free(e) }
    // The builder keeps the BIGNUMs until `OSSL_PARAM_BLD_to_param` copies them, hence the
    // frees deferred to the end of the function.
    guard OSSL_PARAM_BLD_push_BN(builder, cString("n"), n) == 1,
      OSSL_PARAM_BLD_push_BN(builder, cString("e"), e) == 1
    else { throw openSSLFailure() }
    let key = try fromParameters(builder, type: "RSA", refusal: "OpenSSL refused the RSA key")
    let bits = EVP_PKEY_get_bits(key)
    guard bits >= minimumRSABits else {
      EVP_PKEY_free(key)
      throw Unusable(reason: "RSA key of \(bits) bits, under \(minimumRSABits)")
    }
    return JWTPublicKey(kind: .rsa, keyID: keyID, algorithm: algorithm, key: key)
  }

  /// An EC key on P-256 or P-384 from its affine coordinates (`x`, `y`, each the curve's size).
  static func ec(kind: JWTKeyKind, x: [UInt8], y: [UInt8], keyID: String?, algorithm: JWTAlgorithm?)
    throws(Unusable) -> JWTPublicKey
  {
    let (group, size) = kind == .ecP256 ? ("P-256", 32) : ("P-384", 48)
    // RFC 7518 §6.2.1.2–3: the coordinates are full length, leading zeros kept.
    guard x.count == size, y.count == size else { throw Unusable(reason: "x or y is not \(size) bytes") }
    let point = [0x04] + x + y  // SEC 1 §2.3.3 uncompressed point
    guard let builder = OSSL_PARAM_BLD_new() else { throw openSSLFailure() }
    defer { OSSL_PARAM_BLD_free(builder) }
    // The builder keeps pointers to the name and the point until `OSSL_PARAM_BLD_to_param`
    // copies them, so both stay pinned until the key is made.
    let made = group.withCString { name in
      point.withUnsafeBytes { bytes -> Result<OpaquePointer, Unusable> in
        guard OSSL_PARAM_BLD_push_utf8_string(builder, cString("group"), name, 0) == 1,
          OSSL_PARAM_BLD_push_octet_string(builder, cString("pub"), bytes.baseAddress, bytes.count) == 1
        else { return .failure(openSSLFailure()) }
        return Result { () throws(Unusable) in
          try fromParameters(builder, type: "EC", refusal: "point not on the curve")
        }
      }
    }
    let key = try made.get()
    // An off-curve point is the invalid-curve attack's way in. OpenSSL refuses one on import;
    // this full check (on the curve, not infinity, right order) does not rely on that.
    guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else {
      EVP_PKEY_free(key)
      throw openSSLFailure()
    }
    defer { EVP_PKEY_CTX_free(context) }
    guard EVP_PKEY_public_check(context) == 1 else {
      EVP_PKEY_free(key)
      ERR_clear_error()
      throw Unusable(reason: "point not on the curve")
    }
    return JWTPublicKey(kind: kind, keyID: keyID, algorithm: algorithm, key: key)
  }

  /// An Ed25519 key from its 32 bytes (`x`, RFC 8037 §2).
  static func ed25519(x: [UInt8], keyID: String?, algorithm: JWTAlgorithm?) throws(Unusable) -> JWTPublicKey {
    guard x.count == 32 else { throw Unusable(reason: "x is not 32 bytes") }
    guard let key = EVP_PKEY_new_raw_public_key(gh_EVP_PKEY_ED25519(), nil, x, x.count) else {
      ERR_clear_error()
      throw Unusable(reason: "not an Ed25519 public key")
    }
    return JWTPublicKey(kind: .ed25519, keyID: keyID, algorithm: algorithm, key: key)
  }

  /// A parameter name for `OSSL_PARAM_BLD_push_*`, which keeps the pointer (it does not copy
  /// the name) until `OSSL_PARAM_BLD_to_param`: a Swift string bridged for the call would be
  /// gone by then, a static string's bytes live as long as the program. The names are
  /// `OSSL_PKEY_PARAM_RSA_N`, `_RSA_E`, `_GROUP_NAME` and `_PUB_KEY` of core_names.h.
  private static func cString(_ name: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
  }

  /// The key the builder's parameters describe; `refusal` is the reason when OpenSSL refuses
  /// them (for EC, OpenSSL 3 checks on import that the point is on the curve).
  private static func fromParameters(_ builder: OpaquePointer, type: String, refusal: String) throws(Unusable)
    -> OpaquePointer
  {
    guard let parameters = OSSL_PARAM_BLD_to_param(builder) else { throw openSSLFailure() }
    defer { OSSL_PARAM_free(parameters) }
    guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw openSSLFailure() }
    defer { EVP_PKEY_CTX_free(context) }
    var key: OpaquePointer?
    guard EVP_PKEY_fromdata_init(context) == 1,
      EVP_PKEY_fromdata(context, &key, gh_EVP_PKEY_PUBLIC_KEY(), parameters) == 1, let key
    else { throw openSSLFailure(reason: refusal) }
    return key
  }

  /// Clears OpenSSL's per-thread error queue: a stale entry there would make a later
  /// `SSL_get_error` on the same event-loop thread misreport a TLS connection's state.
  private static func openSSLFailure(reason: String = "OpenSSL failed") -> Unusable {
    ERR_clear_error()
    return Unusable(reason: reason)
  }

  // MARK: - Verifying (RFC 7518 §3.3–3.5, RFC 8037 §3.1)

  /// Whether `signature` is a valid signature of `signingInput` by this key under `algorithm`
  /// (which the caller checked with `fits`).
  func verify(_ algorithm: JWTAlgorithm, signingInput: UnsafeRawBufferPointer, signature: [UInt8]) -> Bool {
    var signature = signature
    switch algorithm {
    case .es256, .es384:
      // JWS carries r‖s at the curve's size (RFC 7518 §3.4); OpenSSL verifies DER.
      guard let der = Self.derSignature(rawRS: signature, half: algorithm == .es256 ? 32 : 48) else { return false }
      signature = der
    case .rs256, .rs384, .rs512, .ps256, .edDSA:
      break
    }
    guard !signature.isEmpty, let context = EVP_MD_CTX_new() else { return false }
    defer { EVP_MD_CTX_free(context) }
    let verified = signature.withUnsafeBytes { signature in
      var keyContext: OpaquePointer?
      // Ed25519 hashes inside the signature scheme: no digest (RFC 8032 §5.1).
      guard EVP_DigestVerifyInit(context, &keyContext, Self.digest(algorithm), nil, key) == 1 else { return false }
      if algorithm == .ps256 {
        // RFC 7518 §3.5: MGF1 with the same hash, salt as long as the hash.
        guard let keyContext, EVP_PKEY_CTX_set_rsa_padding(keyContext, gh_RSA_PKCS1_PSS_PADDING()) == 1,
          EVP_PKEY_CTX_set_rsa_mgf1_md(keyContext, EVP_sha256()) == 1,
          EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, 32) == 1
        else { return false }
      }
      return EVP_DigestVerify(
        context, signature.baseAddress, signature.count, signingInput.baseAddress, signingInput.count) == 1
    }
    if !verified { ERR_clear_error() }
    return verified
  }

  private static func digest(_ algorithm: JWTAlgorithm) -> OpaquePointer? {
    switch algorithm {
    case .rs256, .ps256, .es256: EVP_sha256()
    case .rs384, .es384: EVP_sha384()
    case .rs512: EVP_sha512()
    case .edDSA: nil
    }
  }

  /// The DER `ECDSA-Sig-Value` of a raw r‖s signature, or nil when it is not `2 * half` bytes.
  static func derSignature(rawRS: [UInt8], half: Int) -> [UInt8]? {
    guard rawRS.count == 2 * half, let signature = ECDSA_SIG_new() else { return nil }
    defer { ECDSA_SIG_free(signature) }
    let (r, s) = rawRS.withUnsafeBufferPointer {
      (BN_bin2bn($0.baseAddress, Int32(half), nil), BN_bin2bn($0.baseAddress! + half, Int32(half), nil))
    }
    // On success ECDSA_SIG_set0 owns r and s.
    guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
      BN_free(r)
      BN_free(s)
      ERR_clear_error()
      return nil
    }
    let length = i2d_ECDSA_SIG(signature, nil)
    guard length > 0 else { return nil }
    var der = [UInt8](repeating: 0, count: Int(length))
    let written = der.withUnsafeMutableBufferPointer { buffer in
      var cursor = buffer.baseAddress
      return i2d_ECDSA_SIG(signature, &cursor)
    }
    return written == length ? der : nil
  }
}
