import GatehouseConfig

/// What `gatehouse check` adds to decoding: the files a valid config names that `serve`
/// would fail to load (certificates, keys, CA bundles), read and parsed as `serve` does, so
/// a pre-flight `check` catches them. Host names are not resolved: that needs the network
/// `serve` runs in.
public enum ConfigFileCheck {
  public static func problems(_ config: GatehouseConfig) -> [String] {
    var problems: [String] = []
    for (index, listen) in config.listen.enumerated() {
      guard let tls = listen.tls else { continue }
      do {
        _ = try GatewayServer.serverTLS(tls)
      } catch {
        problems.append("listen[\(index)].tls: \(error)")
      }
    }
    if let tls = config.admin.tls {
      do {
        _ = try GatewayServer.serverTLS(tls)
      } catch {
        problems.append("admin.tls: \(error)")
      }
    }
    for upstream in config.upstreams where upstream.url.scheme == .https {
      do {
        _ = try UpstreamPlan.clientTLS(upstream.tls, host: upstream.url.host, handshakeTimeout: .seconds(1))
      } catch {
        problems.append("upstreams.\(upstream.name).tls: \(error)")
      }
    }
    return problems
  }
}
