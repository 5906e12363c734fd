/// What the request parser found next in its input.
public enum HTTPRequestEvent: Sendable, Hashable {
  case head(HTTPRequestHead)
  /// Body bytes: a range of the buffer passed to `parse`, valid until that buffer changes.
  case body(Range<Int>)
  /// The message is complete; trailers if the body was chunked and had any.
  case end(HTTPHeaders?)
}

/// What `next(_:)` found. Heads and trailers stay in the parser until taken (`takeHead()`,
/// `takeTrailers()`), so the per-request path moves no enum with reference-counted payloads:
/// copying and destroying those went through outlined value-witness code, several times per
/// message.
public enum HTTPParseStep: Sendable, Equatable {
  /// All of the input was consumed; more is needed.
  case needMore
  /// A head is ready to take.
  case head
  /// Body bytes: a range of the buffer passed to `next`, valid until that buffer changes.
  case body(Range<Int>)
  /// The message is complete (take trailers, if wanted, with `takeTrailers()`).
  case end
}

/// Incremental HTTP/1.1 request parser for one connection: feed it bytes in any pieces and
/// take events until it returns nil. Pipelined requests come out one after another.
///
/// After a request with `Connection: close` (or HTTP/1.0 without keep-alive) the parser
/// discards everything that follows; after an error it repeats that error.
public struct HTTPRequestParser: Sendable {
  @usableFromInline
  enum State: Sendable {
    case head
    case body(remaining: Int64)
    case chunked
    case endPending
    case closed
    case failed(HTTPParseError)
  }

  @usableFromInline var state = State.head
  @usableFromInline var accumulator = HeadAccumulator(forTrailers: false, isRequestHead: true)
  @usableFromInline var chunked: HTTPChunkedDecoder
  @usableFromInline var keepAlive = true
  @usableFromInline var pendingHead: HTTPRequestHead?
  @usableFromInline var pendingTrailers: HTTPHeaders?
  public let limits: HTTPLimits

  public init(limits: HTTPLimits = HTTPLimits()) {
    self.limits = limits
    chunked = HTTPChunkedDecoder(limits: limits)
  }

  /// True between messages with nothing buffered: a close now loses nothing.
  public var isIdle: Bool {
    if case .head = state { return accumulator.isEmpty }
    return false
  }

  /// True once the connection must not carry more requests.
  public var isClosed: Bool {
    switch state {
    case .closed, .failed: return true
    case .head, .body, .chunked, .endPending: return false
    }
  }

  /// Parses from the start of `input`. Returns the next event and the bytes consumed; a nil
  /// event means all of `input` was consumed and more is needed.
  public mutating func parse(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
    event: HTTPRequestEvent?, consumed: Int
  ) {
    let (found, consumed) = try next(input)
    switch found {
    case .needMore: return (nil, consumed)
    case .head: return (.head(takeHead()), consumed)
    case .body(let range): return (.body(range), consumed)
    case .end: return (.end(takeTrailers()), consumed)
    }
  }

  /// Parses from the start of `input`, like `parse(_:)`, leaving a head or trailers in the
  /// parser to be taken.
  public mutating func next(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
    step: HTTPParseStep, consumed: Int
  ) {
    do {
      return try step(input)
    } catch {
      state = .failed(error)
      throw error
    }
  }

  /// The head `next` reported, moved out of the parser. Call it once per `.head`.
  public mutating func takeHead() -> HTTPRequestHead {
    guard let head = pendingHead.take() else { preconditionFailure("takeHead() without a parsed head") }
    return head
  }

  /// The trailers of the message `next` just ended, if it had any.
  public mutating func takeTrailers() -> HTTPHeaders? {
    pendingTrailers.take()
  }

  /// The peer closed its side: completes a pending message or reports a truncated one.
  public mutating func finish() throws(HTTPParseError) -> HTTPRequestEvent? {
    switch state {
    case .head:
      guard accumulator.isEmpty else {
        state = .failed(.unexpectedEOF)
        throw .unexpectedEOF
      }
      state = .closed
      return nil
    case .endPending:
      state = .closed
      return .end(nil)
    case .body, .chunked:
      state = .failed(.unexpectedEOF)
      throw .unexpectedEOF
    case .closed:
      return nil
    case .failed(let error):
      throw error
    }
  }

  @usableFromInline
  mutating func step(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
    step: HTTPParseStep, consumed: Int
  ) {
    switch state {
    case .failed(let error):
      throw error
    case .closed:
      return (.needMore, input.count)
    case .head:
      guard let taken = try accumulator.take(input, limits: limits) else { return (.needMore, input.count) }
      let head = try HeadParser.parseRequest(taken.section, lines: taken.lines, limits: limits)
      keepAlive = head.keepAlive
      switch head.bodyFraming {
      case .none, .contentLength(0), .untilClose:
        state = .endPending
      case .contentLength(let length):
        state = .body(remaining: length)
      case .chunked:
        chunked = HTTPChunkedDecoder(limits: limits)
        state = .chunked
      }
      pendingHead = head
      pendingTrailers = nil
      return (.head, taken.consumed)
    case .body(let remaining):
      guard input.count > 0 else { return (.needMore, 0) }
      let n = Int(min(remaining, Int64(input.count)))
      state = remaining == Int64(n) ? .endPending : .body(remaining: remaining - Int64(n))
      return (.body(0..<n), n)
    case .chunked:
      let (event, consumed) = try chunked.decode(input)
      switch event {
      case .data(let range)?:
        return (.body(range), consumed)
      case .end(let trailers)?:
        messageEnded()
        pendingTrailers = trailers
        return (.end, consumed)
      case nil:
        return (.needMore, consumed)
      }
    case .endPending:
      messageEnded()
      return (.end, 0)
    }
  }

  @usableFromInline
  mutating func messageEnded() {
    state = keepAlive ? .head : .closed
  }
}

extension HTTPRequestParser {
  /// Parses all of `bytes` and returns every event, copying body ranges into arrays.
  /// For tests and tools; servers use `parse(_:)` on their own buffers.
  public mutating func parseAll(_ bytes: [UInt8]) throws(HTTPParseError) -> [HTTPRequestEvent] {
    var collected: [HTTPRequestEvent] = []
    var offset = 0
    while true {
      // Array's closure APIs are not typed-throws, so the error crosses as a Result.
      let result = try bytes.withUnsafeBytes { all in
        Result { () throws(HTTPParseError) in try parse(UnsafeRawBufferPointer(rebasing: all[offset...])) }
      }.get()
      guard let event = result.event else { break }
      switch event {
      case .body(let range):
        collected.append(.body((range.lowerBound + offset)..<(range.upperBound + offset)))
      case .head, .end:
        collected.append(event)
      }
      offset += result.consumed
    }
    return collected
  }
}
