import Foundation
import Testing

/// A JSON answer from a test backend: `text` as the body with `contentType`.
func jsonAnswer(
  _ text: String, status: Int = 200, reason: String = "OK", contentType: String = "application/json",
  headers: [(String, String)] = []
) -> BackendAction {
  .respond(
    BackendAnswer(
      status: status, reason: reason, headers: [("Content-Type", contentType)] + headers,
      body: .bytes(Array(text.utf8))))
}

/// The success envelope the gateway writes around `datas` (raw JSON text).
func successEnvelope(_ datas: String) -> String { #"{"code":0,"datas":"# + datas + #","message":""}"# }

/// The error envelope the gateway writes for `code` with `message` (plain text, no escapes).
func errorEnvelope(_ code: Int, _ message: String) -> String {
  #"{"code":"# + "\(code)" + #","datas":null,"message":""# + message + #""}"#
}

/// Checks a whole JSON answer: its status, `Content-Type: application/json`, a
/// Content-Length equal to the body received, and the body byte for byte.
func expectJSONAnswer(
  _ answer: ReceivedAnswer, status: Int, body: String, sourceLocation: SourceLocation = #_sourceLocation
) {
  #expect(answer.status == status, "status", sourceLocation: sourceLocation)
  #expect(
    answer.head.value("Content-Type") == "application/json", "content type", sourceLocation: sourceLocation)
  #expect(
    answer.head.contentLength == Int64(answer.body.count), "Content-Length vs body",
    sourceLocation: sourceLocation)
  #expect(answer.text == body, sourceLocation: sourceLocation)
}
