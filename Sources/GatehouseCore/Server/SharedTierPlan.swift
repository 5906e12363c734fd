import GatehouseConfig
import GatehouseSharedTier
import GatehouseStore

/// `shared` ready for the loops: the connection settings with the host resolved and the TLS
/// context built (on the control side, never on a loop), the key prefix, and the sealer when
/// `store.secret_key` is set. Built with the snapshot; a reload that leaves `shared` and the
/// store key as they were keeps the same plan, so each loop keeps its connection.
final class SharedTierPlan: Sendable {
  let config: SharedTierConfig
  let connection: RedisConnection.Configuration
  let prefix: [UInt8]
  let sealer: SharedRecordSealer?
  let secretKey: SecretValue?
  /// For `/admin/status` and logs: the URL without its password.
  let redactedURL: String

  init(_ config: SharedTierConfig, secretKey: SecretValue?) throws(SnapshotError) {
    self.config = config
    let address = try UpstreamPlan.resolve(host: config.url.host, port: config.url.port)
    do {
      connection = try RedisConnection.Configuration(
        url: config.url, address: address, password: config.password?.value, commandTimeout: config.timeout,
        caFile: config.caFile)
    } catch {
      throw SnapshotError(description: "shared.ca: \(error)")
    }
    prefix = Array(config.prefix.utf8)
    self.secretKey = secretKey
    sealer = secretKey.map { SharedRecordSealer(secret: $0.value) }
    redactedURL = config.url.redacted
  }

  /// The plan for `config`: `previous` when nothing it was built from changed (a plain
  /// `redis://` one only: a `rediss://` CA file is read again, as upstreams' are).
  static func make(_ config: GatehouseConfig, previous: SharedTierPlan?) throws(SnapshotError) -> SharedTierPlan? {
    guard let shared = config.shared else { return nil }
    if let previous, previous.config == shared, previous.secretKey == config.store.secretKey, !shared.url.usesTLS {
      return previous
    }
    return try SharedTierPlan(shared, secretKey: config.store.secretKey)
  }

  /// `prefix` + `id`, as the command argument.
  func key(_ id: String) -> [UInt8] { prefix + Array(id.utf8) }

  /// The purge index's key (`SharedTierIndex`).
  var indexKey: [UInt8] { prefix + SharedTierIndex.keySuffix }
}
