import CGatehouseOpenSSL

/// SHA-256, HKDF-SHA-256 and AES-256-GCM through OpenSSL, for cache ids and token values.
/// Everything takes and returns plain byte arrays so no OpenSSL type leaves this file.
enum StoreCrypto {
  static let keyLength = 32
  static let nonceLength = 12
  static let tagLength = 16

  /// SHA-256 of `bytes`.
  static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
    let input = Array(bytes)
    input.withUnsafeBufferPointer { buffer in
      digest.withUnsafeMutableBufferPointer { out in
        _ = SHA256(buffer.baseAddress, buffer.count, out.baseAddress)
      }
    }
    return digest
  }

  /// Lowercase hex of `bytes`.
  static func hex(_ bytes: some Sequence<UInt8>) -> String {
    let digits: [UInt8] = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(64)
    for byte in bytes {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// HMAC-SHA-256 (OpenSSL's one-shot `HMAC`).
  static func hmacSHA256(key: [UInt8], data: [UInt8]) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    key.withUnsafeBufferPointer { keyBuffer in
      data.withUnsafeBufferPointer { dataBuffer in
        out.withUnsafeMutableBufferPointer { outBuffer in
          _ = HMAC(
            EVP_sha256(), keyBuffer.baseAddress, Int32(keyBuffer.count), dataBuffer.baseAddress, dataBuffer.count,
            outBuffer.baseAddress, &length)
        }
      }
    }
    return out
  }

  /// HKDF-SHA-256 (RFC 5869), output at most 255 * 32 bytes.
  static func hkdfSHA256(ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
    let prk = hmacSHA256(key: salt.isEmpty ? [UInt8](repeating: 0, count: 32) : salt, data: ikm)
    var okm: [UInt8] = []
    var previous: [UInt8] = []
    var counter: UInt8 = 1
    while okm.count < length {
      previous = hmacSHA256(key: prk, data: previous + info + [counter])
      okm += previous
      counter += 1
    }
    return Array(okm.prefix(length))
  }

  /// The token encryption key for a configured secret string: HKDF-SHA-256 with a fixed
  /// salt and a versioned purpose label, so the same secret used elsewhere (or a future
  /// key for another purpose) yields an unrelated key.
  static func tokenKey(secret: String) -> [UInt8] {
    hkdfSHA256(
      ikm: Array(secret.utf8), salt: Array("gatehouse-store".utf8), info: Array("tokens/aes-256-gcm/v1".utf8),
      length: keyLength)
  }

  /// Cryptographically random bytes (nonces).
  static func randomBytes(_ count: Int) throws(StoreError) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
    guard ok == 1 else { throw StoreError(kind: .crypto, message: "RAND_bytes failed") }
    return bytes
  }

  /// A sealed value: ciphertext and its 16-byte tag, kept apart as they are stored apart.
  struct Sealed {
    var nonce: [UInt8]
    var ciphertext: [UInt8]
    var tag: [UInt8]
  }

  /// AES-256-GCM encryption with a fresh random 96-bit nonce, or with `nonce` when the caller
  /// derives one (it must never repeat under one key for another plaintext).
  static func seal(_ plaintext: [UInt8], key: [UInt8], aad: [UInt8], nonce given: [UInt8]? = nil) throws(StoreError)
    -> Sealed
  {
    let nonce: [UInt8]
    if let given { nonce = given } else { nonce = try randomBytes(nonceLength) }
    guard nonce.count == nonceLength else { throw StoreError(kind: .crypto, message: "a nonce is 12 bytes") }
    guard let ctx = EVP_CIPHER_CTX_new() else { throw StoreError(kind: .crypto, message: "EVP_CIPHER_CTX_new failed") }
    defer { EVP_CIPHER_CTX_free(ctx) }
    var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
    var tag = [UInt8](repeating: 0, count: tagLength)
    var written: Int32 = 0
    var total = 0
    var ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, gh_EVP_CTRL_GCM_SET_IVLEN(), Int32(nonceLength), nil) == 1
    ok = ok && EVP_EncryptInit_ex(ctx, nil, nil, key, nonce) == 1
    if ok && !aad.isEmpty { ok = EVP_EncryptUpdate(ctx, nil, &written, aad, Int32(aad.count)) == 1 }
    if ok && !plaintext.isEmpty {
      ok =
        ciphertext.withUnsafeMutableBufferPointer {
          EVP_EncryptUpdate(ctx, $0.baseAddress, &written, plaintext, Int32(plaintext.count))
        } == 1
      total = Int(written)
    }
    if ok {
      ok =
        ciphertext.withUnsafeMutableBufferPointer { EVP_EncryptFinal_ex(ctx, $0.baseAddress! + total, &written) } == 1
      total += Int(written)
    }
    ok =
      ok && tag.withUnsafeMutableBytes { EVP_CIPHER_CTX_ctrl(ctx, gh_EVP_CTRL_GCM_GET_TAG(), 16, $0.baseAddress) } == 1
    guard ok else { throw StoreError(kind: .crypto, message: "AES-256-GCM encryption failed") }
    return Sealed(nonce: nonce, ciphertext: Array(ciphertext.prefix(total)), tag: tag)
  }

  /// AES-256-GCM decryption; nil when the tag does not verify (wrong key, wrong name,
  /// tampered bytes), never a crash.
  static func open(_ sealed: Sealed, key: [UInt8], aad: [UInt8]) -> [UInt8]? {
    guard sealed.nonce.count == nonceLength, sealed.tag.count == tagLength, key.count == keyLength else { return nil }
    guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
    defer { EVP_CIPHER_CTX_free(ctx) }
    var plaintext = [UInt8](repeating: 0, count: sealed.ciphertext.count + 16)
    var written: Int32 = 0
    var total = 0
    var tag = sealed.tag
    var ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx, gh_EVP_CTRL_GCM_SET_IVLEN(), Int32(nonceLength), nil) == 1
    ok = ok && EVP_DecryptInit_ex(ctx, nil, nil, key, sealed.nonce) == 1
    if ok && !aad.isEmpty { ok = EVP_DecryptUpdate(ctx, nil, &written, aad, Int32(aad.count)) == 1 }
    if ok && !sealed.ciphertext.isEmpty {
      ok =
        plaintext.withUnsafeMutableBufferPointer {
          EVP_DecryptUpdate(ctx, $0.baseAddress, &written, sealed.ciphertext, Int32(sealed.ciphertext.count))
        } == 1
      total = Int(written)
    }
    ok =
      ok && tag.withUnsafeMutableBytes { EVP_CIPHER_CTX_ctrl(ctx, gh_EVP_CTRL_GCM_SET_TAG(), 16, $0.baseAddress) } == 1
    if ok {
      // The tag is checked here: Final fails when it does not match.
      ok = plaintext.withUnsafeMutableBufferPointer { EVP_DecryptFinal_ex(ctx, $0.baseAddress! + total, &written) } == 1
      total += Int(written)
    }
    return ok ? Array(plaintext.prefix(total)) : nil
  }
}
