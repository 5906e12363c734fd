import GatehouseJSON

/// Why a JWKS document could not be read at all (RFC 7517 §5: a JSON object with a `keys`
/// array). A key the set cannot use is not an error: it is listed in `JWTKeySet.skipped`.
///
/// A struct over a private code (as `JSONError.Reason`), so new reasons do not break callers;
/// two errors are equal when their codes are.
public struct JWKSError: Error, Sendable, Equatable, CustomStringConvertible {
  private enum Code: Sendable {
    case tooLarge, notJSON, notAnObject, noKeysArray
  }

  private let code: Code
  public let description: String

  private init(_ code: Code, _ description: String) {
    self.code = code
    self.description = description
  }

  public static func == (lhs: JWKSError, rhs: JWKSError) -> Bool { lhs.code == rhs.code }

  /// Over `JWTKeySet.maxDocumentBytes`.
  public static let tooLarge = JWKSError(.tooLarge, "JWKS document over \(JWTKeySet.maxDocumentBytes) bytes")
  /// Not valid JSON (or nested deeper than the limit).
  public static let notJSON = JWKSError(.notJSON, "JWKS document is not valid JSON")
  /// Valid JSON, but not an object.
  public static let notAnObject = JWKSError(.notAnObject, "JWKS document is not a JSON object")
  /// An object without a `keys` array.
  public static let noKeysArray = JWKSError(.noKeysArray, "JWKS document has no \"keys\" array")

  static func notJSON(_ error: JSONError) -> JWKSError {
    JWKSError(.notJSON, "JWKS document is not valid JSON (at byte \(error.offset))")
  }
}

/// A provider's parsed JWKS (RFC 7517 §5): the keys a token may be verified with.
///
/// Keys this module cannot or must not use are skipped with a reason, not fatal, since a
/// provider's set often holds encryption keys and new key types next to the signing keys, and
/// RFC 7517 §5 says to ignore keys whose `kty` is not understood, that lack members, or whose
/// values are out of range. Private members (`d`, `p`, …) are never read.
///
/// Why `@unchecked Sendable`: immutable after init, and its keys are `EVP_PKEY`s, which
/// OpenSSL 3 lets several threads verify with at once as long as each call has its own
/// `EVP_MD_CTX`, which `JWTPublicKey.verify` makes per call (see there). So the event loops
/// share one set read-only, without locks.
public final class JWTKeySet: @unchecked Sendable {
  /// Largest document read: real provider sets are a few kilobytes.
  public static let maxDocumentBytes = 512 * 1024
  /// Keys past this many are skipped, bounding the work of a token without `kid`.
  public static let maxKeys = 64

  let keys: [JWTPublicKey]
  /// The `kid` of each usable key that has one, in document order.
  public let keyIDs: [String]
  /// One short reason per skipped key, as "key N: …" with N the index in `keys` from 0.
  public let skipped: [String]

  /// The number of usable keys.
  public var count: Int { keys.count }

  /// Reads the whole JWKS document.
  public init(jwks: [UInt8]) throws(JWKSError) {
    guard jwks.count <= Self.maxDocumentBytes else { throw .tooLarge }
    let document: JSONValue
    do {
      document = try JSONParser.parse(jwks, limits: JSONParser.Limits(maxBytes: Self.maxDocumentBytes, maxDepth: 16))
    } catch {
      throw .notJSON(error)
    }
    guard case .object = document else { throw .notAnObject }
    guard case .array(let entries)? = document["keys"] else { throw .noKeysArray }
    var keys: [JWTPublicKey] = []
    var skipped: [String] = []
    for (index, entry) in entries.enumerated() {
      guard index < Self.maxKeys else {
        skipped.append("key \(index): over the limit of \(Self.maxKeys) keys")
        continue
      }
      do {
        keys.append(try Self.key(from: entry))
      } catch {
        skipped.append("key \(index): \(error.reason)")
      }
    }
    self.keys = keys
    self.keyIDs = keys.compactMap(\.keyID)
    self.skipped = skipped
  }

  /// The keys to try for a token's `alg` and `kid` (RFC 7515 §4.1.4), in document order.
  func candidates(for algorithm: JWTAlgorithm, keyID: String?) -> Result<[JWTPublicKey], JWTRefusal> {
    if keys.isEmpty { return .failure(.noKeys) }
    guard let keyID else {
      // Without a kid, a bounded number of the keys that fit: a token may not make the
      // gateway try 64 signatures.
      let fitting = keys.lazy.filter { $0.fits(algorithm) }.prefix(JWTVerifier.maxKeysTriedWithoutKeyID)
      return fitting.isEmpty
        ? .failure(.algorithmNotAllowed("no key for \(algorithm.rawValue)")) : .success(Array(fitting))
    }
    let named = keys.filter { $0.keyID == keyID }
    if named.isEmpty { return .failure(.unknownKey) }
    let fitting = named.filter { $0.fits(algorithm) }.prefix(JWTVerifier.maxKeysTriedWithoutKeyID)
    return fitting.isEmpty
      ? .failure(.algorithmNotAllowed("the key does not fit \(algorithm.rawValue)")) : .success(Array(fitting))
  }

  // MARK: - One JWK (RFC 7517 §4, RFC 7518 §6, RFC 8037 §2)

  private static func key(from jwk: JSONValue) throws(JWTPublicKey.Unusable) -> JWTPublicKey {
    guard case .object = jwk else { throw unusable("not an object") }
    guard let kty = jwk["kty"] else { throw unusable("no kty") }
    guard case .string(let type) = kty else { throw unusable("kty is not a string") }
    var keyID: String?
    switch jwk["kid"] {
    case nil: break
    case .string(let kid)?: keyID = kid.isEmpty ? nil : kid
    case _?: throw unusable("kid is not a string")
    }
    switch jwk["use"] {
    case nil: break
    case .string("sig")?: break
    case .string(let use)?: throw unusable("use \(printable(use)) is not sig")
    case _?: throw unusable("use is not a string")
    }
    if let operations = jwk["key_ops"] {
      guard case .array(let list) = operations, list.contains(.string("verify")) else {
        throw unusable("key_ops without verify")
      }
    }
    var algorithm: JWTAlgorithm?
    switch jwk["alg"] {
    case nil: break
    case .string(let name)?:
      guard let known = JWTAlgorithm(rawValue: name) else { throw unusable("alg \(printable(name)) not supported") }
      algorithm = known
    case _?: throw unusable("alg is not a string")
    }
    let kind: JWTKeyKind
    switch type {
    case "RSA": kind = .rsa
    case "EC":
      switch jwk["crv"] {
      case .string("P-256")?: kind = .ecP256
      case .string("P-384")?: kind = .ecP384
      case .string(let curve)?: throw unusable("crv \(printable(curve)) not supported")
      case _: throw unusable("crv missing or not a string")
      }
    case "OKP":
      switch jwk["crv"] {
      case .string("Ed25519")?: kind = .ed25519
      case .string(let curve)?: throw unusable("crv \(printable(curve)) not supported")
      case _: throw unusable("crv missing or not a string")
      }
    default: throw unusable("kty \(printable(type)) not supported")
    }
    if let algorithm, algorithm.keyKind != kind {
      throw unusable("alg \(algorithm.rawValue) does not fit kty \(type)")
    }
    switch kind {
    case .rsa:
      return try JWTPublicKey.rsa(
        modulus: try member("n", of: jwk), exponent: try member("e", of: jwk), keyID: keyID, algorithm: algorithm)
    case .ecP256, .ecP384:
      return try JWTPublicKey.ec(
        kind: kind, x: try member("x", of: jwk), y: try member("y", of: jwk), keyID: keyID, algorithm: algorithm)
    case .ed25519:
      return try JWTPublicKey.ed25519(x: try member("x", of: jwk), keyID: keyID, algorithm: algorithm)
    }
  }

  /// A base64url member's bytes (RFC 7518 §6: Base64urlUInt and coordinates).
  private static func member(_ name: String, of jwk: JSONValue) throws(JWTPublicKey.Unusable) -> [UInt8] {
    guard case .string(let text)? = jwk[name] else { throw unusable("\(name) missing or not a string") }
    guard let bytes = Base64URL.decode(text) else { throw unusable("\(name) is not base64url") }
    return bytes
  }

  private static func unusable(_ reason: String) -> JWTPublicKey.Unusable {
    JWTPublicKey.Unusable(reason: reason)
  }

  /// A document's value for a reason text: printable ASCII, at most 32 characters, so that a
  /// hostile document cannot put control bytes or pages of text into a log line.
  private static func printable(_ text: String) -> String {
    let safe = text.utf8.prefix(32).map { (0x20..<0x7F).contains($0) ? $0 : UInt8(ascii: "?") }
    return String(decoding: safe, as: UTF8.self) + (text.utf8.count > 32 ? "…" : "")
  }
}
