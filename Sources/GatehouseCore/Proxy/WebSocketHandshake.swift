import GatehouseHTTP

/// The HTTP side of a WebSocket handshake (RFC 6455 §4, Docs/websockets.md): telling a client's
/// handshake from other requests, checking the upstream's `101`, and writing the `101` the
/// client gets. Bytes only: the tunnel that follows is `WebSocketTunnel`'s.
enum WebSocketHandshake {
  /// What a request head asks of the connection.
  enum Request: Equatable {
    /// No WebSocket upgrade. Any other `Upgrade` (`h2c` among them) is hop-by-hop and
    /// dropped as ever: the request is served as a plain one.
    case none
    /// A well-formed handshake: GET, HTTP/1.1, no body, `Connection: upgrade`, a 16-byte
    /// `Sec-WebSocket-Key` and a `Sec-WebSocket-Version`.
    case websocket
    /// Asks for `websocket` but breaks RFC 6455 §4.1 (another method, a body, no key…).
    case malformed
  }

  /// Reads the head's `Upgrade`, `Connection` and `Sec-WebSocket-*` fields. The parser has
  /// bounded the head already; nothing here allocates for a request without `Upgrade`.
  static func classify(_ head: HTTPRequestHead) -> Request {
    guard head.headers.firstIndex(lowercaseName: "upgrade") != nil else { return .none }
    var upgradeNamesWebSocket = false
    var connectionNamesUpgrade = false
    var keys = 0
    var keyWellFormed = false
    var versions = 0
    head.headers.withEachField { name, value in
      if ASCIIBytes.equalsLowercase(name, "upgrade") {
        if listContains(value, "websocket") { upgradeNamesWebSocket = true }
      } else if ASCIIBytes.equalsLowercase(name, "connection") {
        if listContains(value, "upgrade") { connectionNamesUpgrade = true }
      } else if ASCIIBytes.equalsLowercase(name, "sec-websocket-key") {
        keys += 1
        keyWellFormed = isNonceOfSixteenBytes(value)
      } else if ASCIIBytes.equalsLowercase(name, "sec-websocket-version") {
        versions += 1
      }
    }
    guard upgradeNamesWebSocket else { return .none }
    let bodiless: Bool
    switch head.bodyFraming {
    case .none, .contentLength(0): bodiless = true
    case .contentLength, .chunked, .untilClose: bodiless = false
    }
    guard head.method == .get, head.version == .http1_1, bodiless, connectionNamesUpgrade, keys == 1,
      keyWellFormed, versions == 1
    else { return .malformed }
    return .websocket
  }

  /// Whether the upstream's `101` completes a WebSocket handshake: `Upgrade: websocket`
  /// and a `Sec-WebSocket-Accept` (whose value the client checks against its key).
  static func upstreamSwitched(_ head: HTTPResponseHead) -> Bool {
    guard head.status == 101 else { return false }
    var upgrade = false
    var accept = false
    head.headers.withEachField { name, value in
      if ASCIIBytes.equalsLowercase(name, "upgrade") {
        if listContains(value, "websocket") { upgrade = true }
      } else if ASCIIBytes.equalsLowercase(name, "sec-websocket-accept") {
        if !value.isEmpty { accept = true }
      }
    }
    return upgrade && accept
  }

  /// The `101` for the client: the upstream's end-to-end fields (`Sec-WebSocket-Accept`,
  /// `-Protocol`, `-Extensions`, cookies…) less the hop-by-hop table and the fields the
  /// gateway keeps to itself, then `Upgrade`, `Connection` and `X-Request-Id`.
  static func writeSwitchingHead(_ head: HTTPResponseHead, requestID: [UInt8], into out: inout [UInt8]) {
    out.append(contentsOf: "HTTP/1.1 101 Switching Protocols\r\n".utf8)
    head.headers.withEachField { name, value in
      if HopByHop.isHopByHop(name) || HopByHop.gatewayAnswerFields.contains(name) { return }
      out.append(contentsOf: name)
      out.append(contentsOf: ": ".utf8)
      out.append(contentsOf: value)
      out.append(contentsOf: "\r\n".utf8)
    }
    out.append(contentsOf: "Upgrade: websocket\r\nConnection: Upgrade\r\nX-Request-Id: ".utf8)
    out.append(contentsOf: requestID)
    out.append(contentsOf: "\r\n\r\n".utf8)
  }

  /// The fields the upstream request carries for a handshake (the client's `Upgrade` and
  /// `Connection` are hop-by-hop and were dropped with the rest).
  static let upstreamLines: StaticString = "Upgrade: websocket\r\nConnection: Upgrade\r\n"

  /// Whether a comma-separated field value lists `token`, ignoring case and whitespace.
  static func listContains(_ value: UnsafeBufferPointer<UInt8>, _ token: StaticString) -> Bool {
    ASCIIBytes.anyListElement(value) { ASCIIBytes.equalsLowercase($0, token) }
  }

  /// RFC 6455 §4.1: the key is 16 random bytes in base64, so 24 characters ending `==`.
  static func isNonceOfSixteenBytes(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
    guard value.count == 24, value[22] == 0x3D, value[23] == 0x3D else { return false }
    for byte in value[0..<22] {
      switch byte {
      case 0x41...0x5A, 0x61...0x7A, 0x30...0x39, 0x2B, 0x2F: continue
      default: return false
      }
    }
    return true
  }
}
