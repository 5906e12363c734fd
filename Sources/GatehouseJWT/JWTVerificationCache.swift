import CGatehouseOpenSSL

/// Tokens one event loop has already verified, so a client's next request with the same token
/// costs a hash instead of a signature check. A class owned by one loop: not Sendable, no locks.
///
/// Keyed by a hash of the token AND the provider index: a token good for one provider is not
/// good for another. An entry lives until its token's `exp` plus the leeway it was verified
/// with; the least recently used entry goes first when the cache is full. Lookups, inserts and
/// evictions are O(1): a dictionary into an array of entries threaded on a doubly linked list.
///
/// Why SHA-256 truncated to 128 bits: a client chooses the token bytes, so a hash it could
/// make collide cheaply (FNV, a seeded 64-bit hash whose seed leaks) would let one token hit
/// another's entry and borrow its identity. Finding two tokens with equal 128-bit truncations
/// of SHA-256 takes about 2^64 work; OpenSSL's SHA-256 costs about a microsecond for a typical
/// token, against the tens of microseconds of a signature check it saves. The whole 128 bits
/// (and the provider) are compared on a hit, not only the dictionary's own hash.
public final class JWTVerificationCache {
  private struct Key: Hashable {
    var high: UInt64
    var low: UInt64
    var provider: Int
  }

  private struct Entry {
    var key: Key
    var token: VerifiedToken
    /// `exp` plus the leeway: a lookup later than this misses.
    var validUntil: Int64
    /// Neighbours in recency order (`newest` … `oldest`), -1 at the ends.
    var newer: Int
    var older: Int
  }

  public let capacity: Int
  private var slots: [Key: Int] = [:]
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
    let key = Self.key(token, provider: provider)
    guard let slot = slots[key] else { return nil }
    if now > entries[slot].validUntil {
      remove(slot)
      return nil
    }
    moveToNewest(slot)
    return entries[slot].token
  }

  /// Remembers a token `JWTVerifier.verify` accepted for `provider` with that provider's leeway.
  public func insert(_ token: UnsafeRawBufferPointer, provider: Int, verified: VerifiedToken, leewaySeconds: Int64) {
    guard capacity > 0 else { return }
    let key = Self.key(token, provider: provider)
    let (validUntil, overflow) = verified.expiresAt.addingReportingOverflow(max(0, leewaySeconds))
    let until = overflow ? Int64.max : validUntil
    if let slot = slots[key] {
      entries[slot].token = verified
      entries[slot].validUntil = until
      moveToNewest(slot)
      return
    }
    if slots.count >= capacity { remove(oldest) }
    let entry = Entry(key: key, token: verified, validUntil: until, newer: -1, older: -1)
    let slot: Int
    if let free = freeSlots.popLast() {
      slot = free
      entries[slot] = entry
    } else {
      slot = entries.count
      entries.append(entry)
    }
    slots[key] = slot
    linkAsNewest(slot)
  }

  /// Forgets every token of `provider` (its keys changed: a removed key must stop vouching).
  public func removeAll(provider: Int) {
    var slot = newest
    while slot >= 0 {
      let next = entries[slot].older
      if entries[slot].key.provider == provider { remove(slot) }
      slot = next
    }
  }

  // MARK: - The list

  private func remove(_ slot: Int) {
    unlink(slot)
    slots[entries[slot].key] = nil
    // Drop the claims now rather than when the slot is reused.
    entries[slot].token = VerifiedToken(subject: nil, expiresAt: 0, scopes: [])
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

  private static func key(_ token: UnsafeRawBufferPointer, provider: Int) -> Key {
    var digest = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
    withUnsafeMutableBytes(of: &digest) { output in
      _ = SHA256(
        token.baseAddress?.assumingMemoryBound(to: UInt8.self), token.count,
        output.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }
    return Key(high: digest.0, low: digest.1, provider: provider)
  }
}
