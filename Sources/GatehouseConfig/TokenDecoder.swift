import GatehouseHTTP

/// Decodes `tokens`. It reports only through the fields it reads, so it needs no state of
/// its own.
enum TokenDecoder {
  /// `tokens`: an object from name to a token whose `type` decides the other keys.
  /// No message here quotes a value: any of them may be a credential.
  static func decode(_ field: ConfigField) -> [TokenConfig] {
    guard let object = field.object() else { return [] }
    return object.allFields().compactMap { name, tokenField in
      if let problem = ConfigName.problem(name) { tokenField.report(problem) }
      guard let token = tokenField.object() else { return nil }
      let source = decodeTokenSource(token)
      return source.map { TokenConfig(name: name, source: $0) }
    }
  }

  private enum TokenType {
    case fixed
    case file
    case oauth2ClientCredentials
  }

  private static func decodeTokenSource(_ token: ConfigObjectReader) -> TokenSource? {
    let type = token.requiredField("type")?.enumeration([
      "static": TokenType.fixed, "file": .file, "oauth2_client_credentials": .oauth2ClientCredentials,
    ])
    guard let type else {
      // Without a known type there is no list of allowed keys to check the others against.
      return nil
    }
    switch type {
    case .fixed:
      let valueField = token.requiredField("value")
      var value = valueField?.string()
      if let text = value, let problem = HTTPFieldSyntax.headerValueProblem(text) {
        valueField?.report(problem)
        value = nil
      }
      token.finishReading(kind: "a \"static\" token")
      return value.map { .fixed(SecretValue($0)) }
    case .file:
      let path = token.requiredField("path")?.nonEmptyString()
      token.finishReading(kind: "a \"file\" token")
      return path.map { .file(path: $0) }
    case .oauth2ClientCredentials:
      let tokenURL = token.requiredField("token_url").flatMap { $0.httpURL() }
      let clientIDField = token.requiredField("client_id")
      var clientID = clientIDField?.nonEmptyString()
      // The client id goes into an HTTP Basic header, so it has the same limits as a header value.
      if let id = clientID, let problem = HTTPFieldSyntax.headerValueProblem(id) {
        clientIDField?.report(problem)
        clientID = nil
      }
      let secretField = token.requiredField("client_secret")
      var secret = secretField?.nonEmptyString()
      if let text = secret, let problem = HTTPFieldSyntax.headerValueProblem(text) {
        secretField?.report(problem)
        secret = nil
      }
      let scope = token.field("scope")?.string()
      let refreshBefore = token.field("refresh_before_s")?.seconds() ?? .seconds(60)
      token.finishReading(kind: "an \"oauth2_client_credentials\" token")
      guard let tokenURL, let clientID, let secret else { return nil }
      return .oauth2ClientCredentials(
        OAuth2ClientCredentialsConfig(
          tokenURL: tokenURL, clientID: clientID, clientSecret: SecretValue(secret),
          scope: scope.flatMap { $0.isEmpty ? nil : $0 }, refreshBefore: refreshBefore))
    }
  }
}
