import GatehouseHTTP

/// Writes the head a client receives for an upstream answer: the upstream's
/// status and fields less the hop-by-hop table, the request id, the framing chosen by
/// `HTTPSerializer.framing`, and `Connection: close` when this is the connection's last answer.
public enum ClientAnswerWriter {
  /// Fields whose value contains `hiding` (the token sent, on an error answer) are left out.
  public static func write(
    head: HTTPResponseHead, requestID: [UInt8], framing: HTTPBodyFraming, headContentLength: Int64?,
    closeConnection: Bool, extraLines: [UInt8] = [], except: HeaderNameSet? = nil,
    hiding secret: SecretSpellings? = nil,
    etag: GatewayETag? = nil, into out: inout [UInt8]
  ) {
    // The upstream's own reason phrase, unless it spells the token it was sent (an error
    // page's status line is as much the answer as its fields): then the standard phrase.
    let reason =
      if let secret, !head.reason.isEmpty, SecretMasking.masked([secret], in: Array(head.reason)) != nil {
        ArraySlice<UInt8>()
      } else {
        head.reason
      }
    var phrase = reason.isEmpty ? HTTPStatusPhrase.reason(for: head.status) : ""
    let bound =
      fixedBound + reason.count + phrase.utf8.count + fieldsBound(head.headers) + requestID.count
      + extraLines.count
    out.appendBytes(upTo: bound) { out in
      out.write("HTTP/1.1 ")
      out.writeDecimal(Int64(head.status))
      out.write(0x20)
      if reason.isEmpty {
        phrase.withUTF8 { out.write($0) }
      } else {
        out.write(reason)
      }
      out.write("\r\n")
      writeForwardedFields(head.headers, except: except, hiding: secret, into: &out)
      out.write("X-Request-Id: ")
      out.write(requestID)
      out.write("\r\n")
      out.write(extraLines)
      if let etag { writeETag(etag, into: &out) }
      out.writeFramingField(framing, headContentLength: headContentLength)
      if closeConnection { out.write("Connection: close\r\n") }
      out.write("\r\n")
    }
  }

  /// Room for the fixed parts of a head: status line pieces, the gateway's own field
  /// names (`ETag` among them), one framing field, `Connection: close` and the empty line.
  static let fixedBound = 192

  private static func writeETag(_ etag: GatewayETag, into out: inout ByteCursor) {
    out.write("ETag: ")
    etag.write(into: &out)
    out.write("\r\n")
  }

  /// The most bytes the forwarded fields of `headers` can take: each field is written as
  /// `name: value\r\n` from bytes within the head's storage.
  static func fieldsBound(_ headers: HTTPHeaders) -> Int {
    headers.serializedFieldsLength
  }

  /// Fields of the upstream answer that describe its body, which an envelope replaces.
  static let replacedByEnvelope = HeaderNameSet([
    "content-type", "content-encoding", "content-md5", "etag", "accept-ranges", "content-range", "digest",
  ])

  /// The head of an enveloped answer: the upstream's fields less those describing its body,
  /// `Content-Type: application/json`, its `ETag` when the body is known before it is sent,
  /// gzip when the body was compressed for the client, and `Vary: Accept-Encoding` when
  /// `variesByCoding` (it would have been compressed for a client taking gzip).
  public static func writeEnveloped(
    status: Int, upstream: HTTPResponseHead, requestID: [UInt8], framing: HTTPBodyFraming, gzip: Bool,
    variesByCoding: Bool = false, closeConnection: Bool, extraLines: [UInt8] = [],
    hiding secret: SecretSpellings? = nil,
    etag: GatewayETag? = nil, into out: inout [UInt8]
  ) {
    var phrase = HTTPStatusPhrase.reason(for: status)
    let bound =
      fixedBound + 96 + phrase.utf8.count + fieldsBound(upstream.headers) + requestID.count + extraLines.count
    out.appendBytes(upTo: bound) { out in
      out.write("HTTP/1.1 ")
      out.writeDecimal(Int64(status))
      out.write(0x20)
      phrase.withUTF8 { out.write($0) }
      out.write("\r\n")
      writeForwardedFields(upstream.headers, except: replacedByEnvelope, hiding: secret, into: &out)
      out.write("Content-Type: application/json\r\nX-Request-Id: ")
      out.write(requestID)
      out.write("\r\n")
      out.write(extraLines)
      if let etag { writeETag(etag, into: &out) }
      if gzip { out.write("Content-Encoding: gzip\r\n") }
      if gzip || variesByCoding { out.write("Vary: Accept-Encoding\r\n") }
      out.writeFramingField(framing)
      if closeConnection { out.write("Connection: close\r\n") }
      out.write("\r\n")
    }
  }

  /// Fields of the full answer that its `304 Not Modified` repeats (RFC 9110 §15.4.5): the
  /// client updates its copy with them. Other metadata describes a body the 304 does not carry.
  static let notModifiedFields = HeaderNameSet(["cache-control", "content-location", "date", "expires", "vary"])

  /// `304 Not Modified` for an answer the gateway would have sent: `ETag` (if it has one), the
  /// `notModifiedFields` of `upstream`'s head (a `Date` of now if it has none, RFC 9110
  /// §6.6.1), the request id and `extraLines` (the answer's `X-Gatehouse-Cache`, `Age`),
  /// `Vary: Accept-Encoding` when the full answer's coding depended on it. No body.
  public static func writeNotModified(
    upstream: HTTPHeaders?, etag: [UInt8]?, requestID: [UInt8], variesByCoding: Bool, closeConnection: Bool,
    extraLines: [UInt8], nowSeconds: Int64, into out: inout [UInt8]
  ) {
    let bound =
      fixedBound + 64 + (upstream.map(fieldsBound) ?? 0) + (etag?.count ?? 0) + requestID.count + extraLines.count
    var sawDate = false
    out.appendBytes(upTo: bound) { out in
      out.write("HTTP/1.1 304 Not Modified\r\n")
      upstream?.withEachField { name, value in
        guard notModifiedFields.contains(name) else { return }
        if ASCIIBytes.equalsLowercase(name, "date") { sawDate = true }
        out.write(name)
        out.write(": ")
        out.write(value)
        out.write("\r\n")
      }
      if !sawDate {
        out.write("Date: ")
        out.write(HTTPDate.format(nowSeconds))
        out.write("\r\n")
      }
      if let etag {
        out.write("ETag: ")
        out.write(etag)
        out.write("\r\n")
      }
      if variesByCoding { out.write("Vary: Accept-Encoding\r\n") }
      out.write("X-Request-Id: ")
      out.write(requestID)
      out.write("\r\n")
      out.write(extraLines)
      if closeConnection { out.write("Connection: close\r\n") }
      out.write("\r\n")
    }
  }

  /// The upstream's fields a client may see: all but the hop-by-hop table, the names its
  /// Connection field lists, the fields the gateway sets itself, `except`, and those whose
  /// value contains `secret`.
  static func writeForwardedFields(
    _ headers: HTTPHeaders, except: HeaderNameSet?, hiding secret: SecretSpellings? = nil, into out: inout ByteCursor
  ) {
    let connectionNamed = UpstreamRequestWriter.connectionListedNames(headers)
    headers.withEachField { name, value in
      if HopByHop.isHopByHop(name) || HopByHop.gatewayAnswerFields.contains(name) { return }
      if let except, except.contains(name) { return }
      if let connectionNamed, connectionNamed.contains(name) { return }
      // In any spelling: escapes are decoded as the value is matched.
      if let secret, SecretMasking.occurs(secret, in: value) { return }
      out.write(name)
      out.write(0x3A)
      out.write(0x20)
      out.write(value)
      out.write("\r\n")
    }
  }

  @inline(__always)
  static func append(_ literal: StaticString, _ out: inout [UInt8]) {
    out.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }
}
