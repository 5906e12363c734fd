import GatehouseHTTP
import GatehouseJSON

/// Small rules of forwarding a request and its answer, apart from I/O: whether a request
/// has a body and how it is framed upstream, whether gzip is asked for, which request id is
/// kept, which token an answer must not show, and the answer fields read on the way.
enum ForwardingRules {
  /// RFC 9110 §11.6.1: a 401 names the scheme that would get through; client keys are also
  /// accepted as `Authorization: ApiKey <key>`.
  static let apiKeyChallenge = Array("WWW-Authenticate: ApiKey\r\n".utf8)

  static func hasBody(_ head: HTTPRequestHead) -> Bool {
    switch head.bodyFraming {
    case .none, .contentLength(0): return false
    case .contentLength, .chunked, .untilClose: return true
    }
  }

  /// The upstream gets the body framed as the client framed it: a length stays a length,
  /// chunked stays chunked (re-encoded, trailers dropped).
  static func upstreamFraming(_ requestFraming: HTTPBodyFraming) -> HTTPBodyFraming {
    switch requestFraming {
    case .none: return .none
    case .contentLength(let length): return .contentLength(length)
    case .chunked, .untilClose: return .chunked
    }
  }

  /// Whether the upstream is asked for gzip (on routes whose `Accept-Encoding` the gateway
  /// normalizes). Only where the body passes through: an enveloped body must be read whole
  /// or validated as it streams, and a gzip one can only be read whole, so a large answer
  /// that streams wrapped when plain would fail when gzip. The gateway compresses the
  /// envelope itself for clients that take gzip.
  /// Never on a route with a token: an error answer may echo the token, and only a plain
  /// body can be masked as it streams.
  static func asksUpstreamForGzip(_ plan: RoutePlan, clientTakesGzip: Bool) -> Bool {
    clientTakesGzip && plan.envelope == nil && plan.token == nil
  }

  /// A client's own X-Request-Id is kept when it is plain and short.
  static func requestID(from head: HTTPRequestHead) -> [UInt8]? {
    guard let index = head.headers.firstIndex(lowercaseName: "x-request-id") else { return nil }
    let value = head.headers.valueBytes(at: index)
    return RequestIDGenerator.isAcceptable(value) ? Array(value) : nil
  }

  /// The token value to keep out of an answer: an error answer may echo the credential it was
  /// refused with ("token … is not allowed"), and clients never hold backend credentials. A
  /// 2xx answer is the backend's data and passes as it is.
  static func tokenToHide(_ exchange: Exchange, upstreamStatus: Int) -> SecretSpellings? {
    (200..<300).contains(upstreamStatus) ? nil : exchange.sentToken
  }

  static func field(_ headers: HTTPHeaders, _ lowercaseName: StaticString) -> ArraySlice<UInt8>? {
    headers.firstValue(lowercaseName: lowercaseName)
  }

  static func declaredLength(_ head: HTTPResponseHead) -> Int64? {
    if case .contentLength(let length) = head.bodyFraming { return length }
    return nil
  }

  /// The name of the exchange's route, for its breaker (every exchange that reaches an
  /// upstream has one).
  static func routeName(of exchange: Exchange) -> String {
    exchange.routeIndex.map { exchange.snapshot.routePlans[$0].name } ?? ""
  }

  /// Request bodies up to this size are kept for a retry after a token rejection (Docs/behaviour.md).
  static let maxReplayBody = 64 * 1024

  /// Body bytes held while a token is fetched, before the request is given up.
  static let maxPendingBody = 1 << 20
}
