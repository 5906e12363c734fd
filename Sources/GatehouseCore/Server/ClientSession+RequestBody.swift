import GatehouseHTTP
import GatehouseNet

/// A session's request body on its way upstream: read ahead before a connection is leased,
/// held while the request waits (a token, a free connection), streamed, and timed.
extension ClientSession {
  /// The body's read-ahead is over (it is all here, or `body_buffer_bytes` of it): reading
  /// pauses until a connection carries what was read, and the request goes on its way.
  func bodyReadAhead(_ exchange: Exchange) {
    exchange.bufferingBody = false
    exchange.bodyBuffered = true
    if !exchange.requestComplete { setClientReadingPaused(true, reason: .upstreamBackpressure) }
    sendUpstream(fresh: false)
  }

  /// Every connection `pool` may open is busy: the request waits its turn, up to the
  /// upstream's queue timeout (then a 503, or a stored answer).
  func waitForConnection(_ exchange: Exchange, on pool: UpstreamPool, fresh: Bool) {
    exchange.queuedOn = pool
    exchange.queuedFresh = fresh
    pool.enqueue(self)
    setDeadline(.connectionQueue, nanoseconds: pool.plan.queueTimeoutNanoseconds)
    pool.evictStalledReaderIfDue(now: loop.iterationTime)
  }

  /// `pool` has room for the request this session queued there.
  func connectionRoomAvailable(on pool: UpstreamPool) {
    guard !closed, let exchange, exchange.queuedOn === pool else { return }
    exchange.queuedOn = nil
    clearDeadline()
    sendUpstream(fresh: exchange.queuedFresh)
  }

  /// The request body is still coming: it must keep moving (the idle timeout between reads)
  /// and be all here by `limits.body_timeout_ms` after the head, whichever comes first.
  func setUploadDeadline() {
    setDeadline(.requestUpload, nanoseconds: context.snapshot.idleTimeoutNanoseconds)
    if let bodyDeadline = exchange?.bodyDeadline, bodyDeadline != 0, bodyDeadline < deadline {
      deadline = bodyDeadline
    }
  }

  func forwardRequestBody(_ bytes: UnsafeRawBufferPointer) {
    guard let exchange, !exchange.responseComplete else { return }
    // Routes with a token keep a small body, so a request rejected for its token can be sent again.
    if exchange.requestBodyCopy != nil {
      if exchange.requestBodyCopy!.count + bytes.count <= Self.maxReplayBody {
        exchange.requestBodyCopy!.append(contentsOf: bytes)
      } else {
        exchange.requestBodyCopy = nil
        if exchange.tokenRetried && exchange.waitingForToken {
          // Refused before the body was all here, and the body has outgrown the copy: its
          // start went to the upstream that refused it and cannot be sent again.
          exchange.waitingForToken = false
          closeAfterResponse = true
          respondLocally(failure: .tokenRejected, reason: .tokenRejected)
          return
        }
      }
    }
    guard let upstream = exchange.upstream?.connection else {
      // Held until the upstream gets the head: the body's read-ahead, a request waiting
      // for a connection (reading is paused then: at most one more read), or one waiting
      // for its token (bounded below).
      guard exchange.bufferingBody || exchange.queuedOn != nil || exchange.waitingForToken else { return }
      exchange.pendingBody.append(contentsOf: bytes)
      if exchange.waitingForToken {
        if exchange.pendingBody.count > Self.maxPendingBody {
          exchange.waitingForToken = false
          closeAfterResponse = true
          respondLocally(failure: .tokenUnavailable, reason: .tokenUnavailable)
        }
      } else if exchange.bufferingBody {
        if exchange.pendingBody.count >= exchange.snapshot.bodyBufferBytes {
          bodyReadAhead(exchange)
        } else {
          setUploadDeadline()
        }
      }
      return
    }
    if deadlineKind == .requestUpload {
      setUploadDeadline()
    }
    if exchange.rechunkRequest {
      var frame: [UInt8] = []
      HTTPSerializer.writeChunkHeader(size: bytes.count, into: &frame)
      frame.append(contentsOf: bytes)
      HTTPSerializer.writeChunkTrailer(into: &frame)
      _ = upstream.write(frame)
    } else {
      _ = upstream.write(bytes)
    }
  }

  func requestEnded() {
    guard exchange != nil else { return }
    exchange?.requestComplete = true
    if let exchange, exchange.bufferingBody {
      bodyReadAhead(exchange)
      return
    }
    // Only once the request is with an upstream: one waiting for a new token after a
    // rejection gets its response deadline when it is sent again.
    if deadlineKind == .requestUpload, let exchange, exchange.upstream != nil, let pool = exchange.pool {
      armResponseDeadline(exchange, pool: pool)
    }
    if let exchange, exchange.rechunkRequest, !exchange.responseComplete,
      let upstream = exchange.upstream?.connection
    {
      var last: [UInt8] = []
      HTTPSerializer.writeLastChunk(into: &last)
      _ = upstream.write(last)
    }
    if exchange?.responseComplete == true { finishExchange() }
  }

  /// The whole request is with the upstream: its answer is due within the response
  /// timeout, and one pipelined behind other answers gets its turn within the queue's
  /// patience or goes alone (a slow answer in front must not hold it for long).
  func armResponseDeadline(_ exchange: Exchange, pool: UpstreamPool) {
    let timeout = pool.plan.responseTimeoutNanoseconds
    if exchange.waitedBehindAnother, exchange.upstream?.owner !== self {
      setDeadline(.pipelineWait, nanoseconds: min(timeout, PipelinePolicy.queuePatienceNanoseconds))
    } else {
      setDeadline(.upstreamResponse, nanoseconds: timeout)
    }
  }

  /// Request bodies up to this size are kept for a retry after a token rejection (SPEC §3).
  static let maxReplayBody = 64 * 1024
  /// Body bytes held while a token is fetched, before the request is given up.
  static let maxPendingBody = 1 << 20

  func writeRequestBody(_ body: [UInt8], to upstream: UpstreamConnection, exchange: Exchange) {
    guard let connection = upstream.connection else { return }
    if exchange.rechunkRequest {
      var frame: [UInt8] = []
      HTTPSerializer.writeChunkHeader(size: body.count, into: &frame)
      frame.append(contentsOf: body)
      HTTPSerializer.writeChunkTrailer(into: &frame)
      _ = connection.write(frame)
    } else {
      _ = connection.write(body)
    }
  }
}
