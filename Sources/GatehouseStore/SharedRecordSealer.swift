/// AES-256-GCM for shared-tier records (Docs/shared-tier.md) when `store.secret_key` is set: what one
/// replica writes to Redis, only a replica with the same secret can read, and a record moved
/// to another key (the additional data is the key's id) fails to open.
///
/// It seals the purge index's members too (`Docs/shared-tier.md`, "The purge index"), with
/// keys of their own, so the tier never holds an upstream path in the clear.
package struct SharedRecordSealer: Sendable {
  private let key: [UInt8]
  private let indexKey: [UInt8]
  private let indexNonceKey: [UInt8]

  /// Its own HKDF purpose label, so the key is unrelated to the token key from the same secret.
  package init(secret: String) {
    func derive(_ purpose: String) -> [UInt8] {
      StoreCrypto.hkdfSHA256(
        ikm: Array(secret.utf8), salt: Array("gatehouse-store".utf8), info: Array(purpose.utf8),
        length: StoreCrypto.keyLength)
    }
    key = derive("shared/aes-256-gcm/v1")
    indexKey = derive("shared-index/aes-256-gcm/v1")
    indexNonceKey = derive("shared-index/nonce/hmac-sha256/v1")
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
    Self.open(bytes, key: key, id: id)
  }

  /// An index member's sealed part: the same bytes for the same `id` and `plaintext` on every
  /// replica (the index is a set: one member per entry, whoever wrote it), so the nonce is
  /// derived, not drawn: the first 12 bytes of HMAC-SHA256 under a key of its own over
  /// `id ‖ 0x00 ‖ plaintext`. Two different plaintexts get different nonces (but for a
  /// 96-bit collision), whatever ids they come with, so GCM's one rule holds without
  /// resting on one id naming one plaintext. Equal members show only what equal ids and
  /// equal plaintexts already do. nil only when OpenSSL fails.
  package func sealIndexEntry(_ plaintext: [UInt8], id: String) -> [UInt8]? {
    let nonce = Self.indexNonce(key: indexNonceKey, id: id, plaintext: plaintext)
    guard let sealed = try? StoreCrypto.seal(plaintext, key: indexKey, aad: Array(id.utf8), nonce: nonce) else {
      return nil
    }
    return sealed.nonce + sealed.ciphertext + sealed.tag
  }

  private static func indexNonce(key: [UInt8], id: String, plaintext: [UInt8]) -> [UInt8] {
    var data = Array(id.utf8)
    data.reserveCapacity(data.count + 1 + plaintext.count)
    data.append(0)
    data += plaintext
    return Array(StoreCrypto.hmacSHA256(key: key, data: data).prefix(StoreCrypto.nonceLength))
  }

  /// What `sealIndexEntry` sealed, or nil for anything that does not verify.
  package func openIndexEntry(_ bytes: [UInt8], id: String) -> [UInt8]? {
    Self.open(bytes, key: indexKey, id: id)
  }

  private static func open(_ bytes: [UInt8], key: [UInt8], id: String) -> [UInt8]? {
    guard bytes.count >= overhead else { return nil }
    let nonceEnd = StoreCrypto.nonceLength
    let tagStart = bytes.count - StoreCrypto.tagLength
    let sealed = StoreCrypto.Sealed(
      nonce: Array(bytes[..<nonceEnd]), ciphertext: Array(bytes[nonceEnd..<tagStart]), tag: Array(bytes[tagStart...]))
    return StoreCrypto.open(sealed, key: key, aad: Array(id.utf8))
  }
}
