import GatehouseHTTP
import GatehouseStore
import Testing

@testable import GatehouseCore

/// The gateway's validators (SPEC §12): entity tags of the bytes it sends, the conditional
/// fields of a revalidation, and a stored answer renewed by a `304`.
@Suite struct ValidatorRulesTests {
  @Test func entityTagsDependOnTheBytesAlone() {
    let body = Array(#"{"code":0,"datas":[1,2,3],"message":""}"#.utf8)
    let maker = EntityTagMaker()
    let tag = maker.tag(of: body)
    // Strong, quoted, 32 hex digits.
    #expect(tag.count == 34 && tag.first == 0x22 && tag.last == 0x22)
    #expect(tag.dropFirst().dropLast().allSatisfy { Array("0123456789abcdef".utf8).contains($0) })
    // The same on another loop's maker, on its next use, and without a maker.
    #expect(EntityTagMaker().tag(of: body) == tag)
    #expect(maker.tag(of: body) == tag)
    #expect(EntityTagMaker.tag(of: body) == tag)
    // SHA-256 of the empty body starts e3b0c442…
    #expect(String(decoding: maker.tag(of: []), as: UTF8.self) == #""e3b0c44298fc1c149afbf4c8996fb924""#)
    var changed = body
    changed[changed.count - 3] = 0x78
    #expect(maker.tag(of: changed) != tag)
    #expect(EntityTag(tag)?.isWeak == false)
  }

  static func stored(_ headers: [(String, String)], status: Int = 200) -> StoredAnswer {
    StoredAnswer(status: status, headers: headers, body: Array("{}".utf8), storedAtMs: 1000)
  }

  @Test func aRevalidationSendsTheStoredValidators() {
    let both = Self.stored([
      ("Content-Type", "application/json"), ("ETag", #"W/"v1""#),
      ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
    ])
    #expect(
      String(decoding: StoreEntryRules.validatorLines(both), as: UTF8.self)
        == "If-None-Match: W/\"v1\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n")
    #expect(StoreEntryRules.validatorLines(Self.stored([("Content-Type", "application/json")])).isEmpty)
    // Invalid validators are not sent: they would be written as they were stored.
    #expect(StoreEntryRules.validatorLines(Self.stored([("ETag", "v1"), ("Last-Modified", "yesterday")])).isEmpty)
    #expect(StoreEntryRules.validatorLines(Self.stored([("ETag", #""v1""#)], status: 404)).isEmpty)
  }

  /// RFC 9111 §4.3.4: the 304's fields replace the stored ones of their names; framing,
  /// coding, the body's type, hop-by-hop and the gateway's own fields do not.
  @Test func aConfirmingAnswerUpdatesTheStoredHeaders() {
    let stored: StoredHeaders = [
      ("Content-Type", "application/json"), ("Cache-Control", "max-age=60"), ("ETag", #""v1""#),
      ("X-Extra", "a"), ("X-Extra", "b"),
    ]
    let notModified = HTTPHeaders([
      ("Cache-Control", "max-age=120"), ("ETag", #""v1""#), ("Content-Length", "0"), ("Content-Type", "text/plain"),
      ("Connection", "keep-alive"), ("X-Request-Id", "theirs"), ("X-Extra", "c"), ("Expires", "0"),
    ])
    let renewed = StoreEntryRules.renewedHeaders(stored, notModified: notModified)
    #expect(
      renewed.map { "\($0.name): \($0.value)" } == [
        "Content-Type: application/json", "Cache-Control: max-age=120", "ETag: \"v1\"", "X-Extra: c", "Expires: 0",
      ])
    #expect(StoreEntryRules.renewedHeaders(stored, notModified: HTTPHeaders([("Content-Length", "0")])).count == 5)
  }

  @Test func aConfirmationNamingAnotherRepresentationConfirmsNothing() {
    let stored = Self.stored([("ETag", #""v1""#)])
    #expect(StoreEntryRules.confirms(HTTPHeaders([("ETag", #""v1""#)]), stored))
    #expect(!StoreEntryRules.confirms(HTTPHeaders([("ETag", #""v2""#)]), stored))
    // Without a strong tag the 304 names no representation: it is taken for the one asked about.
    #expect(StoreEntryRules.confirms(HTTPHeaders([("Date", "Sun, 06 Nov 1994 08:49:37 GMT")]), stored))
    #expect(StoreEntryRules.confirms(HTTPHeaders([("ETag", #"W/"v2""#)]), stored))
  }
}
