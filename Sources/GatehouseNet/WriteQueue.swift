import Glibc

/// Bytes waiting for the socket to take them, kept as the caller's own array slices: queueing an `[UInt8]`
/// or `ArraySlice<UInt8>` shares its storage (no copy), and a partial write just narrows the first slice.
/// It writes itself out to a plain socket or through TLS; what a failure means for the connection is
/// the caller's to decide.
struct WriteQueue {
  /// How many chunks one flush hands to sendmsg at most.
  static let maxVectors = 16
  /// Small queued chunks (an answer's head and the first body slice) are gathered into one TLS record of up
  /// to this size, so they cost one record header and one send instead of one each.
  static let tlsCoalescingLimit = 16 * 1024

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

  /// Writes queued bytes to `socket` until the queue is empty or the kernel is full, counting each system
  /// call in `attempts`. Throws the socket's error; what was written before it is consumed.
  mutating func write(to socket: TCPSocket, attempts: inout Int) throws(SystemError) {
    while !isEmpty {
      attempts += 1
      let attempted: Int
      let result: Result<IOResult<Int>, SystemError>
      if chunkCount == 1 {
        attempted = byteCount
        result = withFirstChunk { bytes in Result { () throws(SystemError) in try socket.write(bytes) } }
      } else {
        (result, attempted) = withIOVecs { vectors, total in
          (Result { () throws(SystemError) in try socket.write(iovecs: vectors) }, total)
        }
      }
      switch result {
      case .failure(let error):
        throw error
      case .success(.wouldBlock):
        return
      case .success(.processed(let written)):
        consume(written)
        // A short write means the send buffer is full; another try now would only return EAGAIN.
        if written != attempted { return }
      }
    }
  }

  /// Encrypts queued plaintext through `stream` record by record until the queue is empty (nil) or a
  /// `SSL_write` does not finish (its outcome), counting each call in `attempts`. Each chunk stays queued
  /// until SSL_write reports it done, so a retry after WANT_WRITE passes the same bytes.
  mutating func write(through stream: TLSStream, attempts: inout Int) -> TLSStream.Transfer? {
    while !isEmpty {
      attempts += 1
      let outcome: TLSStream.Transfer
      if chunkCount == 1 {
        outcome = withFirstChunk { stream.write($0) }
      } else {
        outcome = withIOVecs { vectors, _ in Self.writeCoalescing(vectors, through: stream) }
      }
      guard case .processed(let count) = outcome else { return outcome }
      consume(count)
    }
    return nil
  }

  /// Writes the first chunk as it is when it fills a record, or else the first chunks copied together (up to
  /// one record). The gathered prefix only grows as chunks are appended, which keeps retries valid.
  private static func writeCoalescing(_ vectors: UnsafeMutableBufferPointer<iovec>, through stream: TLSStream)
    -> TLSStream.Transfer
  {
    let limit = tlsCoalescingLimit
    if vectors[0].iov_len >= limit {
      return stream.write(UnsafeRawBufferPointer(start: vectors[0].iov_base, count: vectors[0].iov_len))
    }
    return withUnsafeTemporaryAllocation(byteCount: limit, alignment: 16) { scratch in
      var filled = 0
      for vector in vectors where filled < limit {
        let count = min(vector.iov_len, limit - filled)
        scratch.baseAddress!.advanced(by: filled).copyMemory(from: vector.iov_base!, byteCount: count)
        filled += count
      }
      return stream.write(UnsafeRawBufferPointer(rebasing: scratch[..<filled]))
    }
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
