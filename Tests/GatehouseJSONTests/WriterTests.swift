import Foundation
import Testing

@testable import GatehouseJSON

@Suite struct EnvelopeWriterTests {
  func parse(_ bytes: [UInt8]) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
  }

  @Test func successBytesAreExact() throws {
    var out: [UInt8] = []
    let datas = Array(#"[1,{"a":"b"}]"#.utf8)
    datas.withUnsafeBytes { JSONEnvelopeWriter.appendSuccess(datas: $0, to: &out) }
    #expect(String(decoding: out, as: UTF8.self) == #"{"code":0,"datas":[1,{"a":"b"}],"message":""}"#)
    #expect(out.count == JSONEnvelopeWriter.successLength(datasCount: datas.count))
    let parsed = try parse(out)
    #expect(parsed["code"] as? Int == 0)
    #expect((parsed["datas"] as? [Any])?.count == 2)
    #expect(parsed["message"] as? String == "")
  }

  @Test func successWithNullAndSlices() throws {
    var out: [UInt8] = []
    JSONEnvelopeWriter.appendSuccess(datas: ArraySlice<UInt8>?.none, to: &out)
    #expect(String(decoding: out, as: UTF8.self) == #"{"code":0,"datas":null,"message":""}"#)
    #expect(out.count == JSONEnvelopeWriter.successLength(datasCount: nil))
    #expect(try parse(out)["datas"] is NSNull)

    let body = Array(#"{"data":{"items":[true]}}"#.utf8)
    let range = try #require(JSONDocument.range(of: JSONKeyPath("data.items")!, in: body))
    out.removeAll()
    JSONEnvelopeWriter.appendSuccess(datas: body[range], to: &out)
    #expect(String(decoding: out, as: UTF8.self) == #"{"code":0,"datas":[true],"message":""}"#)
  }

  @Test func failureBytesAreExact() {
    #expect(
      String(decoding: JSONEnvelopeWriter.failure(code: 404, message: "no route for GET /x"), as: UTF8.self)
        == #"{"code":404,"datas":null,"message":"no route for GET /x"}"#)
    #expect(
      String(decoding: JSONEnvelopeWriter.failure(code: 502, message: "upstream sent invalid JSON"), as: UTF8.self)
        == #"{"code":502,"datas":null,"message":"upstream sent invalid JSON"}"#)
    #expect(
      String(decoding: JSONEnvelopeWriter.failure(code: 0, message: ""), as: UTF8.self)
        == #"{"code":0,"datas":null,"message":""}"#)
    #expect(
      String(decoding: JSONEnvelopeWriter.failure(code: -12, message: "x"), as: UTF8.self)
        == #"{"code":-12,"datas":null,"message":"x"}"#)
    #expect(
      String(decoding: JSONEnvelopeWriter.failure(code: 1_234_567, message: "x"), as: UTF8.self)
        == #"{"code":1234567,"datas":null,"message":"x"}"#)
  }

  @Test func escapingRoundTripsThroughFoundation() throws {
    let controls = String((0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) })
    let messages = [
      controls, #"quote " backslash \ slash /"#, "é中😀\u{7F}\u{2028}", "tab\there\r\nnext", "", "plain",
      String(repeating: "long \"text\" ", count: 200),
    ]
    for message in messages {
      let out = JSONEnvelopeWriter.failure(code: 500, message: message)
      #expect(JSONValidator.firstError(in: out) == nil)
      let parsed = try parse(out)
      #expect(parsed["code"] as? Int == 500)
      #expect(parsed["datas"] is NSNull)
      #expect(parsed["message"] as? String == message)
      #expect(JSONDocument.errorMessage(out) == message)
    }
  }

  @Test func escapesUseShortFormsWhereTheyExist() {
    var out: [UInt8] = []
    JSONStringWriter.appendQuoted("\u{8}\u{C}\n\r\t\u{0}\u{1F}\"\\", to: &out)
    #expect(String(decoding: out, as: UTF8.self) == #""\b\f\n\r\t\u0000\u001f\"\\""#)
  }
}

@Suite struct MediaTypeTests {
  @Test(arguments: [
    "application/json", "APPLICATION/JSON", "Application/Json", "application/json; charset=utf-8",
    "application/json;charset=UTF-8", " application/json ", "\tapplication/json", "application/json ; charset=utf-8",
    "application/json;", "application/problem+json", "application/vnd.api+json",
    "Application/Problem+JSON; charset=utf-8", "application/merge-patch+json",
  ])
  func json(_ value: String) {
    #expect(JSONMediaType.isJSON(value), "\(value)")
    #expect(JSONMediaType.isJSON(Array(value.utf8)[...]), "\(value)")
  }

  @Test(arguments: [
    "text/plain", "application/jsonp", "image/png", "text/json", "application/json-seq", "application/+json",
    "application /json", "application/ json", "application/json x", "", " ", "application", "application/",
    "applicationx/json", "json", "application/xjson", "application/x+jsonx", "multipart/form-data",
    "text/html; a=application/json", "application/json,text/plain", "appl/json", "application/js",
    "application/x-ndjson",
  ])
  func notJSON(_ value: String) {
    #expect(!JSONMediaType.isJSON(value), "\(value)")
  }
}
