import GatehouseHTTP
import GatehouseNet

/// The request body on its way upstream: kept while the request waits (its
/// read-ahead, a token, a free connection), streamed, and timed. Where each piece goes is
/// the exchange machine's decision (`keepBody`, `forwardBody`, `dropBody`).
extension ExchangeDriver {
  /// `pool` has room for the request this session queued there.
  func connectionRoomAvailable(on pool: UpstreamPool) {
    guard !closed, let exchange, exchange.machine.phase == .waiting(.queue), exchange.pool === pool else { return }
    run(.connectionFree)
  }

  /// The request body is still coming: it must keep moving (the idle timeout between reads)
  /// and be all here by `limits.body_timeout_ms` after the head, whichever comes first.
  func setUploadDeadline() {
    session.setDeadline(.exchange, nanoseconds: context.snapshot.idleTimeoutNanoseconds)
    if let bodyDeadline = exchange?.bodyDeadline, bodyDeadline != 0 { session.shortenDeadline(to: bodyDeadline) }
  }

  func forwardRequestBody(_ bytes: UnsafeRawBufferPointer) {
    guard let exchange else { return }
    // Routes with a token keep a small body, so a request rejected for its token can be sent again.
    if exchange.requestBodyCopy != nil {
      if exchange.requestBodyCopy!.count + bytes.count <= ForwardingRules.maxReplayBody {
        exchange.requestBodyCopy!.append(contentsOf: bytes)
      } else {
        exchange.requestBodyCopy = nil
      }
    }
    bodyPiece = bytes
    defer { bodyPiece = nil }
    run(.clientBody(count: bytes.count), on: exchange)
  }

  /// A piece of the body goes to the upstream that has the head; the body must keep coming.
  func forwardBodyPiece(_ exchange: Exchange) {
    guard let bytes = bodyPiece, let upstream = exchange.upstream?.connection else { return }
    if session.deadlineKind == .exchange && exchange.machine.deadline == .requestUpload {
      setUploadDeadline()
    }
    Self.writeBody(bytes, on: upstream, rechunk: exchange.rechunkRequest)
  }

  /// The whole request is with the upstream: its answer is due within the answer
  /// timeout, and one pipelined behind other answers gets its turn within the queue's
  /// patience or goes alone (a slow answer in front must not hold it for long).
  func armAnswerDeadline(_ exchange: Exchange, pool: UpstreamPool) {
    let timeout = pool.plan.answerTimeoutNanoseconds
    if exchange.waitedBehindAnother, exchange.upstream?.owner !== session {
      session.setDeadline(.pipelineWait, nanoseconds: min(timeout, PipelinePolicy.queuePatienceNanoseconds))
    } else {
      session.setDeadline(.exchange, nanoseconds: timeout)
    }
  }

  func writeRequestBody(_ body: [UInt8], to upstream: UpstreamConnection, exchange: Exchange) {
    guard let connection = upstream.connection else { return }
    body.withUnsafeBytes { Self.writeBody($0, on: connection, rechunk: exchange.rechunkRequest) }
  }

  /// Body bytes for the upstream, as one chunk when the body is re-chunked.
  private static func writeBody(_ bytes: UnsafeRawBufferPointer, on connection: BufferedConnection, rechunk: Bool) {
    guard rechunk else {
      _ = connection.write(bytes)
      return
    }
    var frame: [UInt8] = []
    HTTPSerializer.writeChunkHeader(size: bytes.count, into: &frame)
    frame.append(contentsOf: bytes)
    HTTPSerializer.writeChunkTrailer(into: &frame)
    _ = connection.write(frame)
  }
}
