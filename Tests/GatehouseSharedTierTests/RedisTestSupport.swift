import Dispatch
import Foundation
import GatehouseNet
import Glibc
import Synchronization
import Testing

@testable import GatehouseSharedTier

struct TestFailure: Error, CustomStringConvertible {
  let description: String
}

/// Polls `condition` every 5 ms until it holds or `timeout` passes: tests assert outcomes, not speed.
@discardableResult
func waitUntil(timeout: Duration = .seconds(15), _ condition: () -> Bool) -> Bool {
  let deadline = ContinuousClock.now + timeout
  while ContinuousClock.now < deadline {
    if condition() { return true }
    usleep(5_000)
  }
  return condition()
}

/// Runs `body` on `loop` and waits (at most 10 s) for its result.
func onLoop<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () throws -> T) throws -> T {
  let slot = Mutex<Result<T, any Error>?>(nil)
  let done = DispatchSemaphore(value: 0)
  loop.execute {
    let result = Result { try body() }
    slot.withLock { $0 = result }
    done.signal()
  }
  guard done.wait(timeout: .now() + 10) == .success else { throw TestFailure(description: "loop did not answer") }
  return try slot.withLock { $0 }!.get()
}

/// Carries a loop-confined object between `onLoop` calls; tests touch `value` only on its loop.
final class LoopConfined<Value>: @unchecked Sendable {
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// A `RedisConnection` on its own loop, with blocking helpers for tests.
final class RedisClientHarness: Sendable {
  let group: EventLoopGroup
  let loop: EventLoop
  let redis: LoopConfined<RedisConnection>

  init(_ configuration: RedisConnection.Configuration) throws {
    group = try EventLoopGroup(loopCount: 1)
    loop = group.next()
    let loop = loop
    redis = try onLoop(loop) { LoopConfined(RedisConnection(configuration: configuration, loop: loop, seed: 99)) }
    let redis = redis
    try onLoop(loop) { redis.value.start() }
  }

  func shutdown() {
    let redis = redis
    _ = try? onLoop(loop) { redis.value.stop() }
    group.shutdown()
  }

  var isUp: Bool { redis.value.health.isUp }
  var health: RedisHealth.Snapshot { redis.value.health.snapshot }
  var lastProblem: String? { health.lastProblem }

  func waitUntilUp(timeout: Duration = .seconds(15)) -> Bool { waitUntil(timeout: timeout) { isUp } }

  /// Sends every command in one loop turn (so they are pipelined) and waits for all replies.
  func run(_ commands: [[String]], timeout: Duration = .seconds(15)) throws -> [RedisReply] {
    try runBytes(commands.map { $0.map { Array($0.utf8) } }, timeout: timeout)
  }

  func runBytes(_ commands: [[[UInt8]]], timeout: Duration = .seconds(15)) throws -> [RedisReply] {
    let replies = Mutex<[Int: RedisReply]>([:])
    let calls = Atomic<Int>(0)
    let redis = redis
    loop.execute {
      for (index, command) in commands.enumerated() {
        redis.value.send(command) { reply in
          calls.add(1, ordering: .relaxed)
          replies.withLock { $0[index] = reply }
        }
      }
    }
    guard waitUntil(timeout: timeout, { calls.load(ordering: .relaxed) >= commands.count }) else {
      throw TestFailure(description: "only \(calls.load(ordering: .relaxed)) of \(commands.count) replies came")
    }
    usleep(20_000)  // a second call of a completion would show in `calls`
    #expect(calls.load(ordering: .relaxed) == commands.count, "a completion was called twice")
    return replies.withLock { stored in (0..<commands.count).map { stored[$0]! } }
  }

  func one(_ command: String..., timeout: Duration = .seconds(15)) throws -> RedisReply {
    try run([command], timeout: timeout)[0]
  }
}

/// A `redis-server` on a free 127.0.0.1 port, without persistence, killed when the test ends.
final class RedisServerProcess: @unchecked Sendable {
  static let binary = "/usr/bin/redis-server"
  static var isAvailable: Bool { access(binary, X_OK) == 0 }
  static let missingReason = "redis-server is not installed (apt-get install redis-server, or Scripts/install-deps.sh)"

  let port: UInt16
  let extraArguments: [String]
  private var process: Process?
  private var starts = 0
  private var logPath = ""

  init(extraArguments: [String] = [], port: UInt16? = nil, plainPort: Bool = true) throws {
    self.port = try port ?? Self.freePort()
    self.extraArguments = extraArguments
    try start(plainPort: plainPort)
  }

  deinit { kill() }

  static func freePort() throws -> UInt16 {
    let listener = try TCPListener(address: .loopback(port: 0), reusePort: false)
    let port = listener.localPort
    listener.close()
    return port
  }

  /// Starts (or restarts) the server and waits until it says it is ready and its port accepts
  /// connections (it listens before it has read its ACL settings, and may still exit then).
  func start(plainPort: Bool = true) throws {
    starts += 1
    logPath = "/tmp/gatehouse-redis-\(getpid())-\(port)-\(starts).log"
    let process = Process()
    process.executableURL = URL(fileURLWithPath: Self.binary)
    var arguments = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--logfile", logPath]
    arguments += plainPort ? ["--port", "\(port)"] : ["--port", "0", "--tls-port", "\(port)"]
    process.arguments = arguments + extraArguments
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    self.process = process
    let logPath = logPath
    let ready = waitUntil(timeout: .seconds(15)) {
      let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
      return log.contains("Ready to accept connections")
    }
    guard ready, process.isRunning, loopbackAccepts(port: port) else {
      let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
      kill()
      throw TestFailure(description: "redis-server did not listen on \(port): \(log.suffix(600))")
    }
  }

  func signal(_ number: Int32) {
    guard let process, process.isRunning else { return }
    Glibc.kill(process.processIdentifier, number)
  }

  /// SIGKILL, and waits for the process to go.
  func kill() {
    guard let process else { return }
    self.process = nil
    Glibc.kill(process.processIdentifier, SIGCONT)
    Glibc.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
    unlink(logPath)
  }
}

/// A plain TCP server on a loop that answers the handshake's `PING` with `+PONG` and then
/// every later read with `afterHandshake` (garbage, an oversized reply…).
final class FakeRedisServer: @unchecked Sendable {
  final class Session: ConnectionDelegate {
    let afterHandshake: [UInt8]
    var ponged = false
    var input: [UInt8] = []

    init(afterHandshake: [UInt8]) { self.afterHandshake = afterHandshake }

    func connection(_ connection: BufferedConnection, didRead bytes: UnsafeRawBufferPointer) {
      input.append(contentsOf: bytes)
      if !ponged {
        guard String(decoding: input, as: UTF8.self).contains("PING") else { return }
        ponged = true
        connection.write(Array("+PONG\r\n".utf8))
        input.removeAll()
      } else {
        connection.write(afterHandshake)
      }
    }

    func connection(_ connection: BufferedConnection, didCloseWith reason: ConnectionCloseReason) {}
  }

  let port: UInt16
  private let listener: LoopConfined<TCPListener>
  private let loop: EventLoop

  init(on loop: EventLoop, afterHandshake: [UInt8]) throws {
    let listener = try TCPListener(address: .loopback(port: 0))
    port = listener.localPort
    self.loop = loop
    let box = LoopConfined(listener)
    self.listener = box
    try onLoop(loop) {
      try box.value.startAccepting(on: loop) { socket in
        _ = try? BufferedConnection(
          socket: socket, loop: loop, delegate: Session(afterHandshake: afterHandshake))
      }
    }
  }

  func close() {
    let box = listener
    _ = try? onLoop(loop) { box.value.close() }
  }
}
