import Dispatch
import Glibc
import Synchronization
import Testing

@testable import GatehouseNet

/// Loop and socket tests on 127.0.0.1, port 0. Serialized so that descriptor counts and CPU time are not
/// disturbed by each other; every wait is bounded.
@Suite(.serialized, .timeLimit(.minutes(2))) struct LoopTests {
  // MARK: Loop mechanics

  @Test func groupStartsOneLoopPerCoreAndHandsThemOutRoundRobin() throws {
    let group = try EventLoopGroup(loopCount: 3)
    defer { group.shutdown() }
    let picks = (0..<6).map { _ in ObjectIdentifier(group.next()) }
    #expect(Set(picks).count == 3)
    #expect(Array(picks[0..<3]) == Array(picks[3..<6]))

    let perCore = try EventLoopGroup(loopCount: 0)
    defer { perCore.shutdown() }
    #expect(perCore.loops.count == EventLoopGroup.processorCount)
  }

  @Test func executeFromOtherThreadsRunsOnTheLoopThread() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let ran = Counter()
    let offLoop = Counter()
    DispatchQueue.concurrentPerform(iterations: 4) { _ in
      for _ in 0..<500 {
        loop.execute {
          if !loop.inEventLoop { offLoop.increment() }
          ran.increment()
        }
      }
    }
    #expect(waitUntil { ran.value == 2_000 })
    #expect(offLoop.value == 0)
    #expect(!loop.inEventLoop)
  }

  @Test func executeWakesAnIdleLoopEveryTime() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    // No timers and no sockets: the loop sleeps in epoll_wait(-1) and only the eventfd can wake it.
    for round in 0..<50 {
      let answer = try onLoop(loop) { round * 2 }
      #expect(answer == round * 2)
      if round % 10 == 0 { sleep(milliseconds: 20) }
    }
  }

  @Test func aLongTurnCountsAsAStallAndShortOnesDoNot() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    for _ in 0..<20 { _ = try onLoop(loop) { 1 } }
    #expect(loop.stalls.load(ordering: .relaxed) == 0)
    // A task that holds the loop for 30 ms (a blocking call would): one stall, and the
    // longest turn says how long.
    _ = try onLoop(loop) { sleep(milliseconds: 30) }
    #expect(waitUntil { loop.stalls.load(ordering: .relaxed) == 1 })
    #expect(loop.longestTurnNanoseconds.load(ordering: .relaxed) >= 30_000_000)
    for _ in 0..<20 { _ = try onLoop(loop) { 1 } }
    #expect(loop.stalls.load(ordering: .relaxed) == 1)
  }

  @Test func timersFireInDeadlineOrderAndCancelledOnesDoNot() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = EventLog()
    try onLoop(loop) {
      var handles: [Int: TimerHandle] = [:]
      for delay in [50, 10, 40, 20, 30, 20] {
        handles[delay] = loop.scheduleTimer(after: .milliseconds(delay)) { log.append("t\(delay)") }
      }
      #expect(loop.cancelTimer(handles[40]!))
      #expect(!loop.cancelTimer(handles[40]!))
      // A timer scheduled from a timer's action fires on a later turn.
      loop.scheduleTimer(after: .milliseconds(60)) {
        log.append("t60")
        loop.scheduleTimer(after: .zero) { log.append("nested") }
      }
    }
    #expect(waitUntil { log.all.count == 7 })
    sleep(milliseconds: 100)
    #expect(log.all == ["t10", "t20", "t20", "t30", "t50", "t60", "nested"])
  }

  @Test func staleRegistrationsDoNotReachTheNextUserOfASlot() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    final class CountingHandler: IOEventHandler {
      var count = 0
      func handleIOEvents(_ events: IOEvents) { count += 1 }
    }
    let reusedSlot = try onLoop(loop) {
      let fd = try Syscall.eventFD()
      defer { Syscall.close(fd) }
      let first = try loop.register(fileDescriptor: fd, interest: .read, handler: CountingHandler())
      loop.deregister(first)
      let second = try loop.register(fileDescriptor: fd, interest: .read, handler: CountingHandler())
      defer { loop.deregister(second) }
      loop.deregister(first)  // stale: must not remove the second registration
      #expect(loop.registrationCount == 1)
      return first.slot == second.slot && first.generation != second.generation
    }
    #expect(reusedSlot)
  }

  // MARK: Sockets

  @Test func echoOverARealSocket() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = EventLog()
    let server = try startEchoServer(on: loop, log: log)
    defer { _ = try? onLoop(loop) { server.listener.value.close() } }

    let client = try BlockingClient(port: server.port)
    let message = Array("hello, gatehouse".utf8)
    try client.send(message)
    #expect(client.receive(count: message.count) == message)
    let big = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 * 7) }
    try client.send(big)
    #expect(client.receive(count: big.count) == big)
    client.shutdownWrite()
    // The server's default EOF handling closes gracefully, so the client sees EOF.
    #expect(client.drainUntilEOF() == (0, true))
    #expect(waitUntil { log.count("close:owner") == 1 })
    #expect(log.all == ["accept", "eof", "close:owner"])
  }

  @Test func peerAddressIsTheClient() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let listener = LoopConfined(try TCPListener(address: .loopback(port: 0)))
    let port = listener.value.localPort
    let peers = Mutex<[String]>([])
    try onLoop(loop) {
      try listener.value.startAccepting(on: loop) { socket in
        peers.withLock { $0.append(socket.peerHostText) }
        socket.close()
      }
    }
    let client = try BlockingClient(port: port)
    #expect(waitUntil { peers.withLock { $0 } == ["127.0.0.1"] })
    client.close()
    try onLoop(loop) { listener.value.close() }
  }

  @Test func manyConnectionsThroughOutboundConnections() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let serverLog = EventLog()
    let listeners = try TCPListener.bindReusePortGroup(address: .loopback(port: 0), count: 2)
    let port = listeners[0].localPort
    for (loop, listener) in zip(group.loops, listeners) {
      let box = LoopConfined(listener)
      try onLoop(loop) {
        try box.value.startAccepting(on: loop) { socket in
          let delegate = RecordingDelegate(log: serverLog)
          delegate.echo = true
          delegate.keepBytes = false
          _ = try? BufferedConnection(socket: socket, loop: loop, delegate: delegate)
        }
      }
    }
    let clientLog = EventLog()
    let connectionCount = 150
    let head = Array("HEAD|".utf8)[...]
    let body = [UInt8](repeating: 0x61, count: 4_000)[...]
    for _ in 0..<connectionCount {
      let loop = group.next()
      loop.execute {
        let delegate = RecordingDelegate(log: clientLog)
        delegate.keepBytes = false
        let expected = head.count + body.count
        delegate.onConnect = { connection in connection.write(chunks: [head, body]) }
        delegate.onRead = { connection, total in
          if total >= expected { connection.close() }
        }
        do {
          _ = try BufferedConnection.connect(
            to: .loopback(port: port), on: loop, timeout: .seconds(10), delegate: delegate)
        } catch {
          clientLog.append("connect-throw")
        }
      }
    }
    #expect(waitUntil(timeout: .seconds(30)) { clientLog.count(prefix: "close:") == connectionCount })
    #expect(clientLog.count("close:owner") == connectionCount)
    #expect(clientLog.count("connect") == connectionCount)
    #expect(clientLog.receivedCount == connectionCount * (head.count + body.count))
    #expect(waitUntil { serverLog.count(prefix: "close:") == connectionCount })
    for (loop, listener) in zip(group.loops, listeners) {
      let box = LoopConfined(listener)
      try onLoop(loop) { box.value.close() }
    }
  }

  @Test func connectToAClosedPortIsRefused() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let port = try TCPListener(address: .loopback(port: 0)).localPort  // closed again at once
    let log = EventLog()
    try onLoop(loop) {
      _ = try BufferedConnection.connect(
        to: .loopback(port: port), on: loop, timeout: .seconds(10), delegate: RecordingDelegate(log: log))
    }
    #expect(waitUntil { log.count(prefix: "close:") == 1 })
    sleep(milliseconds: 50)
    #expect(log.all == ["close:errno=\(ECONNREFUSED)"])
  }

  @Test func connectTimesOutWhenTheSYNIsDropped() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    // Backlog 0 and nobody accepting: once the accept queue is full the kernel drops further SYNs, so those
    // connects stay in progress until our timeout.
    let listener = try TCPListener(address: .loopback(port: 0), backlog: 0, reusePort: false)
    let port = listener.localPort
    let log = EventLog()
    let connections = LoopConfined<[BufferedConnection]>([])
    let attempts = 6
    try onLoop(loop) {
      for _ in 0..<attempts {
        connections.value.append(
          try BufferedConnection.connect(
            to: .loopback(port: port), on: loop, timeout: .milliseconds(300),
            delegate: RecordingDelegate(log: log)))
      }
    }
    #expect(
      waitUntil {
        log.count("close:timeout") >= 1 && log.count("connect") + log.count(prefix: "close:") == attempts
      })
    #expect(log.count("close:timeout") >= 1)
    #expect(log.count(prefix: "close:") == log.count("close:timeout"))
    try onLoop(loop) {
      for connection in connections.value { connection.abort() }
      connections.value.removeAll()
    }
    withExtendedLifetime(listener) {}
  }

  @Test func backpressureStopsWritingUntilThePeerReads() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = EventLog()
    let listener = LoopConfined(try TCPListener(address: .loopback(port: 0)))
    let port = listener.value.localPort
    let accepted = LoopConfined<BufferedConnection?>(nil)
    let written = Counter()
    // Chunk n is filled with the byte n, and 60 000 is not a multiple of any kernel write size, so partial
    // writes land inside chunks and any lost, repeated or reordered byte shows up in the pattern.
    let chunkSize = 60_000
    try onLoop(loop) {
      try listener.value.startAccepting(on: loop) { socket in
        let delegate = RecordingDelegate(log: log)
        // Once drained, finish: the graceful close flushes the rest and the client reads to EOF.
        delegate.onDrain = { connection in connection.close() }
        guard
          let connection = try? BufferedConnection(
            socket: socket, loop: loop, delegate: delegate,
            watermarks: WriteWatermarks(low: 16 * 1024, high: 64 * 1024))
        else { return }
        accepted.value = connection
        // The owner's side of backpressure: produce until told to stop (bounded at 256 MiB).
        var chunks = 0
        while !connection.isAboveHighWatermark, chunks < 4_096 {
          connection.write([UInt8](repeating: UInt8(truncatingIfNeeded: chunks), count: chunkSize))
          written.increment(by: chunkSize)
          chunks += 1
        }
      }
    }
    let client = try BlockingClient(port: port, receiveBufferSize: 64 * 1024)
    #expect(waitUntil { log.count("high") == 1 })
    let queued = try onLoop(loop) { accepted.value?.queuedByteCount ?? 0 }
    #expect(queued > 64 * 1024)

    // The peer is not reading: after the kernel settles, no write is attempted at all.
    func attempts() throws -> Int { try onLoop(loop) { accepted.value?.writeAttemptCount ?? -1 } }
    var previous = try attempts()
    for _ in 0..<20 {
      sleep(milliseconds: 100)
      let now = try attempts()
      if now == previous { break }
      previous = now
    }
    sleep(milliseconds: 300)
    #expect(try attempts() == previous)
    #expect(log.count("drain") == 0)

    let (count, sawEOF, mismatches) = client.drainVerifyingChunkPattern(chunkSize: chunkSize)
    #expect(sawEOF)
    #expect(count == written.value)
    #expect(mismatches == 0)
    #expect(waitUntil { log.count("close:owner") == 1 })
    #expect(log.all == ["high", "drain", "close:owner"])
    try onLoop(loop) {
      accepted.value = nil
      listener.value.close()
    }
  }

  @Test func pausedReadingDeliversNothingUntilResumed() throws {
    try withRecordingServer { server in
      let loop = server.loop
      let log = server.log
      try server.start { $0.pauseReading() }
      let client = try BlockingClient(port: server.port)
      try client.send(Array("abc".utf8))
      client.shutdownWrite()
      #expect(waitUntil { log.count("accept") == 1 })
      sleep(milliseconds: 300)
      #expect(log.all == ["accept"])
      #expect(log.receivedCount == 0)

      try onLoop(loop) { server.accepted.value?.resumeReading() }
      #expect(waitUntil { log.count(prefix: "close:") == 1 })
      #expect(log.receivedBytes == Array("abc".utf8))
      #expect(log.all == ["accept", "eof", "close:owner"])
      #expect(client.drainUntilEOF() == (0, true))
    }
  }

  /// Data and FIN in the kernel before the first read: the short read that takes the data is not the end of
  /// the input (edge-triggered epoll would not report the EOF again; EPOLLRDHUP says it is there).
  @Test func dataAndFINArrivingTogetherAreBothDelivered() throws {
    try withRecordingServer { server in
      let log = server.log
      // Accepting waits until both are in, so they are in the kernel before the connection registers.
      let client = try BlockingClient(port: server.port)
      try client.send(Array("abc".utf8))
      client.shutdownWrite()
      sleep(milliseconds: 100)
      try server.start()
      #expect(waitUntil { log.count(prefix: "close:") == 1 })
      #expect(log.receivedBytes == Array("abc".utf8))
      #expect(log.all == ["accept", "eof", "close:owner"])
    }
  }

  /// More input than one event's reads take, with nothing arriving after it: the rest is read in later
  /// passes, not left until the peer sends again.
  @Test func inputBeyondOneEventsReadsIsReadToTheEnd() throws {
    try withRecordingServer { server in
      let loop = server.loop
      let log = server.log
      try server.start { $0.pauseReading() }
      let client = try BlockingClient(port: server.port)
      #expect(waitUntil { log.count("accept") == 1 })
      // Sent from another thread: while reading is paused the kernel buffers fill and the send blocks.
      let total = BufferedConnection.maxReadsPerEvent * EventLoop.readBufferSize * 3 + 1234
      let payload = (0..<total).map { UInt8(truncatingIfNeeded: $0 &* 31) }
      nonisolated(unsafe) let sendingClient = client  // used by the sender only until `sent` is done
      let sent = DispatchGroup()
      DispatchQueue.global().async(group: sent) { try? sendingClient.send(payload) }
      sleep(milliseconds: 200)
      try onLoop(loop) { server.accepted.value?.resumeReading() }
      #expect(waitUntil { log.receivedCount == total })
      #expect(log.receivedBytes == payload)
      #expect(log.count(prefix: "close:") == 0)
      #expect(sent.wait(timeout: .now() + 30) == .success)
      client.shutdownWrite()
      #expect(waitUntil { log.count(prefix: "close:") == 1 })
    }
  }

  @Test func hangupWhilePausedWaitsForResume() throws {
    try withRecordingServer { server in
      let loop = server.loop
      let log = server.log
      try server.start { connection in
        connection.pauseReading()
        connection.write(Array("hi".utf8))
        connection.closeOutputAfterFlush()  // our FIN; with the client's FIN below, epoll reports EPOLLHUP
      }
      let client = try BlockingClient(port: server.port)
      try client.send(Array("abc".utf8))
      #expect(client.receive(count: 2) == Array("hi".utf8))
      #expect(client.drainUntilEOF() == (0, true))
      client.shutdownWrite()
      sleep(milliseconds: 300)
      // Still paused: the unread input waits in the kernel, and nothing was delivered.
      #expect(log.all == ["accept"])
      #expect(try onLoop(loop) { server.accepted.value?.isClosed } == false)
      // EPOLLHUP ignores the interest set: a level-triggered connection leaves epoll, an edge-triggered one
      // hears it once; either way it is not woken again and again while it waits.
      #expect(waitUntil { (try? onLoop(loop) { server.accepted.value?.holdsHangupUntilResume }) == true })
      let events = try onLoop(loop) { server.accepted.value?.eventsHandled ?? 0 }
      sleep(milliseconds: 300)
      #expect(try onLoop(loop) { server.accepted.value?.eventsHandled ?? 0 } == events)

      try onLoop(loop) { server.accepted.value?.resumeReading() }
      #expect(waitUntil { log.count(prefix: "close:") == 1 })
      #expect(log.receivedBytes == Array("abc".utf8))
      #expect(log.all == ["accept", "eof", "close:owner"])
    }
  }

  @Test func twoReusePortListenersOnOnePortBothAccept() throws {
    let group = try EventLoopGroup(loopCount: 2)
    defer { group.shutdown() }
    let listeners = try TCPListener.bindReusePortGroup(address: .loopback(port: 0), count: 2)
    #expect(listeners[0].localPort == listeners[1].localPort)
    let perListener = AcceptCounts()
    let boxes = listeners.map { LoopConfined($0) }
    for index in 0..<2 {
      let loop = group.loops[index]
      let box = boxes[index]
      try onLoop(loop) {
        try box.value.startAccepting(on: loop) { socket in
          socket.close()
          perListener.record(index)
        }
      }
    }
    // The kernel picks a listener by hashing the connection; 64 connections all hashing to one of two
    // listeners has probability 2^-63.
    var clients: [BlockingClient] = []
    for _ in 0..<64 { clients.append(try BlockingClient(port: listeners[0].localPort)) }
    #expect(waitUntil { perListener.total == 64 })
    #expect(perListener.count(0) > 0)
    #expect(perListener.count(1) > 0)
    clients.removeAll()
    for index in 0..<2 {
      let box = boxes[index]
      try onLoop(group.loops[index]) { box.value.close() }
    }
  }

  @Test func acceptBacksOffInsteadOfSpinningWhenOutOfDescriptors() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let listener = LoopConfined(try TCPListener(address: .loopback(port: 0)))
    let port = listener.value.localPort
    var clients: [BlockingClient] = []
    for _ in 0..<4 { clients.append(try BlockingClient(port: port)) }  // waiting in the accept queue

    let errors = Counter()
    let accepted = Counter()
    try onLoop(loop) {
      listener.value.exhaustionBackoff = .milliseconds(100)
      listener.value.simulatedAcceptError = SystemError(errno: EMFILE, syscall: "accept4")
      try listener.value.startAccepting(on: loop) { socket in
        accepted.increment()
        socket.close()
      }
      listener.value.onAcceptError = { error in
        if error.errno == EMFILE { errors.increment() }
      }
    }
    sleep(milliseconds: 500)
    try onLoop(loop) { listener.value.simulatedAcceptError = nil }
    let errorsWhileExhausted = errors.value
    // One failed accept per backoff period (about 5 in 500 ms), not thousands from a spinning loop.
    #expect(errorsWhileExhausted >= 1)
    #expect(errorsWhileExhausted <= 20)
    #expect(waitUntil { accepted.value == 4 })
    clients.removeAll()
    try onLoop(loop) { listener.value.close() }
  }

  @Test func eofIsDeliveredOnce() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = EventLog()
    let listener = LoopConfined(try TCPListener(address: .loopback(port: 0)))
    let port = listener.value.localPort
    let accepted = LoopConfined<BufferedConnection?>(nil)
    try onLoop(loop) {
      try listener.value.startAccepting(on: loop) { socket in
        let delegate = RecordingDelegate(log: log)
        delegate.closeOnEOF = false  // keep the connection half-open, so a repeated EOF would show
        accepted.value = try? BufferedConnection(socket: socket, loop: loop, delegate: delegate)
      }
    }
    let client = try BlockingClient(port: port)
    try client.send(Array("bye".utf8))
    client.shutdownWrite()
    #expect(waitUntil { log.count("eof") == 1 })
    sleep(milliseconds: 200)
    // Half-closed: the server can still answer.
    try onLoop(loop) {
      accepted.value?.write(Array("ok".utf8))
      accepted.value?.close()
    }
    #expect(client.receive(count: 2) == Array("ok".utf8))
    #expect(client.drainUntilEOF() == (0, true))
    #expect(waitUntil { log.count(prefix: "close:") == 1 })
    sleep(milliseconds: 100)
    #expect(log.all == ["eof", "close:owner"])
    try onLoop(loop) {
      accepted.value = nil
      listener.value.close()
    }
  }

  @Test func resetIsDeliveredOnceAsAnError() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = EventLog()
    let server = LoopConfined(try TCPListener(address: .loopback(port: 0)))
    let port = server.value.localPort
    try onLoop(loop) {
      try server.value.startAccepting(on: loop) { socket in
        _ = try? BufferedConnection(socket: socket, loop: loop, delegate: RecordingDelegate(log: log))
        log.append("accept")
      }
    }
    let client = try BlockingClient(port: port)
    #expect(waitUntil { log.count("accept") == 1 })
    client.reset()
    #expect(waitUntil { log.count(prefix: "close:") == 1 })
    sleep(milliseconds: 200)
    #expect(log.all == ["accept", "close:errno=\(ECONNRESET)"])
    try onLoop(loop) { server.value.close() }
  }

  @Test func signalsArriveOnTheLoop() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = EventLog()
    let receiver = LoopConfined<SignalReceiver?>(nil)
    try onLoop(loop) {
      // Created on the loop thread, so SIGHUP is blocked exactly there; raise() then targets that thread
      // and the signal waits for the signalfd instead of reaching a default handler.
      let signals = try SignalReceiver(signals: [.hangup])
      try signals.start(on: loop) { signal in log.append("\(signal)") }
      receiver.value = signals
      raise(SIGHUP)
    }
    #expect(waitUntil { log.all == ["hangup"] })
    try onLoop(loop) {
      receiver.value?.close()
      receiver.value = nil
    }
  }

  @Test func everyDescriptorIsClosedAfterwards() throws {
    let before = openFileDescriptorCount()
    let log = EventLog()
    do {
      let group = try EventLoopGroup(loopCount: 2)
      let loop = group.loops[0]
      let server = try startEchoServer(on: loop, log: log)
      for _ in 0..<20 {
        let client = try BlockingClient(port: server.port)
        try client.send([1, 2, 3])
        #expect(client.receive(count: 3) == [1, 2, 3])
      }
      #expect(waitUntil { log.count(prefix: "close:") == 20 })
      // Refused and timed-out connects release their sockets too.
      let closedPort = try TCPListener(address: .loopback(port: 0)).localPort
      try onLoop(group.loops[1]) {
        _ = try BufferedConnection.connect(
          to: .loopback(port: closedPort), on: group.loops[1], timeout: .seconds(5),
          delegate: RecordingDelegate(log: log))
      }
      #expect(waitUntil { log.count(prefix: "close:errno") == 1 })
      // A connection still open when the loop stops is closed by the loop's shutdown.
      let lingering = try BlockingClient(port: server.port)
      #expect(waitUntil { log.count("accept") == 21 })
      try onLoop(loop) { server.listener.value.close() }
      group.shutdown()
      #expect(log.count("close:loopStopped") == 1)
      lingering.close()
    }
    #expect(waitUntil { openFileDescriptorCount() <= before })
    #expect(openFileDescriptorCount() == before)
  }
}

/// Accepted connections per listener index.
final class AcceptCounts: Sendable {
  private let counts = Mutex<[Int]>([0, 0])
  func record(_ index: Int) { counts.withLock { $0[index] += 1 } }
  func count(_ index: Int) -> Int { counts.withLock { $0[index] } }
  var total: Int { counts.withLock { $0.reduce(0, +) } }
}

/// A counter any thread may bump.
final class Counter: Sendable {
  private let storage = Atomic<Int>(0)
  func increment(by amount: Int = 1) { storage.add(amount, ordering: .relaxed) }
  var value: Int { storage.load(ordering: .relaxed) }
}

/// `hasUndeliveredInput`: what a peer sent that the connection has not delivered yet is seen
/// at once, without the loop having read it (a pooled connection is checked before reuse).
@Suite struct UndeliveredInputTests {
  @Test func bytesAndTheEndAreSeenBeforeTheyAreDelivered() throws {
    try withRecordingServer { server in
      let loop = server.loop
      let log = server.log
      // Not reading: nothing is delivered, whatever epoll reports.
      try server.start { $0.pauseReading() }
      let client = try BlockingClient(port: server.port)
      #expect(waitUntil { log.count("accept") == 1 })
      let silent = try onLoop(loop) { server.accepted.value?.hasUndeliveredInput }
      try client.send(Array("stray".utf8))
      let afterBytes = waitUntil { (try? onLoop(loop) { server.accepted.value?.hasUndeliveredInput }) == true }

      #expect(silent == false)
      #expect(afterBytes)
      #expect(log.receivedCount == 0)
    }
  }

  @Test func anEndSentWhileIdleIsSeenToo() throws {
    try withRecordingServer { server in
      let loop = server.loop
      try server.start { $0.pauseReading() }
      let client = try BlockingClient(port: server.port)
      #expect(waitUntil { server.log.count("accept") == 1 })
      client.shutdownWrite()
      #expect(waitUntil { (try? onLoop(loop) { server.accepted.value?.hasUndeliveredInput }) == true })
    }
  }
}
