import CGatehouseLinux

/// The process heap, as far as the gateway needs to steer it.
public enum Heap {
  /// Hands freed pages back to the kernel. glibc keeps freed memory for reuse, so after a
  /// burst of large buffers the resident size would stay at the burst's peak; call it
  /// rarely (it walks every arena).
  public static func returnFreePages() {
    _ = gh_return_free_heap()
  }

  /// Buffers of this size or more get pages of their own, handed back to the kernel when
  /// freed.
  public static let ownPagesBytes: Int32 = 256 * 1024

  /// Large buffers (an answer held whole, a client's queue) are mapped on their own and
  /// unmapped when freed. glibc otherwise raises its mmap threshold each time such a buffer
  /// is freed (up to 32 MiB), after which buffers of several megabytes come from the heap
  /// and their pages stay resident once freed: a burst of answers held for clients that do
  /// not read would leave the process at the burst's size, past `limits.buffered_bytes`.
  /// Buffers on the request path are far smaller, so they keep the heap's speed.
  public static func keepLargeBuffersOffTheHeap() {
    _ = gh_fix_mmap_threshold(ownPagesBytes)
  }
}
