/// `shared` (Docs/shared-tier.md): the Redis or Valkey server replicas pool stale answers and rate-limit
/// counters through. Absent: no shared tier, and nothing needs Redis (the embedded default).
public struct SharedTierConfig: Sendable, Equatable {
  public let url: SharedTierURL
  /// `shared.password`; replaces the URL's password when set (so the URL can stay in a
  /// ConfigMap and the password in a Secret). Nil when unset or empty.
  public let password: SecretValue?
  /// Put before every key the gateway writes (`gatehouse:`), so several gateways or other
  /// programs can share one database.
  public let prefix: String
  /// Every command's deadline: the most a request ever waits for the shared tier.
  public let timeout: Duration
  /// Answers larger than this (status, headers and body encoded) are not written.
  public let maxEntryBytes: Int
  /// A CA file that verifies a `rediss://` server; nil trusts the system's CAs.
  public let caFile: String?

  public init(
    url: SharedTierURL, password: SecretValue? = nil, prefix: String = Self.defaultPrefix,
    timeout: Duration = Self.defaultTimeout, maxEntryBytes: Int = Self.defaultMaxEntryBytes, caFile: String? = nil
  ) {
    self.url = url
    self.password = password
    self.prefix = prefix
    self.timeout = timeout
    self.maxEntryBytes = maxEntryBytes
    self.caFile = caFile
  }

  public static let defaultPrefix = "gatehouse:"
  public static let defaultTimeout = Duration.milliseconds(50)
  public static let defaultMaxEntryBytes = 1 << 20
  /// Below the client's 8 MiB reply bound, so any entry written can be read back.
  static let maxEntryBytesLimit = 7 << 20
  /// A request waits at most this long; more would defeat "never delays a request".
  static let timeoutLimitMilliseconds = 5_000
  static let prefixLimitBytes = 128
}

extension ConfigDecoder {
  func decodeShared(_ field: ConfigField?) -> SharedTierConfig? {
    guard let field, let object = field.object() else { return nil }
    var url: SharedTierURL?
    if let urlField = object.requiredField("url"), let text = urlField.nonEmptyString() {
      do {
        url = try SharedTierURL(parsing: text)
      } catch {
        // The problem text never repeats the password (SharedTierURL's contract).
        urlField.report(error.problem)
      }
    }
    let password = object.field("password")?.string().flatMap { $0.isEmpty ? nil : SecretValue($0) }
    var prefix = SharedTierConfig.defaultPrefix
    if let prefixField = object.field("prefix"), let text = prefixField.string() {
      if text.utf8.count > SharedTierConfig.prefixLimitBytes {
        prefixField.report("must be at most \(SharedTierConfig.prefixLimitBytes) bytes")
      } else if text.utf8.contains(where: { $0 < 0x21 || $0 == 0x7F }) {
        prefixField.report("must not contain spaces or control characters")
      } else {
        prefix = text
      }
    }
    let timeout =
      object.field("timeout_ms")?.integer(in: 1...SharedTierConfig.timeoutLimitMilliseconds).map {
        Duration.milliseconds($0)
      } ?? SharedTierConfig.defaultTimeout
    let maxEntryBytes =
      object.field("max_entry_bytes")?.integer(in: 1...SharedTierConfig.maxEntryBytesLimit)
      ?? SharedTierConfig.defaultMaxEntryBytes
    var caFile: String?
    if let caField = object.field("ca"), let path = caField.nonEmptyString() {
      if let url, !url.usesTLS {
        caField.report("is only used with rediss:// (TLS); the url is redis://")
      }
      caFile = path
    }
    object.finishReading()
    guard let url else { return nil }
    return SharedTierConfig(
      url: url, password: password, prefix: prefix, timeout: timeout, maxEntryBytes: maxEntryBytes, caFile: caFile)
  }
}
