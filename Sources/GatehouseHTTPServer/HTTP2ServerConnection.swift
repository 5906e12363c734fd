import CGatehouseNghttp2
import GatehouseHTTP

/// The settings a server connection announces and enforces (`limits.http2`, SPEC §11).
public struct HTTP2Settings: Sendable, Equatable {
  public var maxConcurrentStreams: Int
  public var initialWindowBytes: Int
  public var maxHeaderListBytes: Int

  public init(maxConcurrentStreams: Int = 128, initialWindowBytes: Int = 65_535, maxHeaderListBytes: Int = 16_384) {
    self.maxConcurrentStreams = maxConcurrentStreams
    self.initialWindowBytes = initialWindowBytes
    self.maxHeaderListBytes = maxHeaderListBytes
  }
}

/// Why a stream's request cannot be served as it came, beyond what the codec refuses itself
/// (nghttp2 resets streams whose pseudo-headers are wrong or that carry connection-specific
/// fields, RFC 9113 §8.2.2).
public enum HTTP2RequestProblem: Sendable, Equatable {
  /// `Host` and `:authority` name different hosts (RFC 9113 §8.3.1): a 400.
  case hostDisagrees
}

/// Abuse that ended a connection (SPEC §11): the responder logs it, throttled.
public enum HTTP2Abuse: String, Sendable, Equatable {
  /// Streams reset by the client faster than `max_concurrent_streams` per second
  /// (CVE-2023-44487).
  case rapidReset = "rapid_reset"
}

/// A token bucket: `burst` tokens, refilled at `perSecond`; each event takes one. Pure: the
/// caller gives the time.
public struct TokenBucket: Sendable, Equatable {
  public let burst: Double
  public let perSecond: Double
  private var tokens: Double
  private var atNanoseconds: UInt64?

  public init(burst: Int, perSecond: Int) {
    self.burst = Double(max(1, burst))
    self.perSecond = Double(max(1, perSecond))
    tokens = self.burst
  }

  /// Takes a token at `now`; false when none is left.
  public mutating func take(nowNanoseconds now: UInt64) -> Bool {
    if let at = atNanoseconds, now > at {
      tokens = min(burst, tokens + Double(now - at) / 1e9 * perSecond)
    }
    atNanoseconds = now
    guard tokens >= 1 else { return false }
    tokens -= 1
    return true
  }
}

/// What an HTTP/2 connection tells its responder, per stream (the counterpart of
/// `HTTP1Responder`). Called from `receive`, on the connection's loop.
public protocol HTTP2Responder: AnyObject {
  /// A stream's request head is complete; `endOfStream`: no body follows.
  func streamReceivedHead(
    _ stream: Int32, head: HTTPRequestHead, problem: HTTP2RequestProblem?, endOfStream: Bool)
  /// Body bytes of a stream. The connection's and the stream's windows reopen only when the
  /// responder says the bytes are consumed (`consumed`): a body nobody reads stops at the
  /// window.
  func streamReceivedBody(_ stream: Int32, _ bytes: UnsafeRawBufferPointer)
  /// The request body ended.
  func streamReceivedEnd(_ stream: Int32)
  /// The stream is gone (its answer was sent, or the client reset it, or the codec did):
  /// nothing more is sent or read on it. `errorCode` 0 is a normal end.
  func streamClosed(_ stream: Int32, errorCode: UInt32)
  /// The client abused the connection: it ends with a GOAWAY (already queued).
  func connectionAbused(_ abuse: HTTP2Abuse)
}

/// One HTTP/2 server connection's codec, driven by the loop: bytes in (`receive`), bytes out
/// (`drainOutput`), request heads and bodies to the responder, answers from it. libnghttp2
/// holds the frame codec, HPACK and the stream states; it runs no thread and does no I/O of
/// its own. Answer bodies are queued per stream and handed to nghttp2 as its windows allow,
/// so a stream whose client does not read holds only what its responder queued.
///
/// Confined to one loop.
public final class HTTP2ServerConnection {
  public unowned(unsafe) var responder: HTTP2Responder
  public let settings: HTTP2Settings
  private var session: OpaquePointer?
  private var streams: [Int32: StreamState] = [:]
  /// A fatal error happened: the connection ends once its GOAWAY is written.
  public private(set) var failed = false
  /// Client resets allowed: `max_concurrent_streams` at once, as many again per second.
  private var resets: TokenBucket
  /// The loop's clock, in nanoseconds.
  private let now: () -> UInt64

  /// What is known of one stream while its request head arrives and its answer leaves.
  final class StreamState {
    var method: [UInt8] = []
    var path: [UInt8] = []
    var authority: [UInt8] = []
    var scheme: [UInt8] = []
    var fields: [(String, String)] = []
    var host: [UInt8]?
    /// Answer body bytes queued for nghttp2, and whether the answer ends after them.
    var pending: [UInt8] = []
    var pendingStart = 0
    var ended = false
    /// nghttp2 was told there was nothing to send (`NGHTTP2_ERR_DEFERRED`): it must be told
    /// when there is.
    var deferred = false

    var queuedBytes: Int { pending.count - pendingStart }
  }

  public init(settings: HTTP2Settings, responder: HTTP2Responder, now: @escaping () -> UInt64) {
    self.settings = settings
    self.responder = responder
    self.now = now
    resets = TokenBucket(burst: settings.maxConcurrentStreams, perSecond: settings.maxConcurrentStreams)
    var callbacks: OpaquePointer?
    guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
      failed = true
      return
    }
    defer { nghttp2_session_callbacks_del(callbacks) }
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Self.onBeginHeaders)
    nghttp2_session_callbacks_set_on_header_callback(callbacks, Self.onHeader)
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Self.onFrameReceived)
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Self.onDataChunk)
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Self.onStreamClose)
    var option: OpaquePointer?
    guard nghttp2_option_new(&option) == 0, let option else {
      failed = true
      return
    }
    defer { nghttp2_option_del(option) }
    // The responder reopens windows as it forwards bodies: backpressure reaches the client.
    nghttp2_option_set_no_auto_window_update(option, 1)
    nghttp2_option_set_max_send_header_block_length(option, 64 << 10)
    // CONTINUATION floods (CVE-2024-27316) end at a few frames past the header list limit.
    nghttp2_option_set_max_continuations(option, 8)
    nghttp2_option_set_max_settings(option, 32)
    var created: OpaquePointer?
    let me = Unmanaged.passUnretained(self).toOpaque()
    guard nghttp2_session_server_new2(&created, callbacks, me, option) == 0, let created else {
      failed = true
      return
    }
    session = created
    var entries = [
      nghttp2_settings_entry(
        settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue),
        value: UInt32(clamping: settings.maxConcurrentStreams)),
      nghttp2_settings_entry(
        settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue),
        value: UInt32(clamping: settings.initialWindowBytes)),
      nghttp2_settings_entry(
        settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue),
        value: UInt32(clamping: settings.maxHeaderListBytes)),
    ]
    if nghttp2_submit_settings(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count) != 0 {
      failed = true
    }
  }

  deinit {
    if let session { nghttp2_session_del(session) }
  }

  // MARK: Bytes in and out

  /// Feeds what the client sent. Returns false on a fatal error: the connection is to be
  /// closed once `drainOutput` has written what is queued (a GOAWAY among it).
  @discardableResult
  public func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let session, !failed else { return false }
    let consumed = nghttp2_session_mem_recv(
      session, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
    if consumed < 0 {
      failed = true
      // A GOAWAY for the error, if nghttp2 has not queued one itself.
      _ = nghttp2_session_terminate_session(session, UInt32(NGHTTP2_PROTOCOL_ERROR.rawValue))
      return false
    }
    return true
  }

  /// Hands every byte nghttp2 has to send to `write`, in order.
  public func drainOutput(_ write: (UnsafeRawBufferPointer) -> Void) {
    guard let session else { return }
    while true {
      var data: UnsafePointer<UInt8>?
      let count = nghttp2_session_mem_send(session, &data)
      guard count > 0, let data else { return }
      write(UnsafeRawBufferPointer(start: data, count: count))
    }
  }

  /// Whether the connection has nothing more to do: both sides are done (after a GOAWAY,
  /// or a fatal error) and nothing waits to be written.
  public var isFinished: Bool {
    guard let session else { return true }
    return nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
  }

  /// Streams open now.
  public var openStreamCount: Int { streams.count }

  // MARK: Answers

  /// Sends a stream's answer head. `fields`: lowercase names (HTTP/2 carries no others),
  /// without connection-specific ones. The body follows with `sendBody` and `endBody`,
  /// unless `endOfStream`.
  public func sendHead(_ stream: Int32, status: Int, fields: [(name: String, value: String)], endOfStream: Bool) {
    guard let session, let state = streams[stream] else { return }
    // Names and values back to back in one buffer, each pair's lengths noted; nghttp2
    // copies them when the answer is submitted.
    var text: [UInt8] = Array(":status".utf8) + Array(String(status).utf8)
    var lengths: [(name: Int, value: Int)] = [(7, text.count - 7)]
    for field in fields {
      let name = Array(field.name.lowercased().utf8)
      text += name
      text += field.value.utf8
      lengths.append((name.count, field.value.utf8.count))
    }
    let result = text.withUnsafeMutableBufferPointer { bytes in
      var nva: [nghttp2_nv] = []
      nva.reserveCapacity(lengths.count)
      var offset = 0
      for length in lengths {
        let name = bytes.baseAddress! + offset
        nva.append(
          nghttp2_nv(
            name: name, value: name + length.name, namelen: length.name, valuelen: length.value,
            flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
        offset += length.name + length.value
      }
      return gh_h2_submit_response(session, stream, &nva, nva.count, endOfStream ? nil : Self.readBody)
    }
    if result != 0 {
      _ = nghttp2_submit_rst_stream(
        session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, UInt32(NGHTTP2_INTERNAL_ERROR.rawValue))
    }
    if endOfStream { state.ended = true }
  }

  /// Queues answer body bytes for a stream whose head was sent.
  public func sendBody(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) {
    guard let state = streams[stream], !state.ended, !bytes.isEmpty else { return }
    state.pending.append(contentsOf: bytes)
    resumeIfDeferred(stream, state)
  }

  /// Ends a stream's answer after what is queued.
  public func endBody(_ stream: Int32) {
    guard let state = streams[stream], !state.ended else { return }
    state.ended = true
    resumeIfDeferred(stream, state)
  }

  /// Answer bytes of `stream` still queued here (not yet taken by nghttp2): the responder's
  /// measure of a client that does not read.
  public func queuedBytes(_ stream: Int32) -> Int { streams[stream]?.queuedBytes ?? 0 }

  /// The responder forwarded `count` body bytes of `stream`: the windows reopen by as much.
  public func consumed(_ stream: Int32, _ count: Int) {
    guard let session, count > 0 else { return }
    _ = nghttp2_session_consume(session, stream, count)
  }

  /// Resets a stream (`RST_STREAM`), e.g. when its upstream failed after the head was sent.
  public func reset(_ stream: Int32, errorCode: UInt32 = UInt32(NGHTTP2_INTERNAL_ERROR.rawValue)) {
    guard let session else { return }
    _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, errorCode)
  }

  /// Says the connection takes no new streams (drain, reload); those open finish.
  public func goAway(errorCode: UInt32 = UInt32(NGHTTP2_NO_ERROR.rawValue)) {
    guard let session else { return }
    _ = nghttp2_submit_goaway(
      session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session), errorCode, nil, 0)
  }

  /// Ends the connection for `abuse`: GOAWAY with `code`, nothing more read.
  private func abused(_ abuse: HTTP2Abuse, code: UInt32) {
    guard let session, !failed else { return }
    failed = true
    _ = nghttp2_session_terminate_session(session, code)
    responder.connectionAbused(abuse)
  }

  private func resumeIfDeferred(_ stream: Int32, _ state: StreamState) {
    guard state.deferred, let session else { return }
    state.deferred = false
    _ = nghttp2_session_resume_data(session, stream)
  }

  // MARK: nghttp2's callbacks

  private static func connection(_ userData: UnsafeMutableRawPointer?) -> HTTP2ServerConnection {
    Unmanaged<HTTP2ServerConnection>.fromOpaque(userData!).takeUnretainedValue()
  }

  private static let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame, gh_h2_headers_category(frame) == Int32(NGHTTP2_HCAT_REQUEST.rawValue) else { return 0 }
    let connection = connection(userData)
    connection.streams[gh_h2_frame_stream(frame)] = StreamState()
    return 0
  }

  private static let onHeader: nghttp2_on_header_callback = {
    _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, let name, let value else { return 0 }
    let connection = connection(userData)
    guard let state = connection.streams[gh_h2_frame_stream(frame)] else { return 0 }
    let nameBytes = UnsafeBufferPointer(start: name, count: nameLength)
    let valueBytes = Array(UnsafeBufferPointer(start: value, count: valueLength))
    // nghttp2 has checked the names (lowercase, pseudo-headers first and known) and the
    // values (no CR, LF or NUL) before they get here.
    if nameBytes.first == 0x3A {
      switch String(decoding: nameBytes, as: UTF8.self) {
      case ":method": state.method = valueBytes
      case ":path": state.path = valueBytes
      case ":authority": state.authority = valueBytes
      case ":scheme": state.scheme = valueBytes
      default: break
      }
      return 0
    }
    let fieldName = String(decoding: nameBytes, as: UTF8.self)
    if fieldName == "host" { state.host = valueBytes }
    state.fields.append((fieldName, String(decoding: valueBytes, as: UTF8.self)))
    return 0
  }

  private static let onFrameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame else { return 0 }
    let connection = connection(userData)
    let stream = gh_h2_frame_stream(frame)
    let endOfStream = gh_h2_frame_flags(frame) & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    switch UInt32(gh_h2_frame_type(frame)) {
    case NGHTTP2_HEADERS.rawValue:
      guard gh_h2_headers_category(frame) == Int32(NGHTTP2_HCAT_REQUEST.rawValue),
        let state = connection.streams[stream]
      else {
        // Trailers of a request body: their fields are not forwarded; the body ends.
        if endOfStream, connection.streams[stream] != nil { connection.responder.streamReceivedEnd(stream) }
        return 0
      }
      connection.deliverHead(stream, state, endOfStream: endOfStream)
    case NGHTTP2_DATA.rawValue:
      if endOfStream, connection.streams[stream] != nil { connection.responder.streamReceivedEnd(stream) }
    case NGHTTP2_RST_STREAM.rawValue:
      // A client resetting streams as fast as it opens them (CVE-2023-44487) makes the
      // gateway start work for nothing: past the bucket, the connection ends.
      if !connection.resets.take(nowNanoseconds: connection.now()) {
        connection.abused(.rapidReset, code: NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
      }
    default:
      break
    }
    return 0
  }

  private static let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, stream, data, length, userData in
    guard let data else { return 0 }
    let connection = connection(userData)
    guard connection.streams[stream] != nil else { return 0 }
    connection.responder.streamReceivedBody(stream, UnsafeRawBufferPointer(start: data, count: length))
    return 0
  }

  private static let onStreamClose: nghttp2_on_stream_close_callback = { _, stream, errorCode, userData in
    let connection = connection(userData)
    guard connection.streams.removeValue(forKey: stream) != nil else { return 0 }
    connection.responder.streamClosed(stream, errorCode: errorCode)
    return 0
  }

  /// Gives nghttp2 what is queued for a stream's answer body, as much as its windows allow.
  private static let readBody: nghttp2_data_source_read_callback = {
    _, stream, buffer, length, flags, _, userData in
    let connection = connection(userData)
    guard let state = connection.streams[stream], let buffer, let flags else {
      return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
    }
    let count = min(length, state.queuedBytes)
    if count > 0 {
      state.pending.withUnsafeBufferPointer { pending in
        buffer.update(from: pending.baseAddress! + state.pendingStart, count: count)
      }
      state.pendingStart += count
      if state.pendingStart == state.pending.count {
        state.pending.removeAll(keepingCapacity: true)
        state.pendingStart = 0
      }
    }
    if state.queuedBytes == 0 {
      if state.ended {
        flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
      } else if count == 0 {
        state.deferred = true
        return Int(NGHTTP2_ERR_DEFERRED.rawValue)
      }
    }
    return count
  }

  /// Builds the stream's request head from its pseudo-headers and fields: `:authority` is
  /// the `Host` (RFC 9113 §8.3.1), the body's length is its `content-length` or unknown.
  private func deliverHead(_ stream: Int32, _ state: StreamState, endOfStream: Bool) {
    var problem: HTTP2RequestProblem?
    var fields = state.fields
    if !state.authority.isEmpty {
      if let host = state.host {
        if host != state.authority { problem = .hostDisagrees }
      } else {
        fields.insert(("host", String(decoding: state.authority, as: UTF8.self)), at: 0)
      }
    }
    let framing: HTTPBodyFraming
    if endOfStream {
      framing = .none
    } else if let length = fields.first(where: { $0.0 == "content-length" }).flatMap({ Int64($0.1) }) {
      framing = .contentLength(length)
    } else {
      framing = .chunked
    }
    let head = HTTPRequestHead(
      method: HTTPMethod(String(decoding: state.method, as: UTF8.self)),
      target: String(decoding: state.path, as: UTF8.self), version: .http2, headers: HTTPHeaders(fields),
      bodyFraming: framing, keepAlive: true, expectsContinue: false)
    state.fields = []
    responder.streamReceivedHead(stream, head: head, problem: problem, endOfStream: endOfStream)
  }
}
