import GatehouseCompression
import GatehouseHTTP
import GatehouseHTTPServer
import GatehouseLogging

/// Turns a client's answer into bytes: answers the gateway makes, stored and shared
/// answers, the upstream's head and body passed through (re-chunked, its token masked),
/// enveloped whole or as a wrapped stream. Each write counts what it adds in the
/// exchange's `bytesSent` and `bodyBytes`, the figures of its access line.
///
/// One per loop, handed to each of its client sessions. It holds the loop's output buffer:
/// the bytes of one step (a local answer, one upstream read) are gathered there and leave
/// in one write by `flush`, so a head and the body after it usually share a packet. What
/// to write is the session's decision (and its exchange machine's); how is this type's.
final class AnswerWriter {
  /// Bytes for the client, gathered while one step is processed.
  private var output: [UInt8] = []
  /// Made on first use: a deflate state costs about 256 KB.
  private var gzipEncoder: GzipEncoder?
  /// The last body tagged and its tag: an answer handed to collapsed waiters is one array
  /// shared by all of them (as is a stored body read from the loop's recent answers), so
  /// it is hashed once. Holding the array keeps its buffer alive and unchanged (a shared
  /// buffer is copied before it is written), so a body in that same buffer has those bytes.
  private var lastTagged: (body: [UInt8], tag: GatewayETag)?
  /// The shape of the last kept answer written (`writeKept`, `writeKeptEnveloped`) and its
  /// body as sent, for `KeptAnswerShapes`; nil after other answers.
  private(set) var lastKept: (shape: KeptAnswerShape, body: [UInt8])?

  init() {
    output.reserveCapacity(Self.keptOutputBytes)
  }

  static let rangeFields = HeaderNameSet(["accept-ranges"])

  /// Enveloped bodies shorter than this go uncompressed: gzip would not pay for its header.
  static let gzipThreshold = 1024

  /// Pieces of a passed-through body up to this size are gathered with what is staged; a
  /// bigger one goes straight from the upstream's read buffer.
  static let gatheredPieceBytes = 16 * 1024

  // MARK: Staged bytes

  /// Hands what is staged to `server`; once part of an exchange's answer has left it can no
  /// longer give way to an error answer (`Exchange.answerFlushed`).
  func flush(to server: any ExchangeChannel, exchange: Exchange?) {
    guard !output.isEmpty else { return }
    if let exchange, exchange.machine.answerBegan { exchange.answerFlushed = true }
    output.withUnsafeBytes { _ = server.write($0) }
    // The loop's buffer stays as large as a usual step's output; one grown by a large
    // answer (an envelope of megabytes) is let go rather than held for the loop's life.
    // (Four times what is reserved: the allocator may round the reservation up, and a
    // buffer let go at every flush would cost an allocation per answer.)
    if output.capacity > 4 * Self.keptOutputBytes {
      output = []
      output.reserveCapacity(Self.keptOutputBytes)
    } else {
      output.removeAll(keepingCapacity: true)
    }
  }

  /// The output buffer's capacity kept between steps.
  static let keptOutputBytes = 64 * 1024

  /// Drops what is staged: an answer cut or replaced before any of it left. Nothing it
  /// had gathered may go out with the next session's answer.
  func discardStaged() {
    output.removeAll(keepingCapacity: true)
  }

  // MARK: Whole answers

  /// An answer the gateway makes: a JSON body with `status`. Replaces anything staged. A
  /// success (a stub, or an error on an `always_200` route) carries its `ETag` and meets
  /// the request's conditions; an error carries none (no client keeps one to revalidate).
  func writeLocal(status: Int, body: [UInt8], extraHeaders: [UInt8], close: Bool, exchange: Exchange) {
    output.removeAll(keepingCapacity: true)
    let headOnly = exchange.head.method == .head
    var extraHeaders = extraHeaders
    if (200..<300).contains(status) {
      let etag = tag(of: body)
      exchange.bodyBytes = 0
      if answeredByCondition(
        etag: { etag.entityTag }, upstream: nil, variesByCoding: false, extra: extraHeaders, close: close,
        exchange: exchange)
      {
        exchange.bytesSent = Int64(output.count)
        return
      }
      extraHeaders.append(contentsOf: "ETag: ".utf8)
      extraHeaders.append(contentsOf: etag.bytes)
      extraHeaders.append(contentsOf: "\r\n".utf8)
    }
    GatewayAnswer.write(
      status: status, body: body, requestID: exchange.requestID, closeConnection: close, headOnly: headOnly,
      extraHeaders: extraHeaders, into: &output)
    exchange.status = status
    exchange.bytesSent = Int64(output.count)
    exchange.bodyBytes = headOnly || !HTTPSerializer.statusAllowsBody(status) ? 0 : Int64(body.count)
  }

  /// A whole upstream answer kept in memory (stored, or shared by a collapsed exchange),
  /// passed through without `Accept-Ranges` (ranges of kept answers are not served). Its
  /// `ETag` is the backend's when the body is the bytes the backend sent
  /// (`StoreEntryRules.backendTag`), as on the `MISS` that stored it; otherwise the gateway's
  /// of the bytes sent (the backend's described other bytes, another coding). Replaces
  /// anything staged. `decoded`: the body was decoded from the head's `Content-Encoding`,
  /// which is left out.
  func writeKept(
    head: HTTPResponseHead, body: [UInt8], extra: [UInt8], decoded: Bool, close: Bool, exchange: Exchange
  ) {
    output.removeAll(keepingCapacity: true)
    let headOnly = exchange.head.method == .head
    let backendTag = decoded ? nil : StoreEntryRules.backendTag(head)
    // Only hashed when it is sent: most kept answers of pass-through routes have the backend's.
    let gatewayTag = backendTag == nil ? tag(of: body) : nil
    exchange.bodyBytes = 0
    lastKept = (KeptAnswerShape(form: .passThrough(decoded: decoded), length: body.count, etag: gatewayTag), body)
    if answeredByCondition(
      etag: { backendTag ?? gatewayTag?.entityTag }, upstream: head.headers, variesByCoding: false, extra: extra,
      close: close, exchange: exchange)
    {
      exchange.bytesSent = Int64(output.count)
      return
    }
    let except = Self.keptAnswerExceptions(backendTag: backendTag, decoded: decoded)
    exchange.status = head.status
    ClientAnswerWriter.write(
      head: head, requestID: exchange.requestID, framing: headOnly ? .none : .contentLength(Int64(body.count)),
      headContentLength: headOnly ? Int64(body.count) : nil, closeConnection: close, extraLines: extra,
      except: except, etag: gatewayTag, into: &output)
    if !headOnly { output.append(contentsOf: body) }
    exchange.bodyBytes = headOnly ? 0 : Int64(body.count)
    exchange.bytesSent = Int64(output.count)
  }

  /// A whole kept upstream answer through its envelope (`status`, `json`). Replaces anything staged.
  func writeKeptEnveloped(
    status: Int, json: [UInt8], upstream head: HTTPResponseHead, extra: [UInt8], close: Bool, exchange: Exchange
  ) {
    output.removeAll(keepingCapacity: true)
    exchange.bodyBytes = 0
    writeEnveloped(
      status: status, body: json, upstream: head, exchange: exchange, close: close,
      headOnly: exchange.head.method == .head, extra: extra, keepsShape: true)
    exchange.bytesSent = Int64(output.count)
  }

  /// A large stored answer by its shape (`KeptAnswerShapes`): the head, or the `304` / `412`
  /// of a request whose condition it meets, as the whole answer would have had them, and
  /// `body` (the bytes as sent) when the request is a GET the answer goes to whole.
  /// Replaces anything staged.
  func writeShaped(
    _ shape: KeptAnswerShape, body: [UInt8]?, upstream head: HTTPResponseHead, extra: [UInt8], close: Bool,
    exchange: Exchange
  ) {
    output.removeAll(keepingCapacity: true)
    exchange.bodyBytes = 0
    lastKept = nil
    let sent = exchange.head.method == .head ? nil : body
    // Set when a condition answers instead (`304`, `412`): no body then.
    var metCondition = false
    defer {
      if let sent, !metCondition {
        output.append(contentsOf: sent)
        exchange.bodyBytes = Int64(sent.count)
      }
      exchange.bytesSent = Int64(output.count)
    }
    switch shape.form {
    case .enveloped(let status, let gzip, let variesByCoding):
      exchange.status = status
      if (200..<300).contains(status),
        answeredByCondition(
          etag: { shape.etag?.entityTag }, upstream: head.headers, variesByCoding: variesByCoding, extra: extra,
          close: close, exchange: exchange)
      {
        metCondition = true
        return
      }
      ClientAnswerWriter.writeEnveloped(
        status: status, upstream: head, requestID: exchange.requestID, framing: .contentLength(Int64(shape.length)),
        gzip: gzip, variesByCoding: variesByCoding, closeConnection: close, extraLines: extra, hiding: nil,
        etag: shape.etag, into: &output)
    case .passThrough(let decoded):
      let backendTag = decoded ? nil : StoreEntryRules.backendTag(head)
      if answeredByCondition(
        etag: { backendTag ?? shape.etag?.entityTag }, upstream: head.headers, variesByCoding: false, extra: extra,
        close: close, exchange: exchange)
      {
        metCondition = true
        return
      }
      exchange.status = head.status
      ClientAnswerWriter.write(
        head: head, requestID: exchange.requestID,
        framing: sent == nil ? .none : .contentLength(Int64(shape.length)),
        headContentLength: sent == nil ? Int64(shape.length) : nil, closeConnection: close, extraLines: extra,
        except: Self.keptAnswerExceptions(backendTag: backendTag, decoded: decoded),
        etag: shape.etag, into: &output)
    }
  }

  /// The upstream fields a kept answer's head leaves out (the gateway sets its own).
  private static func keptAnswerExceptions(backendTag: EntityTag?, decoded: Bool) -> HeaderNameSet {
    backendTag != nil
      ? StoreEntryRules.replacedInBackendTaggedKeptAnswer
      : decoded ? StoreEntryRules.replacedInDecodedKeptAnswer : StoreEntryRules.replacedInKeptAnswer
  }

  /// A buffered upstream answer, whole: `outcome` is its envelope (`passThrough` without
  /// one). The buffered body is spent.
  func writeBuffered(_ head: HTTPResponseHead, outcome: EnvelopeOutcome, close: Bool, exchange: Exchange) {
    let headOnly = exchange.head.method == .head
    let before = output.count
    let secret = ForwardingRules.tokenToHide(exchange, upstreamStatus: head.status)
    switch outcome {
    case .json(let status, let body), .unusable(let status, let body):
      writeEnveloped(
        status: status, body: body, upstream: head, exchange: exchange, close: close, headOnly: headOnly,
        extra: StoreEntryRules.cacheLines(exchange.cacheResult), hiding: secret)
    case .passThrough:
      exchange.status = head.status
      var except: HeaderNameSet?
      if let secret {
        // A coded body (a redirect's, read whole to be masked) is looked at decoded and sent
        // plain; one that cannot be decoded is left out: a redirect's body is a note for
        // people, and clients follow `Location`.
        if let coding = ForwardingRules.field(head.headers, "content-encoding") {
          except = StoreEntryRules.contentEncodingField
          let decoded =
            EnvelopeRenderer.isGzip(coding)
            ? try? GzipDecoder.decode(exchange.bufferedBody, maxOutputBytes: exchange.envelope?.maxBytes ?? 0) : nil
          exchange.bufferedBody = decoded ?? []
        }
        if let masked = SecretMasking.masked([secret], in: exchange.bufferedBody) {
          exchange.bufferedBody = masked
        }
      }
      if exchange.gatewayMeetsConditions, secret == nil, (200..<300).contains(head.status) {
        // Read whole and passed through (no JSON to wrap): the client's conditions, which
        // the upstream did not see, are met against its validators, as on a streamed one.
        if writeUpstreamCondition(head, close: close, exchange: exchange) {
          exchange.bufferedBody = []
          return
        }
        except = Self.rangeFields
      }
      let allowsBody = HTTPSerializer.statusAllowsBody(head.status)
      ClientAnswerWriter.write(
        head: head, requestID: exchange.requestID,
        framing: allowsBody && !headOnly ? .contentLength(Int64(exchange.bufferedBody.count)) : .none,
        headContentLength: headOnly && allowsBody ? Int64(exchange.bufferedBody.count) : nil, closeConnection: close,
        extraLines: StoreEntryRules.cacheLines(exchange.cacheResult), except: except, hiding: secret,
        into: &output)
      if !headOnly && allowsBody {
        output.append(contentsOf: exchange.bufferedBody)
        exchange.bodyBytes += Int64(exchange.bufferedBody.count)
      }
    }
    exchange.bytesSent += Int64(output.count - before)
    exchange.bufferedBody = []
  }

  /// A whole enveloped answer (gzip when the client takes it and it pays off).
  private func writeEnveloped(
    status: Int, body: [UInt8], upstream head: HTTPResponseHead, exchange: Exchange, close: Bool, headOnly: Bool,
    extra: [UInt8], hiding secret: SecretSpellings? = nil, keepsShape: Bool = false
  ) {
    exchange.status = status
    var body = body
    if let secret, let masked = SecretMasking.masked([secret], in: body) { body = masked }
    var gzip = false
    let variesByCoding = body.count > Self.gzipThreshold
    if exchange.acceptsGzip && variesByCoding, let compressed = compress(body) {
      body = compressed
      gzip = true
    }
    // A success's tag is of the bytes sent: gzip and identity codings differ.
    let bodyTag = (200..<300).contains(status) ? tag(of: body) : nil
    lastKept =
      keepsShape
      ? (
        KeptAnswerShape(
          form: .enveloped(status: status, gzip: gzip, variesByCoding: variesByCoding), length: body.count,
          etag: bodyTag), body
      )
      : nil
    if let bodyTag,
      answeredByCondition(
        etag: { bodyTag.entityTag }, upstream: head.headers, variesByCoding: variesByCoding, extra: extra, close: close,
        exchange: exchange)
    {
      return
    }
    ClientAnswerWriter.writeEnveloped(
      status: status, upstream: head, requestID: exchange.requestID, framing: .contentLength(Int64(body.count)),
      gzip: gzip, variesByCoding: variesByCoding, closeConnection: close, extraLines: extra, hiding: secret,
      etag: bodyTag, into: &output)
    if !headOnly {
      output.append(contentsOf: body)
      exchange.bodyBytes += Int64(body.count)
    }
  }

  /// Meets the request's conditions (RFC 9110 §13.2.2) for a GET or HEAD whose answer would
  /// be a success with `etag` (and the `Last-Modified` of `upstream`, if any): writes `304 Not
  /// Modified` or `412 Precondition Failed` instead and returns true, or returns false
  /// (nothing written) for the answer to go as it is. `extra`: the answer's own lines
  /// (`X-Gatehouse-Cache`, `Age`), which a 304 repeats.
  private func answeredByCondition(
    etag: () -> EntityTag?, upstream: HTTPHeaders?, variesByCoding: Bool, extra: [UInt8], close: Bool,
    exchange: Exchange
  ) -> Bool {
    let method = exchange.head.method
    guard method == .get || method == .head, HTTPPreconditions.isConditional(exchange.head.headers) else {
      return false
    }
    let lastModified = upstream?.firstValue(lowercaseName: "last-modified").flatMap(HTTPDate.parse)
    let tag = etag()
    let outcome = HTTPPreconditions.evaluate(
      exchange.head.headers, etag: tag?.opaque, etagIsWeak: tag?.isWeak ?? false, lastModified: lastModified)
    switch outcome {
    case .proceed:
      return false
    case .notModified:
      ClientAnswerWriter.writeNotModified(
        upstream: upstream, etag: tag.map { ($0.isWeak ? Array("W/".utf8) : []) + $0.opaque },
        requestID: exchange.requestID,
        variesByCoding: variesByCoding,
        closeConnection: close, extraLines: extra, nowSeconds: RFC3339.nowMilliseconds() / 1000, into: &output)
      exchange.status = 304
    case .preconditionFailed:
      let body = GatewayAnswer.errorBody(status: 412, message: "precondition failed")
      GatewayAnswer.write(
        status: 412, body: body, requestID: exchange.requestID, closeConnection: close,
        headOnly: method == .head, extraHeaders: extra, into: &output)
      exchange.status = 412
      exchange.bodyBytes += method == .head ? 0 : Int64(body.count)
    }
    return true
  }

  /// Bodies up to this size are remembered with their tag (see `lastTagged`): a larger one
  /// is not kept alive for a later answer that may never come.
  static let rememberedTagBodyBytes = 64 << 10

  /// The gateway's tag of `body` (`EntityTagMaker`), once per shared body.
  private func tag(of body: [UInt8]) -> GatewayETag {
    if let last = lastTagged, last.body.sharesBuffer(with: body) {
      return last.tag
    }
    let tag = EntityTagMaker.tag(of: body)
    lastTagged = body.count <= Self.rememberedTagBodyBytes ? (body, tag) : nil
    return tag
  }

  /// gzip of an enveloped body for a client that takes it; nil if compression fails.
  private func compress(_ body: [UInt8]) -> [UInt8]? {
    do {
      if gzipEncoder == nil { gzipEncoder = try GzipEncoder() }
      var out: [UInt8] = []
      try gzipEncoder?.encode(body, into: &out)
      return out
    } catch {
      return nil
    }
  }

  // MARK: Streamed answers

  /// An upstream success passed through, for a client whose conditions the upstream did not
  /// see (`Exchange.gatewayMeetsConditions`): met against the upstream's own `ETag` and
  /// `Last-Modified`. Writes `304` or `412` in its place and returns true (the upstream's
  /// body, still coming, is not the client's), or returns false for the answer to go on.
  func writeUpstreamCondition(_ head: HTTPResponseHead, close: Bool, exchange: Exchange) -> Bool {
    let tag = head.headers.firstValue(lowercaseName: "etag").flatMap { EntityTag($0) }
    let before = output.count
    guard
      answeredByCondition(
        etag: { tag }, upstream: head.headers, variesByCoding: false,
        extra: StoreEntryRules.cacheLines(exchange.cacheResult), close: close, exchange: exchange)
    else { return false }
    exchange.bytesSent += Int64(output.count - before)
    return true
  }

  /// The head of an upstream answer passed through, its body to follow in `framing`. When
  /// the client's `Range` did not reach the upstream, its `Accept-Ranges` does not reach the
  /// client: the gateway does not honour ranges either.
  func writeUpstreamHead(
    _ head: HTTPResponseHead, framing: HTTPBodyFraming, headContentLength: Int64?, close: Bool, exchange: Exchange
  ) {
    let before = output.count
    ClientAnswerWriter.write(
      head: head, requestID: exchange.requestID, framing: framing, headContentLength: headContentLength,
      closeConnection: close, extraLines: StoreEntryRules.cacheLines(exchange.cacheResult),
      except: exchange.gatewayMeetsConditions ? Self.rangeFields : nil,
      hiding: ForwardingRules.tokenToHide(exchange, upstreamStatus: head.status), into: &output)
    exchange.bytesSent += Int64(output.count - before)
  }

  /// A piece of a passed-through body, as one chunk when the answer is re-chunked. Small
  /// pieces are gathered so head and body usually leave in one write; big ones go straight
  /// from the read buffer (what is staged first).
  func writeBodyPiece(_ bytes: UnsafeRawBufferPointer, exchange: Exchange, server: any ExchangeChannel) {
    exchange.bodyBytes += Int64(bytes.count)
    exchange.bytesSent += Int64(bytes.count)
    if exchange.rechunkAnswer {
      let before = output.count
      HTTPSerializer.writeChunkHeader(size: bytes.count, into: &output)
      // The chunk's size line and its closing CRLF.
      exchange.bytesSent += Int64(output.count - before + 2)
    }
    if bytes.count <= Self.gatheredPieceBytes {
      output.append(contentsOf: bytes)
    } else {
      flush(to: server, exchange: exchange)
      exchange.answerFlushed = true
      _ = server.write(bytes)
    }
    if exchange.rechunkAnswer { HTTPSerializer.writeChunkTrailer(into: &output) }
  }

  /// A piece of a body that is rewritten on the way (masked, or wrapped): an empty one
  /// (nothing ready yet, a held byte order mark) writes nothing, as a chunk it would end
  /// the body; nor does one of a HEAD request's answer read as a GET's.
  func writeRewrittenPiece(_ piece: [UInt8], exchange: Exchange) {
    guard !piece.isEmpty, !exchange.suppressBody else { return }
    let before = output.count
    if exchange.rechunkAnswer { HTTPSerializer.writeChunkHeader(size: piece.count, into: &output) }
    output.append(contentsOf: piece)
    if exchange.rechunkAnswer { HTTPSerializer.writeChunkTrailer(into: &output) }
    exchange.bodyBytes += Int64(piece.count)
    exchange.bytesSent += Int64(output.count - before)
  }

  /// The end of a re-chunked body.
  func writeLastChunk(exchange: Exchange) {
    guard exchange.rechunkAnswer else { return }
    let before = output.count
    HTTPSerializer.writeLastChunk(into: &output)
    exchange.bytesSent += Int64(output.count - before)
  }

  /// The head of a wrapped stream: an enveloped answer whose `datas` is the upstream's body
  /// as it streams by (`framing`: how that body is framed for the client; none for HEAD).
  func writeWrappedHead(
    _ head: HTTPResponseHead, framing: HTTPBodyFraming, close: Bool, exchange: Exchange
  ) {
    let before = output.count
    ClientAnswerWriter.writeEnveloped(
      status: exchange.status, upstream: head, requestID: exchange.requestID, framing: framing, gzip: false,
      closeConnection: close, extraLines: StoreEntryRules.cacheLines(exchange.cacheResult), into: &output)
    exchange.bytesSent += Int64(output.count - before)
  }
}

extension Array {
  /// Whether `other` is these very elements: the same buffer, the same count. Held, an
  /// array pins its buffer and a shared buffer is copied before it is written, so a memo
  /// that keeps the array it was made from can tell by this that a body (or a stored
  /// answer's headers) is unchanged, without reading it (`AnswerWriter.lastTagged`,
  /// `RouteCache.envelopeOutcome`, `RouteCache.servedForm`).
  func sharesBuffer(with other: [Element]) -> Bool {
    count == other.count
      && withUnsafeBufferPointer { kept in other.withUnsafeBufferPointer { kept.baseAddress == $0.baseAddress } }
  }
}
