import Foundation
import GatehouseConfig
import GatehouseNet
import Glibc
import Synchronization
import Testing

@testable import GatehouseSharedTier

/// `RedisConnection` against a real `redis-server` started per test on a free loopback port.
/// Every wait is bounded and generous; nothing asserts speed.
@Suite(
  .serialized, .timeLimit(.minutes(3)),
  .enabled(if: RedisServerProcess.isAvailable, Comment(rawValue: RedisServerProcess.missingReason)))
struct RedisConnectionTests {
  private func configuration(
    port: UInt16, password: String? = nil, username: String? = nil, database: Int = 0,
    timeout: Duration = .seconds(5)
  ) -> RedisConnection.Configuration {
    var configuration = RedisConnection.Configuration(
      address: .loopback(port: port), serverName: "127.0.0.1", username: username, password: password,
      database: database, commandTimeout: timeout)
    configuration.initialBackoff = .milliseconds(20)
    configuration.maxBackoff = .milliseconds(400)
    configuration.connectTimeout = .seconds(1)
    configuration.unresponsiveAfter = .milliseconds(600)
    return configuration
  }

  @Test func setGetIncrExpireOnTheLoop() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())

    #expect(try client.one("SET", "greeting", "hello") == .status("OK"))
    #expect(try client.one("GET", "greeting") == .bulk(Array("hello".utf8)))
    #expect(try client.one("GET", "missing") == .null)
    #expect(try client.one("INCR", "counter") == .integer(1))
    #expect(try client.one("INCRBY", "counter", "41") == .integer(42))
    #expect(try client.one("EXPIRE", "counter", "100") == .integer(1))
    if case .integer(let ttl) = try client.one("TTL", "counter") {
      #expect(ttl > 0 && ttl <= 100)
    } else {
      Issue.record("TTL did not answer an integer")
    }
    guard case .error(let message) = try client.one("INCR", "greeting") else {
      Issue.record("INCR of a string did not fail")
      return
    }
    #expect(message.hasPrefix("ERR"))
    #expect(try client.one("RPUSH", "list", "a", "b") == .integer(2))
    #expect(try client.one("LRANGE", "list", "0", "-1") == .array([.bulk([97]), .bulk([98])]))
    let health = client.health
    #expect(health.isUp && health.handshakesCompleted == 1 && health.lastRoundTripMicroseconds != nil)
    #expect(health.timeouts == 0 && health.failedDown == 0)
  }

  @Test func pipelinedCommandsAnswerInOrderWithBinaryAndLargeValues() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())

    let replies = try client.run(Array(repeating: ["INCR", "pipelined"], count: 800))
    #expect(replies == (1...800).map { RedisReply.integer(Int64($0)) })

    let binary: [UInt8] = Array(0...255) + [13, 10, 36, 42]
    let large = (0..<(3 * 1024 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    let answers = try client.runBytes([
      [Array("SET".utf8), Array("bin".utf8), binary], [Array("GET".utf8), Array("bin".utf8)],
      [Array("SET".utf8), Array("large".utf8), large], [Array("GET".utf8), Array("large".utf8)],
    ])
    #expect(answers[0] == .status("OK") && answers[2] == .status("OK"))
    #expect(answers[1].bytes == binary)
    #expect(answers[3].bytes == large)
  }

  @Test func selectsTheDatabaseFromTheURL() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let url = try SharedTierURL(parsing: "redis://127.0.0.1:\(server.port)/3")
    let third = try RedisClientHarness(
      RedisConnection.Configuration(url: url, address: url.literalAddress!, commandTimeout: .seconds(5)))
    defer { third.shutdown() }
    let zero = try RedisClientHarness(configuration(port: server.port))
    defer { zero.shutdown() }
    #expect(third.waitUntilUp() && zero.waitUntilUp())
    #expect(try third.one("SET", "where", "three") == .status("OK"))
    #expect(try zero.one("GET", "where") == .null)
    #expect(try third.one("GET", "where") == .bulk(Array("three".utf8)))
  }

  @Test func authenticatesWithAPasswordAndWithAUser() throws {
    let server = try RedisServerProcess(extraArguments: [
      "--requirepass", "s3cret", "--user", "alice", "on", ">wonder", "~*", "&*", "+@all",
    ])
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port, password: "s3cret"))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    #expect(try client.one("SET", "k", "v") == .status("OK"))

    let url = try SharedTierURL(parsing: "redis://alice:wonder@127.0.0.1:\(server.port)")
    let alice = try RedisClientHarness(
      RedisConnection.Configuration(url: url, address: url.literalAddress!, commandTimeout: .seconds(5)))
    defer { alice.shutdown() }
    #expect(alice.waitUntilUp())
    #expect(try alice.one("GET", "k") == .bulk([118]))
  }

  @Test func aWrongOrMissingPasswordFailsInsteadOfHanging() throws {
    let server = try RedisServerProcess(extraArguments: ["--requirepass", "s3cret"])
    defer { server.kill() }
    let wrong = try RedisClientHarness(configuration(port: server.port, password: "guess"))
    defer { wrong.shutdown() }
    let none = try RedisClientHarness(configuration(port: server.port))
    defer { none.shutdown() }
    #expect(waitUntil { wrong.lastProblem?.contains("AUTH refused") == true })
    #expect(wrong.lastProblem?.contains("guess") == false)
    #expect(waitUntil { none.lastProblem?.contains("NOAUTH") == true })
    // Commands fail at once while the link is down, never waiting for the 5 s timeout.
    let started = ContinuousClock.now
    #expect(try wrong.one("GET", "k", timeout: .seconds(4)) == .failure(.down))
    #expect(ContinuousClock.now - started < .seconds(4))
    #expect(!wrong.isUp && !none.isUp)
    #expect(wrong.health.connectAttempts >= 2)  // it keeps trying, with backoff
  }

  @Test func aLateReplyIsDroppedAndTheNextCommandsGetTheirOwn() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port, timeout: .milliseconds(100)))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    // BLPOP holds the connection for 300 ms, then answers null: after its timeout.
    #expect(try client.one("BLPOP", "nothing", "0.3") == .failure(.timedOut))
    usleep(500_000)
    let replies = try client.run([["SET", "after", "1"], ["GET", "after"]])
    #expect(replies == [.status("OK"), .bulk([49])])
    let health = client.health
    #expect(health.timeouts == 1 && health.handshakesCompleted == 1 && health.isUp)
  }

  @Test func aCompletionMayStopTheConnection() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    let redis = client.redis
    let log = Mutex<[RedisReply]>([])
    try onLoop(client.loop) {
      for index in 0..<3 {
        redis.value.send(["PING"]) { reply in
          log.withLock { $0.append(reply) }
          if index == 0 { redis.value.stop() }
        }
      }
    }
    #expect(waitUntil { log.withLock { $0.count } == 3 })
    #expect(log.withLock { $0 } == [.status("PONG"), .failure(.stopped), .failure(.stopped)])
    #expect(!client.isUp)
  }

  @Test func aStoppedServerTimesCommandsOutAndTheLinkRecovers() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port, timeout: .milliseconds(150)))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    #expect(try client.one("SET", "before", "1") == .status("OK"))

    server.signal(SIGSTOP)
    #expect(try client.one("GET", "before") == .failure(.timedOut))
    // Silent past `unresponsiveAfter`: the connection is reset and commands fail at once.
    var sawDown = false
    for _ in 0..<200 where !sawDown {
      sawDown = try client.one("GET", "before") == .failure(.down)
    }
    #expect(sawDown)
    #expect(client.health.timeouts >= 1)

    server.signal(SIGCONT)
    #expect(client.waitUntilUp(timeout: .seconds(20)))
    #expect(try client.one("GET", "before") == .bulk([49]))
  }

  @Test func aKilledServerFailsCommandsFastAndIsReconnectedAfterARestart() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    let client = try RedisClientHarness(configuration(port: server.port))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    #expect(try client.one("SET", "k", "v") == .status("OK"))

    server.kill()
    #expect(waitUntil { !client.isUp })
    let started = ContinuousClock.now
    #expect(try client.one("GET", "k", timeout: .seconds(4)) == .failure(.down))
    #expect(ContinuousClock.now - started < .seconds(4))
    #expect(client.lastProblem != nil)

    try server.start()
    #expect(client.waitUntilUp(timeout: .seconds(20)))
    #expect(try client.one("GET", "k") == .null)  // no persistence: a new, empty server
    #expect(try client.one("SET", "k", "again") == .status("OK"))
  }

  @Test func garbageFromTheServerFailsCommandsAndResets() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let fake = try FakeRedisServer(on: group.next(), afterHandshake: Array("?garbage\r\n".utf8))
    defer { fake.close() }
    let client = try RedisClientHarness(configuration(port: fake.port))
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    guard case .failure(.disconnected(let problem)) = try client.one("GET", "k") else {
      Issue.record("garbage did not fail the command")
      return
    }
    #expect(problem.contains("protocol error"))
    // It reconnects (the fake answers the next PING) and fails the same way: no crash, no hang.
    #expect(client.waitUntilUp())
    #expect(client.health.handshakesCompleted >= 2)
  }

  @Test func anOversizedReplyFailsTheCommandAndResets() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let huge = Array("$100000000\r\n".utf8) + Array(repeating: UInt8(ascii: "x"), count: 300_000)
    let fake = try FakeRedisServer(on: group.next(), afterHandshake: huge)
    defer { fake.close() }
    var settings = configuration(port: fake.port)
    settings.maxReplyBytes = 64 * 1024
    let client = try RedisClientHarness(settings)
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    guard case .failure(.disconnected(let problem)) = try client.one("GET", "k") else {
      Issue.record("an oversized reply did not fail the command")
      return
    }
    #expect(problem.contains("larger than 65536 bytes"))
  }

  @Test func nothingListeningMeansDownWithBackoff() throws {
    let port = try RedisServerProcess.freePort()
    let client = try RedisClientHarness(configuration(port: port))
    defer { client.shutdown() }
    #expect(waitUntil { client.health.connectAttempts >= 3 })
    #expect(!client.isUp)
    #expect(client.lastProblem?.contains("connection failed") == true)
    #expect(try client.one("PING", timeout: .seconds(4)) == .failure(.down))
  }

  @Test func tooManyInFlightAreRefused() throws {
    let server = try RedisServerProcess()
    defer { server.kill() }
    var settings = configuration(port: server.port)
    settings.maxInFlight = 10
    let client = try RedisClientHarness(settings)
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    let replies = try client.run(Array(repeating: ["PING"], count: 15))
    #expect(replies.prefix(10).allSatisfy { $0 == .status("PONG") })
    #expect(replies.suffix(5).allSatisfy { $0 == .failure(.tooManyInFlight) })
  }
}

/// `rediss://` against `redis-server --tls-port` with a certificate made at test time.
@Suite(
  .serialized, .timeLimit(.minutes(2)),
  .enabled(if: RedisServerProcess.isAvailable, Comment(rawValue: RedisServerProcess.missingReason)))
struct RedisTLSTests {
  /// A self-signed certificate for 127.0.0.1 (its own CA), and one the client does not trust.
  private func makeCertificates() throws -> String {
    var template = Array("/tmp/gatehouse-redis-tls-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw TestFailure(description: "mkdtemp failed") }
    let directory = String(cString: made)
    let script = """
      set -e
      cd '\(directory)'
      for name in server other; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $name.key \\
          -out $name.pem -days 2 -subj /CN=localhost \\
          -addext subjectAltName=IP:127.0.0.1,DNS:localhost 2>/dev/null
      done
      """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", script]
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw TestFailure(description: "openssl failed") }
    return directory
  }

  @Test func talksTLSAndVerifiesTheServer() throws {
    let directory = try makeCertificates()
    let server = try RedisServerProcess(
      extraArguments: [
        "--tls-cert-file", "\(directory)/server.pem", "--tls-key-file", "\(directory)/server.key",
        "--tls-auth-clients", "no", "--requirepass", "tlspass",
      ], plainPort: false)
    defer { server.kill() }

    let url = try SharedTierURL(parsing: "rediss://:tlspass@127.0.0.1:\(server.port)/1")
    var trusted = try RedisConnection.Configuration(
      url: url, address: url.literalAddress!, commandTimeout: .seconds(5), caFile: "\(directory)/server.pem")
    trusted.initialBackoff = .milliseconds(20)
    let client = try RedisClientHarness(trusted)
    defer { client.shutdown() }
    #expect(client.waitUntilUp())
    #expect(try client.one("SET", "secure", "yes") == .status("OK"))
    #expect(try client.one("GET", "secure") == .bulk(Array("yes".utf8)))

    // A server whose certificate does not chain to the CA file is refused.
    var untrusted = try RedisConnection.Configuration(
      url: url, address: url.literalAddress!, commandTimeout: .seconds(5), caFile: "\(directory)/other.pem")
    untrusted.initialBackoff = .milliseconds(20)
    let refused = try RedisClientHarness(untrusted)
    defer { refused.shutdown() }
    #expect(waitUntil { refused.lastProblem?.contains("TLS") == true })
    #expect(!refused.isUp)
  }
}
