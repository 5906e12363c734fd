import GatehouseHTTPServer
import GatehouseNet

/// A client connection as its loop sees it: swept for deadlines, drained at shutdown, cut
/// at the drain timeout. An HTTP/1.1 connection is its `ClientSession`; an HTTP/2 one is an
/// `HTTP2ClientConnection`; one whose protocol is not known yet a `ClientProtocolChooser`.
protocol ClientConnection: AnyObject {
  /// The earliest deadline the sweep must act on (0: none).
  var deadline: UInt64 { get }
  func checkDeadline(now: UInt64)
  /// Shutdown or reload: no new requests; those in flight finish.
  func drain()
  /// Closes at once.
  func abort()
}

extension ClientSession: ClientConnection {}

/// The first moments of a connection on a listener that takes HTTP/2 as well as HTTP/1.1:
/// on TLS the protocol ALPN agreed on (`h2`), on cleartext (`h2c`) whether the client's
/// first bytes are the HTTP/2 connection preface (RFC 9113 §3.4, prior knowledge). Then the
/// connection goes on as one or the other with the bytes read so far.
final class ClientProtocolChooser: ConnectionDelegate, ClientConnection {
  unowned(unsafe) let context: LoopContext
  let listenerKey: String
  let peer: String
  let secure: Bool
  private var connection: BufferedConnection?
  /// Cleartext bytes read while they could still be the preface.
  private var held: [UInt8] = []
  private(set) var deadline: UInt64 = 0

  static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

  init(context: LoopContext, listenerKey: String, peer: String, secure: Bool) {
    self.context = context
    self.listenerKey = listenerKey
    self.peer = peer
    self.secure = secure
  }

  func start(_ connection: BufferedConnection) {
    self.connection = connection
    // A client that sends nothing is closed as a silent HTTP/1.1 one would be.
    deadline = context.loop.iterationTime &+ context.snapshot.headerTimeoutNanoseconds
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    withExtendedLifetime(self) {
      if secure {
        let http2 = connection.tlsInfo?.applicationProtocol == "h2"
        hand(connection, http2: http2, bytes)
        return
      }
      held.append(contentsOf: bytes)
      let compared = min(held.count, Self.preface.count)
      if held[..<compared].elementsEqual(Self.preface[..<compared]) {
        // Still the preface so far: a whole one is HTTP/2.
        guard compared == Self.preface.count else { return }
        handHeld(connection, http2: true)
      } else {
        handHeld(connection, http2: false)
      }
    }
  }

  private func handHeld(_ connection: BufferedConnection, http2: Bool) {
    let bytes = held
    held = []
    bytes.withUnsafeBytes { hand(connection, http2: http2, $0) }
  }

  private func hand(_ connection: BufferedConnection, http2: Bool, _ bytes: UnsafeRawBufferPointer) {
    self.connection = nil
    deadline = 0
    if http2 {
      context.continueAsHTTP2(self, connection, initial: bytes)
    } else {
      context.continueAsHTTP1(self, connection, initial: bytes)
    }
  }

  func connectionDidReadEOF(_ connection: BufferedConnection) {
    connection.close()
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    self.connection = nil
    context.connectionClosed(self)
  }

  func checkDeadline(now: UInt64) {
    guard deadline != 0, now >= deadline else { return }
    deadline = 0
    connection?.close()
  }

  func drain() {
    connection?.close()
  }

  func abort() {
    connection?.abort()
  }
}

/// An HTTP/2 client connection (Docs/http2.md): each stream's exchange is a `ClientSession` of
/// its own, answering through its `HTTP2StreamChannel` exactly as an HTTP/1.1 session
/// answers through its connection.
final class HTTP2ClientConnection: HTTP2ServerOwner, ClientConnection {
  unowned(unsafe) let context: LoopContext
  unowned(unsafe) let answers: AnswerWriter
  unowned(unsafe) let routeCache: RouteCache
  /// The configured address of the listener it came in on: removed by a reload, it drains.
  let listenerKey: String
  let clientAddress: [UInt8]
  let secure: Bool
  /// Made in `init` (it needs `self`); never nil after.
  private(set) var server: HTTP2ServerConnection!

  init(
    context: LoopContext, answers: AnswerWriter, routeCache: RouteCache, listenerKey: String, peer: String,
    secure: Bool
  ) {
    self.context = context
    self.answers = answers
    self.routeCache = routeCache
    self.listenerKey = listenerKey
    clientAddress = Array(peer.utf8)
    self.secure = secure
    let snapshot = context.snapshot
    server = HTTP2ServerConnection(
      owner: self, loop: context.loop, settings: snapshot.http2Settings, parserLimits: snapshot.limits,
      limits: HTTP2ServerLimits(
        headerTimeoutNanoseconds: snapshot.headerTimeoutNanoseconds,
        idleTimeoutNanoseconds: snapshot.idleTimeoutNanoseconds))
  }

  func responder(for channel: HTTP2StreamChannel) -> any ServerResponder {
    ClientSession(
      context: context, answers: answers, routeCache: routeCache, clientAddress: clientAddress, secure: secure,
      channel: channel)
  }

  func http2Connection(_ connection: HTTP2ServerConnection, abused abuse: HTTP2Abuse) {
    context.shared.warnAboutHTTP2Abuse(abuse.rawValue, client: String(decoding: clientAddress, as: UTF8.self))
  }

  func http2ConnectionClosed(_ connection: HTTP2ServerConnection) {
    context.connectionClosed(self)
  }

  var deadline: UInt64 { server.deadline }

  func checkDeadline(now: UInt64) {
    server.checkDeadline(now: now)
  }

  func drain() {
    server.drain()
  }

  func abort() {
    server.abort()
  }
}
