/// AES-256-GCM for shared-tier records (SPEC §14) when `store.secret_key` is set: what one
/// replica writes to Redis, only a replica with the same secret can read, and a record moved
/// to another key (the additional data is the key's id) fails to open.
package struct SharedRecordSealer: Sendable {
  private let key: [UInt8]

  /// Its own HKDF purpose label, so the key is unrelated to the token key from the same secret.
  package init(secret: String) {
    key = StoreCrypto.hkdfSHA256(
      ikm: Array(secret.utf8), salt: Array("gatehouse-store".utf8), info: Array("shared/aes-256-gcm/v1".utf8),
      length: StoreCrypto.keyLength)
  }

  /// Bytes that overhead adds: nonce and tag.
  package static let overhead = StoreCrypto.nonceLength + StoreCrypto.tagLength

  /// nonce ‖ ciphertext ‖ tag; nil only when OpenSSL fails.
  package func seal(_ plaintext: [UInt8], id: String) -> [UInt8]? {
    guard let sealed = try? StoreCrypto.seal(plaintext, key: key, aad: Array(id.utf8)) else { return nil }
    return sealed.nonce + sealed.ciphertext + sealed.tag
  }

  /// The plaintext, or nil for anything that does not verify (never a crash).
  package func open(_ bytes: [UInt8], id: String) -> [UInt8]? {
    guard bytes.count >= Self.overhead else { return nil }
    let nonceEnd = StoreCrypto.nonceLength
    let tagStart = bytes.count - StoreCrypto.tagLength
    let sealed = StoreCrypto.Sealed(
      nonce: Array(bytes[..<nonceEnd]), ciphertext: Array(bytes[nonceEnd..<tagStart]), tag: Array(bytes[tagStart...]))
    return StoreCrypto.open(sealed, key: key, aad: Array(id.utf8))
  }
}
