/// Identifies a scheduled timer so it can be cancelled; stale handles (fired or cancelled) are harmless.
public struct TimerHandle: Hashable, Sendable {
  let slot: UInt32
  let generation: UInt32
}

/// A min-heap of deadlines with true O(log n) cancellation.
///
/// Why not lazy deletion: connect and idle timeouts are cancelled far more often than they fire, and a heap
/// that keeps cancelled entries until their deadline grows with the request rate. Each timer lives in a slot
/// that remembers its heap position, so cancel removes it at once; the slot's generation makes old handles
/// miss after the slot is reused.
struct TimerQueue<Action> {
  struct Entry {
    var deadline: UInt64 = 0
    /// Breaks deadline ties in scheduling order, so equal deadlines fire first-in first-out.
    var sequence: UInt64 = 0
    var heapIndex: Int = -1
    var generation: UInt32 = 0
    var action: Action?
  }

  private(set) var entries: [Entry] = []
  private var heap: [UInt32] = []
  private var freeSlots: [UInt32] = []
  private var nextSequence: UInt64 = 0

  var count: Int { heap.count }
  var isEmpty: Bool { heap.isEmpty }

  /// The earliest deadline, if any timer is pending.
  var nearestDeadline: UInt64? {
    heap.first.map { entries[Int($0)].deadline }
  }

  mutating func schedule(deadline: UInt64, _ action: Action) -> TimerHandle {
    let slot: UInt32
    if let reused = freeSlots.popLast() {
      slot = reused
    } else {
      slot = UInt32(entries.count)
      entries.append(Entry())
    }
    nextSequence &+= 1
    entries[Int(slot)].deadline = deadline
    entries[Int(slot)].sequence = nextSequence
    entries[Int(slot)].action = action
    entries[Int(slot)].heapIndex = heap.count
    heap.append(slot)
    siftUp(heap.count - 1)
    return TimerHandle(slot: slot, generation: entries[Int(slot)].generation)
  }

  /// Removes a pending timer; false if it already fired or was cancelled.
  @discardableResult
  mutating func cancel(_ handle: TimerHandle) -> Bool {
    let slot = Int(handle.slot)
    guard slot < entries.count, entries[slot].generation == handle.generation, entries[slot].heapIndex >= 0
    else {
      return false
    }
    removeFromHeap(at: entries[slot].heapIndex)
    release(slot: handle.slot)
    return true
  }

  /// Takes the earliest timer whose deadline is at or before `now`.
  mutating func popExpired(now: UInt64) -> Action? {
    guard let top = heap.first, entries[Int(top)].deadline <= now else { return nil }
    let action = entries[Int(top)].action
    removeFromHeap(at: 0)
    release(slot: top)
    return action
  }

  /// Drops every pending timer (used when a loop stops, to release what the actions captured).
  mutating func removeAll() {
    for slot in heap { release(slot: slot) }
    heap.removeAll()
  }

  private mutating func release(slot: UInt32) {
    entries[Int(slot)].action = nil
    entries[Int(slot)].heapIndex = -1
    entries[Int(slot)].generation &+= 1
    freeSlots.append(slot)
  }

  private func isEarlier(_ a: UInt32, _ b: UInt32) -> Bool {
    // Field by field, so comparing does not copy (and retain) the entries' actions.
    let first = entries[Int(a)].deadline
    let second = entries[Int(b)].deadline
    return first != second ? first < second : entries[Int(a)].sequence < entries[Int(b)].sequence
  }

  private mutating func removeFromHeap(at index: Int) {
    let last = heap.count - 1
    if index != last {
      heap.swapAt(index, last)
      entries[Int(heap[index])].heapIndex = index
    }
    heap.removeLast()
    if index < heap.count {
      siftDown(index)
      siftUp(index)
    }
  }

  private mutating func siftUp(_ start: Int) {
    var index = start
    while index > 0 {
      let parent = (index - 1) / 2
      guard isEarlier(heap[index], heap[parent]) else { break }
      heap.swapAt(index, parent)
      entries[Int(heap[index])].heapIndex = index
      entries[Int(heap[parent])].heapIndex = parent
      index = parent
    }
  }

  private mutating func siftDown(_ start: Int) {
    var index = start
    while true {
      let left = 2 * index + 1
      let right = left + 1
      var smallest = index
      if left < heap.count, isEarlier(heap[left], heap[smallest]) { smallest = left }
      if right < heap.count, isEarlier(heap[right], heap[smallest]) { smallest = right }
      if smallest == index { break }
      heap.swapAt(index, smallest)
      entries[Int(heap[index])].heapIndex = index
      entries[Int(heap[smallest])].heapIndex = smallest
      index = smallest
    }
  }
}
