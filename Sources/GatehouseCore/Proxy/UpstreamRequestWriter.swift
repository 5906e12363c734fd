import GatehouseHTTP

/// Writes the request head the upstream receives: the rewritten target, the client's fields
/// less the hop-by-hop table and the route's dropped names, the route's set lines, `Host`
/// (the upstream's, or the one the config sets),
/// `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Request-Id`, and the framing of the body that
/// is actually sent. Byte in, byte out: nothing here builds a String per request.
public enum UpstreamRequestWriter {
  /// The token's field line in three parts: `Authorization: Bearer `, the value, the rest and CRLF.
  /// (A struct, not a tuple: a tuple of arrays in an optional is destroyed through its runtime
  /// metadata, a struct by specialized code.)
  public struct TokenLine {
    public let prefix: [UInt8]
    public let value: [UInt8]
    public let suffix: [UInt8]

    public init(prefix: [UInt8], value: [UInt8], suffix: [UInt8]) {
      self.prefix = prefix
      self.value = value
      self.suffix = suffix
    }
  }

  /// Request fields the gateway answers itself when it builds or keeps the answer of a GET
  /// or HEAD (an envelope, an answer for the store): the upstream is asked for the whole,
  /// current answer, and the gateway meets the client's conditions on what it sends.
  static let conditionFields = HeaderNameSet([
    "if-match", "if-none-match", "if-modified-since", "if-unmodified-since", "if-range", "range",
  ])

  /// - Parameters:
  ///   - meetsConditions: the client's `conditionFields` are left out (see there).
  ///   - validatorLines: the gateway's own conditional fields, for a stored answer it
  ///     revalidates (`StoreEntryRules.validatorLines`).
  ///   - claimLines: a verified JWT's forwarded claims (`BearerAdmission.claimLines`).
  public static func write(
    head: HTTPRequestHead, method: HTTPMethod? = nil, target: ArraySlice<UInt8>, hostHeader: [UInt8], plan: HeaderPlan,
    token: TokenLine? = nil, acceptsGzip: Bool = false, sharedAnswer: Bool = false, meetsConditions: Bool = false,
    validatorLines: [UInt8] = [], claimLines: [UInt8] = [], clientAddress: [UInt8],
    forwardedProto: StaticString, requestID: [UInt8], framing: HTTPBodyFraming, upgrade: Bool = false,
    into out: inout [UInt8]
  ) {
    // Names of the common methods are string literals: no allocation, UTF-8 already.
    var methodName = (method ?? head.method).name
    let headers = head.headers
    // A configured Host replaces the upstream URL's (it is never among the set lines).
    let host = plan.host ?? hostHeader
    // Every piece below is counted here: the client's fields (and the separators joining
    // its X-Forwarded-For lines) within `serializedFieldsLength`, the rest by length.
    var bound =
      fixedBound + methodName.utf8.count + target.count + host.count + headers.serializedFieldsLength
      + plan.setLines.count + clientAddress.count + requestID.count + validatorLines.count + claimLines.count + 24
    if let token { bound += token.prefix.count + token.value.count + token.suffix.count }
    if plan.writesForwarded { bound += clientAddress.count + 40 }
    if upgrade { bound += WebSocketHandshake.upstreamLines.utf8CodeUnitCount }
    out.appendBytes(upTo: bound) { out in
      methodName.withUTF8 { out.write($0) }
      out.write(0x20)
      out.write(target)
      out.write(" HTTP/1.1\r\nHost: ")
      out.write(host)
      out.write("\r\n")

      var sawForwardedFor = false
      let connectionNamed = connectionListedNames(headers)
      headers.withEachField { name, value in
        if HopByHop.isHopByHop(name) || plan.dropped.contains(name) { return }
        if HopByHop.isUnderscoreLookAlike(name, of: plan.lookAlikesDropped) { return }
        if HopByHop.gatewayRequestFields.contains(name) {
          if isForwardedFor(name) && !value.isEmpty { sawForwardedFor = true }
          return
        }
        if let connectionNamed, connectionNamed.contains(name) { return }
        if meetsConditions && conditionFields.contains(name) { return }
        // An answer others will get depends on no field of this client's but the keyed ones.
        if sharedAnswer && !plan.sharedFields.contains(name) { return }
        if plan.dropsAPIKeyAuthorization && ASCIIBytes.equalsLowercase(name, "authorization")
          && ClientKeys.isAPIKeyScheme(value)
        {
          return
        }
        out.write(name)
        out.write(0x3A)
        out.write(0x20)
        out.write(value)
        out.write("\r\n")
      }
      out.write(plan.setLines)
      out.write(claimLines)
      out.write(validatorLines)
      if plan.normalizesAcceptEncoding && acceptsGzip { out.write("Accept-Encoding: gzip\r\n") }
      if let token {
        out.write(token.prefix)
        out.write(token.value)
        out.write(token.suffix)
      }
      // Every X-Forwarded-For line the client sent, in order, joined as one list, then the
      // client's own address.
      out.write("X-Forwarded-For: ")
      // An answer others will get names no address this client chose: only the peer's.
      if sawForwardedFor && !sharedAnswer {
        headers.withEachField { name, value in
          guard isForwardedFor(name), !value.isEmpty else { return }
          out.write(value)
          out.write(", ")
        }
      }
      out.write(clientAddress)
      out.write("\r\nX-Forwarded-Proto: ")
      out.write(forwardedProto)
      if plan.writesForwarded {
        // RFC 7239 §6: an IPv6 address goes in brackets, quoted; the client's own
        // `Forwarded` was dropped (or passed on purpose, above).
        let ipv6 = clientAddress.contains(0x3A)
        out.write("\r\nForwarded: for=")
        if ipv6 { out.write("\"[") }
        out.write(clientAddress)
        if ipv6 { out.write("]\"") }
        out.write(";proto=")
        out.write(forwardedProto)
      }
      out.write("\r\nX-Request-Id: ")
      out.write(requestID)
      out.write("\r\n")
      // A WebSocket handshake (Docs/websockets.md): the client's `Upgrade` and `Connection` were
      // dropped as hop-by-hop with the rest; the gateway asks for the upgrade itself.
      if upgrade { out.write(WebSocketHandshake.upstreamLines) }
      out.writeFramingField(framing)
      out.write("\r\n")
    }
  }

  /// Room for the fixed parts: the request line's version, the gateway's field names and
  /// the framing field.
  static let fixedBound = 192

  @inline(__always)
  static func isForwardedFor(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
    name.count == 15 && ASCIIBytes.equalsLowercase(name, "x-forwarded-for")
  }

  /// Names listed in the client's Connection field other than close/keep-alive; nil in the
  /// usual case, so the common path allocates nothing.
  static func connectionListedNames(_ headers: HTTPHeaders) -> HeaderNameSet? {
    guard headers.mayListConnectionOptions else { return nil }
    var needsNames = false
    headers.withEachField { name, value in
      if !needsNames && ASCIIBytes.equalsLowercase(name, "connection") && listsOtherThanCloseOrKeepAlive(value) {
        needsNames = true
      }
    }
    guard needsNames else { return nil }
    var listed = HeaderNameSet([])
    for index in 0..<headers.count where headers.nameEquals(at: index, "connection") {
      for name in HopByHop.namesListed(inConnection: [headers.value(at: index)]) { listed.insert(name) }
    }
    return listed
  }

  /// Whether a Connection value names a field (anything but `close` and `keep-alive`);
  /// checked on bytes so the usual `keep-alive` costs no String.
  static func listsOtherThanCloseOrKeepAlive(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
    ASCIIBytes.anyListElement(value) { token in
      !ASCIIBytes.equalsLowercase(token, "close") && !ASCIIBytes.equalsLowercase(token, "keep-alive")
    }
  }

  @inline(__always)
  static func append(_ literal: StaticString, _ out: inout [UInt8]) {
    out.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }
}
