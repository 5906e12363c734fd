import GatehouseHTTP

/// Writes the request head the upstream receives: the rewritten target, the client's fields
/// less the hop-by-hop table and the route's dropped names, the route's set lines, `Host`,
/// `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Request-Id`, and the framing of the body that
/// is actually sent. Byte in, byte out: nothing here builds a String per request.
public enum UpstreamRequestWriter {
  public static func write(
    head: HTTPRequestHead, method: HTTPMethod? = nil, target: [UInt8], hostHeader: [UInt8], plan: HeaderPlan,
    token: (prefix: [UInt8], value: [UInt8], suffix: [UInt8])? = nil,
    clientAddress: [UInt8],
    forwardedProto: StaticString, requestID: [UInt8], framing: HTTPBodyFraming, into out: inout [UInt8]
  ) {
    HTTPSerializer.appendMethod(method ?? head.method, to: &out)
    out.append(0x20)
    out.append(contentsOf: target)
    append(" HTTP/1.1\r\nHost: ", &out)
    out.append(contentsOf: hostHeader)
    append("\r\n", &out)

    // Every X-Forwarded-For line the client sent, in order, joined as one list.
    var forwardedFor: [UInt8] = []
    let connectionNamed = connectionListedNames(head.headers)
    head.headers.withEachField { name, value in
      if HopByHop.fields.contains(name) || plan.dropped.contains(name) { return }
      if HopByHop.isUnderscoreLookAlike(name) { return }
      if HopByHop.gatewayRequestFields.contains(name) {
        if name.count == 15 && ASCIIBytes.equalsLowercase(name, "x-forwarded-for") && !value.isEmpty {
          if !forwardedFor.isEmpty { forwardedFor.append(contentsOf: ", ".utf8) }
          forwardedFor.append(contentsOf: value)
        }
        return
      }
      if let connectionNamed, connectionNamed.contains(name) { return }
      if plan.dropsAPIKeyAuthorization && ASCIIBytes.equalsLowercase(name, "authorization")
        && ClientKeys.isAPIKeyScheme(value)
      {
        return
      }
      out.append(contentsOf: name)
      out.append(0x3A)
      out.append(0x20)
      out.append(contentsOf: value)
      append("\r\n", &out)
    }
    out.append(contentsOf: plan.setLines)
    if let token {
      out.append(contentsOf: token.prefix)
      out.append(contentsOf: token.value)
      out.append(contentsOf: token.suffix)
    }
    append("X-Forwarded-For: ", &out)
    if !forwardedFor.isEmpty {
      out.append(contentsOf: forwardedFor)
      append(", ", &out)
    }
    out.append(contentsOf: clientAddress)
    append("\r\nX-Forwarded-Proto: ", &out)
    append(forwardedProto, &out)
    append("\r\nX-Request-Id: ", &out)
    out.append(contentsOf: requestID)
    append("\r\n", &out)
    switch framing {
    case .none, .untilClose:
      break
    case .contentLength(let length):
      append("Content-Length: ", &out)
      HTTPSerializer.appendDecimal(length, to: &out)
      append("\r\n", &out)
    case .chunked:
      append("Transfer-Encoding: chunked\r\n", &out)
    }
    append("\r\n", &out)
  }

  /// Names listed in the client's Connection field other than close/keep-alive; nil in the
  /// usual case, so the common path allocates nothing.
  static func connectionListedNames(_ headers: HTTPHeaders) -> HeaderNameSet? {
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
    var start = 0
    while start < value.count {
      var end = start
      while end < value.count && value[end] != 0x2C { end += 1 }
      var tokenStart = start
      var tokenEnd = end
      while tokenStart < tokenEnd && (value[tokenStart] == 0x20 || value[tokenStart] == 0x09) { tokenStart += 1 }
      while tokenEnd > tokenStart && (value[tokenEnd - 1] == 0x20 || value[tokenEnd - 1] == 0x09) { tokenEnd -= 1 }
      if tokenEnd > tokenStart {
        let token = UnsafeBufferPointer(rebasing: value[tokenStart..<tokenEnd])
        if !ASCIIBytes.equalsLowercase(token, "close") && !ASCIIBytes.equalsLowercase(token, "keep-alive") {
          return true
        }
      }
      start = end + 1
    }
    return false
  }

  @inline(__always)
  static func append(_ literal: StaticString, _ out: inout [UInt8]) {
    out.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }
}

/// Byte comparisons shared by the proxy writers.
enum ASCIIBytes {
  @inline(__always)
  static func equalsLowercase(_ bytes: UnsafeBufferPointer<UInt8>, _ lowercase: StaticString) -> Bool {
    guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
    let expected = lowercase.utf8Start
    for i in 0..<bytes.count {
      let byte = bytes[i]
      if (byte &- 0x41 < 26 ? byte | 0x20 : byte) != expected[i] { return false }
    }
    return true
  }
}
