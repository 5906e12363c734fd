import GatehouseConfig

/// Settings that work but leave a secret less protected than the operator may think; each is
/// logged as a warning at start, never refused (a test setup or a closed network may want
/// them).
public enum StartupWarnings {
  /// The shortest `store.secret_key` not warned about. The encryption key is derived with
  /// HKDF, which adds no entropy: whoever reads the file can try short secrets offline.
  static let minimumSecretKeyLength = 32

  /// One line per warning, in a fixed order. `storeOpen`: the store is in use, so token
  /// values are written to its file.
  static func messages(for config: GatehouseConfig, storeOpen: Bool) -> [String] {
    secretWarnings(for: config, storeOpen: storeOpen).map { "\($0.path) \($0.problem)" }
  }

  /// What `messages` says, with the key each is about.
  static func secretWarnings(for config: GatehouseConfig, storeOpen: Bool) -> [ConfigWarning] {
    var warnings: [ConfigWarning] = []
    if storeOpen {
      if let key = config.store.secretKey {
        if key.value.count < minimumSecretKeyLength {
          warnings.append(
            ConfigWarning(
              path: "store.secret_key", problem: "is short; use \(minimumSecretKeyLength) random characters or more"))
        }
      } else if persistsTokenValues(config) {
        warnings.append(
          ConfigWarning(path: "store.secret_key", problem: "is not set: token values are stored unencrypted"))
      }
    }
    // The admin token (and token values set through the admin API) would cross the network
    // in clear; a loopback listener, or one behind TLS, keeps them on the machine or sealed.
    if !config.admin.listen.isLoopback && config.admin.tls == nil {
      warnings.append(
        ConfigWarning(
          path: "admin.listen",
          problem: "\(config.admin.listen) is not loopback and admin.tls is not set: "
            + "the admin token travels unencrypted (keep the port on a private network)"))
    }
    for token in config.tokens {
      guard case .oauth2ClientCredentials(let oauth2) = token.source else { continue }
      // RFC 6749 §2.3.1 asks for TLS: the client secret goes in the request's Authorization.
      // A loopback endpoint never leaves the machine (tests, a local sidecar).
      if oauth2.tokenURL.scheme == .http && !oauth2.tokenURL.hostIsLoopback {
        warnings.append(
          ConfigWarning(
            path: "tokens.\(token.name).token_url", problem: "is http://: the client secret travels unencrypted"))
      }
    }
    return warnings
  }

  /// Everything `serve` would warn about when it starts with `config` (the store opening, as
  /// it normally does), then what `ConfigLint` finds: what `gatehouse check` prints, so a
  /// config that passes `check` quietly also starts quietly.
  public static func checkWarnings(for config: GatehouseConfig) -> [ConfigWarning] {
    var warnings: [ConfigWarning] = []
    // `GatewayServer` logs "TLS certificate verification is off for an upstream".
    for upstream in config.upstreams where upstream.url.scheme == .https && upstream.tls?.verify == false {
      warnings.append(
        ConfigWarning(
          path: "upstreams.\(upstream.name).tls.verify",
          problem: "is false: the upstream's certificate is not checked, so anyone on the path can answer for it"))
    }
    warnings += secretWarnings(for: config, storeOpen: true)
    // `ConfigChange.adminTokenMissing` and `adminTokenShort`, logged by `GatewayServer.run`.
    if config.admin.token == nil {
      warnings.append(
        ConfigWarning(
          path: "admin.token", problem: "is not set: the admin API's protected endpoints answer 401 to every request"))
    }
    if ConfigChange.isShortAdminToken(config.admin.token, on: config.admin.listen) {
      warnings.append(
        ConfigWarning(
          path: "admin.token",
          problem: "is short for a non-loopback listener; use 32 random characters or more"))
    }
    return warnings + ConfigLint.warnings(for: config)
  }

  /// Whether some token value may be written to the store: an oauth2 token's fetched values
  /// always are, and a value set through the admin API (`PUT /admin/tokens/<name>`, any
  /// token) is when the admin API is usable, that is with an admin token.
  static func persistsTokenValues(_ config: GatehouseConfig) -> Bool {
    let fetches = config.tokens.contains { token in
      if case .oauth2ClientCredentials = token.source { return true }
      return false
    }
    return fetches || (!config.tokens.isEmpty && config.admin.token != nil)
  }
}
