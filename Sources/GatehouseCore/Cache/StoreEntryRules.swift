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

  /// An answer as the store keeps it. A gzip body for an entry that serves clients without
  /// gzip (the backend sent it unasked) is kept decoded, once, rather than inflated on
  /// every hit; gzip clients of pass-through routes have an entry of their own, which keeps
  /// it as it came. nil when it does not decode within `maxDecodedKeptBody`: not kept.
  static func keptForm(_ head: HTTPResponseHead, body: [UInt8], gzipEntry: Bool) -> (
    head: HTTPResponseHead, body: [UInt8]
  )? {
    guard !gzipEntry, let coding = ForwardingRules.field(head.headers, "content-encoding"),
      EnvelopeRenderer.isGzip(coding)
    else {
      return (head, body)
    }
    guard let decoded = try? GzipDecoder.decode(body, maxOutputBytes: maxDecodedKeptBody) else { return nil }
    var plain = head
    plain.headers = HTTPHeaders(head.headers.pairs.filter { $0.name.lowercased() != "content-encoding" })
    plain.bodyFraming = .contentLength(Int64(decoded.count))
    return (plain, decoded)
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
      upstream: upstream, target: exchange.upstreamTarget, varyNames: vary, vary: values, clientID: client,
      host: plan?.headerPlan.host, scope: plan?.cacheScope, gzip: gzip)
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

  static func cacheLines(_ result: CacheResult?) -> [UInt8] {
    guard let result else { return [] }
    return Array("X-Gatehouse-Cache: \(result.rawValue)\r\n".utf8)
  }
}
