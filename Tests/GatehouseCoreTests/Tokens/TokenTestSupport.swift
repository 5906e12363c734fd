import Dispatch
import GatehouseHTTP
import GatehouseNet
import Synchronization

@testable import GatehouseConfig
@testable import GatehouseCore
@testable import GatehouseLogging

#if canImport(Glibc)
  import Glibc
#endif

struct TokenTestFailure: Error, CustomStringConvertible {
  let description: String
}

/// A clock the test moves by hand.
final class ManualTokenClock: TokenClock {
  private let current: Mutex<TokenInstant>

  init(_ start: TokenInstant = TokenInstant(millisecondsSinceEpoch: 1_800_000_000_000)) {
    current = Mutex(start)
  }

  var now: TokenInstant { current.withLock { $0 } }

  func advance(by duration: Duration) {
    current.withLock { $0 = $0 + duration }
  }
}

/// Carries a value into and out of closures that run on a loop. `@unchecked Sendable` because tests only
/// touch `value` on the loop, or on the test thread after a semaphore ordered the two.
final class UncheckedBox<Value>: @unchecked Sendable {
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// Runs `body` on `loop` and waits (at most 10 s) for its result.
func runOnLoop<T>(_ loop: EventLoop, _ body: @escaping () throws -> T) throws -> T {
  let work = UncheckedBox(body)
  let result = UncheckedBox<Result<T, any Error>?>(nil)
  let done = DispatchSemaphore(value: 0)
  loop.execute {
    result.value = Result { try work.value() }
    done.signal()
  }
  guard done.wait(timeout: .now() + 10) == .success else {
    throw TokenTestFailure(description: "loop did not answer within 10 s")
  }
  return try result.value!.get()
}

/// Polls `condition` every 5 ms until it holds or `timeout` passes. Deadlines are generous: the tests
/// assert outcomes, not speed.
@discardableResult
func waitFor(timeout: Duration = .seconds(10), _ condition: () throws -> Bool) rethrows -> Bool {
  let deadline = ContinuousClock.now + timeout
  while ContinuousClock.now < deadline {
    if try condition() { return true }
    usleep(5_000)
  }
  return try condition()
}

/// A token fetcher that records calls and completes them when the test says so. Its pending list is
/// touched on the manager's loop only.
final class FakeTokenFetcher: TokenFetcher, @unchecked Sendable {
  private let calls = Atomic<Int>(0)
  private var pending: [(Result<FetchedToken, TokenFetchError>) -> Void] = []

  var fetchCount: Int { calls.load(ordering: .relaxed) }
  /// Loop thread only.
  var pendingCount: Int { pending.count }

  func fetch(
    _ config: OAuth2ClientCredentialsConfig, on loop: EventLoop,
    completion: @escaping (Result<FetchedToken, TokenFetchError>) -> Void
  ) {
    calls.add(1, ordering: .relaxed)
    pending.append(completion)
  }

  /// Completes every pending fetch. Loop thread only; the manager sees it as a completion from its loop.
  func complete(_ result: Result<FetchedToken, TokenFetchError>) {
    let taken = pending
    pending.removeAll()
    for completion in taken { completion(result) }
  }

  func succeed(_ value: String, expiresIn: Duration? = .seconds(3600)) {
    complete(.success(FetchedToken(accessToken: SecretValue(value), expiresIn: expiresIn, tokenType: "Bearer")))
  }

  func fail(_ message: String) {
    complete(.failure(TokenFetchError(message)))
  }
}

/// A logger that writes into a pipe, and reads back what was written.
final class PipeLogger {
  private(set) var logger: Logger
  private let readFD: Int32
  private let writeFD: Int32
  private var collected: [UInt8] = []

  init(level: LogLevel = .debug) {
    var fds: [Int32] = [0, 0]
    precondition(pipe(&fds) == 0)
    readFD = fds[0]
    writeFD = fds[1]
    // Non-blocking both ways: the reader drains without waiting, and a full pipe drops lines instead of
    // hanging the test (64 KiB is far more than any test here logs).
    _ = fcntl(readFD, F_SETFL, O_NONBLOCK)
    _ = fcntl(writeFD, F_SETFL, O_NONBLOCK)
    logger = Logger(level: level, fileDescriptor: writeFD)
  }

  deinit {
    close(readFD)
    // A logger still held elsewhere (by something on a loop that outlived this object)
    // would go on writing to the descriptor's number, which the next socket or file of a
    // test running alongside would get: its lines would land there. The number is pointed
    // at /dev/null instead and stays taken, and the late lines go nowhere.
    if isKnownUniquelyReferenced(&logger) {
      close(writeFD)
    } else {
      let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
      if null >= 0 {
        dup2(null, writeFD)
        close(null)
      }
    }
  }

  /// Every complete line written so far.
  func lines() -> [String] {
    var buffer = [UInt8](repeating: 0, count: 65536)
    for _ in 0..<1000 {
      let count = buffer.withUnsafeMutableBytes { read(readFD, $0.baseAddress, $0.count) }
      if count <= 0 { break }
      collected.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: collected, as: UTF8.self).split(separator: "\n").map(String.init)
  }
}

func oauth2Config(
  port: UInt16, path: String = "/oauth/token", clientID: String = "gw", secret: String = "client-secret",
  scope: String? = "read write", refreshBefore: Duration = .seconds(60)
) throws -> OAuth2ClientCredentialsConfig {
  OAuth2ClientCredentialsConfig(
    tokenURL: try HTTPURL.parse("http://127.0.0.1:\(port)\(path)").get(), clientID: clientID,
    clientSecret: SecretValue(secret), scope: scope, refreshBefore: refreshBefore)
}

/// A request the test OAuth2 server received.
struct RecordedTokenRequest: Sendable {
  let method: String
  let target: String
  let headers: [(name: String, value: String)]
  let body: String

  func header(_ name: String) -> String? {
    headers.first { $0.name.lowercased() == name.lowercased() }?.value
  }
}

/// An in-process OAuth 2 token endpoint on 127.0.0.1 (port 0), on its own event loop thread, with modes
/// for the ways a real one fails.
final class TestOAuth2Server: Sendable {
  enum Mode: Sendable {
    /// 200 with a new token `<prefix><n>`; `expiresIn` nil leaves `expires_in` out.
    case issue(expiresIn: Int?)
    /// This status and JSON body.
    case answer(status: Int, body: String)
    /// Issue a token after this delay.
    case slow(Duration)
    /// Bytes that are not HTTP.
    case garbage
    /// Close the connection without answering.
    case close
    /// A 200 whose body is this many bytes.
    case huge(Int)
  }

  private struct State {
    var mode: Mode = .issue(expiresIn: 3600)
    var requests: [RecordedTokenRequest] = []
    var issued: [String] = []
  }

  let port: UInt16
  let tokenPrefix: String
  private let group: EventLoopGroup
  private let state = Mutex(State())
  private let listener: UncheckedBox<TCPListener?>

  init(tokenPrefix: String = "tok-") throws {
    self.tokenPrefix = tokenPrefix
    group = try EventLoopGroup(loopCount: 1)
    let loop = group.loops[0]
    let listener = try TCPListener(address: .loopback(port: 0))
    port = listener.localPort
    self.listener = UncheckedBox(listener)
    let box = self.listener
    try runOnLoop(loop) { [self] in
      try box.value?.startAccepting(on: loop) { [self] socket in
        _ = try? BufferedConnection(socket: socket, loop: loop, delegate: TestOAuth2Connection(server: self))
      }
    }
  }

  func shutdown() {
    let box = listener
    _ = try? runOnLoop(group.loops[0]) { box.value?.close() }
    group.shutdown()
  }

  var mode: Mode {
    get { state.withLock { $0.mode } }
    set { state.withLock { $0.mode = newValue } }
  }

  var requests: [RecordedTokenRequest] { state.withLock { $0.requests } }
  var issuedTokens: [String] { state.withLock { $0.issued } }

  /// Records `request` and decides the answer (nil: close without answering; raw bytes otherwise).
  fileprivate func respond(to request: RecordedTokenRequest) -> (delay: Duration, bytes: [UInt8]?) {
    state.withLock { state in
      state.requests.append(request)
      func issue() -> [UInt8] {
        let token = "\(tokenPrefix)\(state.issued.count + 1)"
        state.issued.append(token)
        return Self.answer(status: 200, body: #"{"access_token":"\#(token)","token_type":"Bearer"}"#)
      }
      switch state.mode {
      case .issue(let expiresIn?):
        let token = "\(tokenPrefix)\(state.issued.count + 1)"
        state.issued.append(token)
        return (
          .zero,
          Self.answer(
            status: 200, body: #"{"access_token":"\#(token)","token_type":"Bearer","expires_in":\#(expiresIn)}"#)
        )
      case .issue(nil):
        return (.zero, issue())
      case .answer(let status, let body):
        return (.zero, Self.answer(status: status, body: body))
      case .slow(let delay):
        return (delay, issue())
      case .garbage:
        return (.zero, Array("this is not HTTP at all\r\n\r\n".utf8))
      case .close:
        return (.zero, nil)
      case .huge(let size):
        return (.zero, Self.answer(status: 200, body: String(repeating: " ", count: size) + "{}"))
      }
    }
  }

  static func answer(status: Int, body: String) -> [UInt8] {
    let bytes = Array(body.utf8)
    return Array(
      "HTTP/1.1 \(status) \(HTTPStatusPhrase.reason(for: status))\r\nContent-Type: application/json\r\nContent-Length: \(bytes.count)\r\nConnection: close\r\n\r\n"
        .utf8) + bytes
  }
}

/// One connection to the test server: parses one request, answers it as the mode says, closes.
private final class TestOAuth2Connection: ConnectionDelegate {
  let server: TestOAuth2Server
  var parser = HTTPRequestParser()
  var head: HTTPRequestHead?
  var body: [UInt8] = []

  init(server: TestOAuth2Server) {
    self.server = server
  }

  func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    var offset = 0
    while offset <= bytes.count {
      guard let step = try? parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...])) else {
        connection.abort()
        return
      }
      let start = offset
      offset += step.consumed
      guard let event = step.event else { break }
      switch event {
      case .head(let requestHead):
        head = requestHead
      case .body(let range):
        body.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start...])[range])
      case .end:
        guard let head else { return }
        let request = RecordedTokenRequest(
          method: head.method.name, target: head.targetString, headers: head.headers.pairs,
          body: String(decoding: body, as: UTF8.self))
        let (delay, answer) = server.respond(to: request)
        guard let answer else {
          connection.close()
          return
        }
        if delay == .zero {
          connection.write(answer)
          connection.close()
        } else {
          connection.loop.scheduleTimer(after: delay) {
            connection.write(answer)
            connection.close()
          }
        }
        return
      }
    }
  }

  func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {}
}
