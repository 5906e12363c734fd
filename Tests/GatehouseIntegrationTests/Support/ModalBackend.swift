import Foundation

/// How a `ModalBackend` answers right now.
enum BackendMode: Sendable, Equatable {
  /// 200 with a JSON body naming the request target and a version number.
  case healthy
  /// 503 with a JSON error body.
  case failing
  /// Holds every answer until the test opens `ModalBackend.gate` (for timeouts).
  case hanging
  /// Resets each connection after reading the request.
  case resetting
  /// 200 with a JSON content type and a body that is not JSON.
  case invalidJSON
}

/// A `TestBackend` whose behaviour the test switches between healthy and the failures a
/// cache must ride out. Healthy answers are
/// `{"target":"<target>","version":<version>,"lang":"<Accept-Language or empty>"}`.
final class ModalBackend: Sendable {
  let mode = Shared(BackendMode.healthy)
  /// Bumped by the test to tell old answers from new ones.
  let version = Shared(1)
  /// Releases held answers (mode `hanging`, or answers held by `holdHealthy`).
  let gate = Gate()
  /// When set, healthy answers wait for this gate too (to hold a background refresh).
  let holdHealthy = Shared<Gate?>(nil)
  /// Extra header fields for healthy answers.
  let extraHeaders = Shared<[(String, String)]>([])
  let server: TestBackend

  /// `port` and `host` as for `TestBackend`: several backends can share a port on
  /// different 127.0.0.x addresses.
  init(options: TestBackend.Options = TestBackend.Options(), port: UInt16 = 0, host: UInt8 = 1) throws {
    let mode = self.mode
    let version = self.version
    let gate = self.gate
    let holdHealthy = self.holdHealthy
    let extraHeaders = self.extraHeaders
    server = try TestBackend(options: options, port: port, host: host) { request in
      switch mode.value {
      case .healthy:
        let lang = request.head.value("Accept-Language") ?? ""
        let body = #"{"target":"\#(request.target)","version":\#(version.value),"lang":"\#(lang)"}"#
        var answer = BackendAnswer(
          headers: [("Content-Type", "application/json")] + extraHeaders.value, body: .bytes(Array(body.utf8)))
        answer.holdUntil = holdHealthy.value
        return .respond(answer)
      case .failing:
        return jsonAnswer(#"{"error":"backend down"}"#, status: 503, reason: "Service Unavailable")
      case .hanging:
        var answer = BackendAnswer(headers: [("Content-Type", "application/json")], body: .bytes(Array("{}".utf8)))
        answer.holdUntil = gate
        return .respond(answer)
      case .resetting:
        return .reset
      case .invalidJSON:
        return jsonAnswer(#"{"v": "cut sho"#)
      }
    }
  }

  var port: UInt16 { server.port }
  var requests: [ReceivedRequest] { server.requests }

  /// Stops the server for good (connections are then refused) and releases held answers.
  func stop() {
    gate.open()
    holdHealthy.value?.open()
    server.stop()
  }

  deinit { stop() }
}
