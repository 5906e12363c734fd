import GatehouseHTTP
import GatehouseJSON
import GatehouseJWT

/// Decodes `jwt` (Docs/jwt.md) and a route's `jwt` block.
enum JWTDecoder {
  /// Algorithms a provider may name. HMAC is left out on purpose: a gateway holding an HMAC
  /// secret could mint tokens, and a verifier that accepts HS256 next to RS256 is the
  /// classic algorithm-confusion hole (the public key used as the secret).
  static let algorithmNames: KeyValuePairs<String, JWTAlgorithm> = [
    "RS256": .rs256, "RS384": .rs384, "RS512": .rs512, "PS256": .ps256, "ES256": .es256, "ES384": .es384,
    "EdDSA": .edDSA,
  ]

  static func decode(_ field: ConfigField) -> JWTConfig {
    guard let object = field.object() else { return .none }
    var providers: [JWTProviderConfig] = []
    if let providersField = object.requiredField("providers"), let members = providersField.object() {
      for (name, providerField) in members.allFields() {
        if let problem = ConfigName.problem(name) { providerField.report(problem) }
        if let provider = decodeProvider(name: name, providerField) { providers.append(provider) }
      }
      members.finishReading()
    }
    object.finishReading()
    return JWTConfig(providers: providers)
  }

  private static func decodeProvider(name: String, _ field: ConfigField) -> JWTProviderConfig? {
    guard let object = field.object() else { return nil }
    let issuer = object.field("issuer")?.nonEmptyString()
    let urlField = object.field("jwks_url")
    var url = urlField?.httpURL()
    // Keys fetched in clear could be swapped on the way, and whoever swaps them signs in as
    // anyone: https, except on this machine (a sidecar, a test identity provider).
    if let fetched = url, fetched.scheme == .http, !Self.isLoopbackHost(fetched.host) {
      urlField?.report(
        "must be https: signing keys fetched in clear could be replaced on the way (http only for loopback hosts)")
      url = nil
    }
    let keysField = object.field("keys")
    var inlineKeys: [UInt8]?
    if let keysField {
      inlineKeys = decodeInlineKeys(keysField)
    }
    if urlField != nil, keysField != nil {
      keysField?.report("give either jwks_url or keys, not both")
    } else if urlField == nil, keysField == nil {
      object.diagnostics.report(
        object.path.appending(key: "jwks_url"), "missing: a provider needs jwks_url or keys")
    }
    let audiences = object.field("audiences")?.stringArray() ?? []
    var algorithms: [JWTAlgorithm] = JWTAlgorithm.allCases
    if let algorithmsField = object.field("algorithms"), let elements = algorithmsField.array() {
      if elements.isEmpty { algorithmsField.report("must list at least one algorithm") }
      algorithms = []
      for element in elements {
        if case .string(let text) = element.value, text == "none" || text.hasPrefix("HS") {
          element.report(
            "\(text) is never accepted: only signatures with a public key (RS, PS, ES, EdDSA) prove who signed")
          continue
        }
        guard let algorithm = element.enumeration(algorithmNames) else { continue }
        if algorithms.contains(algorithm) {
          element.report("\(algorithm.rawValue) is listed twice")
        } else {
          algorithms.append(algorithm)
        }
      }
    }
    let leeway = object.field("leeway_s")?.integer(in: 0...3600) ?? 30
    let refresh = object.field("jwks_refresh_s")?.integer(in: 10...86_400) ?? 600
    var claims: [JWTProviderConfig.ForwardedClaim] = []
    if let claimsField = object.field("forward_claims"), let claimMembers = claimsField.object() {
      for (claim, headerField) in claimMembers.allFields() {
        guard let header = headerField.headerName() else { continue }
        if let problem = forwardedHeaderProblem(header) {
          headerField.report(problem)
        } else if let first = claims.first(where: {
          HTTPFieldSyntax.canonicalName($0.header) == HTTPFieldSyntax.canonicalName(header)
        }) {
          headerField.report("\(header) already carries the claim \"\(first.claim)\"")
        } else {
          claims.append(.init(claim: claim, header: header))
        }
      }
    }
    object.finishReading()
    let source: JWTProviderConfig.KeySource
    if let url {
      source = .url(url)
    } else if let inlineKeys {
      source = .inline(inlineKeys)
    } else {
      return nil
    }
    return JWTProviderConfig(
      name: name, issuer: issuer, keySource: source, audiences: audiences, algorithms: algorithms,
      leewaySeconds: Int64(leeway), jwksRefresh: .seconds(refresh), forwardClaims: claims)
  }

  /// `keys`: a JWKS object, checked now so a typo fails `gatehouse check` and not the first
  /// request.
  private static func decodeInlineKeys(_ field: ConfigField) -> [UInt8]? {
    guard case .object = field.value else {
      field.report("expected a JWKS object ({\"keys\": [...]}), got \(field.value.kindDescription)")
      return nil
    }
    let bytes = field.value.serializedBytes()
    do {
      let keys = try JWTKeySet(jwks: bytes)
      if keys.count == 0 {
        let skipped = keys.skipped.isEmpty ? "" : " (" + keys.skipped.joined(separator: "; ") + ")"
        field.report("holds no usable signing key" + skipped)
        return nil
      }
    } catch {
      field.report(error.description)
      return nil
    }
    return bytes
  }

  /// `localhost`, `::1`, or an IPv4 literal in 127.0.0.0/8 (not a name such as
  /// `127.example.com`).
  static func isLoopbackHost(_ host: String) -> Bool {
    if host == "localhost" || host == "::1" { return true }
    return host.hasPrefix("127.") && host.utf8.allSatisfy { $0 == UInt8(ascii: ".") || (0x30...0x39).contains($0) }
  }

  /// Why a claim may not travel in `header`: fields the gateway writes itself, framing, and
  /// the credentials it manages.
  static func forwardedHeaderProblem(_ header: String) -> String? {
    let canonical = HTTPFieldSyntax.canonicalName(header)
    if HeaderRuleSyntax.ManagedHeader(canonicalName: canonical) != nil {
      return "\(header) is managed by the gateway and cannot carry a claim"
    }
    if canonical == "authorization" || canonical == "cookie" {
      return "\(header) cannot carry a claim (the client's credentials never reach the backend)"
    }
    return nil
  }

  /// A route's `jwt`: `provider` must name one of `providers`.
  static func decodeRoute(_ field: ConfigField, providers: [String]) -> RouteJWTConfig? {
    guard let object = field.object() else { return nil }
    let providerField = object.requiredField("provider")
    let provider = providerField?.string()
    if let provider, let providerField, !providers.contains(provider) {
      providerField.report(RouteDecoder.unknownReference("jwt provider", provider, among: providers))
    }
    let required = object.field("required")?.bool() ?? true
    let scopes = object.field("scopes")?.stringArray() ?? []
    for (index, scope) in scopes.enumerated() where scope.isEmpty || scope.utf8.contains(0x20) {
      object.diagnostics.report(
        object.path.appending(key: "scopes").appending(index: index), "a scope is one word, without spaces")
    }
    object.finishReading()
    return provider.map { RouteJWTConfig(provider: $0, required: required, scopes: scopes) }
  }
}
