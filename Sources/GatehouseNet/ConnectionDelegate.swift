/// Why a connection ended; delivered exactly once through `connection(_:didCloseWith:)`.
public enum ConnectionCloseReason: Sendable, Equatable {
  /// The owner called `close()` (and the queue was flushed) or `abort()`.
  case closedByOwner
  /// Both directions finished without an error: end of input was read and output was shut down, or the
  /// kernel reported a hang-up after end of input.
  case hangup
  /// A read, write or connect failed (ECONNRESET, ECONNREFUSED, EPIPE, ETIMEDOUT…).
  case failed(SystemError)
  /// An outbound connect did not finish within its timeout.
  case connectTimedOut
  /// The event loop stopped while the connection was open.
  case loopStopped
  /// TLS failed: the handshake (including certificate verification, see `TLSError.Kind`), its deadline, or
  /// the session afterwards. A reset or refused socket underneath is still `.failed`.
  case tlsFailed(TLSError)
}

/// Queue sizes at which the owner is told to stop and to resume producing (see `ConnectionDelegate`).
public struct WriteWatermarks: Sendable, Equatable {
  /// Told "drained" when the queue falls to this size or below after having been above `high`.
  public var low: Int
  /// Told "above high watermark" when the queue grows past this size.
  public var high: Int

  public init(low: Int = 16 * 1024, high: Int = 64 * 1024) {
    precondition(low >= 0 && low <= high, "need 0 <= low <= high")
    self.low = low
    self.high = high
  }
}

/// The owner of a `BufferedConnection`. Every method is called on the connection's loop.
///
/// The connection keeps its delegate alive until it has delivered `didCloseWith`, then lets go of it, so an
/// owner that holds its connections strongly forms a cycle that ends exactly when the connection does.
public protocol ConnectionDelegate: AnyObject {
  /// An outbound connect finished; queued writes are being sent.
  func connectionDidConnect(_ connection: BufferedConnection)
  /// Bytes arrived. `bytes` points into the loop's shared read buffer: valid only during this call.
  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer)
  /// The peer will send nothing more (FIN). Writing may go on. The default closes gracefully.
  func connectionDidReadEOF(_ connection: BufferedConnection)
  /// The write queue grew past the high watermark: stop producing (e.g. pause reading the other side).
  /// May be called from inside `write`.
  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection)
  /// The write queue fell to the low watermark after being above the high one: produce again.
  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection)
  /// The connection is closed and its descriptor released. Always the last call, exactly once, and always
  /// from the loop, never from inside a method the owner called.
  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason)
}

extension ConnectionDelegate {
  public func connectionDidConnect(_ connection: BufferedConnection) {}
  public func connectionDidReadEOF(_ connection: BufferedConnection) { connection.close() }
  public func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {}
  public func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {}
}
