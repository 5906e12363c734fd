import CGatehouseLinux

/// The process heap, as far as the gateway needs to steer it.
public enum Heap {
  /// Hands freed pages back to the kernel. glibc keeps freed memory for reuse, so after a
  /// burst of large buffers the resident size would stay at the burst's peak; call it
  /// rarely (it walks every arena).
  public static func returnFreePages() {
    _ = gh_return_free_heap()
  }
}
