import Dispatch
import Synchronization

/// What a purge removes.
enum PurgeTarget: Sendable {
  case id(String)
  case prefix(String)
  case all
}

/// A one-shot reply slot for work whose caller waits on the writer (purges, flush).
final class WriterReply<Value: Sendable>: Sendable {
  private let value = Mutex<Value?>(nil)
  private let done = DispatchSemaphore(value: 0)

  func fulfil(_ result: Value) {
    value.withLock { $0 = result }
    done.signal()
  }

  func wait() -> Value {
    done.wait()
    return value.withLock { $0! }
  }
}

/// A cache write as handed over by the request path; hashing and encoding happen on the
/// writer thread so the request path only copies references.
struct PendingCacheWrite: Sendable {
  var key: CacheKey
  var status: Int
  var headers: StoredHeaders
  var body: [UInt8]
  /// When the answer was first stored elsewhere (an answer read from the shared tier keeps
  /// its age); nil: now.
  var storedAtMs: Int64? = nil
}

/// New headers and age for a stored answer the upstream confirmed unchanged (a `304` to a
/// conditional request): the body row is not rewritten.
struct PendingRenewal: Sendable {
  var id: String
  var headers: StoredHeaders
}

/// A stored row whose body no longer matches its digest, or whose headers do not decode,
/// as a reader saw it: removed only while it is still that row (same digest and status),
/// so an answer stored since is kept.
struct DamagedEntry: Sendable {
  var id: String
  var bodySHA256: [UInt8]
  var status: Int64
}

/// A token row ready to store (already encrypted when a key is configured).
struct PendingToken: Sendable {
  var name: String
  var value: [UInt8]
  var nonce: [UInt8]?
  var tag: [UInt8]?
  var encrypted: Bool
  var expiresAtMs: Int64?
  var refreshedAtMs: Int64?
  var state: String
  var lastError: String?
}

/// Work for the writer thread, applied in queue order.
enum WriterItem: Sendable {
  /// Remember an answer (bounded: dropped when the queue is full).
  case cache(PendingCacheWrite)
  /// Renew a stored answer's headers and age (bounded like `cache`).
  case renew(PendingRenewal)
  /// Last-access times recorded by readers, id → ms (bounded).
  case touches([String: Int64])
  /// A reader found this row damaged (bounded: when dropped, the next read finds it again).
  case discardDamaged(DamagedEntry)
  /// Store a token (not bounded: rare, and losing one costs a fresh login).
  case token(PendingToken)
  case deleteToken(String)
  /// Store an identity provider's signing keys (not bounded: one per fetch that changed them).
  case keySet(StoredKeySet)
  /// Purge and reply with the number of entries removed (not bounded).
  case purge(PurgeTarget, WriterReply<Result<Int, StoreError>>)
  /// Reply once everything queued before has been committed (not bounded).
  case barrier(WriterReply<Void>)
  /// A new `max_bytes` from a config reload; evicts down to it (not bounded).
  case setMaxBytes(Int64)
  /// SQL run on the writer's connection in queue order (not bounded). Only tests use it:
  /// some settings, such as `PRAGMA max_page_count`, exist per connection.
  case execute(String)
  /// Commit what is queued, checkpoint, close the connection and end the thread.
  case stop
}

/// The bounded queue between every thread and the writer. `enqueue` never blocks beyond
/// the short Mutex section: when the bounded items reach capacity the item is refused.
final class WriterQueue: Sendable {
  enum EnqueueResult: Sendable {
    case accepted
    case full
    case closed
  }

  private struct State {
    var items: [WriterItem] = []
    /// Bounded items waiting (cache writes and touches); control items do not count.
    var boundedCount = 0
    /// Body and header bytes of the cache writes waiting.
    var pendingBytes = 0
    /// The writer found the queue empty and is about to wait on `wake`.
    var writerSleeping = false
    var closed = false
  }

  let capacity: Int
  /// Bound on the bytes held by waiting cache writes: a count alone would let 4096 large
  /// bodies pile up in memory while the disk is slow.
  let maxPendingBytes: Int
  private let state = Mutex(State())
  // A semaphore rather than a condition variable: the Mutex from Synchronization has no
  // condition, and a semaphore signalled only when the writer announced it sleeps never
  // accumulates more than one spare permit (which costs one extra loop turn).
  private let wake = DispatchSemaphore(value: 0)

  init(capacity: Int, maxPendingBytes: Int) {
    self.capacity = max(1, capacity)
    self.maxPendingBytes = max(1, maxPendingBytes)
  }

  private static func weight(_ item: WriterItem) -> Int {
    switch item {
    case .cache(let write):
      return write.body.count + write.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 8 }
    case .renew(let renewal):
      return renewal.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 8 }
    case .touches, .discardDamaged, .token, .deleteToken, .keySet, .purge, .barrier, .setMaxBytes, .execute, .stop:
      return 0
    }
  }

  func enqueue(_ item: WriterItem) -> EnqueueResult {
    let bounded: Bool
    switch item {
    case .cache, .renew, .touches, .discardDamaged: bounded = true
    case .token, .deleteToken, .keySet, .purge, .barrier, .setMaxBytes, .execute, .stop: bounded = false
    }
    let weight = Self.weight(item)
    let (result, signal) = state.withLock { state -> (EnqueueResult, Bool) in
      if state.closed { return (.closed, false) }
      if bounded {
        if state.boundedCount >= capacity { return (.full, false) }
        // One write larger than the byte bound still goes through when the queue is empty.
        if weight > 0 && state.pendingBytes > 0 && state.pendingBytes + weight > maxPendingBytes {
          return (.full, false)
        }
        state.boundedCount += 1
        state.pendingBytes += weight
      }
      if case .stop = item { state.closed = true }
      state.items.append(item)
      let signal = state.writerSleeping
      state.writerSleeping = false
      return (.accepted, signal)
    }
    if signal { wake.signal() }
    return result
  }

  /// Up to `limit` items in order, or nil when there are none (then the writer is marked
  /// sleeping and must call `waitForWork`).
  func take(limit: Int) -> [WriterItem]? {
    state.withLock { state -> [WriterItem]? in
      if state.items.isEmpty {
        state.writerSleeping = true
        return nil
      }
      let batch: [WriterItem]
      if state.items.count <= limit {
        batch = state.items
        state.items = []
      } else {
        batch = Array(state.items.prefix(limit))
        state.items.removeFirst(limit)
      }
      for item in batch {
        switch item {
        case .cache, .renew, .touches, .discardDamaged:
          state.boundedCount -= 1
          state.pendingBytes -= Self.weight(item)
        case .token, .deleteToken, .keySet, .purge, .barrier, .setMaxBytes, .execute, .stop: break
        }
      }
      return batch
    }
  }

  /// Sleeps until an item arrives or `timeoutMs` passes; returns false on timeout.
  func waitForWork(timeoutMs: Int) -> Bool {
    wake.wait(timeout: .now() + .milliseconds(timeoutMs)) == .success
  }

  var depth: Int { state.withLock { $0.items.count } }
}

/// Counters shared by the writer, the readers and `Store.stats()`; atomics so no thread
/// ever waits to count.
final class StoreCounters: Sendable {
  let entries = Atomic<Int64>(0)
  let bytes = Atomic<Int64>(0)
  let writes = Atomic<Int64>(0)
  let unchangedWrites = Atomic<Int64>(0)
  let droppedWrites = Atomic<Int64>(0)
  let evictions = Atomic<Int64>(0)
  let oversizeSkipped = Atomic<Int64>(0)
  let readErrors = Atomic<Int64>(0)
  let writeErrors = Atomic<Int64>(0)
  let droppedTouches = Atomic<Int64>(0)
  let pendingTokenWrites = Atomic<Int64>(0)
  /// The `max_bytes` in force (a reload may change it).
  let maxBytes: Atomic<Int64>

  init(maxBytes: Int64) { self.maxBytes = Atomic(maxBytes) }
}
