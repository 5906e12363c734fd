import GatehouseCompression
import GatehouseJSON
import Testing

@testable import GatehouseCore

@Suite struct EnvelopeRendererTests {
  let mirror = EnvelopePolicy(keyPath: nil, alwaysOK: false, maxBytes: 1 << 20)
  let json: ArraySlice<UInt8> = ArraySlice("application/json; charset=utf-8".utf8)

  func render(
    _ status: Int, _ body: String, type: String? = "application/json", encoding: String? = nil,
    policy: EnvelopePolicy? = nil, reason: String = "Reason"
  ) -> EnvelopeOutcome {
    EnvelopeRenderer.render(
      status: status, reason: reason, contentType: type.map { ArraySlice($0.utf8) },
      contentEncoding: encoding.map { ArraySlice($0.utf8) }, body: Array(body.utf8), truncated: false,
      policy: policy ?? mirror)
  }

  func text(_ outcome: EnvelopeOutcome) -> (Int, String)? {
    guard case .json(let status, let body) = outcome else { return nil }
    return (status, String(decoding: body, as: UTF8.self))
  }

  /// The error body of an answer that cannot be used (never stored, stale preferred).
  func unusable(_ outcome: EnvelopeOutcome) -> (Int, String)? {
    guard case .unusable(let status, let body) = outcome else { return nil }
    return (status, String(decoding: body, as: UTF8.self))
  }

  @Test func jsonSuccessIsWrapped() {
    let result = text(render(201, #"{"id":1}"#))
    #expect(result?.0 == 201)
    #expect(result?.1 == #"{"code":0,"datas":{"id":1},"message":""}"#)
  }

  @Test func emptyBodiesAnd204GiveNullDatasWith200() {
    #expect(text(render(204, ""))?.0 == 200)
    #expect(text(render(204, ""))?.1 == #"{"code":0,"datas":null,"message":""}"#)
    #expect(text(render(200, "", type: nil))?.1 == #"{"code":0,"datas":null,"message":""}"#)
  }

  @Test func aJSONBodyOfOnlyWhitespaceIsAnEmptyBody() {
    #expect(text(render(200, "\n"))?.0 == 200)
    #expect(text(render(201, " \r\n\t"))?.1 == #"{"code":0,"datas":null,"message":""}"#)
    #expect(text(render(201, " \r\n\t"))?.0 == 200)
    // Only JSON bodies: a blank text body is content like any other and passes through.
    #expect(render(200, "\n", type: "text/plain") == .passThrough)
    // A lone non-whitespace byte is still invalid JSON.
    #expect(unusable(render(200, " x "))?.0 == 502)
  }

  @Test func existingEnvelopesPassUnchanged() {
    let body = #"{"code":7,"datas":[1],"message":"x"}"#
    #expect(text(render(200, body))?.1 == body)
    #expect(text(render(409, #"{"code":409,"message":"taken"}"#))?.1 == #"{"code":409,"message":"taken"}"#)
  }

  @Test func errorsTakeTheBackendMessageOrTheReason() {
    #expect(
      text(render(404, #"{"message":"user 7 not found"}"#))?.1
        == #"{"code":404,"datas":null,"message":"user 7 not found"}"#)
    #expect(
      text(render(400, #"{"error":"invalid_request","error_description":"x"}"#))?.1.contains(
        #""message":"invalid_request""#) == true)
    #expect(text(render(422, #"{"detail":"bad field"}"#))?.1.contains(#""message":"bad field""#) == true)
    #expect(
      text(render(503, "<html>down</html>", type: "text/html", reason: "Service Unavailable"))?.1
        == #"{"code":503,"datas":null,"message":"Service Unavailable"}"#)
    #expect(text(render(500, "{broken", reason: "Internal Server Error"))?.0 == 500)
  }

  @Test func invalidJSONOnSuccessIs502() {
    #expect(unusable(render(200, #"{"a":"#))?.0 == 502)
    #expect(
      unusable(render(200, #"{"a":"#))?.1 == #"{"code":502,"datas":null,"message":"upstream sent invalid JSON"}"#)
  }

  @Test func keyPathSelectsOrGivesNull() {
    let policy = EnvelopePolicy(keyPath: JSONKeyPath("data.items"), alwaysOK: false, maxBytes: 1 << 20)
    #expect(
      text(render(200, #"{"data":{"items":[1,2]}}"#, policy: policy))?.1 == #"{"code":0,"datas":[1,2],"message":""}"#)
    #expect(text(render(200, #"{"data":{}}"#, policy: policy))?.1 == #"{"code":0,"datas":null,"message":""}"#)
    let indexed = EnvelopePolicy(keyPath: JSONKeyPath("users.1.name"), alwaysOK: false, maxBytes: 1 << 20)
    #expect(
      text(render(200, #"{"users":[{"name":"a"},{"name":"b"}]}"#, policy: indexed))?.1
        == #"{"code":0,"datas":"b","message":""}"#)
  }

  @Test func alwaysOKKeepsTheStatusOnlyInCode() {
    let policy = EnvelopePolicy(keyPath: nil, alwaysOK: true, maxBytes: 1 << 20)
    #expect(text(render(404, #"{"message":"nope"}"#, policy: policy))?.0 == 200)
    #expect(text(render(404, #"{"message":"nope"}"#, policy: policy))?.1.hasPrefix(#"{"code":404"#) == true)
    #expect(unusable(render(200, "{broken", policy: policy))?.0 == 200)
  }

  @Test func nonJSONSuccessAndRedirectsPassThrough() {
    #expect(render(200, "PNG....", type: "image/png") == .passThrough)
    #expect(render(302, "", type: nil) == .passThrough)
    #expect(render(200, "plain", type: nil) == .passThrough)
  }

  @Test func gzipBodiesAreDecodedFirstAndCorruptOnesAre502() throws {
    let compressed = try GzipEncoder.encode(Array(#"{"ok":true}"#.utf8))
    let outcome = EnvelopeRenderer.render(
      status: 200, reason: "OK", contentType: json, contentEncoding: ArraySlice("gzip".utf8), body: compressed,
      truncated: false, policy: mirror)
    #expect(text(outcome)?.1 == #"{"code":0,"datas":{"ok":true},"message":""}"#)
    #expect(unusable(render(200, "not gzip at all", encoding: "gzip"))?.0 == 502)
  }

  /// A gzip body that decodes past the limit is too large, not corrupt: the message says
  /// which (a client is told the truth, an operator where to look).
  @Test func aGzipBodyThatDecodesPastTheLimitIsTooLargeNotCorrupt() throws {
    let document = "[" + Array(repeating: #"{"id":12345,"name":"someone"}"#, count: 200).joined(separator: ",") + "]"
    let compressed = try GzipEncoder.encode(Array(document.utf8))
    let small = EnvelopePolicy(keyPath: nil, alwaysOK: false, maxBytes: 1024)
    #expect(compressed.count < small.maxBytes)
    let outcome = EnvelopeRenderer.render(
      status: 200, reason: "OK", contentType: json, contentEncoding: ArraySlice("gzip".utf8), body: compressed,
      truncated: false, policy: small)
    #expect(unusable(outcome)?.0 == 502)
    #expect(unusable(outcome)?.1.contains("upstream answer too large") == true)
  }

  /// Valid JSON that strict parsers refuse is still the backend's data: a lone surrogate
  /// escape (a string cut inside an emoji) is wrapped byte for byte, and a leading byte order
  /// mark (RFC 8259 §8.1) is left out of `datas`. Nesting deeper than 512 is refused.
  @Test func loneSurrogatesAndAByteOrderMarkAreAccepted() {
    let cut = #"{"title":"caf\u00e9 \ud83d","tail":"\udc00x"}"#
    #expect(text(render(200, cut))?.1 == #"{"code":0,"datas":"# + cut + #","message":""}"#)
    #expect(text(render(200, "\u{FEFF}" + #"{"a":1}"#))?.1 == #"{"code":0,"datas":{"a":1},"message":""}"#)
    #expect(text(render(404, "\u{FEFF}" + #"{"message":"gone away"}"#))?.1.contains("gone away") == true)
    let deep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
    #expect(unusable(render(200, deep))?.0 == 502)
    let fine = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
    #expect(text(render(200, fine))?.0 == 200)
  }

  /// Redirects pass as they are; on a route that injects a token they are read whole (to be
  /// masked), and one too long to read whole is not passed on cut.
  @Test func redirectsAreReadWholeWhereATokenMayBeEchoed() {
    let policy = EnvelopePolicy(keyPath: nil, alwaysOK: false, maxBytes: 100)
    let html: ArraySlice<UInt8> = ArraySlice("text/html".utf8)
    #expect(
      EnvelopeRenderer.plan(status: 302, contentType: html, contentEncoding: nil, contentLength: 50, policy: policy)
        == .passThrough)
    #expect(
      EnvelopeRenderer.plan(
        status: 302, contentType: html, contentEncoding: nil, contentLength: 50, policy: policy, readsRedirects: true)
        == .buffer)
    let cut = EnvelopeRenderer.render(
      status: 302, reason: "Found", contentType: html, contentEncoding: nil, body: Array(repeating: 0x61, count: 100),
      truncated: true, policy: policy)
    #expect(unusable(cut)?.0 == 502)
  }

  @Test func plansBufferStreamOrPass() {
    func plan(_ status: Int, _ type: String?, _ length: Int64?, encoding: String? = nil, keyPath: String? = nil)
      -> EnvelopeBodyPlan
    {
      EnvelopeRenderer.plan(
        status: status, contentType: type.map { ArraySlice($0.utf8) },
        contentEncoding: encoding.map { ArraySlice($0.utf8) },
        contentLength: length,
        policy: EnvelopePolicy(keyPath: keyPath.flatMap { JSONKeyPath($0) }, alwaysOK: false, maxBytes: 100))
    }
    #expect(plan(200, "application/json", 50) == .buffer)
    #expect(plan(200, "application/json", 500) == .streamWrapped)
    #expect(plan(200, "application/json", 500, keyPath: "a") == .buffer)
    #expect(plan(200, "image/png", 50) == .passThrough)
    #expect(plan(200, "application/json", 50, encoding: "br") == .passThrough)
    #expect(plan(301, nil, 0) == .passThrough)
    #expect(plan(404, "text/html", 50) == .buffer)
  }
}
