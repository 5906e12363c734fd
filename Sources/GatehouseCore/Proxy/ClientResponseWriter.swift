import GatehouseHTTP

/// Writes the response head a client receives for an upstream answer: the upstream's
/// status and fields less the hop-by-hop table, the request id, the framing chosen by
/// `HTTPSerializer.framing`, and `Connection: close` when this is the connection's last answer.
public enum ClientResponseWriter {
  public static func write(
    head: HTTPResponseHead, requestID: [UInt8], framing: HTTPBodyFraming, headContentLength: Int64?,
    closeConnection: Bool, extraLines: [UInt8] = [], into out: inout [UInt8]
  ) {
    append("HTTP/1.1 ", &out)
    HTTPSerializer.appendDecimal(Int64(head.status), to: &out)
    out.append(0x20)
    if head.reason.isEmpty {
      out.append(contentsOf: HTTPStatusPhrase.reason(for: head.status).utf8)
    } else {
      out.append(contentsOf: head.reason)
    }
    append("\r\n", &out)
    writeForwardedFields(head.headers, except: nil, into: &out)
    append("X-Request-Id: ", &out)
    out.append(contentsOf: requestID)
    append("\r\n", &out)
    out.append(contentsOf: extraLines)
    writeFraming(framing, headContentLength: headContentLength, into: &out)
    if closeConnection { append("Connection: close\r\n", &out) }
    append("\r\n", &out)
  }

  /// Fields of the upstream answer that describe its body, which an envelope replaces.
  static let replacedByEnvelope = HeaderNameSet([
    "content-type", "content-encoding", "content-md5", "etag", "accept-ranges", "content-range", "digest",
  ])

  /// The head of an enveloped answer: the upstream's fields less those describing its body,
  /// `Content-Type: application/json`, and gzip when the body was compressed for the client.
  public static func writeEnveloped(
    status: Int, upstream: HTTPResponseHead, requestID: [UInt8], framing: HTTPBodyFraming, gzip: Bool,
    closeConnection: Bool, extraLines: [UInt8] = [], into out: inout [UInt8]
  ) {
    append("HTTP/1.1 ", &out)
    HTTPSerializer.appendDecimal(Int64(status), to: &out)
    out.append(0x20)
    out.append(contentsOf: HTTPStatusPhrase.reason(for: status).utf8)
    append("\r\n", &out)
    writeForwardedFields(upstream.headers, except: replacedByEnvelope, into: &out)
    append("Content-Type: application/json\r\nX-Request-Id: ", &out)
    out.append(contentsOf: requestID)
    append("\r\n", &out)
    out.append(contentsOf: extraLines)
    if gzip { append("Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n", &out) }
    writeFraming(framing, headContentLength: nil, into: &out)
    if closeConnection { append("Connection: close\r\n", &out) }
    append("\r\n", &out)
  }

  /// The upstream's fields a client may see: all but the hop-by-hop table, the names its
  /// Connection field lists, the fields the gateway sets itself, and `except`.
  static func writeForwardedFields(_ headers: HTTPHeaders, except: HeaderNameSet?, into out: inout [UInt8]) {
    let connectionNamed = UpstreamRequestWriter.connectionListedNames(headers)
    headers.withEachField { name, value in
      if HopByHop.fields.contains(name) || HopByHop.gatewayResponseFields.contains(name) { return }
      if let except, except.contains(name) { return }
      if let connectionNamed, connectionNamed.contains(name) { return }
      out.append(contentsOf: name)
      out.append(0x3A)
      out.append(0x20)
      out.append(contentsOf: value)
      append("\r\n", &out)
    }
  }

  static func writeFraming(_ framing: HTTPBodyFraming, headContentLength: Int64?, into out: inout [UInt8]) {
    switch framing {
    case .none:
      if let length = headContentLength {
        append("Content-Length: ", &out)
        HTTPSerializer.appendDecimal(length, to: &out)
        append("\r\n", &out)
      }
    case .untilClose:
      break
    case .contentLength(let length):
      append("Content-Length: ", &out)
      HTTPSerializer.appendDecimal(length, to: &out)
      append("\r\n", &out)
    case .chunked:
      append("Transfer-Encoding: chunked\r\n", &out)
    }
  }

  @inline(__always)
  static func append(_ literal: StaticString, _ out: inout [UInt8]) {
    out.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }
}
