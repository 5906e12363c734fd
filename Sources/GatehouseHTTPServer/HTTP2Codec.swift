import CGatehouseNghttp2
import GatehouseHTTP
import Glibc

/// What an HTTP/2 codec tells its delegate, per stream. Called from `receive`, on the
/// connection's loop.
public protocol HTTP2CodecDelegate: AnyObject {
  /// A stream's request head is complete (or refused: the delegate answers with an error);
  /// `endOfStream`: no body follows.
  func streamReceivedHead(_ stream: Int32, head: Result<HTTPRequestHead, HTTP2RequestProblem>, endOfStream: Bool)
  /// Body bytes of a stream. The connection's and the stream's windows reopen only when the
  /// delegate says the bytes are consumed (`consumed`): a body nobody reads stops at the
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
/// (`drainOutput`), request heads and bodies to the delegate, answers from it. libnghttp2
/// holds the frame codec, HPACK and the stream states; it runs no thread and does no I/O of
/// its own. Answer bodies are queued per stream and handed to nghttp2 as its windows allow,
/// so a stream whose client does not read holds only what its delegate queued.
///
/// A request head is checked by the same rules as an HTTP/1.1 one: the fields nghttp2 has
/// validated are written as an HTTP/1.1 head (`:authority` as `Host`, cookies joined, RFC
/// 9113 §8.2.3) and read by `HTTPRequestParser`, so targets, dot segments, `content-length`
/// and header limits mean the same on both protocols.
///
/// Confined to one loop.
public final class HTTP2Codec {
  public unowned(unsafe) var delegate: HTTP2CodecDelegate
  public let settings: HTTP2Settings
  private let parserLimits: HTTPLimits
  private var session: OpaquePointer?
  private var streams: [Int32: StreamState] = [:]
  /// The request head being received. Header blocks never interleave (a block's
  /// CONTINUATION frames follow it at once, RFC 9113 §6.10), so one set of buffers, kept
  /// between streams, serves every stream's head without an allocation.
  private var incoming = IncomingHead()

  struct IncomingHead {
    /// The request line's parts and `Host`, from the pseudo-headers.
    var method: [UInt8] = []
    var path: [UInt8] = []
    var authority: [UInt8] = []
    var host: [UInt8] = []
    var hasHost = false
    /// The other fields, already in HTTP/1.1 form (`name: value\r\n`).
    var fields: [UInt8] = []
    var cookies: [UInt8] = []
    var hasContentLength = false
    /// The decoded header list's size as RFC 9113 §6.5.2 counts it (trailers too).
    var listBytes = 0
    /// The head written as HTTP/1.1, for the parser.
    var text: [UInt8] = []

    mutating func reset() {
      // Emptying an empty array still costs a call into the generic range replacement:
      // `host` and `cookies` are mostly empty.
      method.removeAll(keepingCapacity: true)
      path.removeAll(keepingCapacity: true)
      authority.removeAll(keepingCapacity: true)
      if !host.isEmpty { host.removeAll(keepingCapacity: true) }
      hasHost = false
      fields.removeAll(keepingCapacity: true)
      if !cookies.isEmpty { cookies.removeAll(keepingCapacity: true) }
      hasContentLength = false
      listBytes = 0
    }
  }

  /// An answer head being submitted: its bytes, lengths and nghttp2's name-value pairs,
  /// kept between answers so a head costs no allocation.
  private var headText: [UInt8] = []
  private var headLengths: [(name: Int, value: Int, unique: Bool)] = []
  private var headFields: [nghttp2_nv] = []
  /// The stream looked up last: nghttp2's callbacks come many in a row for one stream (each
  /// header of a head, each read of a body), and hashing the id each time showed in profiles.
  private var lastLookedUp: (id: Int32, state: StreamState)?
  /// A fatal error happened: the connection ends once its GOAWAY is written.
  public private(set) var failed = false
  /// The loop's clock, in nanoseconds.
  private let now: () -> UInt64
  /// Allowances of frames that cost work and carry none (Docs/http2.md): each kind a burst, then
  /// a rate. Client resets: `max_concurrent_streams` at once, as many again per second.
  private var resets: TokenBucket
  private var settingsFrames = TokenBucket(burst: 32, perSecond: 8)
  private var pings = TokenBucket(burst: 32, perSecond: 8)
  private var priorities: TokenBucket
  private var emptyData = TokenBucket(burst: 32, perSecond: 8)
  /// Earned back by every DATA frame sent (the client acknowledges each with up to two).
  private var windowUpdates = TokenBucket(burst: 1024, perSecond: 64)
  private var refusedStreams = TokenBucket(burst: 16, perSecond: 4)
  private var invalidFrames = TokenBucket(burst: 16, perSecond: 4)

  /// What is known of one stream while its answer leaves.
  final class StreamState {
    /// Answer body bytes queued for nghttp2, and whether the answer ends after them.
    var pending: [UInt8] = []
    var pendingStart = 0
    var ended = false
    /// nghttp2 was told there was nothing to send (`NGHTTP2_ERR_DEFERRED`): it must be told
    /// when there is.
    var deferred = false

    var queuedBytes: Int { pending.count - pendingStart }

    /// Ready for another stream, keeping the queue's buffer unless a large answer grew it.
    func clear() {
      if pending.capacity > HTTP2Codec.keptQueueBytes {
        pending = []
      } else {
        pending.removeAll(keepingCapacity: true)
      }
      pendingStart = 0
      ended = false
      deferred = false
    }
  }

  /// States of closed streams, kept for the next ones: a stream then costs no new state nor
  /// a new answer queue (two allocations per request showed in profiles). As many as the
  /// connection keeps channels (`HTTP2ServerConnection.spareLimit`).
  private var spareStates: [StreamState] = []
  static let spareStateLimit = 16
  /// A kept state's queue buffer is kept up to this size: small answers reuse it, and an
  /// idle connection holds little.
  static let keptQueueBytes = 2048
  /// The head buffer is kept between answers up to this size.
  static let keptHeadBytes = 16 * 1024

  public init(
    settings: HTTP2Settings, parserLimits: HTTPLimits, delegate: HTTP2CodecDelegate, now: @escaping () -> UInt64
  ) {
    self.settings = settings
    self.parserLimits = parserLimits
    self.delegate = delegate
    self.now = now
    resets = TokenBucket(burst: settings.maxConcurrentStreams, perSecond: settings.maxConcurrentStreams)
    // Browsers send a few PRIORITY frames per stream they open.
    priorities = TokenBucket(burst: 2 * settings.maxConcurrentStreams, perSecond: 2 * settings.maxConcurrentStreams)
    var callbacks: OpaquePointer?
    guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
      failed = true
      return
    }
    defer { nghttp2_session_callbacks_del(callbacks) }
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Self.onBeginHeaders)
    nghttp2_session_callbacks_set_on_header_callback(callbacks, Self.onHeader)
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Self.onFrameReceived)
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks, Self.onInvalidFrame)
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, Self.onFrameSent)
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Self.onDataChunk)
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Self.onStreamClose)
    var option: OpaquePointer?
    guard nghttp2_option_new(&option) == 0, let option else {
      failed = true
      return
    }
    defer { nghttp2_option_del(option) }
    // The delegate reopens windows as it forwards bodies: backpressure reaches the client.
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
    // The connection's own window grows with the streams': one stream's upload must not
    // hold the others' at the 65,535 bytes RFC 9113 starts every connection with.
    let connectionWindow = Int32(clamping: settings.initialWindowBytes * max(1, min(settings.maxConcurrentStreams, 16)))
    if connectionWindow > 65_535 {
      _ = nghttp2_session_set_local_window_size(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, connectionWindow)
    }
  }

  deinit {
    if let session { nghttp2_session_del(session) }
  }

  /// The state of stream `id`, if it is open.
  private func state(_ id: Int32) -> StreamState? {
    if let last = lastLookedUp, last.id == id { return last.state }
    guard let state = streams[id] else { return nil }
    lastLookedUp = (id, state)
    return state
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
      switch Int32(consumed) {
      case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS.rawValue:
        abused(.continuationFlood, code: NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
      case NGHTTP2_ERR_FLOODED.rawValue:
        abused(.invalidFrames, code: NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
      default:
        break
      }
      failed = true
      // A GOAWAY for the error, if none is queued yet.
      _ = nghttp2_session_terminate_session(session, UInt32(NGHTTP2_PROTOCOL_ERROR.rawValue))
      return false
    }
    return true
  }

  /// Hands every byte nghttp2 has to send to `write`, in order; stops early when `write`
  /// returns false (the socket's queue is full: the rest waits in nghttp2 and in the
  /// streams' queues).
  public func drainOutput(_ write: (UnsafeRawBufferPointer) -> Bool) {
    guard let session else { return }
    while true {
      var data: UnsafePointer<UInt8>?
      let count = nghttp2_session_mem_send(session, &data)
      guard count > 0, let data else { return }
      if !write(UnsafeRawBufferPointer(start: data, count: count)) { return }
    }
  }

  /// Whether nghttp2 has bytes to send now.
  public var wantsWrite: Bool {
    guard let session else { return false }
    return nghttp2_session_want_write(session) != 0
  }

  /// Whether the connection has nothing more to do: both sides are done (after a GOAWAY,
  /// or a fatal error) and nothing waits to be written.
  public var isFinished: Bool {
    guard let session else { return true }
    return nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
  }

  /// Streams open now.
  public var openStreamCount: Int { streams.count }

  /// The client's window for the whole connection: 0 while it takes no more answer bytes.
  public var remoteWindow: Int {
    guard let session else { return 0 }
    return Int(nghttp2_session_get_remote_window_size(session))
  }

  // MARK: Answers

  /// Sends a stream's answer head. `fields`: names and values as bytes (names are lowercased
  /// here: HTTP/2 carries no others); those whose name `except` picks are left out
  /// (connection-specific ones). The body follows with `sendBody` and `endBody`, unless
  /// `endOfStream`.
  public func sendHead(
    _ stream: Int32, status: Int, fields: HTTPHeaders, except: (UnsafeBufferPointer<UInt8>) -> Bool,
    endOfStream: Bool
  ) {
    beginHead(status: status, capacity: fields.serializedFieldsLength)
    fields.withEachField { name, value in
      if !except(name) { addHeadField(name: name, value: value) }
    }
    submitHead(stream, endOfStream: endOfStream)
  }

  /// Starts an answer head, made field by field (`addHeadField`) and sent by `submitHead`
  /// before any other stream's head is begun: one set of buffers, kept between answers,
  /// holds the head being made, so a head costs no allocation. ":status" comes first, then
  /// the fields, back to back, with each pair's lengths; nghttp2 copies them when the
  /// answer is submitted.
  public func beginHead(status: Int, capacity: Int = 0) {
    if headText.capacity > Self.keptHeadBytes {
      // A rare large head does not keep its buffer for the connection's life.
      headText = []
    } else {
      headText.removeAll(keepingCapacity: true)
    }
    headLengths.removeAll(keepingCapacity: true)
    headText.reserveCapacity(capacity + 16)
    HTTP2Codec.append(":status", to: &headText)
    headText.append(UInt8(48 + status / 100 % 10))
    headText.append(UInt8(48 + status / 10 % 10))
    headText.append(UInt8(48 + status % 10))
    headLengths.append((7, 3, false))
  }

  /// A field of the head begun last, its name lowercased (HTTP/2 carries no others).
  public func addHeadField(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
    let start = headText.count
    headText.append(contentsOf: name)
    headText.withUnsafeMutableBufferPointer { text in
      for index in start..<text.count where text[index] &- 0x41 < 26 { text[index] |= 0x20 }
    }
    headText.append(contentsOf: value)
    // A field whose value differs in every answer is sent without indexing: entering it
    // in the HPACK table would only push out entries a later answer could reuse.
    let unique = headText.withUnsafeBufferPointer { text in
      let lowered = UnsafeBufferPointer(rebasing: text[start..<(start + name.count)])
      return Self.equals(lowered, "x-request-id") || Self.equals(lowered, "etag") || Self.equals(lowered, "date")
    }
    headLengths.append((name.count, value.count, unique))
  }

  /// Sends the head begun last as `stream`'s answer head; its body follows with `sendBody`
  /// and `endBody`, unless `endOfStream`.
  public func submitHead(_ stream: Int32, endOfStream: Bool) {
    guard let session, let state = state(stream) else { return }
    headFields.removeAll(keepingCapacity: true)
    let result = headText.withUnsafeMutableBufferPointer { bytes in
      var offset = 0
      for length in headLengths {
        let name = bytes.baseAddress! + offset
        headFields.append(
          nghttp2_nv(
            name: name, value: name + length.name, namelen: length.name, valuelen: length.value,
            flags: UInt8(length.unique ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue)))
        offset += length.name + length.value
      }
      return headFields.withUnsafeMutableBufferPointer { nva in
        gh_h2_submit_response(session, stream, nva.baseAddress, nva.count, endOfStream ? nil : Self.readBody)
      }
    }
    if result != 0 {
      _ = nghttp2_submit_rst_stream(
        session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, UInt32(NGHTTP2_INTERNAL_ERROR.rawValue))
    }
    if endOfStream { state.ended = true }
  }

  /// Queues answer body bytes for a stream whose head was sent.
  public func sendBody(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) {
    guard let state = state(stream), !state.ended, !bytes.isEmpty else { return }
    state.pending.append(contentsOf: bytes)
    resumeIfDeferred(stream, state)
  }

  /// Ends a stream's answer after what is queued.
  public func endBody(_ stream: Int32) {
    guard let state = state(stream), !state.ended else { return }
    state.ended = true
    resumeIfDeferred(stream, state)
  }

  /// Answer bytes of `stream` still queued here (not yet taken by nghttp2): the delegate's
  /// measure of a client that does not read.
  public func queuedBytes(_ stream: Int32) -> Int { state(stream)?.queuedBytes ?? 0 }

  /// The delegate forwarded `count` body bytes of `stream`: the windows reopen by as much.
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
  public func abused(_ abuse: HTTP2Abuse, code: UInt32) {
    guard let session, !failed else { return }
    failed = true
    _ = nghttp2_session_terminate_session(session, code)
    delegate.connectionAbused(abuse)
  }

  private func resumeIfDeferred(_ stream: Int32, _ state: StreamState) {
    guard state.deferred, let session else { return }
    state.deferred = false
    _ = nghttp2_session_resume_data(session, stream)
  }

  /// Takes `count` of `bucket`'s tokens, or ends the connection for `abuse`.
  private func allow(_ bucket: inout TokenBucket, _ count: Int = 1, else abuse: HTTP2Abuse) {
    if !bucket.take(count, nowNanoseconds: now()) { abused(abuse, code: NGHTTP2_ENHANCE_YOUR_CALM.rawValue) }
  }

  /// Answer bytes a client's reset throws away that cost one more of its reset allowance:
  /// a reset stream whose large answer was made and never read (a stored answer of
  /// megabytes, read from the file and wrapped) cost the loop work in proportion to it.
  static let resetWasteUnit = 128 << 10

  // MARK: nghttp2's callbacks

  /// Appends a literal's bytes. A `String.UTF8View` goes through the generic string copy,
  /// which showed in profiles at several literals per request.
  @inline(__always)
  static func append(_ literal: StaticString, to bytes: inout [UInt8]) {
    bytes.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
  }

  /// Whether `bytes` are `literal`'s: the length first, then memcmp (a generic
  /// `elementsEqual` over a UTF-8 view cost more than the rest of a header's handling).
  static func equals(_ bytes: UnsafeBufferPointer<UInt8>, _ literal: StaticString) -> Bool {
    bytes.count == literal.utf8CodeUnitCount
      && (bytes.isEmpty || memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0)
  }

  private static func codec(_ userData: UnsafeMutableRawPointer?) -> HTTP2Codec {
    Unmanaged<HTTP2Codec>.fromOpaque(userData!).takeUnretainedValue()
  }

  private static let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame else { return 0 }
    let codec = codec(userData)
    codec.incoming.reset()
    guard gh_h2_headers_category(frame) == Int32(NGHTTP2_HCAT_REQUEST.rawValue) else { return 0 }
    if codec.streams.count >= codec.settings.maxConcurrentStreams {
      // nghttp2 refuses the stream itself; a client that keeps trying is told to stop.
      codec.allow(&codec.refusedStreams, else: .tooManyStreams)
    }
    codec.streams[gh_h2_frame_stream(frame)] = codec.spareStates.popLast() ?? StreamState()
    return 0
  }

  private static let onHeader: nghttp2_on_header_callback = {
    _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, let name, let value else { return 0 }
    let codec = codec(userData)
    codec.incoming.listBytes += nameLength + valueLength + 32
    if codec.incoming.listBytes > codec.settings.maxHeaderListBytes {
      codec.abused(.headerListTooLarge, code: NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
      return Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }
    // Trailers are counted, not kept.
    guard gh_h2_headers_category(frame) == Int32(NGHTTP2_HCAT_REQUEST.rawValue) else { return 0 }
    let nameBytes = UnsafeBufferPointer(start: name, count: nameLength)
    let valueBytes = UnsafeBufferPointer(start: value, count: valueLength)
    // nghttp2 has checked the names (lowercase, pseudo-headers first and known, no
    // connection-specific ones) and the values (no CR, LF or NUL) before they get here.
    if nameBytes.first == 0x3A {
      if HTTP2Codec.equals(nameBytes, ":method") {
        codec.incoming.method.append(contentsOf: valueBytes)
      } else if HTTP2Codec.equals(nameBytes, ":path") {
        codec.incoming.path.append(contentsOf: valueBytes)
      } else if HTTP2Codec.equals(nameBytes, ":authority") {
        codec.incoming.authority.append(contentsOf: valueBytes)
      }
      return 0
    }
    if HTTP2Codec.equals(nameBytes, "host") {
      codec.incoming.hasHost = true
      codec.incoming.host.append(contentsOf: valueBytes)
    } else if HTTP2Codec.equals(nameBytes, "cookie") {
      // RFC 9113 §8.2.3: cookie crumbs are one field again for HTTP/1.1.
      if !codec.incoming.cookies.isEmpty { HTTP2Codec.append("; ", to: &codec.incoming.cookies) }
      codec.incoming.cookies.append(contentsOf: valueBytes)
      return 0
    } else if HTTP2Codec.equals(nameBytes, "content-length") {
      codec.incoming.hasContentLength = true
    }
    codec.incoming.fields.append(contentsOf: nameBytes)
    HTTP2Codec.append(": ", to: &codec.incoming.fields)
    codec.incoming.fields.append(contentsOf: valueBytes)
    HTTP2Codec.append("\r\n", to: &codec.incoming.fields)
    return 0
  }

  private static let onFrameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame else { return 0 }
    let codec = codec(userData)
    let stream = gh_h2_frame_stream(frame)
    let flags = gh_h2_frame_flags(frame)
    let endOfStream = flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    switch UInt32(gh_h2_frame_type(frame)) {
    case NGHTTP2_HEADERS.rawValue:
      guard gh_h2_headers_category(frame) == Int32(NGHTTP2_HCAT_REQUEST.rawValue), codec.state(stream) != nil
      else {
        // Trailers of a request body: their fields are not forwarded; the body ends.
        if endOfStream, codec.state(stream) != nil { codec.delegate.streamReceivedEnd(stream) }
        return 0
      }
      codec.deliverHead(stream, endOfStream: endOfStream)
    case NGHTTP2_DATA.rawValue:
      if gh_h2_frame_length(frame) == 0 && !endOfStream { codec.allow(&codec.emptyData, else: .emptyDataFlood) }
      if endOfStream, codec.state(stream) != nil { codec.delegate.streamReceivedEnd(stream) }
    case NGHTTP2_RST_STREAM.rawValue:
      // A client resetting streams as fast as it opens them (CVE-2023-44487) makes the
      // gateway start work for nothing: past the bucket, the connection ends. A reset that
      // throws away an answer made and not read costs more (`resetWasteUnit`): otherwise a
      // client could ask for a large answer and reset it, again and again, within the rate.
      // At most half the burst, so that one such reset is always allowed.
      let wasted = codec.state(stream)?.queuedBytes ?? 0
      let cost = min(1 + wasted / resetWasteUnit, max(1, Int(codec.resets.burst) / 2))
      codec.allow(&codec.resets, cost, else: .rapidReset)
    case NGHTTP2_SETTINGS.rawValue:
      if flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 { codec.allow(&codec.settingsFrames, else: .settingsFlood) }
    case NGHTTP2_PING.rawValue:
      if flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 { codec.allow(&codec.pings, else: .pingFlood) }
    case NGHTTP2_PRIORITY.rawValue:
      codec.allow(&codec.priorities, else: .priorityFlood)
    case NGHTTP2_WINDOW_UPDATE.rawValue:
      codec.allow(&codec.windowUpdates, else: .windowUpdateFlood)
    default:
      break
    }
    return 0
  }

  private static let onInvalidFrame: nghttp2_on_invalid_frame_recv_callback = { _, _, _, userData in
    let codec = codec(userData)
    codec.allow(&codec.invalidFrames, else: .invalidFrames)
    return 0
  }

  private static let onFrameSent: nghttp2_on_frame_send_callback = { _, frame, userData in
    guard let frame, UInt32(gh_h2_frame_type(frame)) == NGHTTP2_DATA.rawValue else { return 0 }
    // The client may acknowledge each DATA frame for its stream and for the connection.
    codec(userData).windowUpdates.refund(2)
    return 0
  }

  private static let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, stream, data, length, userData in
    guard let data else { return 0 }
    let codec = codec(userData)
    guard codec.state(stream) != nil else { return 0 }
    codec.delegate.streamReceivedBody(stream, UnsafeRawBufferPointer(start: data, count: length))
    return 0
  }

  private static let onStreamClose: nghttp2_on_stream_close_callback = { _, stream, errorCode, userData in
    let codec = codec(userData)
    if codec.lastLookedUp?.id == stream { codec.lastLookedUp = nil }
    guard let state = codec.streams.removeValue(forKey: stream) else { return 0 }
    if codec.spareStates.count < HTTP2Codec.spareStateLimit {
      state.clear()
      codec.spareStates.append(state)
    }
    codec.delegate.streamClosed(stream, errorCode: errorCode)
    return 0
  }

  /// Gives nghttp2 what is queued for a stream's answer body, as much as its windows allow.
  private static let readBody: nghttp2_data_source_read_callback = {
    _, stream, buffer, length, flags, _, userData in
    let codec = codec(userData)
    guard let state = codec.state(stream), let buffer, let flags else {
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

  /// Reads the stream's request head as HTTP/1.1 would: its pseudo-headers become the
  /// request line and `Host` (RFC 9113 §8.3.1), and a body without `content-length` is read
  /// as one of unknown length (chunked, for the upstream).
  private func deliverHead(_ stream: Int32, endOfStream: Bool) {
    if !incoming.authority.isEmpty, incoming.hasHost, incoming.host != incoming.authority {
      delegate.streamReceivedHead(stream, head: .failure(.hostDisagrees), endOfStream: endOfStream)
      return
    }
    var text = incoming.text
    incoming.text = []
    text.removeAll(keepingCapacity: true)
    text.append(contentsOf: incoming.method)
    text.append(0x20)
    text.append(contentsOf: incoming.path)
    HTTP2Codec.append(" HTTP/1.1\r\n", to: &text)
    if !incoming.hasHost {
      HTTP2Codec.append("host: ", to: &text)
      text.append(contentsOf: incoming.authority)
      HTTP2Codec.append("\r\n", to: &text)
    }
    text.append(contentsOf: incoming.fields)
    if !incoming.cookies.isEmpty {
      HTTP2Codec.append("cookie: ", to: &text)
      text.append(contentsOf: incoming.cookies)
      HTTP2Codec.append("\r\n", to: &text)
    }
    if !endOfStream && !incoming.hasContentLength { HTTP2Codec.append("transfer-encoding: chunked\r\n", to: &text) }
    HTTP2Codec.append("\r\n", to: &text)
    var parser = HTTPRequestParser(limits: parserLimits)
    let parsed = text.withUnsafeBytes { bytes -> Result<HTTPRequestHead, HTTP2RequestProblem> in
      do throws(HTTPParseError) {
        let (step, _) = try parser.next(bytes)
        guard step == .head else { return .failure(.invalid(.invalidLeadingLine)) }
        var head = parser.takeHead()
        head.version = .http2
        if endOfStream { head.bodyFraming = .none }
        return .success(head)
      } catch {
        return .failure(.invalid(error))
      }
    }
    // The buffer goes back for the next head (the parsed head has its own copy).
    incoming.text = text
    delegate.streamReceivedHead(stream, head: parsed, endOfStream: endOfStream)
  }
}
