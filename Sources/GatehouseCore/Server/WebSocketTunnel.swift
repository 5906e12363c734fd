import GatehouseNet

/// A client connection and an upstream connection joined as a byte tunnel after a WebSocket
/// handshake (Docs/websockets.md). Bytes pass as they come, never parsed: the frames are the two
/// peers' business. It is the delegate of both connections.
///
/// Backpressure: while one side's write queue is above its high watermark, the other side is
/// not read (its kernel buffer fills and TCP slows its peer), so a tunnel holds at most
/// about a watermark and one read per direction, whatever a peer sends.
///
/// Lifecycle: an end of input on one side is passed on as a half-close of the other
/// (shutdown of its write side once its queue is out); a side that closes takes the other
/// with it, after the other's queued bytes. Silence both ways past the idle timeout, the
/// drain's end and a reload of its route close both (`close(now:)`): gracefully first,
/// by reset when the peers do not let the close finish (`closeGrace`). Its session hears
/// `tunnelClosed` once both are closed.
///
/// Loop-confined, like the connections it joins.
final class WebSocketTunnel: ConnectionDelegate {
  /// unowned(unsafe): the session holds the exchange that holds the tunnel, and outlives
  /// both connections' last callbacks (it ends only once the tunnel says it closed).
  private unowned(unsafe) let session: ClientSession
  private(set) var client: BufferedConnection?
  private(set) var upstream: BufferedConnection?
  private let idleNanoseconds: UInt64
  /// Loop time of the last byte read from either side.
  private(set) var lastActivity: UInt64
  /// Client to upstream, and upstream to client, after the handshake.
  private(set) var bytesIn: Int64 = 0
  private(set) var bytesOut: Int64 = 0
  /// When a drain or a reload wants the tunnel gone (0: never).
  private(set) var closeBy: UInt64 = 0
  /// A close was asked: `closeBy` is then when a close that did not finish becomes a reset.
  private(set) var closing = false
  private var clientInputEnded = false
  private var upstreamInputEnded = false

  /// How long a graceful close may take (queued bytes, TLS close_notify) before both
  /// connections are reset.
  static let closeGrace: UInt64 = 2_000_000_000

  init(
    session: ClientSession, client: BufferedConnection, upstream: BufferedConnection, idleNanoseconds: UInt64,
    now: UInt64
  ) {
    self.session = session
    self.client = client
    self.upstream = upstream
    self.idleNanoseconds = idleNanoseconds
    lastActivity = now
  }

  /// Takes both connections over and passes on what each side sent before the tunnel
  /// existed (frames a client sent behind its handshake, frames behind the `101`).
  func start(clientInput: [UInt8], upstreamInput: [UInt8]) {
    client?.delegate = self
    upstream?.delegate = self
    if !clientInput.isEmpty {
      bytesIn += Int64(clientInput.count)
      _ = upstream?.write(clientInput)
    }
    if !upstreamInput.isEmpty {
      bytesOut += Int64(upstreamInput.count)
      _ = client?.write(upstreamInput)
    }
    // Reading may have been paused for the handshake (input held behind it).
    client?.resumeReading()
    upstream?.resumeReading()
  }

  /// The deadline the loop's sweep compares: the idle timeout, a drain or reload's end, or
  /// a close's grace.
  var deadline: UInt64 {
    if closing { return closeBy }
    let idle = lastActivity &+ idleNanoseconds
    return closeBy == 0 ? idle : min(idle, closeBy)
  }

  /// A drain or a reload lets the tunnel run until `due` (loop time), no later.
  func retire(by due: UInt64) {
    guard !closing, closeBy == 0 || due < closeBy else { return }
    closeBy = due
  }

  /// Closes both sides: gracefully the first time (queued bytes go out), by reset when
  /// asked again once the grace is over.
  func close(now: UInt64) {
    if closing {
      abort()
      return
    }
    closing = true
    closeBy = now &+ Self.closeGrace
    // A side whose peer reads nothing would hold a graceful close forever.
    for connection in [client, upstream].compactMap({ $0 }) {
      if connection.queuedByteCount > 0 && connection.isAboveHighWatermark {
        connection.abort()
      } else {
        connection.close()
      }
    }
  }

  /// Resets both sides at once (the drain timeout).
  func abort() {
    closing = true
    client?.abort()
    upstream?.abort()
  }

  // MARK: ConnectionDelegate

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    lastActivity = connection.loop.iterationTime
    if connection === client {
      bytesIn += Int64(bytes.count)
      _ = upstream?.write(bytes)
    } else {
      bytesOut += Int64(bytes.count)
      _ = client?.write(bytes)
    }
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    if connection === client {
      clientInputEnded = true
      upstream?.closeOutputAfterFlush()
    } else {
      upstreamInputEnded = true
      client?.closeOutputAfterFlush()
    }
    // Both peers said all they had to say: nothing more can cross.
    if clientInputEnded && upstreamInputEnded {
      client?.close()
      upstream?.close()
    }
  }

  func connectionWriteQueueDidRiseAboveHighWatermark(_ connection: BufferedConnection) {
    (connection === client ? upstream : client)?.pauseReading()
  }

  func connectionWriteQueueDidDrainBelowLowWatermark(_ connection: BufferedConnection) {
    (connection === client ? upstream : client)?.resumeReading()
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    // The other side follows once its queue is out, within the grace.
    if !closing {
      closing = true
      closeBy = connection.loop.iterationTime &+ Self.closeGrace
    }
    if connection === client {
      client = nil
      upstream?.close()
    } else if connection === upstream {
      upstream = nil
      session.context.shared.upstreamConnections.subtract(1, ordering: .relaxed)
      client?.close()
    }
    if client == nil && upstream == nil { session.tunnelClosed() }
  }
}
