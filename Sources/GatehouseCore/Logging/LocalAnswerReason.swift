/// Why the gateway answered a request itself instead of passing on the upstream's answer
/// for it: the `reason` of access lines and the `reason` label of
/// `gatehouse_local_answers_total`. An answer the upstream gave has none.
///
/// The raw values are part of the log and metrics contract: add cases, never rename.
public enum LocalAnswerReason: String, Sendable, Hashable, CaseIterable {
  /// The health checks call the upstream down: refused without a connect attempt.
  case unhealthy
  /// The upstream's (or the route's) circuit is open: refused without a connect attempt.
  case circuitOpen = "circuit_open"
  /// The connection was refused or the host unreachable (or no socket could be opened).
  case connectRefused = "connect_refused"
  case connectTimeout = "connect_timeout"
  /// The TLS handshake with an https upstream failed (certificate, protocol).
  case tlsFailed = "tls_failed"
  /// No answer head within `response_timeout_ms`.
  case answerTimeout = "response_timeout"
  /// The upstream closed or reset the connection before its answer.
  case reset
  /// The upstream's bytes were no HTTP answer, or its body could not be used (invalid
  /// JSON or a corrupt gzip body for the envelope, too large to wrap).
  case badAnswer = "bad_response"
  /// The upstream answered 5xx and a stored answer was served instead (`cache: STALE`).
  case upstreamError = "upstream_error"
  case tokenUnavailable = "token_unavailable"
  case tokenRejected = "token_rejected"
  case rateLimited = "rate_limited"
  case clientKeyMissing = "client_key_missing"
  case clientKeyInvalid = "client_key_invalid"
  /// A route with a required `jwt` got no bearer token.
  case bearerMissing = "jwt_missing"
  /// The bearer token failed verification (the access line's `jwt_error` says why).
  case bearerInvalid = "jwt_invalid"
  case scopeInsufficient = "jwt_insufficient_scope"
  /// The identity provider had no signing keys to verify with.
  case signingKeysUnavailable = "jwt_keys_unavailable"
  /// An `Upgrade: websocket` handshake on a route without `websocket`.
  case webSocketNotEnabled = "websocket_not_enabled"
  /// `limits.max_websockets` tunnels were open.
  case webSocketsAtLimit = "websocket_limit"
  case noRoute = "no_route"
  /// The route names no upstream, or its upstream is gone from the config.
  case noUpstream = "no_upstream"
  case badRequest = "bad_request"
  /// The request's head or body did not arrive in time.
  case requestTimeout = "request_timeout"
  /// Every connection `max_connections` allows stayed busy for the queue timeout.
  case upstreamBusy = "upstream_busy"
  /// `limits.buffered_bytes` was spent.
  case overloaded
  /// The route's stub answered (`stub.mode: always`).
  case stub
  /// A stored answer could not be served (its gzip body does not decode).
  case storedAnswerUnusable = "stored_answer_unusable"
}
