/// What a responder answers one request through, whatever the protocol: an HTTP/1.1
/// connection (`HTTP1ServerConnection`, one exchange after another) or an HTTP/2 stream
/// (`HTTP2StreamChannel`, one exchange). The answer is written as HTTP/1.1 bytes in both
/// cases; a stream reads them back into HEADERS and DATA frames (see `HTTP2StreamChannel`).
public protocol ExchangeChannel: AnyObject {
  /// Part of the request body came with its head (no wait for it is needed).
  var inputFollowsHead: Bool { get }
  /// The responder's deadline (monotonic nanoseconds, 0: none).
  var responderDeadline: UInt64 { get }
  /// The client's answer bytes queued past the high watermark: it is not reading.
  var isAboveHighWatermark: Bool { get }
  /// One of many exchanges sharing a connection (an HTTP/2 stream): an answer held for it
  /// stays counted against the buffer budget until the stream ends, since any number of
  /// streams below their watermark would add up to any amount of memory.
  var sharesConnection: Bool { get }
  /// Starts the answer; returns whether it must say `Connection: close`.
  func beginAnswer(_ kind: AnswerKind) -> Bool
  /// Answer bytes. Returns false when the client no longer takes them.
  @discardableResult func write(_ bytes: UnsafeRawBufferPointer) -> Bool
  @discardableResult func write(_ bytes: [UInt8]) -> Bool
  /// Writes `100 Continue` when the request asked for it; returns whether it was written.
  @discardableResult func writeContinue() -> Bool
  /// The answer is complete.
  func endAnswer()
  /// Nothing more after this answer (shutdown, an answer whose framing ends the connection).
  func closeAfterCurrentAnswer()
  /// Pauses (or resumes) reading the request's body for `reason`.
  func setReadingPaused(_ paused: Bool, reason: ReadPauseReasons)
  func setResponderDeadline(at due: UInt64)
  func setResponderDeadline(after nanoseconds: UInt64)
  /// Ends the exchange at once: its answer is cut (a reset).
  func abort()
}

extension HTTP1ServerConnection: ExchangeChannel {
  /// One exchange at a time: an answer below the watermark is the connection's allowance.
  public var sharesConnection: Bool { false }
}
