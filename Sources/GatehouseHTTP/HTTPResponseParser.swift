/// What the response parser found next in its input.
public enum HTTPResponseEvent: Sendable, Hashable {
  /// A status line and headers; informational (1xx) heads are followed by another head.
  case head(HTTPResponseHead)
  /// Body bytes: a range of the buffer passed to `parse`.
  case body(Range<Int>)
  case end(HTTPHeaders?)
}

/// Incremental HTTP/1.1 response parser for one upstream connection. Set
/// `requestWasHEAD` before each response to a HEAD request: its framing headers describe a
/// body that is not sent.
public struct HTTPResponseParser: Sendable {
  @usableFromInline
  enum State: Sendable {
    case head
    case body(remaining: Int64)
    case untilClose
    case chunked
    case endPending
    case closed
    case failed(HTTPParseError)
  }

  @usableFromInline var state = State.head
  @usableFromInline var accumulator = HeadAccumulator(forTrailers: false, isRequestHead: false)
  @usableFromInline var chunked: HTTPChunkedDecoder
  @usableFromInline var keepAlive = true
  @usableFromInline var pendingHead: HTTPResponseHead?
  @usableFromInline var pendingTrailers: HTTPHeaders?
  public var requestWasHEAD = false
  /// The request asked to switch protocols (`Upgrade: websocket`): a `101` is its final
  /// head, after which the connection carries no more HTTP. Without it a `101` is an error.
  public var requestAskedUpgrade = false
  public let limits: HTTPLimits

  public init(limits: HTTPLimits = HTTPLimits()) {
    self.limits = limits
    chunked = HTTPChunkedDecoder(limits: limits)
  }

  /// True between messages with nothing buffered.
  public var isIdle: Bool {
    if case .head = state { return accumulator.isEmpty }
    return false
  }

  /// True once the connection must not be used again.
  public var isClosed: Bool {
    switch state {
    case .closed, .failed: return true
    case .head, .body, .untilClose, .chunked, .endPending: return false
    }
  }

  public mutating func parse(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
    event: HTTPResponseEvent?, consumed: Int
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
  /// parser to be taken (see `HTTPParseStep`).
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
  public mutating func takeHead() -> HTTPResponseHead {
    guard let head = pendingHead.take() else { preconditionFailure("takeHead() without a parsed head") }
    return head
  }

  /// The trailers of the response `next` just ended, if it had any.
  public mutating func takeTrailers() -> HTTPHeaders? {
    pendingTrailers.take()
  }

  /// The upstream closed: ends a close-delimited body, or reports a truncated message.
  public mutating func finish() throws(HTTPParseError) -> HTTPResponseEvent? {
    switch state {
    case .untilClose, .endPending:
      state = .closed
      return .end(nil)
    case .head:
      guard accumulator.isEmpty else {
        state = .failed(.unexpectedEOF)
        throw .unexpectedEOF
      }
      state = .closed
      return nil
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
      guard input.count == 0 else { throw .invalidMessageAfterClose }
      return (.needMore, 0)
    case .head:
      guard let taken = try accumulator.take(input, limits: limits) else { return (.needMore, input.count) }
      let head = try HeadParser.parseResponse(
        taken.section, lines: taken.lines, limits: limits, requestWasHEAD: requestWasHEAD)
      if head.isInformational {
        // 101 switches protocols: only an answer to a request that asked for it.
        if head.status == 101 {
          guard requestAskedUpgrade else { throw .unexpectedInformational }
          // What follows is the new protocol's, never parsed here.
          state = .closed
          pendingHead = head
          return (.head, taken.consumed)
        }
        pendingHead = head
        return (.head, taken.consumed)
      }
      keepAlive = head.keepAlive
      enterBody(head.bodyFraming)
      pendingHead = head
      pendingTrailers = nil
      return (.head, taken.consumed)
    case .body(let remaining):
      guard input.count > 0 else { return (.needMore, 0) }
      let n = Int(min(remaining, Int64(input.count)))
      state = remaining == Int64(n) ? .endPending : .body(remaining: remaining - Int64(n))
      return (.body(0..<n), n)
    case .untilClose:
      guard input.count > 0 else { return (.needMore, 0) }
      return (.body(0..<input.count), input.count)
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

  /// The head is read: what follows is its body, framed by `framing`.
  @usableFromInline
  mutating func enterBody(_ framing: HTTPBodyFraming) {
    switch framing {
    case .none, .contentLength(0):
      state = .endPending
    case .contentLength(let length):
      state = .body(remaining: length)
    case .chunked:
      chunked = HTTPChunkedDecoder(limits: limits)
      state = .chunked
    case .untilClose:
      state = .untilClose
    }
  }

  @usableFromInline
  mutating func messageEnded() {
    state = keepAlive ? .head : .closed
    requestWasHEAD = false
  }
}

extension HTTPResponseParser {
  /// Parses all of `bytes` (then EOF if `atEOF`) and returns every event, with body ranges
  /// relative to `bytes`. For tests and tools.
  public mutating func parseAll(_ bytes: [UInt8], atEOF: Bool = false) throws(HTTPParseError)
    -> [HTTPResponseEvent]
  {
    var collected: [HTTPResponseEvent] = []
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
    if atEOF, let last = try finish() { collected.append(last) }
    return collected
  }
}
