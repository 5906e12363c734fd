import GatehouseCompression
import GatehouseConfig
import GatehouseHTTP
import GatehouseJSON

/// A route's envelope settings, compiled for the request path.
public struct EnvelopePolicy: Sendable, Equatable {
  public let keyPath: JSONKeyPath?
  /// `status: "always_200"`: HTTP 200 for every answer, the real status only in `code`.
  public let alwaysOK: Bool
  /// Bodies up to this size are buffered and checked whole.
  public let maxBytes: Int

  public init(keyPath: JSONKeyPath?, alwaysOK: Bool, maxBytes: Int) {
    self.keyPath = keyPath
    self.alwaysOK = alwaysOK
    self.maxBytes = maxBytes
  }

  init(_ config: EnvelopeConfig) {
    keyPath = config.keyPath.flatMap { JSONKeyPath($0.joined(separator: ".")) }
    alwaysOK = config.status == .always200
    maxBytes = config.maxBytes
  }

  /// The HTTP status sent for an answer whose `code` is `status`.
  func httpStatus(_ status: Int) -> Int { alwaysOK ? 200 : status }
}

/// What to do with an upstream answer on an enveloped route (Docs/envelope.md).
public enum EnvelopeOutcome: Equatable, Sendable {
  /// Send the upstream's answer as it is: non-JSON 2xx bodies (files, images) and redirects.
  case passThrough
  /// Send this JSON body with this HTTP status.
  case json(status: Int, body: [UInt8])
  /// The upstream's answer cannot be used (invalid JSON, a corrupt gzip body, a success
  /// too large to wrap): a failure of the upstream, so it is never stored, and a stored
  /// answer stands in where the route allows. Otherwise this error body is sent.
  case unusable(status: Int, body: [UInt8])
}

/// How an upstream head's body must be handled before the answer can be decided.
public enum EnvelopeBodyPlan: Equatable, Sendable {
  case passThrough
  /// Keep the body (up to the policy's limit) and decide at its end.
  case buffer
  /// A JSON success body too big to buffer: wrap it while streaming, validating on the way.
  case streamWrapped
}

/// The envelope rules as pure functions of the upstream's status, headers and body, so the
/// same code wraps live answers and stored ones.
public enum EnvelopeRenderer {
  /// How upstream bodies are checked. Lone surrogate escapes (`"\ud83d"`, what JavaScript and
  /// Python write for a string cut inside an emoji) are allowed: RFC 8259's grammar admits
  /// them, `datas` is copied byte for byte (never decoded), and refusing the whole answer
  /// for one cut string would turn the backend's data into a 502. The depth limit stays: it
  /// bounds the work a body can cause (see Config/README.md).
  public static let validation = JSONValidationOptions(maxDepth: 512, allowsLoneSurrogates: true)
  /// A UTF-8 byte order mark, which RFC 8259 §8.1 lets a parser ignore; some .NET and PHP
  /// stacks send one. It is not part of the value, so it is not part of `datas` either.
  public static let byteOrderMark: [UInt8] = [0xEF, 0xBB, 0xBF]

  /// - Parameter readsRedirects: keep redirect bodies whole too (they pass as they are
  ///   otherwise): on a route that injects a token, a redirect may echo it (`Location:
  ///   /sso?access_token=…` and the same link in its body), and only a body in hand can be
  ///   masked before the client gets it.
  public static func plan(
    status: Int, contentType: ArraySlice<UInt8>?, contentEncoding: ArraySlice<UInt8>?, contentLength: Int64?,
    policy: EnvelopePolicy, readsRedirects: Bool = false
  ) -> EnvelopeBodyPlan {
    switch status {
    case 200..<300:
      if status == 204 || contentLength == 0 { return .buffer }
      let identity = contentEncoding.map(isIdentity) ?? true
      guard identity || contentEncoding.map(isGzip) == true else { return .passThrough }
      guard let contentType else { return contentLength == nil ? .buffer : .passThrough }
      guard JSONMediaType.isJSON(contentType) else { return .passThrough }
      if let length = contentLength, length > policy.maxBytes, policy.keyPath == nil, identity {
        return .streamWrapped
      }
      return .buffer
    case 300..<400:
      return readsRedirects ? .buffer : .passThrough
    default:
      return .buffer
    }
  }

  /// Decides the answer for a complete (or, for errors, possibly cut) body.
  /// - Parameter truncated: the body went past `maxBytes` and only its start was kept.
  public static func render(
    status: Int, reason: String, contentType: ArraySlice<UInt8>?, contentEncoding: ArraySlice<UInt8>?,
    body rawBody: [UInt8], truncated: Bool, policy: EnvelopePolicy
  ) -> EnvelopeOutcome {
    var keyPathMissing = false
    return render(
      status: status, reason: reason, contentType: contentType, contentEncoding: contentEncoding, body: rawBody,
      truncated: truncated, policy: policy, keyPathMissing: &keyPathMissing)
  }

  /// `render`, telling through `keyPathMissing` when a JSON success body did not have the
  /// route's `key_path` (so `datas` is null): most likely a wrong `key_path`, which the
  /// gateway logs and counts rather than leaving the operator to guess from `null`s.
  public static func render(
    status: Int, reason: String, contentType: ArraySlice<UInt8>?, contentEncoding: ArraySlice<UInt8>?,
    body rawBody: [UInt8], truncated: Bool, policy: EnvelopePolicy, keyPathMissing: inout Bool
  ) -> EnvelopeOutcome {
    if (300..<400).contains(status) {
      // Passed as they are (read whole only to be masked: one cut short cannot be).
      return truncated ? unusable(502, "upstream answer too large", policy) : .passThrough
    }
    var body = rawBody
    if let contentEncoding, isGzip(contentEncoding), !body.isEmpty, !truncated {
      do {
        body = try GzipDecoder.decode(rawBody, maxOutputBytes: policy.maxBytes)
      } catch  where status >= 400 {
        // An error answer keeps its status; a body that cannot be read just has no message.
        body = []
      } catch  where error == .outputLimitExceeded {
        return unusable(502, "upstream answer too large", policy)
      } catch {
        return unusable(502, "upstream sent a corrupt gzip body", policy)
      }
    }
    if body.starts(with: byteOrderMark) { body.removeFirst(byteOrderMark.count) }
    switch status {
    case 200..<300:
      if status == 204 || body.isEmpty {
        return .json(status: 200, body: success(nil, in: []))
      }
      if let contentType, !JSONMediaType.isJSON(contentType) { return .passThrough }
      if contentType == nil { return .passThrough }
      if truncated { return unusable(502, "upstream answer too large", policy) }
      // A JSON body of only whitespace holds no value: the empty-body row, not invalid JSON
      // (some frameworks write a lone newline for "nothing").
      if body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
        return .json(status: 200, body: success(nil, in: []))
      }
      guard body.withUnsafeBytes({ JSONValidator.isValid($0, options: validation) }) else {
        return unusable(502, "upstream sent invalid JSON", policy)
      }
      if JSONDocument.isEnvelope(body) { return .json(status: policy.httpStatus(status), body: body) }
      guard let keyPath = policy.keyPath else {
        // The document without the whitespace around it (a trailing newline is common).
        let whole = JSONDocument.range(of: .root, in: body) ?? 0..<body.count
        return .json(status: policy.httpStatus(status), body: success(whole, in: body))
      }
      let range = JSONDocument.range(of: keyPath, in: body)
      keyPathMissing = range == nil
      return .json(status: policy.httpStatus(status), body: success(range, in: body))
    default:
      let valid = !truncated && !body.isEmpty && body.withUnsafeBytes { JSONValidator.isValid($0, options: validation) }
      if valid && JSONDocument.isEnvelope(body) { return .json(status: policy.httpStatus(status), body: body) }
      let message = (valid ? JSONDocument.errorMessage(body) : nil) ?? reason
      return failure(status, message, policy)
    }
  }

  static func success(_ range: Range<Int>?, in body: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity((range?.count ?? 4) + 40)
    JSONEnvelopeWriter.appendSuccess(datas: range.map { body[$0] }, to: &out)
    return out
  }

  static func failure(_ status: Int, _ message: String, _ policy: EnvelopePolicy) -> EnvelopeOutcome {
    .json(status: policy.httpStatus(status), body: JSONEnvelopeWriter.failure(code: status, message: message))
  }

  static func unusable(_ status: Int, _ message: String, _ policy: EnvelopePolicy) -> EnvelopeOutcome {
    .unusable(status: policy.httpStatus(status), body: JSONEnvelopeWriter.failure(code: status, message: message))
  }

  static func isGzip(_ value: ArraySlice<UInt8>) -> Bool {
    let lower = value.map { $0 &- 0x41 < 26 ? $0 | 0x20 : $0 }
    return lower.elementsEqual("gzip".utf8) || lower.elementsEqual("x-gzip".utf8)
  }

  static func isIdentity(_ value: ArraySlice<UInt8>) -> Bool {
    let lower = value.map { $0 &- 0x41 < 26 ? $0 | 0x20 : $0 }
    return lower.isEmpty || lower.elementsEqual("identity".utf8)
  }
}

extension EnvelopeRenderer {
  /// Renders a complete upstream answer with its own reason phrase (the standard one when it
  /// sent none): what a client's exchange writes and a background refresh checks before storing.
  static func render(answer head: HTTPResponseHead, body: [UInt8], truncated: Bool, policy: EnvelopePolicy)
    -> EnvelopeOutcome
  {
    var keyPathMissing = false
    return render(answer: head, body: body, truncated: truncated, policy: policy, keyPathMissing: &keyPathMissing)
  }

  static func render(
    answer head: HTTPResponseHead, body: [UInt8], truncated: Bool, policy: EnvelopePolicy, keyPathMissing: inout Bool
  ) -> EnvelopeOutcome {
    render(
      status: head.status, reason: head.reason.isEmpty ? HTTPStatusPhrase.reason(for: head.status) : head.reasonString,
      contentType: head.headers.firstValue(lowercaseName: "content-type"),
      contentEncoding: head.headers.firstValue(lowercaseName: "content-encoding"), body: body, truncated: truncated,
      policy: policy, keyPathMissing: &keyPathMissing)
  }
}
