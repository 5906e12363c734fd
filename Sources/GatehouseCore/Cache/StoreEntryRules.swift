import GatehouseCompression
import GatehouseHTTP
import GatehouseStore

/// What decides a request's store entry and what the store keeps, apart from I/O: the key's
/// inputs, the requests that may share an answer (no client credentials), the form an
/// answer is kept in, and the lines an answer from the store carries.
enum StoreEntryRules {
  /// Bodies above this size are not kept for the store.
  static let maxStoredBody = 8 << 20

  /// A kept gzip body decoded for a client without gzip (only when a backend sent gzip unasked:
  /// such clients have their own entries) may be at most this large.
  static let maxDecodedKeptBody = maxStoredBody

  static let contentEncodingField = HeaderNameSet(["content-encoding"])

  /// Upstream fields an answer from the store (or shared by a collapsed exchange) does not
  /// repeat when it carries the gateway's `ETag` (the body is not the bytes the backend
  /// sent, see `backendTag`): the tag is the gateway's, of the bytes it sends; and ranges of
  /// kept answers are not served (so not advertised). See Docs/clients-and-cache.md.
  static let replacedInKeptAnswer = HeaderNameSet(["etag", "accept-ranges", "content-range"])
  /// The same for a kept body sent decoded: its `Content-Encoding` goes too.
  static let replacedInDecodedKeptAnswer = HeaderNameSet([
    "etag", "accept-ranges", "content-range", "content-encoding",
  ])
  /// The same for a kept body that is the backend's bytes: its own `ETag` stays.
  static let replacedInBackendTaggedKeptAnswer = HeaderNameSet(["accept-ranges", "content-range"])

  /// The field a stored answer carries when its body is not the bytes the backend sent
  /// (`keptForm` decoded it), whose value is the coding it was decoded from. Its stored `ETag`
  /// is still the backend's (of the coded bytes): sent back as `If-None-Match` to revalidate,
  /// it asks about the representation the backend has, and its `304` still confirms the
  /// entry. But it names other bytes than those served, so such an entry is served with the
  /// gateway's tag (`backendTag`). One of `HopByHop.gatewayAnswerFields`: a backend's own is
  /// neither stored nor passed on, nor taken from a `304`, so only the gateway sets it; and no
  /// client sees it. Why a field and not a column: it lives wherever the headers do (the
  /// local store, the shared tier's records) without a change to either.
  static let decodedMarkerName = "X-Gatehouse-Decoded"

  /// The validator that an answer made of a kept `head` and its body, passed through, carries
  /// and meets the client's conditions with: the backend's own `ETag` (strong or weak, as it
  /// came: the first `ETag` field, when it is a valid entity tag), so that the answers from
  /// the store of a pass-through route carry the tag its `MISS` did, and a client's copy from
  /// either revalidates against the other. nil when the body is not the backend's bytes (kept
  /// decoded: `decodedMarkerName`), or the backend sent no valid tag: the gateway's tag of the
  /// bytes it sends then stands in. The caller rules out bodies it changes as it serves them
  /// (decoded for a client without gzip, or wrapped in an envelope).
  static func backendTag(_ head: HTTPResponseHead) -> EntityTag? {
    guard let value = head.headers.firstValue(lowercaseName: "etag"),
      head.headers.firstIndex(lowercaseName: "x-gatehouse-decoded") == nil
    else { return nil }
    return EntityTag(value)
  }

  /// An answer as the store keeps it. A gzip body for an entry that serves clients without
  /// gzip (the backend sent it unasked) is kept decoded, once, rather than inflated on
  /// every hit; gzip clients of pass-through routes have an entry of their own, which keeps
  /// it as it came. `decoded`: the body is no longer the backend's bytes (the store adds
  /// `decodedMarkerName`). nil when it does not decode within `maxDecodedKeptBody`: not kept.
  static func keptForm(_ head: HTTPResponseHead, body: [UInt8], gzipEntry: Bool) -> (
    head: HTTPResponseHead, body: [UInt8], decoded: Bool
  )? {
    guard !gzipEntry, let coding = ForwardingRules.field(head.headers, "content-encoding"),
      EnvelopeRenderer.isGzip(coding)
    else {
      return (head, body, false)
    }
    guard let decoded = try? GzipDecoder.decode(body, maxOutputBytes: maxDecodedKeptBody) else { return nil }
    var plain = head
    plain.headers = HTTPHeaders(head.headers.pairs.filter { $0.name.lowercased() != "content-encoding" })
    plain.bodyFraming = .contentLength(Int64(decoded.count))
    return (plain, decoded, true)
  }

  /// Whether the request's entry is the gzip one of a pass-through route (see `cacheKeyInputs`).
  static func isGzipEntry(_ exchange: Exchange) -> Bool {
    let plan = exchange.routeIndex.map { exchange.snapshot.routePlans[$0] }
    return plan?.envelope == nil && exchange.acceptsGzip
  }

  /// The largest upstream `Age` taken into the age of a stored answer: ten years.
  static let maxInitialAge: Int64 = 315_360_000

  /// The key inputs of a request: each vary header's values joined, prefixed with "=" when
  /// the client sent it (so "absent" and "empty" differ).
  static func cacheKeyInputs(_ exchange: Exchange, upstream: String, vary: [String]) -> LoopStore.KeyInputs {
    let values = vary.map { name -> String in
      let sent = exchange.head.headers.values(for: name)
      return sent.isEmpty ? "" : "=" + sent.joined(separator: ",")
    }
    // With keys required, answers are per client: one client's data never serves another.
    let client = exchange.snapshot.clients.required ? exchange.clientID : nil
    // Two routes to one upstream with their own Host are two virtual hosts: their answers
    // for the same path are different resources.
    let plan = exchange.routeIndex.map { exchange.snapshot.routePlans[$0] }
    // A route that passes bodies through keeps the gzip answer (for clients that take it)
    // apart from the plain one: decoding a kept body per answer would cost the loop the time
    // a large body takes to inflate, on every hit. Enveloped routes decode anyway to wrap.
    let gzip = isGzipEntry(exchange)
    return LoopStore.KeyInputs(
      upstream: upstream, target: Array(exchange.upstreamTarget), varyNames: vary, vary: values, clientID: client,
      host: plan?.headerPlan.host, scope: plan?.cacheScope, gzip: gzip, user: exchange.bearer?.userKey)
  }

  /// Request fields that carry a client's own credentials.
  static let credentialFields = HeaderNameSet(["authorization", "cookie", "x-api-key"])

  /// Whether the request carries credentials of the client's own (`Authorization`, `Cookie`,
  /// `X-Api-Key`, or a look-alike spelled with `_`) that the route forwards and its key does
  /// not hold: the answer may be that client's alone. A shared cache does not reuse answers
  /// to such requests (RFC 9111 §3.5), so they neither read nor feed the store, nor share
  /// an exchange with others. An injected token, a client key and a removed field are not the
  /// client's credentials reaching the backend.
  static func forwardsClientCredentials(_ exchange: Exchange, plan: RoutePlan, keyed: [String]) -> Bool {
    var found = false
    exchange.head.headers.withEachField { name, value in
      guard !found else { return }
      guard
        credentialFields.contains(name)
          || (name.contains(0x5F) && credentialFields.containsReadingUnderscoreAsDash(name))
      else { return }
      if plan.headerPlan.dropped.contains(name) || HopByHop.isUnderscoreLookAlike(name, of: plan.headerPlan.dropped) {
        return
      }
      if plan.headerPlan.dropsAPIKeyAuthorization && ASCIIBytes.equalsLowercase(name, "authorization")
        && ClientKeys.isAPIKeyScheme(value)
      {
        return
      }
      if keyed.contains(String(decoding: name, as: UTF8.self).lowercased()) { return }
      found = true
    }
    return found
  }

  /// Whether the request's `Connection` field lists one of the `keyed` names.
  static func connectionNamesKeyedField(_ head: HTTPRequestHead, keyed: [String]) -> Bool {
    guard !keyed.isEmpty, let listed = UpstreamRequestWriter.connectionListedNames(head.headers) else { return false }
    return keyed.contains { listed.contains($0.lowercased()) }
  }

  /// The request fields the route's cache key holds (its `vary` list, lowercased).
  static func keyedNames(_ exchange: Exchange) -> [String] {
    exchange.routeIndex.flatMap { exchange.snapshot.routePlans[$0].cache?.vary } ?? []
  }

  /// The `X-Gatehouse-Cache` line of an answer on a route with a cache: made once per
  /// result, not per answer (string interpolation cost about a thousand instructions).
  static func cacheLines(_ result: CacheResult?) -> [UInt8] {
    switch result {
    case nil: []
    case .hit: hitLine
    case .stale: staleLine
    case .miss: missLine
    case .bypass: bypassLine
    case .revalidated: revalidatedLine
    }
  }

  private static let hitLine = line(.hit)
  private static let staleLine = line(.stale)
  private static let missLine = line(.miss)
  private static let bypassLine = line(.bypass)
  private static let revalidatedLine = line(.revalidated)

  private static func line(_ result: CacheResult) -> [UInt8] {
    Array("X-Gatehouse-Cache: \(result.rawValue)\r\n".utf8)
  }

  // MARK: Revalidation

  /// The conditional fields that ask the upstream whether `stored` is still current
  /// (RFC 9111 §4.3.1): its `ETag` as `If-None-Match` and its `Last-Modified` as
  /// `If-Modified-Since`, each only when it is a valid one (they are written as they were
  /// stored); empty when it has neither.
  static func validatorLines(_ stored: StoredAnswer) -> [UInt8] {
    guard (200..<300).contains(stored.status) else { return [] }
    var lines: [UInt8] = []
    if let etag = stored.headers.first(where: { $0.name.lowercased() == "etag" && EntityTag($0.value.utf8) != nil }) {
      lines.append(contentsOf: "If-None-Match: \(etag.value)\r\n".utf8)
    }
    if let date = stored.headers.first(where: {
      $0.name.lowercased() == "last-modified" && HTTPDate.parse($0.value.utf8) != nil
    }) {
      lines.append(contentsOf: "If-Modified-Since: \(date.value)\r\n".utf8)
    }
    return lines
  }

  /// Fields of a `304` that do not update a stored answer (RFC 9111 §3.2): those about the
  /// message rather than the stored answer, and those describing a body the 304 does not carry.
  static let keptThroughRenewal = HeaderNameSet([
    "content-length", "content-encoding", "content-range", "transfer-encoding", "content-type",
  ])

  /// A stored answer's headers updated by a `304`'s (RFC 9111 §4.3.4): each field the 304
  /// carries replaces the stored ones of its name, except the hop-by-hop fields, the
  /// gateway's own and `keptThroughRenewal`.
  static func renewedHeaders(_ stored: StoredHeaders, notModified: HTTPHeaders) -> StoredHeaders {
    var replacing: [(name: String, value: String)] = []
    notModified.withEachField { name, value in
      if HopByHop.isHopByHop(name) || HopByHop.gatewayAnswerFields.contains(name) { return }
      if keptThroughRenewal.contains(name) { return }
      replacing.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
    }
    guard !replacing.isEmpty else { return stored }
    let replaced = Set(replacing.map { $0.name.lowercased() })
    return stored.filter { !replaced.contains($0.name.lowercased()) } + replacing
  }

  /// Whether a `304`'s strong `ETag`, if it has one, is the stored answer's: one naming
  /// another representation confirms nothing about this one (RFC 9111 §4.3.4).
  static func confirms(_ notModified: HTTPHeaders, _ stored: StoredAnswer) -> Bool {
    guard let value = notModified.firstValue(lowercaseName: "etag"), let tag = EntityTag(value), !tag.isWeak else {
      return true
    }
    return stored.headers.contains { $0.name.lowercased() == "etag" && EntityTag($0.value.utf8)?.opaque == tag.opaque }
  }

  /// The complete upstream answer of a request with a cache key, when it may be stored
  /// (raw: the envelope is applied when it is served, so envelope settings can change).
  static func storableAnswer(_ exchange: Exchange) -> (head: HTTPResponseHead, body: [UInt8])? {
    guard exchange.hasCacheKey, let status = exchange.upstreamStatus, !exchange.answerFollowsDoubt else { return nil }
    switch exchange.bodyPlan {
    case .buffer:
      guard let head = exchange.bufferedHead, !exchange.bufferedTruncated,
        !exchange.answerParser.requestWasHEAD,
        CacheStorability.isStorable(
          status: status, headers: head.headers, keyed: keyedNames(exchange), enveloped: exchange.envelope != nil)
      else { return nil }
      return (head, exchange.bufferedBody)
    case .passThrough:
      guard let tee = exchange.teeBody, let head = exchange.storableHead else { return nil }
      return (head, tee)
    case .streamWrapped:
      return nil
    }
  }

  // MARK: Answers from the shared tier

  /// Why `answer`, read from the shared tier for an entry of the route `plan` (`gzipEntry`:
  /// the entry that keeps gzip as it came, `isGzipEntry`), is not an answer this gateway would
  /// have stored there: the rule's name, for the log line, or nil. Whoever can write to the
  /// tier can write any record, so a record is held to the rules an upstream answer meets on
  /// its way into the store, the same functions: what `CacheStorability` refuses (statuses,
  /// `Set-Cookie`, `Location`, `Cache-Control`, `Vary`, codings, an HTML page on an
  /// enveloped route); the fields the store never keeps (`LoopStore.remember` leaves out the
  /// hop-by-hop and framing fields and the gateway's own); no body where the status allows
  /// none; the size bounds of an upstream answer's head and of a stored body; no gzip coding
  /// on an entry kept decoded (`keptForm`); a body that does not say the token was rejected;
  /// and on an enveloped route an answer the envelope can use (what a client's exchange and
  /// a background refresh refuse to store, neither is served from the tier).
  static func refusal(ofShared answer: StoredAnswer, gzipEntry: Bool, plan: RoutePlan) -> String? {
    let limits = Exchange.upstreamAnswerLimits
    guard answer.headers.count <= limits.maxHeaderCount, answer.body.count <= maxStoredBody else { return "size" }
    var headers = HTTPHeaders()
    var headBytes = 0
    for field in answer.headers {
      headBytes += field.name.utf8.count + field.value.utf8.count + 4
      headers.add(name: field.name, value: field.value)
    }
    guard headBytes <= limits.maxHeaderBytes else { return "size" }
    var neverKept: String?
    headers.withEachField { name, value in
      guard neverKept == nil, HopByHop.isHopByHop(name) || HopByHop.gatewayAnswerFields.contains(name) else { return }
      // The store's own note on a body it keeps decoded is the one gateway field a record
      // carries, and only as the gateway writes it (it decides no more than which tag the
      // answer is served with).
      if ASCIIBytes.equalsLowercase(name, "x-gatehouse-decoded"), ASCIIBytes.equalsLowercase(value, "gzip") { return }
      neverKept = String(decoding: name, as: UTF8.self).lowercased()
    }
    if let neverKept { return neverKept }
    if let rule = CacheStorability.refusal(
      status: answer.status, headers: headers, keyed: plan.cache?.vary ?? [], enveloped: plan.envelope != nil)
    {
      return rule
    }
    // A 204 that brought bytes would send them after a head that says there are none: the
    // client would read them as the next answer.
    if !HTTPSerializer.statusAllowsBody(answer.status) && !answer.body.isEmpty { return "body" }
    if !gzipEntry, let coding = ForwardingRules.field(headers, "content-encoding"), EnvelopeRenderer.isGzip(coding) {
      return "content-encoding"
    }
    let head = HTTPResponseHead(
      status: answer.status, headers: headers, bodyFraming: .contentLength(Int64(answer.body.count)))
    if let use = plan.token, use.answerRejects(head, body: answer.body) { return "token-rejected" }
    if let policy = plan.envelope,
      case .unusable = EnvelopeRenderer.render(answer: head, body: answer.body, truncated: false, policy: policy)
    {
      return "envelope"
    }
    return nil
  }

  private static let ageLinePrefix = Array("Age: ".utf8)
  private static let staleWarningLine = Array("Warning: 110 - \"Response is Stale\"\r\n".utf8)

  /// A stored answer as it is served at `nowMs`: its head, and the lines the gateway adds
  /// (`X-Gatehouse-Cache`, `Age`, and `Warning` when it is stale).
  static func servedForm(_ stored: StoredAnswer, result: CacheResult, nowMs: Int64) -> (
    head: HTTPResponseHead, extra: [UInt8]
  ) {
    let served = servedHead(stored)
    let age = servedAge(initialAge: served.initialAge, storedAtMs: stored.storedAtMs, nowMs: nowMs)
    return (served.head, servedLines(result: result, age: age))
  }

  /// The part of a stored answer's served form that does not change while it is stored:
  /// its head without the upstream's `Age` and `Warning`, and the age it had when stored.
  /// Depends on the status, the headers and the body's length only (`RouteCache` keeps the
  /// last one made).
  static func servedHead(_ stored: StoredAnswer) -> (head: HTTPResponseHead, initialAge: Int64) {
    servedHead(status: stored.status, headers: stored.headers, bodyCount: stored.body.count)
  }

  /// `servedHead(_:)` of an answer whose body is not at hand (`StoredAnswerHead`).
  static func servedHead(status: Int, headers stored: StoredHeaders, bodyCount: Int) -> (
    head: HTTPResponseHead, initialAge: Int64
  ) {
    // The gateway says how old the answer is now: the Age and Warning the upstream sent
    // with it (from a cache in front of it) described it then. That Age is where the
    // answer's age started (RFC 9111 §4.2.3), so it is added to the time spent in the store.
    var initialAge: Int64 = 0
    // Built in one pass, its room reserved.
    var headers = HTTPHeaders()
    var bytes = 0
    for field in stored { bytes += field.name.utf8.count + field.value.utf8.count }
    headers.reserveCapacity(bytes: bytes, fields: stored.count)
    for field in stored {
      let name = field.name.lowercased()
      if name == "age" {
        // delta-seconds only (digits); longer than 10 digits is capped like any huge value,
        // so a hostile one cannot overflow the sum.
        if initialAge == 0, !field.value.isEmpty, field.value.utf8.allSatisfy({ $0 &- 0x30 < 10 }) {
          initialAge =
            field.value.utf8.count > 10
            ? maxInitialAge : min(Int64(field.value) ?? 0, maxInitialAge)
        }
        continue
      }
      if name == "warning" { continue }
      headers.add(name: field.name, value: field.value)
    }
    let head = HTTPResponseHead(
      status: status, headers: headers, bodyFraming: .contentLength(Int64(bodyCount)))
    return (head, initialAge)
  }

  /// How old a stored answer is at `nowMs`, in whole seconds (RFC 9111 §4.2.3): the age it
  /// had when stored plus the time it has spent in the store.
  static func servedAge(initialAge: Int64, storedAtMs: Int64, nowMs: Int64) -> Int64 {
    // Saturating: a stored time far from now (a damaged entry) gives a huge age, never a trap.
    let (elapsed, overflow) = nowMs.subtractingReportingOverflow(storedAtMs)
    let seconds = overflow ? (storedAtMs > nowMs ? 0 : Int64.max / 2) : max(0, elapsed / 1000)
    return min(initialAge, Int64.max / 2) + min(seconds, Int64.max / 2)
  }

  /// How long ago `storedAtMs` was at `nowMs`, saturating instead of trapping on a time a
  /// damaged or hostile entry carries.
  static func elapsedMs(since storedAtMs: Int64, nowMs: Int64) -> Int64 {
    let (elapsed, overflow) = nowMs.subtractingReportingOverflow(storedAtMs)
    return overflow ? (storedAtMs > nowMs ? Int64.min : Int64.max) : elapsed
  }

  /// The lines the gateway adds to a stored answer `age` seconds old (`X-Gatehouse-Cache`,
  /// `Age`, and `Warning` when it is stale).
  static func servedLines(result: CacheResult, age: Int64) -> [UInt8] {
    let cacheLine = cacheLines(result)
    var extra: [UInt8] = []
    extra.reserveCapacity(cacheLine.count + 32 + (result == .stale ? staleWarningLine.count : 0))
    extra.append(contentsOf: cacheLine)
    // RFC 9111 §5.1: every answer from the store says how old it is.
    extra.append(contentsOf: ageLinePrefix)
    HTTPSerializer.appendDecimal(age, to: &extra)
    extra.append(UInt8(ascii: "\r"))
    extra.append(UInt8(ascii: "\n"))
    if result == .stale { extra.append(contentsOf: staleWarningLine) }
    return extra
  }
}
