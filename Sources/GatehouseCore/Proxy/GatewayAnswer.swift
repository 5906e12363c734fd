import GatehouseHTTP
import GatehouseJSON

/// Answers the gateway makes itself (errors, stubs): complete, with a JSON
/// envelope body `{"code","datas","message"}` and a correct Content-Length.
public enum GatewayAnswer {
  /// The failures of the proxy path and how Docs/envelope.md answers them.
  public enum Failure: Sendable, Equatable {
    case noRoute(method: String, path: String)
    case upstreamUnavailable
    case upstreamTimedOut
    /// Every connection the upstream's `max_connections` allows was busy for the queue timeout.
    case upstreamBusy
    /// The answers being wrapped whole already hold `limits.buffered_bytes`, and this one
    /// cannot stream wrapped.
    case overloaded
    case badRequest(HTTPParseError)
    case headerTimeout
    case methodNotAllowed
    case tokenUnavailable
    /// The backend still rejected the token after it was refreshed (or cannot be refreshed).
    case tokenRejected
    case clientKeyMissing
    case clientKeyInvalid
    case rateLimited
    /// A route with a required `jwt` got no bearer token.
    case bearerMissing
    case bearerInvalid
    case scopeInsufficient
    /// The route's identity provider has no signing keys to verify with.
    case signingKeysUnavailable
    /// An `Upgrade: websocket` handshake on a route without `websocket: true`.
    case webSocketNotEnabled
    case webSocketMalformed
    /// `limits.max_websockets` tunnels are open.
    case webSocketsAtLimit

    public var status: Int {
      switch self {
      case .noRoute: return 404
      case .upstreamUnavailable: return 502
      case .upstreamTimedOut: return 504
      case .upstreamBusy, .overloaded: return 503
      case .badRequest(let error): return error.status
      case .headerTimeout: return 408
      case .methodNotAllowed: return 405
      case .tokenUnavailable, .tokenRejected: return 401
      case .clientKeyMissing, .clientKeyInvalid: return 401
      case .rateLimited: return 429
      case .bearerMissing, .bearerInvalid: return 401
      case .scopeInsufficient: return 403
      case .signingKeysUnavailable: return 503
      case .webSocketNotEnabled, .webSocketMalformed: return 400
      case .webSocketsAtLimit: return 503
      }
    }

    public var message: String {
      switch self {
      case .noRoute(let method, let path): return "no route for \(method) \(path)"
      case .upstreamUnavailable: return "upstream unavailable"
      case .upstreamTimedOut: return "upstream timed out"
      case .upstreamBusy: return "upstream busy"
      case .overloaded: return "gateway overloaded"
      case .badRequest(let error): return "bad request: \(error)"
      case .headerTimeout: return "request timeout"
      case .methodNotAllowed: return "method not allowed"
      case .tokenUnavailable: return "upstream token unavailable"
      case .tokenRejected: return "upstream rejected the token"
      case .clientKeyMissing: return "client key required"
      case .clientKeyInvalid: return "client key not recognized"
      case .rateLimited: return "rate limit exceeded"
      case .bearerMissing: return "bearer token required"
      case .bearerInvalid: return "invalid bearer token"
      case .scopeInsufficient: return "insufficient scope"
      case .signingKeysUnavailable: return "token signing keys unavailable"
      case .webSocketNotEnabled: return "websocket is not enabled on this route"
      case .webSocketMalformed: return "invalid websocket handshake"
      case .webSocketsAtLimit: return "too many websockets"
      }
    }
  }

  /// `{"code":<status>,"datas":null,"message":<message>}`
  public static func errorBody(status: Int, message: String) -> [UInt8] {
    var body: [UInt8] = []
    body.reserveCapacity(48 + message.utf8.count)
    body.append(contentsOf: #"{"code":"#.utf8)
    HTTPSerializer.appendDecimal(Int64(status), to: &body)
    body.append(contentsOf: #","datas":null,"message":"#.utf8)
    JSONText.appendString(message, to: &body)
    body.append(0x7D)
    return body
  }

  /// A whole answer: head and body. `extraHeaders` are written as given (trusted lines).
  public static func write(
    status: Int, body: [UInt8], contentType: StaticString = "application/json", requestID: [UInt8],
    closeConnection: Bool, headOnly: Bool = false, extraHeaders: [UInt8] = [], into out: inout [UInt8]
  ) {
    ClientAnswerWriter.append("HTTP/1.1 ", &out)
    HTTPSerializer.appendDecimal(Int64(status), to: &out)
    out.append(0x20)
    out.append(contentsOf: HTTPStatusPhrase.reason(for: status).utf8)
    ClientAnswerWriter.append("\r\nContent-Type: ", &out)
    ClientAnswerWriter.append(contentType, &out)
    ClientAnswerWriter.append("\r\nX-Request-Id: ", &out)
    out.append(contentsOf: requestID)
    ClientAnswerWriter.append("\r\n", &out)
    out.append(contentsOf: extraHeaders)
    let allowsBody = HTTPSerializer.statusAllowsBody(status)
    if allowsBody {
      ClientAnswerWriter.append("Content-Length: ", &out)
      HTTPSerializer.appendDecimal(Int64(body.count), to: &out)
      ClientAnswerWriter.append("\r\n", &out)
    }
    if closeConnection { ClientAnswerWriter.append("Connection: close\r\n", &out) }
    ClientAnswerWriter.append("\r\n", &out)
    if allowsBody && !headOnly { out.append(contentsOf: body) }
  }

  /// Returns the bytes of the body written (0 for `headOnly`), for the access line.
  @discardableResult
  public static func writeFailure(
    _ failure: Failure, requestID: [UInt8], closeConnection: Bool, headOnly: Bool = false, into out: inout [UInt8]
  ) -> Int {
    let body = errorBody(status: failure.status, message: failure.message)
    write(
      status: failure.status, body: body, requestID: requestID, closeConnection: closeConnection, headOnly: headOnly,
      into: &out)
    return headOnly || !HTTPSerializer.statusAllowsBody(failure.status) ? 0 : body.count
  }

  /// What the client is told for an answer the exchange machine makes itself: the failure
  /// (status and message), the reason for the access line and the local-answers count, and
  /// fields the answer carries beyond the envelope's. `failureReason`: the reason of an
  /// upstream failure when more precise than the failure's own; `retryAfterSeconds`: when a
  /// rate-limited client may ask again; `challenge`: the `WWW-Authenticate` line of a
  /// bearer token's refusal (RFC 6750 §3).
  static func local(
    _ answer: ExchangeMachine.LocalAnswer, method: HTTPMethod, path: ArraySlice<UInt8>,
    failureReason: LocalAnswerReason?, retryAfterSeconds: Int, challenge: [UInt8] = []
  ) -> (failure: Failure, reason: LocalAnswerReason, extraHeaders: [UInt8]) {
    switch answer {
    case .refused(.bearerMissing): (.bearerMissing, .bearerMissing, challenge)
    case .refused(.bearerInvalid): (.bearerInvalid, .bearerInvalid, challenge)
    case .refused(.scopeInsufficient): (.scopeInsufficient, .scopeInsufficient, challenge)
    case .refused(.signingKeysUnavailable): (.signingKeysUnavailable, .signingKeysUnavailable, [])
    case .refused(.webSocketNotEnabled): (.webSocketNotEnabled, .webSocketNotEnabled, [])
    case .refused(.webSocketMalformed): (.webSocketMalformed, .badRequest, [])
    case .refused(.webSocketsAtLimit): (.webSocketsAtLimit, .webSocketsAtLimit, [])
    case .refused(.clientKeyMissing): (.clientKeyMissing, .clientKeyMissing, ForwardingRules.apiKeyChallenge)
    case .refused(.clientKeyInvalid): (.clientKeyInvalid, .clientKeyInvalid, ForwardingRules.apiKeyChallenge)
    case .refused(.rateLimited): (.rateLimited, .rateLimited, Array("Retry-After: \(retryAfterSeconds)\r\n".utf8))
    case .noRoute: (.noRoute(method: method.name, path: String(decoding: path, as: UTF8.self)), .noRoute, [])
    case .noUpstream: (.upstreamUnavailable, .noUpstream, [])
    case .badTarget: (.badRequest(.invalidTarget), .badRequest, [])
    case .upstream(let failure): (failure.answer, failureReason ?? failure.reason, [])
    case .tokenUnavailable: (.tokenUnavailable, .tokenUnavailable, [])
    case .tokenRejected: (.tokenRejected, .tokenRejected, [])
    case .requestTimedOut: (.headerTimeout, .requestTimeout, [])
    case .overloaded: (.overloaded, .overloaded, [])
    }
  }
}
