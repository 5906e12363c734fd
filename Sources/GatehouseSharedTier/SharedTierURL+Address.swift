import GatehouseConfig
import GatehouseNet

extension SharedTierURL {
  /// The address when the host is an IP literal or `localhost`; nil for a name, which the caller
  /// resolves off the loops (as upstream hosts are) before building a `RedisConnection`.
  public var literalAddress: SocketAddress? {
    let text = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    return try? SocketAddress(parsing: text)
  }
}
