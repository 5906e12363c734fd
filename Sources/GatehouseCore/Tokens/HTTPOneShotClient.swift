import GatehouseHTTP
import GatehouseNet

#if canImport(Glibc)
  import Glibc
#endif

/// One HTTP/1.1 request on a new connection, for control-plane calls such as token fetches: connect with a
/// timeout, send the whole request, read one answer up to a size limit within a deadline, close.
/// Plain http only (TLS is not there yet; config validation refuses https token endpoints).
///
/// Confined to the loop it runs on. The completion runs exactly once, on that loop, never from inside
/// `send`.
public final class HTTPOneShotClient: ConnectionDelegate {
  /// A request to send. `headers` must include `Host`; the framing header is written from `body`.
  public struct Request: Sendable {
    public var method: HTTPMethod
    public var target: String
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(method: HTTPMethod, target: String, headers: HTTPHeaders, body: [UInt8] = []) {
      self.method = method
      self.target = target
      self.headers = headers
      self.body = body
    }
  }

  /// A complete answer.
  public struct Answer: Sendable {
    public let status: Int
    public let headers: HTTPHeaders
    public let body: [UInt8]
  }

  /// Bounds for one exchange.
  public struct Limits: Sendable, Equatable {
    public var connectTimeout: Duration
    /// From the moment the connection is up until the answer has been read completely.
    public var answerTimeout: Duration
    /// The most body bytes accepted; a larger answer fails.
    public var maxAnswerBytes: Int

    public init(connectTimeout: Duration, answerTimeout: Duration, maxAnswerBytes: Int) {
      self.connectTimeout = connectTimeout
      self.answerTimeout = answerTimeout
      self.maxAnswerBytes = maxAnswerBytes
    }
  }

  /// Why an exchange failed. The descriptions contain no request or answer content.
  public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
    case cannotConnect(SystemError)
    case connectTimedOut(Duration)
    case answerTimedOut(Duration)
    /// The peer closed (or reset) the connection before a whole answer arrived.
    case closedEarly(SystemError?)
    case answerTooLarge(limit: Int)
    case invalidAnswer(HTTPParseError)
    /// The request could not be serialized (a header with a forbidden byte).
    case invalidRequest(String)
    /// The TLS handshake failed or the certificate was refused.
    case tls(String)

    public var description: String {
      switch self {
      case .cannotConnect(let error): "cannot connect: \(error.shortMessage)"
      case .connectTimedOut(let limit): "connect timed out after \(limit.wholeMilliseconds) ms"
      case .answerTimedOut(let limit): "no complete answer within \(limit.wholeMilliseconds) ms"
      case .closedEarly(let error?): "connection lost before a complete answer: \(error.shortMessage)"
      case .closedEarly(nil): "connection closed before a complete answer"
      case .answerTooLarge(let limit): "answer larger than \(limit) bytes"
      case .invalidAnswer(let error): "invalid HTTP answer: \(error)"
      case .invalidRequest(let problem): "request not sent: \(problem)"
      case .tls(let problem): "TLS: \(problem)"
      }
    }
  }

  private let loop: EventLoop
  private let limits: Limits
  private var parser: HTTPResponseParser
  private var connection: BufferedConnection?
  private var completion: ((Result<Answer, Failure>) -> Void)?
  private var answerTimer: TimerHandle?
  private var head: HTTPResponseHead?
  private var connected = false
  private var body: [UInt8] = []

  private init(loop: EventLoop, limits: Limits, completion: @escaping (Result<Answer, Failure>) -> Void) {
    self.loop = loop
    self.limits = limits
    self.completion = completion
    parser = HTTPResponseParser(
      limits: HTTPLimits(maxHeaderBytes: 16384, maxHeaderCount: 100, maxBodyBytes: Int64(limits.maxAnswerBytes)))
  }

  /// Sends `request` to `address`. Loop thread only.
  public static func send(
    _ request: Request, to address: SocketAddress, on loop: EventLoop, limits: Limits, tls: TLSClientOptions? = nil,
    completion: @escaping (Result<Answer, Failure>) -> Void
  ) {
    loop.assertInEventLoop()
    let client = HTTPOneShotClient(loop: loop, limits: limits, completion: completion)
    var bytes: [UInt8] = []
    do throws(HTTPSerializer.Error) {
      try HTTPSerializer.writeRequestHead(
        method: request.method, target: Array(request.target.utf8)[...], headers: request.headers,
        framing: .contentLength(Int64(request.body.count)), into: &bytes)
    } catch {
      client.finishLater(.failure(.invalidRequest(error.description)))
      return
    }
    bytes.append(contentsOf: request.body)
    do {
      let connection = try BufferedConnection.connect(
        to: address, on: loop, timeout: limits.connectTimeout, delegate: client, tls: tls)
      client.connection = connection
      // Queued until the connect finishes; the connection keeps `client` alive until it has closed.
      connection.write(bytes)
    } catch {
      client.finishLater(.failure(.cannotConnect(error)))
    }
  }

  private func finishLater(_ result: Result<Answer, Failure>) {
    loop.executeLater { [self] in finish(result) }
  }

  private func finish(_ result: Result<Answer, Failure>) {
    guard let completion else { return }
    self.completion = nil
    if let answerTimer { loop.cancelTimer(answerTimer) }
    answerTimer = nil
    switch result {
    case .success: connection?.close()
    case .failure: connection?.abort()
    }
    completion(result)
  }

  public func connectionDidConnect(_ connection: BufferedConnection) {
    connected = true
    answerTimer = loop.scheduleTimer(after: limits.answerTimeout) { [weak self] in
      guard let self else { return }
      answerTimer = nil
      finish(.failure(.answerTimedOut(limits.answerTimeout)))
    }
  }

  public func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    guard completion != nil else { return }
    var offset = 0
    while offset <= bytes.count {
      let step: (event: HTTPResponseEvent?, consumed: Int)
      do {
        step = try parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      } catch {
        finish(.failure(Self.failure(for: error, limit: limits.maxAnswerBytes)))
        return
      }
      let start = offset
      offset += step.consumed
      guard let event = step.event else { break }
      handle(event, in: UnsafeRawBufferPointer(rebasing: bytes[start...]))
      if completion == nil { return }
    }
  }

  public func connectionDidReadEOF(_ connection: BufferedConnection) {
    guard completion != nil else { return }
    do {
      if let event = try parser.finish() { handle(event, in: UnsafeRawBufferPointer(start: nil, count: 0)) }
    } catch {
      finish(.failure(.closedEarly(nil)))
      return
    }
    if completion != nil { finish(.failure(.closedEarly(nil))) }
  }

  public func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    switch reason {
    case .closedByOwner, .hangup, .loopStopped:
      finish(.failure(.closedEarly(nil)))
    case .failed(let error):
      // A connect that fails is reported as a close; tell "refused" apart from "lost".
      finish(.failure(connected ? .closedEarly(error) : .cannotConnect(error)))
    case .connectTimedOut:
      finish(.failure(.connectTimedOut(limits.connectTimeout)))
    case .tlsFailed(let error):
      finish(.failure(.tls(error.description)))
    }
  }

  private func handle(_ event: HTTPResponseEvent, in buffer: UnsafeRawBufferPointer) {
    switch event {
    case .head(let answerHead):
      if answerHead.isInformational { return }
      head = answerHead
    case .body(let range):
      // The parser enforces the limit for declared lengths and chunks; count here for close-delimited bodies.
      guard body.count + range.count <= limits.maxAnswerBytes else {
        finish(.failure(.answerTooLarge(limit: limits.maxAnswerBytes)))
        return
      }
      body.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[range]))
    case .end:
      guard let head else {
        finish(.failure(.closedEarly(nil)))
        return
      }
      finish(.success(Answer(status: head.status, headers: head.headers, body: body)))
    }
  }

  private static func failure(for error: HTTPParseError, limit: Int) -> Failure {
    error == .bodyTooLarge ? .answerTooLarge(limit: limit) : .invalidAnswer(error)
  }
}

extension Duration {
  var wholeMilliseconds: Int64 { tokenMilliseconds }
}

extension SystemError {
  /// The errno as a short phrase for error messages ("connection refused").
  var shortMessage: String {
    switch errno {
    case ECONNREFUSED: "connection refused"
    case ECONNRESET: "connection reset"
    case ECONNABORTED: "connection aborted"
    case ETIMEDOUT: "timed out"
    case EHOSTUNREACH: "host unreachable"
    case ENETUNREACH: "network unreachable"
    case EPIPE: "broken pipe"
    case EADDRNOTAVAIL: "address not available"
    case EMFILE, ENFILE: "too many open files"
    default: "errno \(errno)"
    }
  }
}
