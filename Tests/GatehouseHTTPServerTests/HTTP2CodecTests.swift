import CGatehouseNghttp2
import GatehouseHTTP
import Testing

@testable import GatehouseHTTPServer

/// A responder that records what the connection tells it and answers as a test says.
final class RecordingHTTP2Responder: HTTP2CodecDelegate {
  var heads: [(stream: Int32, head: HTTPRequestHead?, problem: HTTP2RequestProblem?, end: Bool)] = []
  var bodies: [Int32: [UInt8]] = [:]
  var ended: Set<Int32> = []
  var closed: [Int32: UInt32] = [:]
  var abuses: [HTTP2Abuse] = []

  func streamReceivedHead(_ stream: Int32, head: Result<HTTPRequestHead, HTTP2RequestProblem>, endOfStream: Bool) {
    switch head {
    case .success(let head): heads.append((stream, head, nil, endOfStream))
    case .failure(let problem): heads.append((stream, nil, problem, endOfStream))
    }
  }
  func streamReceivedBody(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) {
    bodies[stream, default: []].append(contentsOf: bytes)
  }
  func streamReceivedEnd(_ stream: Int32) { ended.insert(stream) }
  func streamClosed(_ stream: Int32, errorCode: UInt32) { closed[stream] = errorCode }
  func connectionAbused(_ abuse: HTTP2Abuse) { abuses.append(abuse) }
}

/// A client-side nghttp2 session in the same process: what a real client would send, and
/// what it makes of the server's bytes.
final class HTTP2TestClient {
  var session: OpaquePointer?
  var statuses: [Int32: String] = [:]
  var answerFields: [Int32: [(String, String)]] = [:]
  var answerBodies: [Int32: [UInt8]] = [:]
  var resets: [Int32: UInt32] = [:]
  var goAwayCode: UInt32?
  /// Request body bytes still to send, per stream (all of them when the window allows).
  var uploads: [Int32: [UInt8]] = [:]

  /// `readsAnswers: false`: a client that never reopens its windows (it does not read).
  init(readsAnswers: Bool = true) {
    var callbacks: OpaquePointer?
    nghttp2_session_callbacks_new(&callbacks)
    defer { nghttp2_session_callbacks_del(callbacks) }
    nghttp2_session_callbacks_set_on_header_callback(callbacks) {
      _, frame, name, nameLength, value, valueLength, _, user in
      let client = Unmanaged<HTTP2TestClient>.fromOpaque(user!).takeUnretainedValue()
      let stream = gh_h2_frame_stream(frame!)
      let name = String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self)
      let value = String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)
      if name == ":status" {
        client.statuses[stream] = value
      } else {
        client.answerFields[stream, default: []].append((name, value))
      }
      return 0
    }
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, stream, data, length, user in
      let client = Unmanaged<HTTP2TestClient>.fromOpaque(user!).takeUnretainedValue()
      client.answerBodies[stream, default: []].append(contentsOf: UnsafeBufferPointer(start: data, count: length))
      return 0
    }
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
      let client = Unmanaged<HTTP2TestClient>.fromOpaque(user!).takeUnretainedValue()
      switch UInt32(gh_h2_frame_type(frame!)) {
      case NGHTTP2_RST_STREAM.rawValue: client.resets[gh_h2_frame_stream(frame!)] = gh_h2_rst_error_code(frame!)
      case NGHTTP2_GOAWAY.rawValue: client.goAwayCode = frame!.pointee.goaway.error_code
      default: break
      }
      return 0
    }
    var option: OpaquePointer?
    nghttp2_option_new(&option)
    defer { nghttp2_option_del(option) }
    if !readsAnswers { nghttp2_option_set_no_auto_window_update(option, 1) }
    nghttp2_session_client_new2(&session, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
    _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil, 0)
  }

  deinit { nghttp2_session_del(session) }

  /// Opens a stream with these pseudo-headers and fields; a body, if given, follows as DATA.
  @discardableResult
  func request(_ fields: [(String, String)], body: [UInt8]? = nil) -> Int32 {
    var text: [UInt8] = []
    for (name, value) in fields { text += Array(name.utf8) + Array(value.utf8) }
    return text.withUnsafeMutableBufferPointer { bytes in
      var nva: [nghttp2_nv] = []
      var offset = 0
      for (name, value) in fields {
        let start = bytes.baseAddress! + offset
        nva.append(
          nghttp2_nv(
            name: start, value: start + name.utf8.count, namelen: name.utf8.count, valuelen: value.utf8.count,
            flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
        offset += name.utf8.count + value.utf8.count
      }
      let stream = gh_h2_submit_request(session, &nva, nva.count, body == nil ? nil : Self.readUpload)
      if let body { uploads[stream] = body }
      return stream
    }
  }

  private static let readUpload: nghttp2_data_source_read_callback = { _, stream, buffer, length, flags, _, user in
    let client = Unmanaged<HTTP2TestClient>.fromOpaque(user!).takeUnretainedValue()
    let pending = client.uploads[stream] ?? []
    let count = min(length, pending.count)
    pending.withUnsafeBufferPointer { buffer!.update(from: $0.baseAddress!, count: count) }
    client.uploads[stream] = Array(pending.dropFirst(count))
    if client.uploads[stream]!.isEmpty { flags!.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
    return count
  }

  func reset(_ stream: Int32) {
    _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, UInt32(NGHTTP2_CANCEL.rawValue))
  }

  /// Everything the client has to send.
  func output() -> [UInt8] {
    var out: [UInt8] = []
    while true {
      var data: UnsafePointer<UInt8>?
      let count = nghttp2_session_mem_send(session, &data)
      guard count > 0 else { return out }
      out.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
    }
  }

  func receive(_ bytes: [UInt8]) {
    bytes.withUnsafeBufferPointer { _ = nghttp2_session_mem_recv(session, $0.baseAddress, $0.count) }
  }
}

@Suite struct HTTP2CodecTests {
  /// A clock standing still: only the rapid-reset test moves time.
  static let clock: @Sendable () -> UInt64 = { 1_000_000_000 }

  static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

  /// Moves bytes both ways until neither side has more to say (bounded).
  static func codec(_ delegate: HTTP2CodecDelegate, settings: HTTP2Settings = HTTP2Settings()) -> HTTP2Codec {
    HTTP2Codec(settings: settings, parserLimits: HTTPLimits(), delegate: delegate, now: Self.clock)
  }

  static func send(
    _ server: HTTP2Codec, _ stream: Int32, status: Int, fields: [(String, String)] = [], endOfStream: Bool
  ) {
    server.sendHead(
      stream, status: status, fields: HTTPHeaders(fields), except: { _ in false }, endOfStream: endOfStream)
  }

  static func exchange(_ client: HTTP2TestClient, _ server: HTTP2Codec) {
    for _ in 0..<50 {
      let toServer = client.output()
      if !toServer.isEmpty { toServer.withUnsafeBytes { _ = server.receive($0) } }
      var toClient: [UInt8] = []
      server.drainOutput {
        toClient.append(contentsOf: $0)
        return true
      }
      if !toClient.isEmpty { client.receive(toClient) }
      if toServer.isEmpty && toClient.isEmpty { return }
    }
  }

  static func get(_ path: String, authority: String = "api.example", extra: [(String, String)] = []) -> [(
    String, String
  )] {
    [(":method", "GET"), (":scheme", "https"), (":authority", authority), (":path", path)] + extra
  }

  @Test func aStreamIsOneRequestAndItsAnswer() throws {
    let responder = RecordingHTTP2Responder()
    let server = Self.codec(responder)
    let client = HTTP2TestClient()
    let stream = client.request(Self.get("/users?page=2", extra: [("accept", "application/json")]))
    Self.exchange(client, server)

    let received = try #require(responder.heads.first)
    #expect(received.stream == stream && received.end && received.problem == nil)
    let head = try #require(received.head)
    #expect(head.method == .get && head.targetString == "/users?page=2")
    #expect(head.version == .http2 && head.version.description == "HTTP/2")
    #expect(head.headers["host"] == "api.example" && head.headers["accept"] == "application/json")
    #expect(head.bodyFraming == .none)

    Self.send(server, stream, status: 200, fields: [("Content-Type", "application/json")], endOfStream: false)
    Array(#"{"ok":true}"#.utf8).withUnsafeBytes { server.sendBody(stream, $0) }
    server.endBody(stream)
    Self.exchange(client, server)
    #expect(client.statuses[stream] == "200")
    #expect(client.answerFields[stream]?.contains { $0 == ("content-type", "application/json") } == true)
    #expect(client.answerBodies[stream] == Array(#"{"ok":true}"#.utf8))
    #expect(responder.closed[stream] == 0)
    #expect(server.openStreamCount == 0)
  }

  @Test func hostAndAuthorityMustAgree() throws {
    let responder = RecordingHTTP2Responder()
    let server = Self.codec(responder)
    let client = HTTP2TestClient()
    client.request(Self.get("/a", extra: [("host", "other.example")]))
    client.request(Self.get("/b", extra: [("host", "api.example")]))
    Self.exchange(client, server)
    #expect(responder.heads.map(\.problem) == [.hostDisagrees, nil])
  }

  /// RFC 9113 §8.2.2: a connection-specific field makes the request malformed; the stream
  /// is reset and the responder never hears of it.
  @Test func connectionSpecificFieldsResetTheStream() {
    let responder = RecordingHTTP2Responder()
    let server = Self.codec(responder)
    let client = HTTP2TestClient()
    let stream = client.request(Self.get("/a", extra: [("connection", "keep-alive")]))
    Self.exchange(client, server)
    #expect(responder.heads.isEmpty)
    #expect(client.resets[stream] == UInt32(NGHTTP2_PROTOCOL_ERROR.rawValue))
  }

  /// A request body reaches the responder only as far as the window it reopens allows.
  @Test func requestBodiesAreFlowControlledByTheResponder() {
    let responder = RecordingHTTP2Responder()
    let server = HTTP2Codec(
      settings: HTTP2Settings(initialWindowBytes: 16_384), parserLimits: HTTPLimits(), delegate: responder,
      now: Self.clock)
    let client = HTTP2TestClient()
    // The client learns the server's window before it sends.
    Self.exchange(client, server)
    let body = (0..<50_000).map { UInt8($0 % 251) }
    let stream = client.request(
      [(":method", "POST"), (":scheme", "https"), (":authority", "api.example"), (":path", "/up")], body: body)
    Self.exchange(client, server)
    #expect(responder.heads.first?.head?.bodyFraming == .chunked)
    #expect(responder.bodies[stream]?.count == 16_384, "the window stops the rest")
    var consumed = 0
    for _ in 0..<20 where !responder.ended.contains(stream) {
      let received = responder.bodies[stream]?.count ?? 0
      server.consumed(stream, received - consumed)
      consumed = received
      Self.exchange(client, server)
    }
    #expect(responder.ended.contains(stream))
    #expect(responder.bodies[stream] == body)
  }

  /// An answer body queued before the client's window opens waits, then flows.
  @Test func answerBodiesWaitForTheClientsWindow() {
    let responder = RecordingHTTP2Responder()
    let server = Self.codec(responder)
    let client = HTTP2TestClient(readsAnswers: false)
    let stream = client.request(Self.get("/big"))
    Self.exchange(client, server)
    Self.send(server, stream, status: 200, endOfStream: false)
    Self.exchange(client, server)
    let body = (0..<200_000).map { UInt8($0 % 253) }
    body.withUnsafeBytes { server.sendBody(stream, $0) }
    server.endBody(stream)
    Self.exchange(client, server)
    // The client's default window (65,535) lets that much through until it consumes.
    #expect(client.answerBodies[stream]?.count == 65_535)
    #expect(server.queuedBytes(stream) > 0)
  }

  /// Streams opened and reset faster than the connection allows (CVE-2023-44487): GOAWAY.
  /// At the allowed rate they are not.
  @Test func rapidResetEndsTheConnection() {
    final class Time: @unchecked Sendable { var value: UInt64 = 1_000_000_000 }
    let time = Time()
    let calm = RecordingHTTP2Responder()
    let patient = HTTP2Codec(
      settings: HTTP2Settings(maxConcurrentStreams: 8), parserLimits: HTTPLimits(), delegate: calm, now: { time.value })
    let politeClient = HTTP2TestClient()
    for _ in 0..<40 {
      let stream = politeClient.request(Self.get("/x"))
      Self.exchange(politeClient, patient)
      politeClient.reset(stream)
      Self.exchange(politeClient, patient)
      time.value += 200_000_000  // five a second, under the eight allowed
    }
    #expect(politeClient.goAwayCode == nil && calm.abuses.isEmpty)
    #expect(calm.closed.count == 40 && calm.closed.values.allSatisfy { $0 == UInt32(NGHTTP2_CANCEL.rawValue) })

    let responder = RecordingHTTP2Responder()
    let server = HTTP2Codec(
      settings: HTTP2Settings(maxConcurrentStreams: 8), parserLimits: HTTPLimits(), delegate: responder,
      now: { time.value })
    let client = HTTP2TestClient()
    for _ in 0..<200 where client.goAwayCode == nil {
      let stream = client.request(Self.get("/x"))
      Self.exchange(client, server)
      client.reset(stream)
      Self.exchange(client, server)
    }
    #expect(client.goAwayCode == UInt32(NGHTTP2_ENHANCE_YOUR_CALM.rawValue))
    #expect(responder.abuses == [.rapidReset])
  }

  /// A reset that throws away a large answer made and never read costs more of the reset
  /// allowance: one now and then is allowed; asking for one and resetting it, again and
  /// again at a rate well within the allowance for streams reset early, ends the connection.
  @Test func resetsThatThrowAwayLargeAnswersEndTheConnectionSooner() {
    final class Time: @unchecked Sendable { var value: UInt64 = 1_000_000_000 }
    let time = Time()
    let large = [UInt8](repeating: 0x61, count: 8 << 20)
    func run(resets: Int, answerBytes: Int) -> (RecordingHTTP2Responder, HTTP2TestClient) {
      let responder = RecordingHTTP2Responder()
      let server = HTTP2Codec(
        settings: HTTP2Settings(maxConcurrentStreams: 128), parserLimits: HTTPLimits(), delegate: responder,
        now: { time.value })
      let client = HTTP2TestClient(readsAnswers: false)
      for _ in 0..<resets where client.goAwayCode == nil {
        let stream = client.request(Self.get("/large"))
        Self.exchange(client, server)
        Self.send(server, stream, status: 200, endOfStream: false)
        large[..<answerBytes].withUnsafeBytes { server.sendBody(stream, $0) }
        server.endBody(stream)
        Self.exchange(client, server)
        client.reset(stream)
        Self.exchange(client, server)
        time.value += 250_000_000  // four a second: a thirty-second of the allowance
      }
      return (responder, client)
    }
    let (wasteful, wastefulClient) = run(resets: 40, answerBytes: large.count)
    #expect(wastefulClient.goAwayCode == UInt32(NGHTTP2_ENHANCE_YOUR_CALM.rawValue))
    #expect(wasteful.abuses == [.rapidReset])
    let (modest, modestClient) = run(resets: 40, answerBytes: 100_000)
    #expect(modestClient.goAwayCode == nil && modest.abuses.isEmpty)
  }

  @Test func goAwayLetsOpenStreamsFinish() {
    let responder = RecordingHTTP2Responder()
    let server = Self.codec(responder)
    let client = HTTP2TestClient()
    let stream = client.request(Self.get("/a"))
    Self.exchange(client, server)
    server.goAway()
    Self.exchange(client, server)
    #expect(client.goAwayCode == 0)
    Self.send(server, stream, status: 204, endOfStream: true)
    Self.exchange(client, server)
    #expect(client.statuses[stream] == "204")
  }

  /// The reset allowance: a burst, then the rate; time refills it up to the burst only.
  @Test func theTokenBucketAllowsABurstThenTheRate() {
    var bucket = TokenBucket(burst: 3, perSecond: 2)
    let second: UInt64 = 1_000_000_000
    var taken: [Bool] = []
    for _ in 0..<4 { taken.append(bucket.take(nowNanoseconds: second)) }
    #expect(taken == [true, true, true, false])
    // Half a second gives one token back; ten seconds give the burst, not twenty.
    let half = bucket.take(nowNanoseconds: second + second / 2)
    let none = bucket.take(nowNanoseconds: second + second / 2)
    #expect(half && !none)
    taken = []
    for _ in 0..<4 { taken.append(bucket.take(nowNanoseconds: 12 * second)) }
    #expect(taken == [true, true, true, false])
  }
}
