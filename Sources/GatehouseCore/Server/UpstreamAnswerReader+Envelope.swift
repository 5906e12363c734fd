import GatehouseHTTP
import GatehouseJSON

/// The reader's envelope work: buffering or streaming an upstream body into `{"code","datas","message"}`.
extension UpstreamAnswerReader {
  /// Keeps the body for the envelope. A JSON success body that outgrows the buffer is
  /// switched to a wrapped stream when it can be; otherwise only its start is kept.
  func bufferAnswerBody(_ bytes: UnsafeRawBufferPointer, exchange: Exchange) {
    guard let policy = exchange.envelope else {
      exchange.bufferedBody.append(contentsOf: bytes)
      return
    }
    let fits = exchange.bufferedBody.count + bytes.count <= policy.maxBytes
    if fits && context.shared.chargeBufferedAnswer(bytes.count, limit: exchange.snapshot.bufferedBytes) {
      exchange.bufferCharge += bytes.count
      exchange.bufferedBody.append(contentsOf: bytes)
      return
    }
    if let head = exchange.bufferedHead, (200..<300).contains(head.status), policy.keyPath == nil,
      ForwardingRules.field(head.headers, "content-encoding") == nil
    {
      // Too large to wrap whole, or the budget for answers held whole is spent: a stream
      // holds no more than the client's connection queue at a time. What was kept so far
      // goes to that queue at once, so its charge stays with the exchange (and then the
      // session) until the client has taken it: released here, a client that does not read
      // would hold those bytes uncounted while the freed budget filled again elsewhere.
      let kept = exchange.bufferedBody
      exchange.bufferedBody = []
      beginWrappedStream(head, policy: policy)
      guard exchange.bodyPlan == .streamWrapped else { return }
      for piece in [kept, Array(bytes)] {
        let passed = piece.withUnsafeBytes { exchange.bomFilter.filter($0) } ?? piece
        guard feedWrapped(passed, exchange: exchange) else { return }
      }
      session.flushOutput()
      return
    }
    if fits {
      // Within the route's size, but no room in the budget and no way to stream it.
      context.shared.warnBufferedBudgetSpent(limit: exchange.snapshot.bufferedBytes)
      driver.run(.answerReplaced(.overloaded, reusable: nil))
      return
    }
    exchange.bufferedTruncated = true
  }

  /// Validates a piece of a wrapped stream's body and queues it; false (the connection cut,
  /// so the client never sees a last chunk) when it makes the JSON invalid.
  func feedWrapped(_ piece: [UInt8], exchange: Exchange) -> Bool {
    do {
      try exchange.streamValidator?.feed(piece)
    } catch {
      // The cut answer's access line says why (its status is the 200 already sent).
      exchange.reason = .badAnswer
      session.abort()
      return false
    }
    answers.writeRewrittenPiece(piece, exchange: exchange)
    return true
  }

  /// Starts a chunked JSON answer whose `datas` is the upstream body as it streams by.
  func beginWrappedStream(_ head: HTTPResponseHead, policy: EnvelopePolicy) {
    guard let exchange else { return }
    exchange.status = policy.httpStatus(head.status)
    driver.answerBegan(exchange)
    if exchange.suppressBody {
      // HEAD: the same head a GET gets, with the wrapped length when the upstream's is known,
      // and no body at all (the upstream's is read and dropped).
      let close = answerEndsConnection(exchange)
      exchange.bodyPlan = .passThrough
      let length = ForwardingRules.declaredLength(head).map {
        Int64(JSONEnvelopeWriter.successLength(datasCount: Int($0)))
      }
      answers.writeWrappedHead(
        head, framing: length.map { .contentLength($0) } ?? .none, close: close, exchange: exchange)
      return
    }
    let framing = HTTPSerializer.framing(bodyLength: nil, allowsBody: true, peerVersion: exchange.head.version)
    let close = answerEndsConnection(exchange) || framing == .untilClose
    if close { server.closeAfterCurrentAnswer() }
    exchange.rechunkAnswer = framing == .chunked
    exchange.bodyPlan = .streamWrapped
    exchange.streamValidator = JSONStreamingValidator(options: EnvelopeRenderer.validation)
    answers.writeWrappedHead(head, framing: framing, close: close, exchange: exchange)
    answers.writeRewrittenPiece(Array(#"{"code":0,"datas":"#.utf8), exchange: exchange)
  }

  /// The buffered body is complete: render the envelope (or pass the answer as it is).
  /// Returns the envelope rendered, if the route has one.
  func renderBufferedAnswer(_ exchange: Exchange) -> EnvelopeOutcome? {
    guard let head = exchange.bufferedHead, let policy = exchange.envelope else { return nil }
    var keyPathMissing = false
    let outcome = EnvelopeRenderer.render(
      answer: head, body: exchange.bufferedBody, truncated: exchange.bufferedTruncated, policy: policy,
      keyPathMissing: &keyPathMissing)
    if keyPathMissing, let keyPath = policy.keyPath, let index = exchange.routeIndex {
      let route = exchange.snapshot.config.routes[index].name
      context.metrics.countKeyPathMissing(route: route)
      context.shared.warnKeyPathMissing(route: route, keyPath: keyPath.description)
    }
    return outcome
  }

  /// Writes a buffered answer: `outcome` is its envelope (`passThrough` without one).
  func writeBufferedAnswer(_ exchange: Exchange, outcome: EnvelopeOutcome) {
    guard let head = exchange.bufferedHead else { return }
    answers.writeBuffered(head, outcome: outcome, close: answerEndsConnection(exchange), exchange: exchange)
  }
}
