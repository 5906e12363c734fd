import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// Reads the upstream's answer for a client session's exchange: parses it, decides what its
/// head means (a token rejected, a failing backend's error page a stored answer replaces,
/// an answer to keep, how the body reaches the client: passed through, buffered for the
/// envelope, or wrapped as it streams), and feeds the exchange machine its begin and end.
/// The bytes for the client are `AnswerWriter`'s; failures and what follows them are the
/// `ExchangeDriver`'s. One per client session.
final class UpstreamAnswerReader: ClientSessionPart {
  /// unowned(unsafe): the session owns its reader and outlives it; plain `unowned` would
  /// cost an atomic reference-count operation per access.
  unowned(unsafe) let session: ClientSession

  init(session: ClientSession) {
    self.session = session
  }

  func upstreamDidRead(_ upstream: UpstreamConnection, _ bytes: UnsafeRawBufferPointer) -> Int {
    // The exchange is loaded once: each load of the session's optional costs a retain and
    // a release. It stays this read's as long as it holds `upstream` (checked after each
    // step that may end it).
    guard let exchange, exchange.upstream === upstream else {
      upstream.pool.discard(upstream, by: session)
      return bytes.count
    }
    let serial = session.exchangeSerial
    exchange.answerBytesReceived = true
    // Until the client has the head, `response_timeout_ms` bounds the whole wait, however
    // slowly the upstream trickles bytes; once the answer streams to the client it bounds
    // the silence between reads (a large body may take long, but must keep moving).
    if exchange.machine.answerBegan, session.deadlineKind == .exchange,
      exchange.machine.deadline == .upstreamAnswer, let timeout = exchange.pool?.plan.answerTimeoutNanoseconds
    {
      session.setDeadline(.exchange, nanoseconds: timeout)
    }
    var offset = 0
    while offset <= bytes.count {
      let step: (step: HTTPParseStep, consumed: Int)
      do {
        step = try exchange.answerParser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        upstreamSentInvalidAnswer(upstream, error)
        return bytes.count
      }
      let start = offset
      offset += step.consumed
      switch step.step {
      case .needMore:
        session.flushOutput()
        return bytes.count
      case .head:
        let head = exchange.answerParser.takeHead()
        // Only a handshake's answer can be a 101 (the parser refuses it otherwise).
        if head.status == 101 {
          upstreamSwitchedProtocols(head, exchange, behind: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
          return bytes.count
        }
        if head.isInformational { continue }
        exchange.headAt = loop.iterationTime
        upstream.lastAnswerWasHTTP11 = head.version == .http1_1
        guard beginUpstreamAnswer(head, exchange) else { return bytes.count }
      case .body(let range):
        appendAnswerBody(
          UnsafeRawBufferPointer(rebasing: bytes[(start + range.lowerBound)..<(start + range.upperBound)]), exchange)
        guard exchange.upstream === upstream, session.exchangeSerial == serial else { return bytes.count }
      case .end:
        // Bytes after a complete answer belong to the next pipelined request; without one
        // they were never asked for, and the connection is spoiled. An answer whose end
        // only its status marks (204, 304) cannot show that the bytes after it are not a
        // body the upstream should not have sent: requests written behind it go again,
        // alone, rather than take those bytes for their answers.
        let reusable: Bool
        if upstream.pipeline.isEmpty {
          reusable = offset == bytes.count
        } else {
          reusable = HTTPSerializer.statusAllowsBody(exchange.upstreamStatus ?? 200)
        }
        completeUpstreamAnswer(exchange, upstreamReusable: reusable)
        return offset
      }
    }
    session.flushOutput()
    return bytes.count
  }

  func upstreamDidReadEOF(_ upstream: UpstreamConnection) {
    guard exchange?.upstream === upstream else { return }
    do {
      if let exchange, case .end? = try exchange.answerParser.finish() {
        completeUpstreamAnswer(exchange, upstreamReusable: false)
        return
      }
    } catch  where exchange?.answerBytesReceived == true {
      upstreamSentInvalidAnswer(upstream, error)
      return
    } catch {}
    driver.upstreamFailed(exchange?.answerBytesReceived == true ? .invalidAnswer : .closed)
  }

  /// The upstream's bytes are no HTTP answer: logged with what was wrong (fixed texts, never
  /// the upstream's bytes), kept as the upstream's last error, and failed like a reset.
  private func upstreamSentInvalidAnswer(_ upstream: UpstreamConnection, _ error: HTTPParseError) {
    context.shared.logger.warn(
      "upstream sent an invalid answer",
      ["upstream": .string(upstream.pool.plan.name), "error": .string(error.description)])
    driver.upstreamFailed(.invalidAnswer, detail: "invalid answer: \(error.description)")
  }

  /// The upstream answered a WebSocket handshake with `101`: checked, the machine turns the
  /// exchange into a tunnel, which takes the bytes that came behind the head; a `101` that
  /// is no WebSocket upgrade is an invalid answer (502).
  private func upstreamSwitchedProtocols(
    _ head: HTTPResponseHead, _ exchange: Exchange, behind rest: UnsafeRawBufferPointer
  ) {
    exchange.headAt = loop.iterationTime
    exchange.upstreamStatus = head.status
    guard WebSocketHandshake.upstreamSwitched(head) else {
      driver.upstreamFailed(.invalidAnswer, detail: "101 without a WebSocket upgrade")
      return
    }
    if let pool = exchange.pool {
      context.recordUpstreamAnswer(pool: pool, status: head.status, route: ForwardingRules.routeName(of: exchange))
    }
    exchange.switchingHead = head
    exchange.upstreamTunnelInput = Array(rest)
    driver.run(.upgraded, on: exchange)
  }

  /// Returns false when the exchange no longer reads this upstream answer.
  @discardableResult
  private func beginUpstreamAnswer(_ head: HTTPResponseHead, _ exchange: Exchange) -> Bool {
    exchange.upstreamStatus = head.status
    // The try's endpoint answered: a success as far as the fleet goes, unless 502/503/504.
    if let pool = exchange.pool, let upstream = exchange.upstream {
      let outcome = AttemptOutcome(status: head.status)
      pool.reportOutcome(outcome, on: upstream, error: outcome.failure.map { _ in "status \(head.status)" })
      // Another endpoint may answer better (`retry.on` lists the status); this answer's
      // body is left unread with its connection.
      if let kind = outcome.failure, driver.retriesAnsweredFailure(exchange, pool: pool, after: kind) { return false }
    }
    exchange.upstreamKeepAlive = head.keepAlive
    exchange.answerFollowsDoubt = exchange.upstream?.followsDoubtfulAnswer == true
    exchange.answerLeavesDoubt = UpstreamAnswerDoubt.leavesDoubt(
      requestWasHEAD: exchange.answerParser.requestWasHEAD, status: head.status,
      announcedLength: head.contentLength,
      announcesChunked: head.headers.firstIndex(lowercaseName: "transfer-encoding") != nil)
    if let routeIndex = exchange.routeIndex, let use = exchange.snapshot.routePlans[routeIndex].token {
      if use.invalidStatuses.contains(head.status) {
        if driver.tokenRejected(use, exchange: exchange, reusable: nil) { return false }
      } else if use.bodyField != nil && exchange.envelope == nil, let length = ForwardingRules.declaredLength(head),
        length <= ForwardingRules.maxReplayBody,
        JSONMediaType.isJSON(ForwardingRules.field(head.headers, "content-type") ?? [])
      {
        // A pass-through route whose backend signals rejection in the body: keep the (small)
        // body to look at it before answering.
        exchange.bodyPlan = .buffer
        exchange.bufferedHead = head
        return true
      }
    }
    if head.status == 304, exchange.revalidation != nil {
      // The stored answer asked about may be current: its end (a 304 has no body) says so.
      exchange.notModifiedHead = head
      return true
    }
    if head.status >= 500, let stale = routeCache.staleAnswer(for: exchange) {
      // A failing backend's error page is worse than yesterday's answer.
      if let pool = exchange.pool {
        context.recordUpstreamAnswer(
          pool: pool, status: head.status, route: ForwardingRules.routeName(of: exchange), outcome: "error_status")
      }
      if exchange.collapseRole == .leading { exchange.collapseOutcome = .failed(.unavailable) }
      exchange.reason = .upstreamError
      exchange.storedAnswer = stale
      driver.run(.answerReplaced(.stored, reusable: nil))
      return false
    }
    if exchange.hasCacheKey && !exchange.answerParser.requestWasHEAD
      && CacheStorability.isStorable(
        status: head.status, headers: head.headers, keyed: StoreEntryRules.keyedNames(exchange),
        enveloped: exchange.envelope != nil)
    {
      exchange.teeBody = []
      exchange.storableHead = head
    }
    if let policy = exchange.envelope {
      let plan = EnvelopeRenderer.plan(
        status: head.status, contentType: ForwardingRules.field(head.headers, "content-type"),
        contentEncoding: ForwardingRules.field(head.headers, "content-encoding"),
        contentLength: ForwardingRules.declaredLength(head),
        policy: policy, readsRedirects: exchange.sentToken != nil)
      exchange.bodyPlan = plan
      switch plan {
      case .buffer:
        exchange.bufferedHead = head
        return true
      case .streamWrapped:
        exchange.teeBody = nil
        beginWrappedStream(head, policy: policy)
        return true
      case .passThrough:
        break
      }
    }
    // The request's fields are read one by one: a copy of the whole head would retain each
    // of its buffers.
    let requestIsHEAD = exchange.head.method == .head
    var framing: HTTPBodyFraming
    var headLength: Int64?
    var rechunk = false
    if requestIsHEAD || !HTTPSerializer.statusAllowsBody(head.status) {
      framing = .none
      headLength = requestIsHEAD ? ForwardingRules.declaredLength(head) ?? head.contentLength : nil
    } else {
      switch head.bodyFraming {
      case .contentLength(let length):
        framing = .contentLength(length)
      case .chunked, .untilClose:
        framing = HTTPSerializer.framing(bodyLength: nil, allowsBody: true, peerVersion: exchange.head.version)
        rechunk = framing == .chunked
      case .none:
        framing = .contentLength(0)
      }
    }
    let close = answerEndsConnection(exchange) || framing == .untilClose
    if close { server.closeAfterCurrentAnswer() }
    exchange.rechunkAnswer = rechunk
    exchange.status = head.status
    exchange.upstreamStatus = head.status
    exchange.upstreamKeepAlive = head.keepAlive
    driver.answerBegan(exchange)
    if exchange.gatewayMeetsConditions, (200..<300).contains(head.status),
      answers.writeUpstreamCondition(head, close: close, exchange: exchange)
    {
      // The client has its answer (304 or 412); the body still read is kept for the store
      // if it is storable, and sent to nobody.
      exchange.rechunkAnswer = false
      exchange.suppressBody = true
      return true
    }
    if let secret = ForwardingRules.tokenToHide(exchange, upstreamStatus: head.status), framing != .none,
      !requestIsHEAD,
      ForwardingRules.field(head.headers, "content-encoding").map(EnvelopeRenderer.isIdentity) ?? true
    {
      // An error answer streams as it is on this route: the token it may echo is masked on
      // the way, byte for byte (the length already announced stays true).
      exchange.bodyMasker = StreamingSecretMasker(secrets: [secret])
    }
    answers.writeUpstreamHead(
      head, framing: framing, headContentLength: headLength, close: close, exchange: exchange)
    return true
  }

  /// A piece of the upstream's body: kept for the envelope, wrapped, or passed through.
  private func appendAnswerBody(_ bytes: UnsafeRawBufferPointer, _ exchange: Exchange) {
    // A 304 has no body; should one come all the same, it is nobody's.
    if exchange.notModifiedHead != nil { return }
    switch exchange.bodyPlan {
    case .buffer:
      bufferAnswerBody(bytes, exchange: exchange)
      return
    case .streamWrapped:
      if let start = exchange.bomFilter.filter(bytes) {
        // The body's first bytes, a byte order mark left out (or held until it is known).
        _ = feedWrapped(start, exchange: exchange)
        return
      }
      do {
        try exchange.streamValidator?.feed(bytes)
      } catch {
        // Invalid JSON mid-stream: cut the connection so the client never sees a last chunk.
        exchange.reason = .badAnswer
        session.abort()
        return
      }
    case .passThrough:
      if exchange.teeBody != nil {
        if exchange.teeBody!.count + bytes.count <= StoreEntryRules.maxStoredBody {
          exchange.teeBody!.append(contentsOf: bytes)
        } else {
          exchange.teeBody = nil
        }
      }
      if exchange.suppressBody { return }
      if exchange.bodyMasker != nil {
        answers.writeRewrittenPiece(exchange.bodyMasker!.process(bytes), exchange: exchange)
        return
      }
    }
    answers.writeBodyPiece(bytes, exchange: exchange, server: server)
  }

  private func completeUpstreamAnswer(_ exchange: Exchange, upstreamReusable: Bool) {
    exchange.endAt = loop.iterationTime
    if let pool = exchange.pool {
      pool.recordAnswerTime(loop.iterationTime &- exchange.sentAt)
      context.recordUpstreamAnswer(
        pool: pool, status: exchange.upstreamStatus ?? 0, route: ForwardingRules.routeName(of: exchange))
    }
    if let notModified = exchange.notModifiedHead, let stored = exchange.revalidation {
      storedAnswerConfirmed(exchange, stored: stored, by: notModified, upstreamReusable: upstreamReusable)
      return
    }
    // A body that says the token was rejected is sent again with a new value when it can
    // be; when it cannot, it is no good answer: never stored, never wrapped as a success.
    var tokenRefused = false
    if exchange.bodyPlan == .buffer, let routeIndex = exchange.routeIndex,
      let use = exchange.snapshot.routePlans[routeIndex].token, use.bodyField != nil, let head = exchange.bufferedHead,
      use.answerRejects(head, body: exchange.bufferedBody)
    {
      if tokenRejectedAfterBody(use, exchange: exchange, upstreamReusable: upstreamReusable) { return }
      tokenRefused = true
    }
    var rendered = exchange.bodyPlan == .buffer ? renderBufferedAnswer(exchange) : nil
    if tokenRefused, let policy = exchange.envelope {
      rendered = .unusable(
        status: policy.httpStatus(401),
        body: GatewayAnswer.errorBody(status: 401, message: GatewayAnswer.Failure.tokenRejected.message))
    }
    var usable = !tokenRefused
    if case .unusable = rendered {
      usable = false
      // The answer written (or the stored one served instead) is the gateway's: the
      // upstream's could not be used.
      exchange.reason = tokenRefused ? .tokenRejected : .badAnswer
    }
    if usable {
      context.noteTokenAccepted(exchange)
    } else if exchange.collapseRole == .leading {
      // Waiters answer as an upstream failure would, except after a token rejection: that
      // is about the token, not the upstream, and each waiter asks with the current value.
      exchange.collapseOutcome = tokenRefused ? .retry : .failed(.invalidAnswer)
    }
    if !usable {
      // The last good answer is worth more than one the backend got wrong.
      if let stale = routeCache.staleAnswer(for: exchange) {
        exchange.bufferedBody = []
        exchange.storedAnswer = stale
        driver.run(.answerReplaced(.stored, reusable: upstreamReusable))
        return
      }
    }
    let kept = usable ? StoreEntryRules.storableAnswer(exchange) : nil
    if let kept {
      routeCache.remember(kept, exchange: exchange)
    } else if usable, !exchange.answerFollowsDoubt, let key = exchange.cacheKey, let status = exchange.upstreamStatus,
      (200..<300).contains(status), !exchange.answerParser.requestWasHEAD
    {
      context.store?.forget(key: key)
    }
    switch exchange.bodyPlan {
    case .buffer:
      writeBufferedAnswer(exchange, outcome: rendered ?? .passThrough)
    case .streamWrapped:
      let held = exchange.bomFilter.finish()
      if !held.isEmpty && !feedWrapped(held, exchange: exchange) { return }
      do {
        try exchange.streamValidator?.finish()
      } catch {
        exchange.reason = .badAnswer
        session.abort()
        return
      }
      answers.writeRewrittenPiece(Array(#","message":""}"#.utf8), exchange: exchange)
    case .passThrough:
      if let tail = exchange.bodyMasker?.finish() { answers.writeRewrittenPiece(tail, exchange: exchange) }
    }
    if exchange.collapseRole == .leading, let kept {
      exchange.collapseOutcome = .answer(CollapsedAnswer(head: kept.head, body: kept.body, rendered: rendered))
    }
    answers.writeLastChunk(exchange: exchange)
    session.flushOutput()
    driver.run(.answerEnded(reusable: upstreamReusable), on: exchange)
  }

  /// The upstream answered `304` to the validators of the stored answer: it is renewed
  /// (age and headers, RFC 9111 §4.3.4; the body row stays) and served, `REVALIDATED`, to
  /// this client and those waiting with it. A 304 naming another representation, or read
  /// from a connection in doubt, confirms nothing: the entry goes and the upstream failed.
  private func storedAnswerConfirmed(
    _ exchange: Exchange, stored: StoredAnswer, by notModified: HTTPResponseHead, upstreamReusable: Bool
  ) {
    exchange.notModifiedHead = nil
    exchange.revalidation = nil
    guard let key = exchange.cacheKey else { return }
    guard StoreEntryRules.confirms(notModified.headers, stored), !exchange.answerFollowsDoubt else {
      context.store?.forget(key: key)
      if exchange.collapseRole == .leading { exchange.collapseOutcome = .failed(.invalidAnswer) }
      driver.upstreamFailed(.invalidAnswer, detail: "304 that confirms no stored answer")
      return
    }
    let now = RFC3339.nowMilliseconds()
    let renewed = context.store?.renew(key: key, stored, notModified: notModified.headers, nowMs: now) ?? stored
    context.noteTokenAccepted(exchange)
    if exchange.collapseRole == .leading {
      let head = StoreEntryRules.servedForm(renewed, result: .revalidated, nowMs: now).head
      exchange.collapseOutcome = .answer(
        CollapsedAnswer(
          head: head, body: renewed.body,
          rendered: routeCache.envelopeOutcome(of: renewed, head: head, policy: exchange.envelope)))
    }
    exchange.storedAnswer = renewed
    driver.run(.answerReplaced(.revalidated, reusable: upstreamReusable))
  }

  /// A body said the token was rejected: the answer was read whole, so the connection goes
  /// back to the pool before the retry.
  private func tokenRejectedAfterBody(_ use: TokenUse, exchange: Exchange, upstreamReusable: Bool) -> Bool {
    let charge = exchange.bufferCharge
    guard driver.tokenRejected(use, exchange: exchange, reusable: upstreamReusable && exchange.upstreamKeepAlive) else {
      return false
    }
    exchange.bufferedBody = []
    // The refused answer's share of `limits.buffered_bytes` goes with it.
    context.shared.releaseBufferedAnswer(charge)
    exchange.bufferCharge = 0
    exchange.bufferedHead = nil
    exchange.bodyPlan = .passThrough
    exchange.answerBytesReceived = false
    return true
  }

  /// Starts the client's answer to the upstream's: whether it ends the connection (see
  /// `ClientSession.beginAnswer`; a body still coming cannot go anywhere once the answer starts).
  func answerEndsConnection(_ exchange: Exchange) -> Bool {
    session.beginAnswer(.streamed)
  }

}
