import GatehouseJSON

/// Verifies a bearer JWT (RFC 6750 §2.1) in JWS compact serialization (RFC 7515 §7.1) against a
/// provider's keys and rules, following RFC 8725's best practices. Pure: no I/O, no clock of
/// its own, no state.
///
/// The order: size, shape and base64url (cheap, before any parsing); the header (RFC 7515
/// §4.1) with `alg` checked against the policy before any key is touched; the signature; only
/// then the payload, so the claims parser sees only bytes the provider signed; then the claims
/// (RFC 7519 §4.1).
///
/// Header members that point at keys (`jku`, `x5u`, `jwk`, `x5c`, RFC 7515 §4.1.2–6) are
/// ignored: keys come only from the provider's JWKS, never from the token that they would
/// vouch for.
public enum JWTVerifier {
  /// Longest token accepted: real tokens are under 2 KiB, and this bounds every step's work.
  public static let maxTokenBytes = 8192
  /// Longest `kid` accepted; it is only compared, never used as a path or a query.
  public static let maxKeyIDBytes = 256
  /// Keys tried for one token (bounded work when a token has no `kid`).
  public static let maxKeysTriedWithoutKeyID = 4
  /// Header and payload are small objects; these limits keep a hostile one cheap.
  static let jsonLimits = JSONParser.Limits(maxBytes: 8192, maxDepth: 8)

  /// `token` is the bytes after "Bearer ". `now` is Unix seconds.
  public static func verify(_ token: UnsafeRawBufferPointer, keys: JWTKeySet, policy: JWTPolicy, now: Int64)
    -> Result<VerifiedToken, JWTRefusal>
  {
    do throws(JWTRefusal) {
      return .success(try checked(token, keys: keys, policy: policy, now: now))
    } catch {
      return .failure(error)
    }
  }

  private static func checked(_ token: UnsafeRawBufferPointer, keys: JWTKeySet, policy: JWTPolicy, now: Int64)
    throws(JWTRefusal) -> VerifiedToken
  {
    guard token.count <= maxTokenBytes else { throw .tooLarge }
    guard let firstDot = token.firstIndex(of: UInt8(ascii: ".")),
      let secondDot = token[(firstDot + 1)...].firstIndex(of: UInt8(ascii: ".")),
      !token[(secondDot + 1)...].contains(UInt8(ascii: "."))
    else { throw .malformed("not three parts") }
    let signingInput = UnsafeRawBufferPointer(rebasing: token[..<secondDot])
    guard let headerBytes = Base64URL.decode(UnsafeRawBufferPointer(rebasing: token[..<firstDot])),
      let payloadBytes = Base64URL.decode(UnsafeRawBufferPointer(rebasing: token[(firstDot + 1)..<secondDot])),
      let signature = Base64URL.decode(UnsafeRawBufferPointer(rebasing: token[(secondDot + 1)...]))
    else { throw .malformed("bad base64url") }

    let header = try object(headerBytes, part: "header")
    let algorithm = try allowedAlgorithm(header, policy: policy)
    // RFC 7515 §4.1.11: an extension the recipient does not understand must be refused, and
    // this verifier understands none.
    if header["crit"] != nil { throw .unsupportedCritical }
    var keyID: String?
    switch header["kid"] {
    case nil: break
    case .string(let kid)?:
      guard kid.utf8.count <= maxKeyIDBytes else { throw .malformed("kid too long") }
      keyID = kid
    case _?: throw .malformed("kid is not a string")
    }

    let candidates = try keys.candidates(for: algorithm, keyID: keyID).get()
    guard candidates.contains(where: { $0.verify(algorithm, signingInput: signingInput, signature: signature) })
    else { throw .badSignature }

    return try claims(try object(payloadBytes, part: "payload"), policy: policy, now: now)
  }

  /// The decoded part as a JSON object (RFC 7515 §4, RFC 7519 §7.2 step 10).
  private static func object(_ bytes: [UInt8], part: StaticString) throws(JWTRefusal) -> JSONValue {
    // The parser's own message may quote the input, so only fixed words go into the refusal.
    guard let value = try? JSONParser.parse(bytes, limits: jsonLimits), case .object = value else {
      throw .malformed("\(part) is not a JSON object")
    }
    return value
  }

  /// The header's `alg`, if this policy accepts it (RFC 8725 §3.1). `none` and HMAC are never
  /// accepted, whatever the policy: their names are not `JWTAlgorithm` cases.
  private static func allowedAlgorithm(_ header: JSONValue, policy: JWTPolicy) throws(JWTRefusal) -> JWTAlgorithm {
    guard case .string(let name)? = header["alg"] else { throw .malformed("alg missing or not a string") }
    guard let algorithm = JWTAlgorithm(rawValue: name) else {
      // Name only what is known, so the refusal never repeats the token's bytes.
      switch name {
      case "none", "HS256", "HS384", "HS512": throw .algorithmNotAllowed(name)
      default: throw .algorithmNotAllowed("unsupported")
      }
    }
    guard policy.algorithms.contains(algorithm) else { throw .algorithmNotAllowed(name) }
    return algorithm
  }

  // MARK: - Claims (RFC 7519 §4.1)

  private static func claims(_ payload: JSONValue, policy: JWTPolicy, now: Int64) throws(JWTRefusal)
    -> VerifiedToken
  {
    let leeway = max(0, policy.leewaySeconds)
    let earliest = now.subtractingSaturated(leeway)
    let latest = now.addingSaturated(leeway)
    guard let exp = payload["exp"] else { throw .malformed("exp missing") }
    let expiresAt = try time(exp, name: "exp", rounded: .down)
    // The time comparisons are with integer seconds, so each time claim is rounded the way
    // that keeps the comparison exact: now > exp ⇔ now > ⌊exp⌋, now < nbf ⇔ now < ⌈nbf⌉,
    // iat > now ⇔ ⌈iat⌉ > now.
    if earliest > expiresAt { throw .expired }
    if let nbf = payload["nbf"], latest < (try time(nbf, name: "nbf", rounded: .up)) { throw .notYetValid }
    if let iat = payload["iat"], (try time(iat, name: "iat", rounded: .up)) > latest { throw .issuedInFuture }

    if let issuer = policy.issuer {
      guard case .string(let iss)? = payload["iss"], iss == issuer else { throw .wrongIssuer }
    }
    let audiences: [String]
    switch payload["aud"] {
    case nil: audiences = []
    case .string(let audience)?: audiences = [audience]
    case .array(let list)?: audiences = try strings(list, name: "aud")
    case _?: throw .malformed("aud is not a string or an array")
    }
    if !policy.audiences.isEmpty && !audiences.contains(where: policy.audiences.contains) { throw .wrongAudience }

    var subject: [UInt8]?
    // An empty or blank `sub` names nobody: taken as a `sub` it would make every token that
    // carries it one user (one per-user cache entry, one forwarded identity).
    if case .string(let sub)? = payload["sub"], !VerifiedToken.namesNobody(sub) { subject = Array(sub.utf8) }
    let scopes: [String]
    if let scope = payload["scope"] {
      scopes = try scopeList(scope, name: "scope")
    } else if let scp = payload["scp"] {
      scopes = try scopeList(scp, name: "scp")
    } else {
      scopes = []
    }
    return VerifiedToken(subject: subject, expiresAt: expiresAt, scopes: scopes, claims: payload)
  }

  /// A NumericDate (RFC 7519 §2): a JSON number of seconds, fraction allowed, as whole seconds.
  private static func time(_ value: JSONValue, name: StaticString, rounded rule: FloatingPointRoundingRule)
    throws(JWTRefusal) -> Int64
  {
    guard case .number(let number) = value else { throw .malformed("\(name) is not a number") }
    if let integer = number.integer { return integer }
    let seconds = number.double.rounded(rule)
    // Beyond Int64 (1e300) saturates; the parser never gives NaN or infinity.
    if seconds >= 9.2e18 { return .max }
    if seconds <= -9.2e18 { return .min }
    return Int64(seconds)
  }

  private static func strings(_ list: [JSONValue], name: StaticString) throws(JWTRefusal) -> [String] {
    var result: [String] = []
    for element in list {
      guard case .string(let string) = element else { throw .malformed("\(name) has a non-string element") }
      result.append(string)
    }
    return result
  }

  private static func scopeList(_ value: JSONValue, name: StaticString) throws(JWTRefusal) -> [String] {
    switch value {
    case .string(let text): return text.split(separator: " ").map(String.init)
    case .array(let list): return try strings(list, name: name)
    case _: throw .malformed("\(name) is not a string or an array")
    }
  }
}

extension Int64 {
  fileprivate func addingSaturated(_ other: Int64) -> Int64 {
    let (sum, overflow) = addingReportingOverflow(other)
    return overflow ? (other > 0 ? .max : .min) : sum
  }

  fileprivate func subtractingSaturated(_ other: Int64) -> Int64 {
    let (difference, overflow) = subtractingReportingOverflow(other)
    return overflow ? (other > 0 ? .min : .max) : difference
  }
}
