import GatehouseHTTP
import GatehouseNet

/// What an `HTTP1ServerConnection` (or an `HTTP2StreamChannel`, for its one request) hands
/// its responder: the request's parts as they are parsed, and the connection's turns. Every
/// method runs on the connection's loop.
///
/// Body bytes point into the loop's read buffer (or the connection's held input): they are
/// valid only during the call. The layer never calls its responder again after
/// `serverClosed(reason:answerStarted:)`.
public protocol ServerResponder: AnyObject {
  /// A request head is whole. Answer now (a whole answer; the rest of the body, if any, is
  /// read and dropped) or later, after the body or some outside work.
  func serverReceivedHead(_ head: HTTPRequestHead)
  /// A piece of the request's body, without a copy. Not called once the answer is complete.
  func serverReceivedBody(_ bytes: UnsafeRawBufferPointer)
  /// The request is whole. Not called when the answer was complete before it.
  func serverReceivedEnd()
  /// The parser refused the input with `error` (its `status` is the one to answer with).
  /// Write an error answer within this call, or none; the connection closes after it.
  func serverRefusedRequest(_ error: HTTPParseError)
  /// Part of a request came but not all of it within the header timeout. Write a 408 within
  /// this call, or none; the connection closes after it.
  func serverRequestTimedOut()
  /// Both the request and its answer are complete: the place to record the exchange. The
  /// responder's deadline and its pause reasons were cleared before this call.
  func serverExchangeFinished()
  /// The responder's own deadline (`setResponderDeadline`) passed.
  func serverResponderDeadlinePassed()
  /// The client's write queue rose above its high watermark: it stopped reading.
  func serverClientFellBehind()
  /// The client's write queue drained below its low watermark after falling behind.
  func serverClientCaughtUp()
  /// An HTTP/2 stream whose exchange finished is over, and the responder will answer a
  /// later stream of the same connection (`HTTP2ServerConnection` keeps a few for reuse):
  /// what it held for the client of the stream's answer is let go, as at `serverClosed`.
  func serverStreamEnded()
  /// The connection is closed. `answerStarted` tells whether a request was open and part of
  /// its answer had been written (else it ended unanswered).
  func serverClosed(reason: ConnectionCloseReason, answerStarted: Bool)
}

extension ServerResponder {
  public func serverRequestTimedOut() {}
  public func serverExchangeFinished() {}
  public func serverResponderDeadlinePassed() {}
  public func serverClientFellBehind() {}
  public func serverClientCaughtUp() {}
  public func serverStreamEnded() {}
}

/// The timeouts an `HTTP1ServerConnection` runs under. Settable on a live connection (a
/// reload applies from the next deadline armed).
public struct HTTP1ServerLimits: Sendable, Equatable {
  /// A request head must be whole within this, counted from accept for the first request
  /// and from its first byte for later ones.
  public var headerTimeoutNanoseconds: UInt64
  /// How long a connection may wait for its next request, and how long a client may go
  /// without taking any of the output queued for it.
  public var idleTimeoutNanoseconds: UInt64
  /// The header timeout also runs while the body arrives: a request must arrive whole
  /// within it (for responders that buffer small bodies; a proxy times bodies itself).
  public var headerTimeoutCoversBody: Bool

  public init(headerTimeoutNanoseconds: UInt64, idleTimeoutNanoseconds: UInt64, headerTimeoutCoversBody: Bool = false) {
    self.headerTimeoutNanoseconds = headerTimeoutNanoseconds
    self.idleTimeoutNanoseconds = idleTimeoutNanoseconds
    self.headerTimeoutCoversBody = headerTimeoutCoversBody
  }
}

/// Why reading from the client is paused; it resumes when no reason is left. An option set,
/// not a `Set`: it is changed on the request path and must not allocate.
public struct ReadPauseReasons: OptionSet, Sendable {
  public let rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }
  /// The layer's own: input waits behind an unfinished answer, or for the client to read.
  public static let pipelining = ReadPauseReasons(rawValue: 1)
  /// The responder's: where it sends the body cannot take more (upstream backpressure).
  /// Cleared when the answer completes. Responders may define more bits of their own.
  public static let backpressure = ReadPauseReasons(rawValue: 2)
}

/// How an answer is written, which decides whether a request body still coming can be read
/// and dropped afterwards.
public enum AnswerKind: Sendable {
  /// Made here, whole: the rest of the body is read and dropped after it, and the connection
  /// goes on (unless the client still waits for 100 Continue, RFC 9110 §10.1.1).
  case whole
  /// Streamed from elsewhere while the body was meant to go there too: a body not all read
  /// when it starts can no longer go anywhere, so the connection ends after it.
  case streamed
}

/// The connection's own deadline: what it waits for.
public enum HTTP1DeadlineKind: Sendable, Equatable {
  /// None of its own (the request is being answered; the responder may have one).
  case none
  /// A request head; with `headerTimeoutCoversBody`, the whole request. Passing it answers
  /// a partial request with the responder's 408, and closes a silent connection.
  case header
  /// The next request after an answer. The idle timeout, extended while the client
  /// acknowledges queued output.
  case idle
  /// The client must take the answer being written (its queue is above the high
  /// watermark). The idle timeout, extended while it acknowledges bytes; then a reset.
  case clientWrite
  /// Pipelined input waits for the client to take earlier answers before it is parsed:
  /// like `clientWrite`, between answers.
  case pipelineWait
}
