import GatehouseHTTP
import GatehouseStore

/// What the gateway sends for a kept answer, without the body: the form it took (through
/// the envelope, gzip or not; or passed through, decoded or not), the length of the body as
/// sent, and the gateway's tag of it. It is all a HEAD needs, and all a request whose
/// condition the answer meets needs (a `304` or `412` carries no body).
struct KeptAnswerShape: Equatable {
  enum Form: Equatable {
    case enveloped(status: Int, gzip: Bool, variesByCoding: Bool)
    case passThrough(decoded: Bool)
  }

  var form: Form
  /// Bytes of the body as it is sent.
  var length: Int
  /// The gateway's tag of the body as sent; nil where it sends none (an enveloped answer
  /// that is no success, one passed through with the backend's own tag).
  var etag: GatewayETag?
}

extension KeptAnswerShape {
  /// The tag a client's condition is met against, as the whole answer would meet it: the
  /// gateway's for an enveloped success, the backend's (else the gateway's) passed through.
  func entityTag(upstream head: HTTPResponseHead) -> EntityTag? {
    switch form {
    case .enveloped(let status, _, _):
      return (200..<300).contains(status) ? etag?.entityTag : nil
    case .passThrough(let decoded):
      return (decoded ? nil : StoreEntryRules.backendTag(head)) ?? etag?.entityTag
    }
  }

  /// Whether the answer to `request` carries no body: a HEAD, or a GET whose condition the
  /// answer meets (`304`, `412`; RFC 9110 §13.2.2). An enveloped answer that is no success
  /// meets no condition.
  func answersWithoutBody(_ request: HTTPRequestHead, upstream head: HTTPResponseHead) -> Bool {
    if request.method == .head { return true }
    guard request.method == .get, HTTPPreconditions.isConditional(request.headers) else { return false }
    if case .enveloped(let status, _, _) = form, !(200..<300).contains(status) { return false }
    let tag = entityTag(upstream: head)
    let lastModified = head.headers.firstValue(lowercaseName: "last-modified").flatMap(HTTPDate.parse)
    let outcome = HTTPPreconditions.evaluate(
      request.headers, etag: tag?.opaque, etagIsWeak: tag?.isWeak ?? false, lastModified: lastModified)
    return outcome != .proceed
  }
}

/// A large stored answer served by its shape, its body left in the file: the row's head,
/// its served head (`StoreEntryRules.servedHead`), the shape, and the body as sent when the
/// loop keeps it (`KeptAnswerShapes`); without it only a bodiless answer is served this way.
struct ShapedStoredAnswer {
  let stored: StoredAnswerHead
  let head: HTTPResponseHead
  let initialAge: Int64
  let shape: KeptAnswerShape
  let body: [UInt8]?
}

/// One loop's memory of the shapes of large stored answers it has served (bodies over the
/// memory of recent answers' limit), so that HEADs and met conditions for them cost a row's
/// head instead of a read of the whole body from the file, its envelope, gzip and tag (tens
/// of milliseconds for a body of megabytes, which a flood of bodiless requests would buy for
/// nothing). A shape is found by everything that decides it: the body (by the SHA-256 it was
/// stored with), the stored status and headers, the route's envelope settings and whether
/// the client takes gzip. A changed body has another digest, so a shape is never served for
/// a body it was not made from. Bounded; confined to its loop.
struct KeptAnswerShapes {
  struct Key {
    let bodyDigest: [UInt8]
    let status: Int
    let headers: StoredHeaders
    let policy: EnvelopePolicy?
    let acceptsGzip: Bool

    static func == (lhs: Key, rhs: Key) -> Bool {
      lhs.bodyDigest == rhs.bodyDigest && lhs.status == rhs.status && lhs.acceptsGzip == rhs.acceptsGzip
        && lhs.policy == rhs.policy && lhs.headers.count == rhs.headers.count
        && zip(lhs.headers, rhs.headers).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }
  }

  /// Shapes kept; the oldest goes first. Few large entries are hot at once, and a lookup
  /// compares digests first, so a short list is searched faster than a key hashed.
  static let limit = 32
  /// The bodies as sent kept with their shapes, at most this many bytes in all (the most
  /// recent first), each at most half of it: a hot large answer is then served from memory,
  /// at the cost of a copy, instead of being read from the file, checked, wrapped and
  /// tagged again for every request (tens of milliseconds for a body of megabytes, which a
  /// client that asks and resets at once would otherwise buy as often as it likes).
  static let bodyBytesLimit = 32 << 20
  private var entries: [(key: Key, shape: KeptAnswerShape, body: [UInt8]?)] = []
  private(set) var bodyBytes = 0

  var count: Int { entries.count }

  /// The shape for `key`, with the body as sent when it is kept.
  func shape(for key: Key) -> (shape: KeptAnswerShape, body: [UInt8]?)? {
    entries.last { $0.key == key }.map { ($0.shape, $0.body) }
  }

  mutating func remember(_ shape: KeptAnswerShape, body: [UInt8]?, for key: Key) {
    if let index = entries.firstIndex(where: { $0.key == key }) { drop(at: index) }
    if entries.count >= Self.limit { drop(at: 0) }
    let kept = body.flatMap { $0.count <= Self.bodyBytesLimit / 2 ? $0 : nil }
    if let kept {
      // Older bodies make room; their shapes stay.
      var index = 0
      while bodyBytes + kept.count > Self.bodyBytesLimit && index < entries.count {
        if let old = entries[index].body {
          bodyBytes -= old.count
          entries[index].body = nil
        }
        index += 1
      }
      bodyBytes += kept.count
    }
    entries.append((key, shape, kept))
  }

  private mutating func drop(at index: Int) {
    bodyBytes -= entries[index].body?.count ?? 0
    entries.remove(at: index)
  }
}
