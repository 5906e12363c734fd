import GatehouseHTTP
import GatehouseStore
import Testing

@testable import GatehouseCore

/// The gateway's validators (Docs/clients-and-cache.md): entity tags of the bytes it sends, the conditional
/// fields of a revalidation, and a stored answer renewed by a `304`.
@Suite struct ValidatorRulesTests {
  @Test func entityTagsDependOnTheBytesAlone() {
    let body = Array(#"{"code":0,"datas":[1,2,3],"message":""}"#.utf8)
    let tag = EntityTagMaker.tag(of: body).bytes
    // Strong, quoted, 32 hex digits: the 128-bit SipHash-2-4 under the key
    // "gatehouse-etag/1", as an independent implementation computes it.
    #expect(String(decoding: tag, as: UTF8.self) == #""ea09bafdfed3199f2b785ce177757123""#)
    #expect(String(decoding: EntityTagMaker.tag(of: []).bytes, as: UTF8.self) == #""f8b4a486daccaa1e9ce7757fa2f9f149""#)
    #expect(EntityTagMaker.tag(of: body).bytes == tag)
    var changed = body
    changed[changed.count - 3] = 0x78
    #expect(EntityTagMaker.tag(of: changed).bytes != tag)
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

  /// An answer from the store made of the backend's bytes carries the backend's tag, weak as
  /// it came; a body kept decoded (the store's note), or no valid tag, leaves the gateway's.
  @Test func keptAnswersOfTheBackendsBytesKeepItsTag() throws {
    func head(_ fields: [(String, String)]) -> HTTPResponseHead {
      HTTPResponseHead(status: 200, headers: HTTPHeaders(fields), bodyFraming: .contentLength(2))
    }
    #expect(
      StoreEntryRules.backendTag(head([("ETag", #""v1""#)])) == EntityTag(isWeak: false, opaque: Array(#""v1""#.utf8)))
    #expect(
      StoreEntryRules.backendTag(head([("etag", #"W/"v1""#)])) == EntityTag(isWeak: true, opaque: Array(#""v1""#.utf8)))
    #expect(StoreEntryRules.backendTag(head([("ETag", #""v1""#), (StoreEntryRules.decodedMarkerName, "gzip")])) == nil)
    #expect(StoreEntryRules.backendTag(head([("ETag", "v1")])) == nil)
    #expect(StoreEntryRules.backendTag(head([("Content-Type", "application/json")])) == nil)

    // Kept decoded: the form says so; kept as it came, it does not.
    let plain = Array("{}".utf8)
    let coded = head([("Content-Encoding", "gzip"), ("ETag", #""z1""#)])
    // `{}` as gzip (Python's `gzip.compress(b"{}", mtime=0)`).
    let zipped: [UInt8] = [
      0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xAB, 0xAE, 0x05, 0x00, 0x43, 0xBF, 0xA6, 0xA3, 0x02,
      0x00, 0x00, 0x00,
    ]
    let decoded = try #require(StoreEntryRules.keptForm(coded, body: zipped, gzipEntry: false))
    #expect(decoded.decoded && decoded.body == plain && decoded.head.headers.firstValue(lowercaseName: "etag") != nil)
    #expect(StoreEntryRules.keptForm(coded, body: zipped, gzipEntry: true)?.decoded == false)
    #expect(StoreEntryRules.keptForm(head([("ETag", #""v1""#)]), body: plain, gzipEntry: false)?.decoded == false)
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
