import Glibc

/// Bytes waiting for the socket to take them, kept as the caller's own array slices: queueing an `[UInt8]`
/// or `ArraySlice<UInt8>` shares its storage (no copy), and a partial write just narrows the first slice.
struct WriteQueue {
  /// How many chunks one flush hands to sendmsg at most.
  static let maxVectors = 16

  private var chunks: [ArraySlice<UInt8>] = []
  private var head = 0
  private(set) var byteCount = 0

  var isEmpty: Bool { head == chunks.count }
  var chunkCount: Int { chunks.count - head }

  mutating func append(_ chunk: ArraySlice<UInt8>) {
    guard !chunk.isEmpty else { return }
    chunks.append(chunk)
    byteCount += chunk.count
  }

  /// Drops `written` bytes from the front.
  mutating func consume(_ written: Int) {
    precondition(written <= byteCount)
    var remaining = written
    while remaining > 0 {
      let first = chunks[head].count
      if remaining >= first {
        chunks[head] = []  // release the storage now, not when the array is compacted
        head += 1
        remaining -= first
      } else {
        let start = chunks[head].startIndex + remaining
        chunks[head] = chunks[head][start...]
        remaining = 0
      }
    }
    byteCount -= written
    if head == chunks.count {
      chunks.removeAll(keepingCapacity: true)
      head = 0
    } else if head >= 32, head * 2 >= chunks.count {
      chunks.removeFirst(head)
      head = 0
    }
  }

  mutating func removeAll() {
    chunks.removeAll()
    head = 0
    byteCount = 0
  }

  /// Calls `body` with the first chunk's bytes.
  func withFirstChunk<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
    chunks[head].withUnsafeBytes(body)
  }

  /// Calls `body` with iovecs for up to `maxVectors` chunks, and the byte count they cover.
  ///
  /// The pointers come from nested `withUnsafeBytes` calls (one level per chunk), which is the way to keep
  /// several arrays' storage pinned at once without copying them.
  func withIOVecs<Result>(_ body: (UnsafeMutableBufferPointer<iovec>, Int) -> Result) -> Result {
    let count = min(chunkCount, WriteQueue.maxVectors)
    return withUnsafeTemporaryAllocation(of: iovec.self, capacity: count) { vectors in
      pin(from: 0, count: count, vectors: vectors, total: 0, body)
    }
  }

  private func pin<Result>(
    from index: Int, count: Int, vectors: UnsafeMutableBufferPointer<iovec>, total: Int,
    _ body: (UnsafeMutableBufferPointer<iovec>, Int) -> Result
  ) -> Result {
    if index == count { return body(vectors, total) }
    return chunks[head + index].withUnsafeBytes { bytes in
      vectors[index] = iovec(
        iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
      return pin(from: index + 1, count: count, vectors: vectors, total: total + bytes.count, body)
    }
  }
}
