import GatehouseNet
import GatehouseStore

/// Whoever is using a leased upstream connection: a client session's exchange or a
/// background refresh. Every call comes from the connection's loop.
protocol UpstreamExchangeOwner: AnyObject {
  /// Returns how many of `bytes` belonged to this exchange's answer: fewer than all when
  /// its answer ended and the rest is the next pipelined request's.
  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer) -> Int
  func upstreamDidReadEOF(_ upstream: UpstreamConnection)
  func upstreamDidClose(_ upstream: UpstreamConnection, reason: ConnectionCloseReason)
  /// The request body is arriving faster than the upstream takes it (or has caught up).
  func upstreamWantsClientPaused(_ paused: Bool)
  /// This exchange's request was pipelined behind an answer after which `upstream` ended:
  /// it was not answered there and should be sent again.
  func upstreamDroppedQueuedRequest(_ upstream: UpstreamConnection)
  /// Which try of its request a lease now is (1 for the first), for `UpstreamAttempt`.
  var upstreamTryNumber: Int { get }
}

/// One connection to an upstream. While leased it belongs to the exchange whose answer is
/// being read, which gets everything it reads; exchanges whose requests were pipelined
/// behind wait in `pipeline`. While idle, anything it reads ends it.
final class UpstreamConnection: ConnectionDelegate {
  /// Strong: a pool retired by a reload must outlive its last connection's close callback.
  /// The cycle (idle list ↔ connection) ends when the connection closes.
  let pool: UpstreamPool
  var connection: BufferedConnection?
  /// The exchange whose answer is being read; nil while idle.
  var owner: (any UpstreamExchangeOwner)?
  /// Exchanges whose requests were written after the owner's, in order.
  var pipeline = PipelineQueue<any UpstreamExchangeOwner>()
  /// Exchanges completed on this connection; above zero means a reused connection.
  var useCount = 0
  /// The store key of the last answer stored from this connection: forgotten if the
  /// connection later sends bytes nobody asked for (that answer may have been another's).
  var lastStoredKey: CacheKey?
  /// The last answer was HTTP/1.1 (pipelining is an HTTP/1.1 feature).
  var lastAnswerWasHTTP11 = false
  /// The answer before the one now read left the connection in doubt (`UpstreamAnswerDoubt`):
  /// this one may be what the backend sent after it, and is not stored.
  var followsDoubtfulAnswer = false
  /// Pipelined requests of this loop turn, sent together at its end.
  private var gathered: [UInt8] = []
  private var sendScheduled = false

  /// The endpoint this connection goes to.
  let endpoint: EndpointID
  /// The try on `endpoint` in flight on this connection (see `UpstreamPool.startAttempt`),
  /// with what its exchange reported of it so far; nil while idle.
  var attempt: UpstreamAttempt?

  init(pool: UpstreamPool, endpoint: EndpointID) {
    self.pool = pool
    self.endpoint = endpoint
  }

  var acceptsPipelinedRequest: Bool {
    owner != nil && connection?.isClosed == false && !pipeline.spoiled && !pool.retired
  }

  /// Keeps a pipelined request to send with the others of this loop turn.
  func gather(_ bytes: UnsafeRawBufferPointer) {
    gathered.append(contentsOf: bytes)
    guard !sendScheduled else { return }
    sendScheduled = true
    pool.context.loop.executeLater { [self] in sendGathered() }
  }

  /// Sends what was gathered now (the scheduled send then finds nothing).
  func sendGathered() {
    sendScheduled = false
    guard !gathered.isEmpty else { return }
    if let connection { gathered.withUnsafeBytes { _ = connection.write($0) } }
    gathered.removeAll(keepingCapacity: true)
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    var rest = bytes
    while let owner {
      let used = owner.upstreamDidRead(self, rest)
      guard used < rest.count, self.connection === connection else { return }
      // The rest is the next pipelined answer; an owner that kept the connection without
      // taking all the bytes would be a bug, and the bytes are not trusted then.
      guard self.owner !== owner else { break }
      rest = UnsafeRawBufferPointer(rebasing: rest[used...])
    }
    // An idle keep-alive connection must stay silent; bytes here mean it cannot be trusted.
    pool.strayBytesSeen(on: self)
    pool.idleConnectionEnded(self)
    connection.abort()
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    guard let owner else {
      pool.idleConnectionEnded(self)
      connection.close()
      return
    }
    owner.upstreamDidReadEOF(self)
  }

  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    owner?.upstreamWantsClientPaused(true)
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    owner?.upstreamWantsClientPaused(false)
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    pool.connectionClosed()
    if let owner {
      owner.upstreamDidClose(self, reason: reason)
    } else {
      pool.idleConnectionEnded(self)
    }
  }
}
