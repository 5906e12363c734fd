import GatehouseConfig
import GatehouseNet

/// A pipelined client connection to Redis or Valkey that lives on one event loop: the shared
/// tier's transport (Docs/shared-tier.md).
///
/// Why our connection plus hiredis's reader, not hiredis's `redisAsyncContext`: the bytes go
/// through GatehouseNet's `BufferedConnection`, the same non-blocking path (epoll, write queue,
/// `TLSStream` with certificate verification) the upstreams use, so `rediss://` works although
/// Debian's hiredis 0.14 has no TLS, and no C library calls back into the loop's internals or
/// owns a socket. hiredis does the part worth reusing: the incremental RESP reader. Commands
/// are encoded here (see `RedisCommandEncoder`). No thread, no blocking call.
///
/// Commands are pipelined: written at the end of the loop turn they were sent in, many in
/// flight, replies matched in order. Each completion is called exactly once, on the loop, never
/// from inside `send`: with the reply, or with `.failure` when the command times out
/// (`commandTimeout`), the connection is lost, the link is down (at once, never queued), or
/// `maxInFlight` commands are waiting. The link reconnects on its own with backoff
/// (`RedisLinkMachine`). Loop-confined and not Sendable; `health` may be read anywhere.
///
/// The connection and this object hold each other while a transport is open; `stop()` ends that.
public final class RedisConnection: ConnectionDelegate {
  public struct Configuration: Sendable {
    public var address: SocketAddress
    /// A client context for `rediss://`; nil for plain TCP.
    public var tls: TLSContext?
    /// Checked against the server's certificate (and sent as SNI when it is a name).
    public var serverName: String
    public var username: String?
    public var password: String?
    public var database: Int
    /// Each command's deadline, from the moment it is sent (`shared.timeout_ms`).
    public var commandTimeout: Duration
    /// Bounds TCP, then TLS, then the handshake's replies, each.
    public var connectTimeout: Duration = .seconds(2)
    /// Commands waiting for replies (timed-out ones included, as their replies are still owed).
    public var maxInFlight = 1024
    /// Bytes written and not yet taken by the kernel, beyond which commands are refused.
    public var maxQueuedBytes = 16 * 1024 * 1024
    /// A reply that takes more bytes resets the connection.
    public var maxReplyBytes = 8 * 1024 * 1024
    public var initialBackoff: Duration = .milliseconds(100)
    public var maxBackoff: Duration = .seconds(10)
    /// See `RedisLinkMachine.Settings`.
    public var stableAfter: Duration = .seconds(5)
    public var unresponsiveAfter: Duration = .seconds(2)
    /// See `RedisLinkMachine.Settings.downAfterTimeouts`.
    public var downAfterTimeouts = 3

    public init(
      address: SocketAddress, serverName: String, tls: TLSContext? = nil, username: String? = nil,
      password: String? = nil, database: Int = 0, commandTimeout: Duration = .milliseconds(50)
    ) {
      self.address = address
      self.serverName = serverName
      self.tls = tls
      self.username = username
      self.password = password
      self.database = database
      self.commandTimeout = commandTimeout
    }

    /// From a parsed `shared.url` and its resolved address. `password`, when not empty,
    /// replaces the URL's (the config's separate `shared.password`). For `rediss://` a client
    /// context is made that verifies the server against `caFile` (the system's CAs when nil);
    /// build the configuration once and give it to every loop's connection.
    public init(
      url: SharedTierURL, address: SocketAddress, password: String? = nil, commandTimeout: Duration,
      caFile: String? = nil
    ) throws(TLSError) {
      let explicit = password.flatMap { $0.isEmpty ? nil : $0 }
      self.init(
        address: address, serverName: url.host, username: url.username, password: explicit ?? url.password,
        database: url.database, commandTimeout: commandTimeout)
      if url.usesTLS {
        tls = try TLSContext(client: TLSClientConfiguration(caPath: caFile))
      }
    }

    var linkSettings: RedisLinkMachine.Settings {
      RedisLinkMachine.Settings(
        initialBackoff: initialBackoff, maxBackoff: maxBackoff, stableAfter: stableAfter,
        unresponsiveAfter: unresponsiveAfter, downAfterTimeouts: downAfterTimeouts, commandTimeout: commandTimeout)
    }
  }

  public let loop: EventLoop
  public let configuration: Configuration
  /// Up/down, last round trip and counters, for status pages and metrics (any thread).
  public let health = RedisHealth()
  /// Called on the loop when `isUp` changes, with `lastProblem` (nil when up): for the
  /// owner's log. Not when `stop()` takes the link down: that is the owner's own doing.
  public var onUpChange: ((_ isUp: Bool, _ problem: String?) -> Void)?

  private var machine: RedisLinkMachine
  private var connection: BufferedConnection?
  private var reader: RedisReplyReader?
  private var pending = PendingCommands()
  /// Commands sent this loop turn, written together at its end.
  private var output: [UInt8] = []
  private var flushScheduled = false
  private var deadlineTimer: TimerHandle?
  private var deadlineTimerAt: UInt64 = 0
  private var reconnectTimer: TimerHandle?
  private var lastReplyAt: UInt64 = 0
  /// `isUp` as last reported to `health` and `onUpChange`.
  private var reportedUp = false
  /// Bumped whenever the transport is opened or dropped, so that a loop over replies notices
  /// that a completion it called reset the connection.
  private var generation: UInt64 = 0
  private let commandTimeoutNanoseconds: UInt64
  private let connectTimeoutNanoseconds: UInt64

  /// `seed` drives the backoff jitter; tests pin it.
  public init(configuration: Configuration, loop: EventLoop, seed: UInt64 = UInt64.random(in: .min ... .max)) {
    self.configuration = configuration
    self.loop = loop
    machine = RedisLinkMachine(settings: configuration.linkSettings, seed: seed)
    commandTimeoutNanoseconds = RedisLinkMachine.nanoseconds(configuration.commandTimeout)
    connectTimeoutNanoseconds = RedisLinkMachine.nanoseconds(configuration.connectTimeout)
  }

  // MARK: Owner API (loop thread)

  /// Starts connecting; commands fail with `.down` until the handshake is done.
  public func start() {
    loop.assertInEventLoop()
    perform(machine.handle(.start))
  }

  /// Closes the connection for good; waiting commands fail with `.stopped`.
  public func stop() {
    loop.assertInEventLoop()
    if let reconnectTimer { loop.cancelTimer(reconnectTimer) }
    reconnectTimer = nil
    perform(machine.handle(.stop))
  }

  /// True once `AUTH`, `SELECT` and a `PING` succeeded, until the connection is lost or its
  /// commands time out too many times in a row (`downAfterTimeouts`; commands are still sent
  /// then, and one answered in time makes it true again).
  public var isUp: Bool { machine.isUp }
  /// Why the link last went down; nil while it is up.
  public var lastProblem: String? { machine.lastProblem }
  /// Commands waiting for a reply.
  public var inFlightCount: Int { pending.count }

  /// Sends a command (`["SET", key, value]` as bytes). `completion` runs once, on the loop,
  /// never from inside this call.
  public func send(_ arguments: [[UInt8]], completion: @escaping (RedisReply) -> Void) {
    loop.assertInEventLoop()
    guard machine.isConnected else {
      failSoon(completion, machine.phase == .stopped ? .stopped : .down)
      return
    }
    guard !arguments.isEmpty else {
      failSoon(completion, .emptyCommand)
      return
    }
    let queued = output.count + (connection?.queuedByteCount ?? 0)
    guard pending.count < configuration.maxInFlight, queued < configuration.maxQueuedBytes else {
      failSoon(completion, .tooManyInFlight)
      return
    }
    enqueue(RedisCommandEncoder.encode(arguments), .caller, timeout: commandTimeoutNanoseconds, completion)
  }

  /// Sends a command given as strings (their UTF-8 bytes).
  public func send(_ arguments: [String], completion: @escaping (RedisReply) -> Void) {
    send(arguments.map { Array($0.utf8) }, completion: completion)
  }

  // MARK: Sending

  private func enqueue(
    _ bytes: [UInt8], _ purpose: PendingCommands.Purpose, timeout: UInt64,
    _ completion: ((RedisReply) -> Void)?
  ) {
    let now = EventLoop.monotonicNanoseconds()
    pending.append(.init(completion: completion, purpose: purpose, sentAt: now, deadline: now &+ timeout))
    health.countSent()
    if output.isEmpty {
      output = bytes
    } else {
      output.append(contentsOf: bytes)
    }
    if !flushScheduled {
      flushScheduled = true
      loop.executeLater { [self] in flushOutput() }
    }
    armDeadlineTimer()
  }

  private func flushOutput() {
    flushScheduled = false
    guard !output.isEmpty else { return }
    let bytes = output
    output = []
    connection?.write(bytes)
  }

  private func failSoon(_ completion: @escaping (RedisReply) -> Void, _ failure: RedisFailure) {
    health.countFailure(failure)
    loop.executeLater { completion(.failure(failure)) }
  }

  private func sendHandshake() {
    let configuration = configuration
    if let password = configuration.password {
      var arguments = ["AUTH"]
      if let username = configuration.username { arguments.append(username) }
      arguments.append(password)
      enqueue(RedisCommandEncoder.encode(arguments), .auth, timeout: connectTimeoutNanoseconds, nil)
    }
    if configuration.database != 0 {
      let select = RedisCommandEncoder.encode(["SELECT", String(configuration.database)])
      enqueue(select, .select, timeout: connectTimeoutNanoseconds, nil)
    }
    // The link is up only once the server has answered, so a server that accepts connections
    // but does not run (stopped, overloaded) never counts as up.
    enqueue(RedisCommandEncoder.encode(["PING"]), .ping, timeout: connectTimeoutNanoseconds, nil)
  }

  // MARK: Deadlines

  /// One timer, for the earliest deadline still to come; it moves along as commands finish.
  private func armDeadlineTimer() {
    guard let deadline = pending.nextDeadline else { return }
    if deadlineTimer != nil {
      if deadlineTimerAt <= deadline { return }
      loop.cancelTimer(deadlineTimer!)
    }
    let now = EventLoop.monotonicNanoseconds()
    let delay = deadline > now ? deadline - now : 0
    deadlineTimerAt = deadline
    deadlineTimer = loop.scheduleTimer(after: .nanoseconds(Int64(delay))) { [weak self] in
      self?.deadlineTimerFired()
    }
  }

  private func cancelDeadlineTimer() {
    if let deadlineTimer { loop.cancelTimer(deadlineTimer) }
    deadlineTimer = nil
  }

  private func deadlineTimerFired() {
    deadlineTimer = nil
    let now = EventLoop.monotonicNanoseconds()
    let expired = pending.takeExpired(now: now)
    let startGeneration = generation
    var callerTimedOut = false
    for entry in expired {
      switch entry.purpose {
      case .caller:
        guard let completion = entry.completion else { continue }
        callerTimedOut = true
        health.countFailure(.timedOut)
        completion(.failure(.timedOut))
      case .auth, .select, .ping:
        let milliseconds = connectTimeoutNanoseconds / 1_000_000
        lose("no reply to \(Self.name(of: entry.purpose)) within \(milliseconds) ms", now: now)
        return
      }
    }
    guard generation == startGeneration, machine.isConnected else { return }
    if callerTimedOut {
      let oldest = pending.first?.sentAt ?? now
      perform(machine.handle(.commandTimedOut(now: now, silentSince: max(lastReplyAt, oldest))))
    }
    armDeadlineTimer()
  }

  private static func name(of purpose: PendingCommands.Purpose) -> String {
    switch purpose {
    case .caller: "a command"
    case .auth: "AUTH"
    case .select: "SELECT"
    case .ping: "PING"
    }
  }

  // MARK: Replies

  private func readReplies(_ reader: RedisReplyReader) {
    let startGeneration = generation
    while generation == startGeneration {
      switch reader.next() {
      case .incomplete:
        return
      case .invalid(let problem):
        lose(problem, now: EventLoop.monotonicNanoseconds())
        return
      case .reply(let reply):
        deliver(reply)
      }
    }
  }

  private func deliver(_ reply: RedisReply) {
    let now = EventLoop.monotonicNanoseconds()
    lastReplyAt = now
    health.countReply()
    guard let entry = pending.popFirst() else {
      lose("a reply that no command asked for", now: now)
      return
    }
    switch entry.purpose {
    case .caller:
      // Nil: the command timed out before; its late reply is dropped (and says nothing
      // about the link: a server that answers everything late is of no use either).
      guard let completion = entry.completion else { return }
      health.recordRoundTrip(nanoseconds: now &- entry.sentAt)
      // Before the completion, which may stop the connection.
      perform(machine.handle(.commandAnswered))
      completion(reply)
    case .auth, .select, .ping:
      if case .error(let message) = reply {
        lose("\(Self.name(of: entry.purpose)) refused: \(message)", now: now)
      } else if entry.purpose == .ping {
        health.recordRoundTrip(nanoseconds: now &- entry.sentAt)
        perform(machine.handle(.handshakeDone(now: now)))
      }
    }
  }

  // MARK: Actions

  private func lose(_ problem: String, now: UInt64) {
    perform(machine.handle(.lost(problem: problem, now: now)))
  }

  private func perform(_ actions: [RedisLinkMachine.Action]) {
    for action in actions {
      switch action {
      case .connect:
        openTransport()
      case .sendHandshake:
        sendHandshake()
      case .markUp:
        health.countHandshake()
        health.setProblem(nil)
      case .closeTransport:
        closeTransport()
      case .failPending(let failure):
        if case .disconnected(let problem) = failure { health.setProblem(problem) }
        failPending(failure)
      case .scheduleReconnect(let delay):
        if let reconnectTimer { loop.cancelTimer(reconnectTimer) }
        reconnectTimer = loop.scheduleTimer(after: delay) { [weak self] in
          guard let self else { return }
          reconnectTimer = nil
          perform(machine.handle(.backoffElapsed))
        }
      case .markUnanswered(let problem):
        health.setProblem(problem)
      case .markAnswered:
        health.setProblem(nil)
      }
    }
    let up = machine.isUp
    guard up != reportedUp else { return }
    reportedUp = up
    health.setUp(up)
    if machine.phase != .stopped { onUpChange?(up, machine.lastProblem) }
  }

  private func openTransport() {
    generation &+= 1
    health.countConnectAttempt()
    let now = EventLoop.monotonicNanoseconds()
    guard let reader = RedisReplyReader(maxReplyBytes: configuration.maxReplyBytes) else {
      lose("cannot allocate a reply reader", now: now)
      return
    }
    self.reader = reader
    let tls = configuration.tls.map {
      TLSClientOptions(
        context: $0, serverName: configuration.serverName, handshakeTimeout: configuration.connectTimeout)
    }
    do {
      connection = try BufferedConnection.connect(
        to: configuration.address, on: loop, timeout: configuration.connectTimeout, delegate: self, tls: tls)
    } catch {
      connection = nil
      lose("cannot open a socket: \(error)", now: now)
    }
  }

  /// Aborts the transport (its close callback, which comes later, is then ignored) and drops
  /// everything tied to it.
  private func closeTransport() {
    generation &+= 1
    if let connection {
      self.connection = nil
      connection.abort()
    }
    reader = nil
    output = []
  }

  private func failPending(_ failure: RedisFailure) {
    cancelDeadlineTimer()
    for entry in pending.removeAll() {
      guard entry.purpose == .caller, let completion = entry.completion else { continue }
      health.countFailure(failure)
      completion(.failure(failure))
    }
  }

  // MARK: ConnectionDelegate

  public func connectionDidConnect(_ connection: BufferedConnection) {
    guard connection === self.connection else { return }
    perform(machine.handle(.transportReady))
  }

  public func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
    guard connection === self.connection, let reader else { return }
    guard reader.feed(bytes) else {
      lose("the reply reader refused input", now: EventLoop.monotonicNanoseconds())
      return
    }
    readReplies(reader)
  }

  public func connectionDidReadEOF(_ connection: BufferedConnection) {
    guard connection === self.connection else { return }
    lose("the server closed the connection", now: EventLoop.monotonicNanoseconds())
  }

  public func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {
    guard connection === self.connection else { return }
    self.connection = nil
    switch reason {
    case .loopStopped:
      perform(machine.handle(.stop))
    case .closedByOwner, .hangup:
      lose("the server closed the connection", now: EventLoop.monotonicNanoseconds())
    case .failed(let error):
      lose("connection failed: \(error)", now: EventLoop.monotonicNanoseconds())
    case .connectTimedOut:
      let milliseconds = connectTimeoutNanoseconds / 1_000_000
      lose("connect timed out after \(milliseconds) ms", now: EventLoop.monotonicNanoseconds())
    case .tlsFailed(let error):
      lose("TLS: \(error)", now: EventLoop.monotonicNanoseconds())
    }
  }
}
