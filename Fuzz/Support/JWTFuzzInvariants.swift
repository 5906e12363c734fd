// The invariants every input of the `jwt` fuzz target must satisfy. This one file is compiled
// into Fuzz/build/fuzz-jwt (Fuzz/run.sh), which traps on a violation so libFuzzer saves the
// input, and into the GatehouseJWT tests through a symlink
// (Tests/GatehouseJWTTests/JWTFuzzInvariants.swift), where JWTFuzzReplayTests records a
// violation as a test failure. It uses only the public API.

import GatehouseJWT

/// A broken invariant, described well enough to act on from a crash log alone.
struct FuzzViolation: Error, CustomStringConvertible {
  var description: String

  init(_ description: String) {
    self.description = description
  }
}

/// Checks the JWT verifier on one input. The first byte picks what the rest is:
///
/// - bit 0 clear: a JWKS document for `JWTKeySet(jwks:)`;
/// - bit 0 set: a token for `JWTVerifier.verify` against `keys` (a real P-256 key and a real
///   Ed25519 key, whose private halves were thrown away after minting the seeds in
///   Fuzz/corpus/jwt/), at `now`; bit 1 sets an issuer and an audience in the policy; bits
///   2–3 pick the leeway (0, 30 s, an hour, `Int64.max`); bits 4–5 the algorithms (all, ES256
///   only, EdDSA only, the RSA ones only).
enum JWTFuzzInvariants {
  /// The public keys the verify half checks tokens against (kids `fuzz-ec`, `fuzz-ed`).
  static let jwks = Array(
    #"""
    {"keys":[
    {"kty":"EC","crv":"P-256","kid":"fuzz-ec","use":"sig","alg":"ES256",
     "x":"vSwcO9bGoB2l0-B85Kuv-r5HcZ08UCgFfsVDpVgy8XA","y":"y9ILZJg8oEgzMYGZUQ8SLauk2dTuxVuhoUYE8_F7RZw"},
    {"kty":"OKP","crv":"Ed25519","kid":"fuzz-ed","x":"By0KNPBlKu6PKHqhVXGoWl3Nvop7pQOqF9__iRboU08"}]}
    """#.utf8)
  static let keys = try! JWTKeySet(jwks: jwks)
  static let now: Int64 = 1_700_000_000
  static let issuer = "https://id.example.com/"
  static let audience = "fuzz-api"

  /// A refusal reason must share no run of this many bytes with the input (or its decoded
  /// parts): long enough that the fixed wording never matches by chance.
  static let echoWindow = 12

  /// libFuzzer entry: traps on a violation so libFuzzer reports it and saves the input.
  static func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) {
    let input = UnsafeRawBufferPointer(start: size > 0 ? data : nil, count: size)
    if let violation = check(input) {
      fatalError("fuzz invariant violated (jwt): \(violation)")
    }
  }

  /// Runs every check on one input and returns the first violation, or nil.
  ///
  /// A JWKS document: either refused with a short description, or read into at most
  /// `JWTKeySet.maxKeys` keys whose ids are non-empty, with one "key N: …" reason per skipped
  /// key in ascending order, and usable keys plus skipped keys no more than the document has;
  /// a fixed token verified against the set is refused without echoing it.
  ///
  /// A token: verified twice with the same answer; a refusal's `reason` is short printable
  /// ASCII and shares no `echoWindow`-byte run with the token or its decoded parts; an
  /// accepted token is one signed by `keys` (the fuzzer cannot forge one, so only seeds pass),
  /// unexpired at `now`, allowed by the policy, consistent in its scopes and claim texts, and
  /// found in a `JWTVerificationCache` after being inserted for one provider only.
  static func check(_ input: UnsafeRawBufferPointer) -> FuzzViolation? {
    guard let control = input.first else { return nil }
    let rest = UnsafeRawBufferPointer(rebasing: input[1...])
    do throws(FuzzViolation) {
      if control & 1 == 0 {
        try checkKeySet(Array(rest))
      } else {
        try checkToken(rest, control: control)
      }
      return nil
    } catch {
      return error
    }
  }

  static func require(_ condition: Bool, _ message: @autoclosure () -> String) throws(FuzzViolation) {
    if !condition { throw FuzzViolation(message()) }
  }

  // MARK: - Key sets

  static func checkKeySet(_ document: [UInt8]) throws(FuzzViolation) {
    let set: JWTKeySet
    do {
      set = try JWTKeySet(jwks: document)
    } catch {
      try require(!error.description.isEmpty && error.description.utf8.count <= 120, "JWKSError: \(error)")
      return
    }
    try require(set.count <= JWTKeySet.maxKeys, "\(set.count) keys, over the limit")
    try require(set.keyIDs.count <= set.count, "\(set.keyIDs.count) key ids for \(set.count) keys")
    try require(!set.keyIDs.contains(""), "an empty key id is listed")
    var previous = -1
    for reason in set.skipped {
      guard reason.hasPrefix("key "), let colon = reason.firstIndex(of: ":"),
        let index = Int(reason[reason.index(reason.startIndex, offsetBy: 4)..<colon])
      else { throw FuzzViolation("skip reason \(reason.debugDescription) is not \"key N: …\"") }
      try require(index > previous, "skip reasons out of order: \(set.skipped)")
      previous = index
      try require(reason.utf8.count <= 120, "skip reason too long: \(reason.debugDescription)")
      try require(!reason.utf8.contains { $0 < 0x20 || $0 == 0x7F }, "control byte in \(reason.debugDescription)")
    }
    // Every key is either usable or skipped, and the document has at least that many.
    try require(
      set.count + set.skipped.count <= document.count / 2,
      "\(set.count) + \(set.skipped.count) keys from a short document")
    let token = Array("eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjF9.AAAA".utf8)
    let result = token.withUnsafeBytes {
      JWTVerifier.verify($0, keys: set, policy: JWTPolicy(), now: now)
    }
    guard case .failure(let refusal) = result else {
      throw FuzzViolation("a token with a 3-byte signature was accepted")
    }
    try checkReason(refusal, token: token)
  }

  // MARK: - Tokens

  static func policy(_ control: UInt8) -> JWTPolicy {
    let leeway: [Int64] = [0, 30, 3600, .max]
    let algorithms: [Set<JWTAlgorithm>] = [
      Set(JWTAlgorithm.allCases), [.es256], [.edDSA], [.rs256, .rs384, .rs512, .ps256],
    ]
    return JWTPolicy(
      issuer: control & 2 != 0 ? issuer : nil, audiences: control & 2 != 0 ? [audience] : [],
      algorithms: algorithms[Int(control >> 4) & 3], leewaySeconds: leeway[Int(control >> 2) & 3])
  }

  static func checkToken(_ token: UnsafeRawBufferPointer, control: UInt8) throws(FuzzViolation) {
    let policy = policy(control)
    let first = JWTVerifier.verify(token, keys: keys, policy: policy, now: now)
    let second = JWTVerifier.verify(token, keys: keys, policy: policy, now: now)
    switch (first, second) {
    case (.failure(let refusal), .failure(let again)):
      try require(refusal == again, "verified twice: \(refusal) then \(again)")
      try checkReason(refusal, token: Array(token))
    case (.success(let verified), .success(let again)):
      try require(verified.expiresAt == again.expiresAt, "verified twice: different exp")
      try checkAccepted(verified, token: token, policy: policy)
    case (.success, .failure(let refusal)), (.failure(let refusal), .success):
      throw FuzzViolation("verified twice: accepted once and refused once (\(refusal))")
    }
  }

  static func checkAccepted(_ verified: VerifiedToken, token: UnsafeRawBufferPointer, policy: JWTPolicy)
    throws(FuzzViolation)
  {
    let (limit, overflow) = verified.expiresAt.addingReportingOverflow(policy.leewaySeconds)
    try require(overflow || now <= limit, "accepted a token that expired at \(verified.expiresAt)")
    try require(token.count <= JWTVerifier.maxTokenBytes, "accepted a token of \(token.count) bytes")
    try require(verified.hasScopes(verified.scopes) && verified.hasScopes([]), "hasScopes denies its own scopes")
    for name in ["sub", "iss", "aud", "exp", "scope", "scp", "x", "nbf", "iat", "missing"] {
      switch verified.claimText(name) {
      case .absent: break
      case .value(let text):
        try require(text.count <= 1024, "claim \(name) of \(text.count) bytes")
        try require(!text.contains { $0 < 0x20 || $0 == 0x7F }, "claim \(name) has a control byte")
      case .refused(let reason):
        try require(reason.utf8.count <= 40, "claim refusal too long: \(reason)")
      }
    }
    if let subject = verified.subject {
      if case .value(let text) = verified.claimText("sub") {
        try require(text == subject, "claimText(sub) differs from subject")
      }
    }
    let cache = JWTVerificationCache(capacity: 2)
    cache.insert(token, provider: 1, verified: verified, leewaySeconds: policy.leewaySeconds)
    try require(cache.lookUp(token, provider: 1, now: now) != nil, "the cache lost a token it was given")
    try require(cache.lookUp(token, provider: 2, now: now) == nil, "the cache gave a token to another provider")
    cache.removeAll(provider: 1)
    try require(cache.lookUp(token, provider: 1, now: now) == nil, "removeAll(provider:) kept a token")
  }

  /// The reason is short printable ASCII and repeats nothing of the token, raw or decoded.
  static func checkReason(_ refusal: JWTRefusal, token: [UInt8]) throws(FuzzViolation) {
    let reason = Array(refusal.reason.utf8)
    try require(reason.count <= 80, "reason too long: \(refusal.reason)")
    try require(reason.allSatisfy { (0x20..<0x7F).contains($0) }, "reason not printable ASCII: \(refusal)")
    var sources = [token]
    for part in token.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) {
      if let decoded = decodeBase64URL(part) { sources.append(decoded) }
    }
    guard reason.count >= echoWindow else { return }
    for start in 0...(reason.count - echoWindow) {
      let window = reason[start..<(start + echoWindow)]
      for source in sources where contains(source, window) {
        throw FuzzViolation("reason \(refusal.reason.debugDescription) repeats input bytes")
      }
    }
  }

  static func contains(_ haystack: [UInt8], _ needle: ArraySlice<UInt8>) -> Bool {
    guard haystack.count >= needle.count, let first = needle.first else { return false }
    for start in 0...(haystack.count - needle.count) where haystack[start] == first {
      if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
    }
    return false
  }

  /// A lenient base64url decoder (padding and bad bytes skipped): what a log reader could
  /// decode from a token, so the echo check also covers decoded header and payload text.
  static func decodeBase64URL(_ text: ArraySlice<UInt8>) -> [UInt8]? {
    var output: [UInt8] = []
    var accumulator: UInt32 = 0
    var bits = 0
    for byte in text {
      let value: UInt32
      switch byte {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(byte - UInt8(ascii: "A"))
      case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(byte - UInt8(ascii: "a")) + 26
      case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(byte - UInt8(ascii: "0")) + 52
      case UInt8(ascii: "-"), UInt8(ascii: "+"): value = 62
      case UInt8(ascii: "_"), UInt8(ascii: "/"): value = 63
      default: continue
      }
      accumulator = (accumulator << 6) | value
      bits += 6
      if bits >= 8 {
        bits -= 8
        output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
      }
    }
    return output.isEmpty ? nil : output
  }
}
