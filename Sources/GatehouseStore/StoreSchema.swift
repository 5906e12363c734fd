/// The store's tables, connection settings and ordered migrations.
///
/// `PRAGMA user_version` holds the number of the last migration applied; each migration runs
/// in its own transaction together with the version bump, so a crash leaves the file either
/// before or after it. Add migrations at the end; never edit one that has shipped.
enum StoreSchema {
  /// Marks the file as ours ("GATE"), so a foreign SQLite file at the configured path is
  /// moved aside instead of having our tables added to it.
  static let applicationID: Int64 = 0x4741_5445

  static let migrations: [String] = [
    // 1: cache entries and tokens.
    """
    CREATE TABLE cache_entries (
      id TEXT NOT NULL UNIQUE,          -- hex SHA-256 of the canonical cache key
      method TEXT NOT NULL,
      upstream TEXT NOT NULL,
      path TEXT NOT NULL,               -- upstream path, no query
      query TEXT NOT NULL,              -- sorted query
      vary TEXT NOT NULL,               -- vary headers and client id part of the key
      status INTEGER NOT NULL,
      headers BLOB NOT NULL,            -- HeaderBlock encoding
      body BLOB NOT NULL,
      body_sha256 BLOB NOT NULL,
      bytes INTEGER NOT NULL,           -- headers + body bytes, what max_bytes counts
      stored_at INTEGER NOT NULL,       -- ms since the Unix epoch
      last_access INTEGER NOT NULL      -- ms since the Unix epoch
    );
    CREATE INDEX cache_entries_lru ON cache_entries(last_access);
    CREATE INDEX cache_entries_path ON cache_entries(path, id);
    CREATE TABLE tokens (
      name TEXT PRIMARY KEY NOT NULL,
      value BLOB NOT NULL,              -- ciphertext when encrypted = 1, else UTF-8 plaintext
      nonce BLOB,                       -- 12 random bytes per write when encrypted
      tag BLOB,                         -- 16-byte GCM tag when encrypted
      encrypted INTEGER NOT NULL,
      expires_at INTEGER,               -- ms since the Unix epoch
      refreshed_at INTEGER,             -- ms since the Unix epoch
      state TEXT NOT NULL,
      last_error TEXT
    );
    """,
    // 2: identity providers' signing keys (JWKS documents as fetched), so a restart while
    // the provider is down still verifies tokens.
    """
    CREATE TABLE key_sets (
      provider TEXT PRIMARY KEY NOT NULL,
      source TEXT NOT NULL,             -- the jwks_url they came from
      jwks BLOB NOT NULL,
      fetched_at INTEGER NOT NULL       -- ms since the Unix epoch
    );
    """,
  ]

  static var currentVersion: Int64 { Int64(migrations.count) }

  /// Indexes only reads need, made at every open when missing rather than by a migration:
  /// a file that has them still opens with an older build (which keeps them up to date
  /// without knowing them), and one without them is only slower to read.
  ///
  /// `cache_entries_head` holds the columns stored after the body: SQLite reaches them in a
  /// row by walking the body's overflow pages (milliseconds for a body of megabytes), in the
  /// index directly (`StoreReader.lookupHead`).
  static let readIndexes = """
    CREATE INDEX IF NOT EXISTS cache_entries_head ON cache_entries(id, stored_at, body_sha256);
    """

  static func addReadIndexes(_ db: SQLiteConnection) throws(StoreError) {
    try db.inTransaction { () throws(StoreError) in try db.execute(readIndexes) }
  }

  /// Settings for the writer connection. WAL lets readers run beside the writer;
  /// synchronous=NORMAL in WAL mode loses nothing on a process crash (only on power loss,
  /// where the last transactions may roll back), which suits a cache.
  static func configureWriter(_ db: SQLiteConnection) throws(StoreError) {
    let mode = try db.strings("PRAGMA journal_mode = WAL")
    guard mode.first?.lowercased() == "wal" else {
      throw StoreError(kind: .sqlite, message: "could not switch to WAL (journal_mode is \(mode.first ?? "?"))")
    }
    try db.execute(
      """
      PRAGMA synchronous = NORMAL;
      PRAGMA foreign_keys = ON;
      PRAGMA journal_size_limit = 67108864;
      PRAGMA wal_autocheckpoint = 1000;
      """)
  }

  /// Applies missing migrations; refuses files from a newer schema and foreign databases.
  static func migrate(_ db: SQLiteConnection) throws(StoreError) {
    let version = try db.scalarInt("PRAGMA user_version") ?? 0
    let appID = try db.scalarInt("PRAGMA application_id") ?? 0
    if version == 0 {
      let objects = try db.scalarInt("SELECT count(*) FROM sqlite_schema") ?? 0
      if objects > 0 || (appID != 0 && appID != applicationID) {
        throw StoreError(kind: .corrupt, message: "not a Gatehouse store (foreign SQLite database)")
      }
    } else if appID != applicationID {
      throw StoreError(kind: .corrupt, message: "not a Gatehouse store (application_id \(appID))")
    }
    if version > currentVersion {
      throw StoreError(
        kind: .unsupportedSchema,
        message: "store schema version \(version) is newer than this build knows (\(currentVersion))")
    }
    for index in Int(version)..<migrations.count {
      try db.inTransaction { () throws(StoreError) in
        try db.execute(migrations[index])
        try db.execute("PRAGMA user_version = \(index + 1); PRAGMA application_id = \(applicationID)")
      }
    }
  }
}
