/// The commands sent on one connection and still owed a reply, oldest first. Redis answers in
/// order, so each reply belongs to the first entry.
///
/// A command that times out keeps its place (its completion already called and dropped) until
/// its late reply arrives, since that reply must still be matched and thrown away. Deadlines
/// grow along the queue (one timeout per connection, sent in order), so the only deadline to
/// watch is that of the first entry not yet expired (`nextDeadline`).
struct PendingCommands {
  enum Purpose: Equatable {
    case caller
    case auth
    case select
    case ping
  }

  struct Entry {
    /// Nil once called (after a timeout).
    var completion: ((RedisReply) -> Void)?
    let purpose: Purpose
    /// Monotonic nanoseconds.
    let sentAt: UInt64
    let deadline: UInt64
  }

  private var entries: [Entry] = []
  private var head = 0
  /// Entries before this index have expired or been answered.
  private var firstUnexpired = 0

  var count: Int { entries.count - head }
  var isEmpty: Bool { head == entries.count }
  var first: Entry? { isEmpty ? nil : entries[head] }

  var nextDeadline: UInt64? {
    let index = max(head, firstUnexpired)
    return index < entries.count ? entries[index].deadline : nil
  }

  mutating func append(_ entry: Entry) {
    entries.append(entry)
  }

  mutating func popFirst() -> Entry? {
    guard head < entries.count else { return nil }
    let entry = entries[head]
    entries[head].completion = nil
    head += 1
    if head == entries.count {
      entries.removeAll(keepingCapacity: entries.capacity <= 1024)
      head = 0
      firstUnexpired = 0
    } else if head >= 64, head * 2 >= entries.count {
      entries.removeFirst(head)
      firstUnexpired = max(firstUnexpired - head, 0)
      head = 0
    }
    return entry
  }

  /// Marks every entry whose deadline is at or before `now` as expired and returns them, with
  /// their completions, for the caller to fail. Their places stay until their replies come.
  mutating func takeExpired(now: UInt64) -> [Entry] {
    var expired: [Entry] = []
    var index = max(head, firstUnexpired)
    while index < entries.count, entries[index].deadline <= now {
      expired.append(entries[index])
      entries[index].completion = nil
      index += 1
    }
    firstUnexpired = index
    return expired
  }

  /// Empties the queue, returning what was in it (for failing every command on a reset).
  mutating func removeAll() -> [Entry] {
    let taken = Array(entries[head...])
    entries.removeAll()
    head = 0
    firstUnexpired = 0
    return taken
  }
}
