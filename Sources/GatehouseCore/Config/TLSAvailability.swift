/// The one place that refuses TLS settings while the gateway has no TLS support.
///
/// The model and the decoder accept TLS fully (https URLs, `tls` blocks), so when TLS
/// streams exist, deleting this file and its single call in `ConfigDecoder.decode` is the
/// whole change on the config side.
enum TLSAvailability {
  static func reportUnsupportedTLS(in config: GatehouseConfig, to diagnostics: ConfigDiagnostics) {
    for (index, listener) in config.listen.enumerated() where listener.tls != nil {
      diagnostics.report(
        ConfigPath.root.appending(key: "listen").appending(index: index).appending(key: "tls"),
        "TLS listeners need TLS support, not available yet")
    }
    for upstream in config.upstreams where upstream.url.scheme == .https {
      diagnostics.report(
        ConfigPath.root.appending(key: "upstreams").appending(key: upstream.name).appending(key: "url"),
        "https upstreams need TLS support, not available yet")
    }
    for token in config.tokens {
      guard case .oauth2ClientCredentials(let oauth2) = token.source, oauth2.tokenURL.scheme == .https else {
        continue
      }
      diagnostics.report(
        ConfigPath.root.appending(key: "tokens").appending(key: token.name).appending(key: "token_url"),
        "https token_url needs TLS support, not available yet")
    }
  }
}
