/// A header list as stored: name and value pairs in the order given.
public typealias StoredHeaders = [(name: String, value: String)]

/// A stored answer, as the request path needs it to serve it stale or fresh.
public struct StoredAnswer: Sendable {
  /// The backend's status code.
  public var status: Int
  /// The backend's answer headers as handed to `Store.remember`.
  public var headers: StoredHeaders
  /// The body bytes.
  public var body: [UInt8]
  /// When the answer was last stored (or confirmed unchanged), ms since the Unix epoch.
  public var storedAtMs: Int64
  /// The body's SHA-256 as stored and checked on reading it from the file; nil for an answer
  /// that did not come from the file (one just received, or from the shared tier).
  public var bodyDigest: [UInt8]?

  public init(status: Int, headers: StoredHeaders, body: [UInt8], storedAtMs: Int64, bodyDigest: [UInt8]? = nil) {
    self.status = status
    self.headers = headers
    self.body = body
    self.storedAtMs = storedAtMs
    self.bodyDigest = bodyDigest
  }
}

/// A stored answer without its body (`StoreReader.lookupHead`): what a large entry's
/// answer to a HEAD, or to a condition it meets, needs, at the cost of a row's head.
public struct StoredAnswerHead: Sendable {
  public var status: Int
  public var headers: StoredHeaders
  public var storedAtMs: Int64
  public var bodyCount: Int
  /// The SHA-256 the body was stored with (not checked: the body is not read).
  public var bodyDigest: [UInt8]

  public init(status: Int, headers: StoredHeaders, storedAtMs: Int64, bodyCount: Int, bodyDigest: [UInt8]) {
    self.status = status
    self.headers = headers
    self.storedAtMs = storedAtMs
    self.bodyCount = bodyCount
    self.bodyDigest = bodyDigest
  }
}

/// One row of the admin listing (no headers or body).
public struct CacheEntrySummary: Sendable, Equatable {
  public var id: String
  public var method: String
  public var upstream: String
  public var path: String
  public var query: String
  public var status: Int
  /// Stored size (headers + body), what `max_bytes` counts.
  public var bytes: Int64
  public var storedAtMs: Int64
  public var lastAccessMs: Int64
  /// The vary headers and client id part of the key (`CacheKey.varyPart`).
  public var vary: String = ""
}

/// A page of the admin listing. `nextCursor` is nil on the last page.
public struct CacheEntryPage: Sendable {
  public var entries: [CacheEntrySummary]
  /// Opaque; pass it back unchanged to get the next page.
  public var nextCursor: String?
}

/// One entry with everything stored for it (admin `GET /admin/cache/entries/{id}`).
public struct CacheEntryDetail: Sendable {
  public var summary: CacheEntrySummary
  /// The vary headers and client id part of the key, as in `CacheKey.varyPart`.
  public var vary: String
  public var headers: StoredHeaders
  public var body: [UInt8]
  /// Lowercase hex SHA-256 of the body.
  public var bodySHA256: String
}

/// Counters and sizes for `GET /admin/cache` and the metrics. Hits, stale answers, misses
/// and bypasses are decided by the caller and counted there.
public struct StoreStats: Sendable, Equatable {
  /// Entries in the store after the last committed batch.
  public var entries: Int64
  /// Stored bytes (headers + bodies) after the last committed batch.
  public var bytes: Int64
  public var maxBytes: Int64
  /// Entries inserted or rewritten.
  public var writes: Int64
  /// Writes whose body had the stored hash and status: only `stored_at` was refreshed.
  public var unchangedWrites: Int64
  /// Writes refused because the queue was full (or the store was closing).
  public var droppedWrites: Int64
  /// Entries removed to stay under `max_bytes`.
  public var evictions: Int64
  /// Entries larger than `max_bytes` on their own, never stored.
  public var oversizeSkipped: Int64
  /// Lookups that failed inside SQLite (busy, I/O, damaged row) and were answered as a miss,
  /// and readers that could not be opened (`Store.makeReader`).
  public var readErrors: Int64
  /// Cache writes lost because their batch failed to commit (token writes are kept and
  /// retried instead, see `pendingTokenWrites`).
  public var writeErrors: Int64
  /// Batches of recorded accesses dropped because the queue was full (LRU gets less exact).
  public var droppedTouches: Int64
  /// Items waiting for the writer when the stats were taken.
  public var queueDepth: Int
  /// Token writes whose commit failed, kept and retried until one succeeds (0 while
  /// commits work).
  public var pendingTokenWrites: Int64
}

/// What the writer reports as it happens (`Store.Configuration.onEvent`), for the caller's
/// log: the store has no logger of its own. Called on the writer thread, so a handler must
/// be short and must not call back into the store.
public enum StoreEvent: Sendable, Equatable {
  /// A commit failed after the ones before it had worked: writes are not reaching the file.
  /// `error` describes the failure (SQLite's message, never a stored value);
  /// `pendingTokenWrites` are the token writes kept for a retry.
  case writesFailing(error: String, pendingTokenWrites: Int)
  /// A commit wrote to the file again after `failedCommits` failed ones.
  case writesRecovered(failedCommits: Int)
  /// The store closed while these tokens' writes had still not been committed (names only).
  case tokenWritesLost(names: [String])
}

/// A token as persisted. State names are the caller's (`valid`, `expiring`, ...); the store
/// keeps them as given.
public struct StoredToken: Sendable, Equatable {
  public var name: String
  public var value: String
  public var expiresAtMs: Int64?
  public var refreshedAtMs: Int64?
  public var state: String
  public var lastError: String?

  public init(
    name: String, value: String, expiresAtMs: Int64?, refreshedAtMs: Int64?, state: String, lastError: String?
  ) {
    self.name = name
    self.value = value
    self.expiresAtMs = expiresAtMs
    self.refreshedAtMs = refreshedAtMs
    self.state = state
    self.lastError = lastError
  }
}

/// What `Store.loadTokens` found: readable tokens, and one warning per token that could not
/// be used (treat it as `missing`). Warnings never contain token values.
public struct TokenLoadResult: Sendable {
  public var tokens: [StoredToken]
  public var warnings: [String]
  /// Tokens whose stored value could not be read (encrypted with another `secret_key`, or
  /// with none set now): their rows must be left as they are until a new value replaces
  /// them, so a start with the right key finds the value again.
  public var unreadable: Set<String> = []
}

/// The header list encoding in the `headers` column: per header a 4-byte big-endian name
/// length, the name, a 4-byte value length, the value. Length-prefixed so any byte is safe
/// and decoding needs no parsing rules.
enum HeaderBlock {
  static func encode(_ headers: StoredHeaders) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(headers.reduce(0) { $0 + 8 + $1.name.utf8.count + $1.value.utf8.count })
    func append(_ text: String) {
      let count = UInt32(text.utf8.count)
      out += [UInt8(count >> 24), UInt8((count >> 16) & 0xFF), UInt8((count >> 8) & 0xFF), UInt8(count & 0xFF)]
      out += text.utf8
    }
    for header in headers {
      append(header.name)
      append(header.value)
    }
    return out
  }

  /// nil when the bytes are not a valid block (a damaged row).
  static func decode(_ bytes: [UInt8]) -> StoredHeaders? {
    var headers: StoredHeaders = []
    var index = 0
    func next() -> String? {
      guard bytes.count - index >= 4 else { return nil }
      let count =
        Int(bytes[index]) << 24 | Int(bytes[index + 1]) << 16 | Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
      index += 4
      guard bytes.count - index >= count else { return nil }
      defer { index += count }
      return String(decoding: bytes[index..<index + count], as: UTF8.self)
    }
    while index < bytes.count {
      guard let name = next(), let value = next() else { return nil }
      headers.append((name: name, value: value))
    }
    return headers
  }
}

/// An identity provider's signing keys as last fetched (a JWKS document, public data: not
/// encrypted).
public struct StoredKeySet: Sendable, Equatable {
  public let provider: String
  /// The `jwks_url` they came from: keys of another URL are not restored.
  public let source: String
  public let jwks: [UInt8]
  public let fetchedAtMs: Int64

  public init(provider: String, source: String, jwks: [UInt8], fetchedAtMs: Int64) {
    self.provider = provider
    self.source = source
    self.jwks = jwks
    self.fetchedAtMs = fetchedAtMs
  }
}
