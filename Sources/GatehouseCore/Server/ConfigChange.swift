import GatehouseConfig

/// What a config means for the running process beyond its snapshot, at start (`old` nil) or
/// on a reload: the settings kept until a restart, and whether to say that the admin API has
/// no token. A pure value of the two configs, so the rules are unit-tested without a
/// gateway; `GatewayServer` logs what it says.
struct ConfigChange: Equatable {
  /// Config keys whose new value waits for the next start, in a fixed order, so one log line
  /// names them all.
  let awaitingRestart: [String]
  /// True when the admin API has no token now and had one before (or this is the start):
  /// every protected endpoint then answers 401. Said once, not on every reload without one.
  let adminTokenMissing: Bool
  /// True when the admin listener that runs is reachable from other machines and the admin
  /// token is short enough to guess (`isShortAdminToken`). A warning, not a refusal: configs
  /// that ran before keep running. Said at start and on every reload while it holds.
  let adminTokenShort: Bool

  /// Below this many characters a token on a non-loopback listener is warned about. 16 is
  /// the floor of what could be random enough; the warning asks for 32.
  static let shortAdminTokenLength = 16

  /// `running` is what the process runs with for the settings kept until a restart (the
  /// config it started with); without it, `old`. A change still waiting is named again on
  /// each reload, and one reverted to what runs is not named.
  init(from old: GatehouseConfig?, to new: GatehouseConfig, running: GatehouseConfig? = nil) {
    adminTokenMissing = new.admin.token == nil && (old.map { $0.admin.token != nil } ?? true)
    // The listener keeps the address it started with (`admin.listen` waits for a restart).
    let listen = (running ?? old ?? new).admin.listen
    adminTokenShort = Self.isShortAdminToken(new.admin.token, on: listen)
    guard let old = running ?? old else {
      awaitingRestart = []
      return
    }
    var keys: [String] = []
    // The event loops (and their listeners, pools and store readers) are made at start.
    if new.workers != old.workers { keys.append("workers") }
    // The admin listener keeps its socket: moving it would drop the connection that may
    // have asked for this reload, and a failed bind would leave no admin API at all.
    if new.admin.listen != old.admin.listen { keys.append("admin.listen") }
    // Moving live data to another file, or re-encrypting stored tokens, is a restart's job.
    if new.store.path != old.store.path { keys.append("store.path") }
    if new.store.secretKey != old.store.secretKey { keys.append("store.secret_key") }
    awaitingRestart = keys
  }

  /// Whether `token` on a listener at `listen` deserves the short-token warning: only off
  /// loopback (a local token guards against local users only), and only when one is set
  /// (a missing token has a warning of its own).
  static func isShortAdminToken(_ token: SecretValue?, on listen: ListenAddress) -> Bool {
    guard let token, !listen.isLoopback else { return false }
    return token.value.count < shortAdminTokenLength
  }
}
