import GatehouseCompression
import GatehouseHTTP
import GatehouseJSON
import GatehouseNet
import GatehouseStore

/// One request's journey through the gateway, owned by its client session. A class, so
/// the many short reads of it on the request path share one reference instead of copying.
final class Exchange {
  /// The request's phase and the rules that move it on; this class holds what the session
  /// needs to perform the machine's actions.
  var machine = ExchangeMachine()
  /// A WebSocket handshake's slot of `limits.max_websockets`, held until the exchange is
  /// recorded (a tunnel's end, or a refused handshake's answer).
  var holdsWebSocketSlot = false
  /// The upstream's `101` and the bytes that came behind it, between the reader and `openTunnel`.
  var switchingHead: HTTPResponseHead?
  var upstreamTunnelInput: [UInt8] = []
  /// The tunnel the exchange became (phase `tunnel`); kept after it closes for the access line.
  var tunnel: WebSocketTunnel?
  let head: HTTPRequestHead
  let requestID: [UInt8]
  let snapshot: GatewaySnapshot
  let routeIndex: Int?
  let startedAt: UInt64
  /// The target the upstream is asked for: the request's own bytes when the route sends
  /// them unchanged (no copy), else the rewritten target.
  var upstreamTarget: ArraySlice<UInt8> = []
  var pool: UpstreamPool?
  var upstream: UpstreamConnection?
  /// This answer leaves its connection in doubt, or follows one that did (`UpstreamAnswerDoubt`).
  var answerLeavesDoubt = false
  var answerFollowsDoubt = false
  /// When the request went to the upstream (loop time), for its answer-time average.
  var sentAt: UInt64 = 0
  /// Was pipelined behind an answer after which the connection ended: it goes alone now.
  var pipelineDropped = false
  /// The request was written behind another one on its connection (a pipelined batch).
  var waitedBehindAnother = false
  /// Upstream answers may have larger heads than client requests.
  static let upstreamAnswerLimits = HTTPLimits(maxHeaderBytes: 65536)
  var answerParser = HTTPResponseParser(limits: Exchange.upstreamAnswerLimits)
  var answerBytesReceived = false
  var rechunkRequest = false
  /// The request was written on a connection shared with other requests (pipelined).
  var pipelinedWrite = false
  /// Some of the answer left for the client; until then a started answer is only staged in
  /// the loop's output buffer and can still give way to an error answer.
  var answerFlushed = false
  var rechunkAnswer = false
  var upstreamKeepAlive = false
  var status = 0
  var upstreamStatus: Int?
  /// All bytes written to the client for the answer (`bytes` of the access line) and those
  /// of its body alone (`body_bytes`; see `AccessRecord`).
  var bytesSent: Int64 = 0
  var bodyBytes: Int64 = 0
  /// Why the gateway answered itself; nil while the answer is the upstream's.
  var reason: LocalAnswerReason?
  /// When the upstream's answer head arrived (loop time); 0 before one did.
  var headAt: UInt64 = 0
  /// When the upstream answer's body ended (loop time); 0 until it has.
  var endAt: UInt64 = 0
  /// The route's envelope settings; nil when the route passes bodies through.
  var envelope: EnvelopePolicy?
  var bodyPlan = EnvelopeBodyPlan.passThrough
  /// The upstream head, kept while its body is buffered for the envelope.
  var bufferedHead: HTTPResponseHead?
  var bufferedBody: [UInt8] = []
  var bufferedTruncated = false
  /// Bytes of `bufferedBody` taken from the `limits.buffered_bytes` budget.
  var bufferCharge = 0
  var streamValidator: JSONStreamingValidator?
  /// Leaves a byte order mark out of a wrapped stream's body.
  var bomFilter = LeadingBOMFilter()
  /// Masks the token in an error answer that passes through (`ForwardingRules.tokenToHide`).
  var bodyMasker: StreamingSecretMasker?
  /// A HEAD request sent upstream as GET (enveloped routes need the body to size the
  /// answer): its body is read but never sent to the client.
  var suppressBody = false
  var acceptsGzip = false
  /// The store key, for GET/HEAD requests on routes with a `cache` block.
  var cacheKey: CacheKey? {
    didSet { hasCacheKey = cacheKey != nil }
  }
  /// Whether `cacheKey` is set, asked on every answer: testing the optional itself copies the key.
  private(set) var hasCacheKey = false
  var cacheResult: CacheResult?
  /// The client key's id, when the request carried a valid one.
  var clientID: String?
  /// The endpoints of the upstream this request's tries went to: a retry avoids them.
  var triedEndpoints = TriedEndpoints()
  /// What the bearer token's check left (routes with `jwt` only).
  var bearer: BearerAdmission?

  /// The forwarded claims the upstream request carries: none when its answer may be
  /// everyone's (a cache key without the user in it: `cache.shared`), since the backend
  /// would answer for this user and everyone would get that answer.
  var upstreamClaimLines: [UInt8] {
    guard let bearer, !hasCacheKey || bearer.userKey != nil else { return [] }
    return bearer.claimLines
  }
  /// The client key's local bucket, when its limit is counted in the shared tier: the
  /// fallback when the tier does not answer.
  var rateLimitBucket: Int?
  /// When a rate-limited client may ask again (`Retry-After`, seconds).
  var retryAfterSeconds = 0
  /// The serial of the token value sent, reported back if the backend rejects it.
  var tokenSerial: UInt64?
  /// The token value sent, with the forms it is masked in when an error answer echoes it
  /// (made once per value, shared, not a copy).
  var sentToken: SecretSpellings?
  /// A value handed over by a token refresh, used for the next send.
  var tokenGrant: TokenGrant?
  /// After a rejection: the next token is the one a refresh brings, not the one at hand
  /// (`rejectedToken`: the value rejected and where, for a refreshable token).
  var awaitsNewToken = false
  var rejectedToken: (serial: UInt64, endpoint: String)?
  /// The request body, kept (up to `maxReplayBody`) on routes with a token; nil once too big.
  var requestBodyCopy: [UInt8]?
  /// Body bytes that arrived while the token was fetched.
  var pendingBody: [UInt8] = []
  /// A pass-through body kept (up to a limit) so it can be stored, with its head.
  var teeBody: [UInt8]?
  var storableHead: HTTPResponseHead?
  /// When the whole request body must have arrived (`limits.body_timeout_ms`); 0 for none.
  var bodyDeadline: UInt64 = 0
  /// The stored answer the machine may serve (a fresh hit, or one for a failure).
  var storedAnswer: StoredAnswer?
  /// In its place, a large stored answer served by its shape (a HEAD, a met condition).
  var storedShape: ShapedStoredAnswer?
  /// The stored answer whose validators the upstream request carries (it was no longer
  /// fresh): a `304` confirms it.
  var revalidation: StoredAnswer?
  /// The client's conditional and range fields were left out of the upstream request
  /// (`UpstreamRequestWriter.conditionFields`): the gateway meets them on what it sends.
  var gatewayMeetsConditions = false
  /// The upstream's `304` confirming `revalidation`, until its end is read.
  var notModifiedHead: HTTPResponseHead?
  /// The answer of the exchange a collapsed request waited for.
  var collapsedAnswer: CollapsedAnswer?
  /// How long a collapsed request waits for its leader (loop nanoseconds).
  var collapsePatience: UInt64 = 0
  /// The upstream's last failure, and the access line's reason for it when more precise
  /// than the failure's own: what a stored answer, the stub or an error answer stands for.
  var failure: UpstreamFailure?
  var failureReason: LocalAnswerReason?
  /// This exchange's part in collapsed forwarding.
  var collapseRole = CollapseRole.none
  /// What a leading exchange hands its waiters when it ends (nil: they ask the upstream).
  var collapseOutcome: CollapseOutcome?

  init(head: HTTPRequestHead, requestID: [UInt8], snapshot: GatewaySnapshot, routeIndex: Int?, startedAt: UInt64) {
    self.head = head
    self.requestID = requestID
    self.snapshot = snapshot
    self.routeIndex = routeIndex
    self.startedAt = startedAt
  }

  /// The answer is read anew (a retry, a request sent again alone): nothing the parser saw
  /// of the connection before belongs to it.
  func startAnswerAfresh() {
    answerParser = HTTPResponseParser(limits: Exchange.upstreamAnswerLimits)
    answerBytesReceived = false
    notModifiedHead = nil
  }
}
