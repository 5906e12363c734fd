#if canImport(Glibc)
  import Glibc
#endif

/// Tokens one event loop has already verified, so a client's next request with the same token
/// costs a hash instead of a signature check. A class owned by one loop: not Sendable, no locks.
///
/// Keyed by the token's bytes AND the provider index: a token good for one provider is not
/// good for another. An entry lives until its token's `exp` plus the leeway it was verified
/// with; the least recently used entry goes first when the cache is full. Lookups, inserts and
/// evictions are O(1): a dictionary into an array of entries threaded on a doubly linked list.
///
/// Why the whole token is kept and compared: a client chooses the token bytes, so equal
/// hashes must never be enough for a hit (one token would borrow another's identity). The
/// dictionary is keyed by Swift's `Hasher` (SipHash with a seed drawn at process start, which
/// a client never sees) of the token's signature end (`hashedTailBytes`), so a client cannot
/// aim at another token's bucket; a hit is then confirmed by comparing every byte. This
/// costs a fraction of a cryptographic digest of the token, on every request of every
/// signed-in client.
public final class JWTVerificationCache {
  private struct Entry {
    /// `Self.hash` of the token and provider: the entry's key in `slots`.
    var hash: Int
    var provider: Int
    /// The key set the token was verified with (`keys` of `insert`).
    var keys: UInt64
    var tokenBytes: [UInt8]
    var token: VerifiedToken
    /// What the caller derived from the token once (see `insert`).
    var attachment: AnyObject?
    /// `exp` plus the leeway: a lookup later than this misses.
    var validUntil: Int64
    /// Neighbours in recency order (`newest` … `oldest`), -1 at the ends.
    var newer: Int
    var older: Int
  }

  public let capacity: Int
  private var slots: [Int: Int] = [:]
  private var entries: [Entry] = []
  private var freeSlots: [Int] = []
  private var newest = -1
  private var oldest = -1

  /// `capacity` entries at most (0 or less caches nothing).
  public init(capacity: Int) {
    self.capacity = max(0, capacity)
    slots.reserveCapacity(min(self.capacity, 1 << 16))
  }

  /// The number of entries held (expired ones included until they are looked up or evicted).
  public var count: Int { slots.count }

  /// The verified token for these bytes and this provider, unless it has expired by `now`.
  public func lookUp(_ token: UnsafeRawBufferPointer, provider: Int, now: Int64) -> VerifiedToken? {
    lookUpEntry(token, provider: provider, keys: 0, now: now)?.token
  }

  /// `lookUp`, with what the caller attached when it inserted the token. `keys` names the
  /// key set it must have been verified with (a generation the caller keeps): a token
  /// verified with keys since replaced is verified again.
  public func lookUpEntry(_ token: UnsafeRawBufferPointer, provider: Int, keys: UInt64, now: Int64) -> (
    token: VerifiedToken, attachment: AnyObject?
  )? {
    guard let slot = slots[Self.hash(token, provider: provider)], matches(slot, token, provider, keys) else {
      return nil
    }
    if now > entries[slot].validUntil {
      remove(slot)
      return nil
    }
    moveToNewest(slot)
    return (entries[slot].token, entries[slot].attachment)
  }

  /// Remembers a token `JWTVerifier.verify` accepted for `provider` with that provider's leeway.
  /// `attachment`: what the caller derives from the token and the provider alone (forwarded
  /// claims, say), handed back by `lookUpEntry` so it is derived once per token.
  public func insert(
    _ token: UnsafeRawBufferPointer, provider: Int, keys: UInt64 = 0, verified: VerifiedToken, leewaySeconds: Int64,
    attachment: AnyObject? = nil
  ) {
    guard capacity > 0 else { return }
    let hash = Self.hash(token, provider: provider)
    let (validUntil, overflow) = verified.expiresAt.addingReportingOverflow(max(0, leewaySeconds))
    let until = overflow ? Int64.max : validUntil
    if let slot = slots[hash] {
      // The same token again, or (rarely) another one with the same hash: it takes the slot.
      entries[slot].provider = provider
      entries[slot].keys = keys
      entries[slot].tokenBytes = Array(token)
      entries[slot].token = verified
      entries[slot].attachment = attachment
      entries[slot].validUntil = until
      moveToNewest(slot)
      return
    }
    if slots.count >= capacity { remove(oldest) }
    let entry = Entry(
      hash: hash, provider: provider, keys: keys, tokenBytes: Array(token), token: verified, attachment: attachment,
      validUntil: until, newer: -1, older: -1)
    let slot: Int
    if let free = freeSlots.popLast() {
      slot = free
      entries[slot] = entry
    } else {
      slot = entries.count
      entries.append(entry)
    }
    slots[hash] = slot
    linkAsNewest(slot)
  }

  /// Forgets every token.
  public func removeAll() {
    slots.removeAll(keepingCapacity: true)
    entries.removeAll(keepingCapacity: true)
    freeSlots.removeAll(keepingCapacity: true)
    newest = -1
    oldest = -1
  }

  /// Forgets every token of `provider` (its keys changed: a removed key must stop vouching).
  public func removeAll(provider: Int) {
    var slot = newest
    while slot >= 0 {
      let next = entries[slot].older
      if entries[slot].provider == provider { remove(slot) }
      slot = next
    }
  }

  // MARK: - The list

  private func remove(_ slot: Int) {
    unlink(slot)
    slots[entries[slot].hash] = nil
    // Drop the claims and the token now rather than when the slot is reused.
    entries[slot].token = VerifiedToken(subject: nil, expiresAt: 0, scopes: [])
    entries[slot].tokenBytes = []
    entries[slot].attachment = nil
    freeSlots.append(slot)
  }

  private func moveToNewest(_ slot: Int) {
    guard slot != newest else { return }
    unlink(slot)
    linkAsNewest(slot)
  }

  private func linkAsNewest(_ slot: Int) {
    entries[slot].newer = -1
    entries[slot].older = newest
    if newest >= 0 { entries[newest].newer = slot }
    newest = slot
    if oldest < 0 { oldest = slot }
  }

  private func unlink(_ slot: Int) {
    let (newer, older) = (entries[slot].newer, entries[slot].older)
    if newer >= 0 { entries[newer].older = older } else { newest = older }
    if older >= 0 { entries[older].newer = newer } else { oldest = newer }
    entries[slot].newer = -1
    entries[slot].older = -1
  }

  /// The token's end is its signature: bytes no two verified tokens share, which a client
  /// cannot make another verified token's without the signer's key. Hashing the last 32 of
  /// them (and the length) finds the entry; the whole token is compared on a hit anyway,
  /// so a crafted token with a borrowed end only misses.
  static let hashedTailBytes = 32

  private static func hash(_ token: UnsafeRawBufferPointer, provider: Int) -> Int {
    var hasher = Hasher()
    hasher.combine(provider)
    hasher.combine(token.count)
    let tail = max(0, token.count - hashedTailBytes)
    hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: token[tail...]))
    return hasher.finalize()
  }

  /// Whether the entry in `slot` is this token's, byte for byte.
  private func matches(_ slot: Int, _ token: UnsafeRawBufferPointer, _ provider: Int, _ keys: UInt64) -> Bool {
    guard entries[slot].provider == provider, entries[slot].keys == keys, entries[slot].tokenBytes.count == token.count
    else { return false }
    return entries[slot].tokenBytes.withUnsafeBytes { stored in
      token.isEmpty || memcmp(stored.baseAddress!, token.baseAddress!, token.count) == 0
    }
  }
}
