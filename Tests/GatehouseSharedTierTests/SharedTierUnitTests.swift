import CGatehouseHiredis
import GatehouseConfig
import Glibc
import Testing

@testable import GatehouseSharedTier

@Suite struct SharedTierURLTests {
  @Test func parsesTheFullForm() throws {
    let url = try SharedTierURL(parsing: "redis://alice:s3cret@cache.internal:6380/2")
    #expect(!url.usesTLS)
    #expect(url.host == "cache.internal")
    #expect(url.port == 6380)
    #expect(url.username == "alice")
    #expect(url.password == "s3cret")
    #expect(url.database == 2)
    #expect(url.redacted == "redis://alice:***@cache.internal:6380/2")
    #expect(!url.description.contains("s3cret"))
    #expect(url.literalAddress == nil)
  }

  @Test func defaultsPortAndDatabaseAndReadsTLSAndPasswordOnly() throws {
    let url = try SharedTierURL(parsing: "rediss://:p%40ss:w/rd@10.0.0.5")
    #expect(url.usesTLS)
    #expect(url.port == 6379)
    #expect(url.database == 0)
    #expect(url.username == nil)
    #expect(url.password == "p@ss:w/rd")
    #expect(url.redacted == "rediss://:***@10.0.0.5:6379/0")
    #expect(url.literalAddress?.port == 6379)

    let plain = try SharedTierURL(parsing: "redis://localhost:7000/")
    #expect(plain.password == nil && plain.username == nil && plain.database == 0)
    #expect(plain.redacted == "redis://localhost:7000/0")
    #expect(plain.literalAddress != nil)

    let v6 = try SharedTierURL(parsing: "redis://[::1]:6390/15")
    #expect(v6.host == "::1")
    #expect(v6.port == 6390)
    #expect(v6.redacted == "redis://[::1]:6390/15")
    #expect(v6.literalAddress != nil)
  }

  @Test(arguments: [
    ("http://host:6379", "must start with redis://"),
    ("redis://", "host is missing"),
    ("redis://:6379", "host is missing"),
    ("redis://host:0", "port must be a number"),
    ("redis://host:70000", "port must be a number"),
    ("redis://host:port", "port must be a number"),
    ("redis://host/db1", "database number"),
    ("redis://host/1/2", "database number"),
    ("redis://host?timeout=1", "query parameters"),
    ("redis://ho st", "not a valid host name"),
    ("redis://[::1:6379", "missing ']'"),
    ("redis://[nothost]:6379", "not an IPv6 address"),
    ("redis://secretonly@host", "credentials need a ':'"),
    ("redis://alice:@host", "has no password"),
    ("redis://:bad%zzpw@host", "not followed by two hex digits"),
  ])
  func refusesWithAClearProblem(input: String, fragment: String) {
    do {
      _ = try SharedTierURL(parsing: input)
      Issue.record("\(input) was accepted")
    } catch {
      #expect(error.problem.contains(fragment), "\(input): \(error.problem)")
      #expect(!error.problem.contains("secretonly") && !error.problem.contains("bad%zzpw"))
    }
  }
}

@Suite struct RedisProtocolTests {
  /// Our encoder against hiredis's `redisFormatCommandArgv`, byte for byte.
  @Test func encodingMatchesHiredis() {
    let commands: [[[UInt8]]] = [
      [Array("PING".utf8)],
      [Array("SET".utf8), Array("key".utf8), Array(0...255)],
      [Array("SET".utf8), [], Array(repeating: 0x41, count: 12_345)],
      (0..<11).map { Array("arg\($0)".utf8) },
    ]
    for command in commands {
      #expect(RedisCommandEncoder.encode(command) == hiredisFormat(command))
    }
  }

  private func hiredisFormat(_ arguments: [[UInt8]]) -> [UInt8] {
    let copies = arguments.map { argument -> UnsafeMutablePointer<CChar> in
      let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: max(argument.count, 1))
      for (index, byte) in argument.enumerated() { pointer[index] = CChar(bitPattern: byte) }
      return pointer
    }
    defer { for copy in copies { copy.deallocate() } }
    var pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) }
    var lengths = arguments.map { $0.count }
    var target: UnsafeMutablePointer<CChar>?
    let count = redisFormatCommandArgv(&target, Int32(arguments.count), &pointers, &lengths)
    guard count > 0, let target else { return [] }
    defer { redisFreeCommand(target) }
    return Array(UnsafeRawBufferPointer(start: target, count: Int(count)))
  }

  private func read(_ chunks: [String], limit: Int = 1 << 20) -> [String] {
    guard let reader = RedisReplyReader(maxReplyBytes: limit) else { return ["no reader"] }
    var seen: [String] = []
    for chunk in chunks {
      let bytes = Array(chunk.utf8)
      _ = bytes.withUnsafeBytes { reader.feed($0) }
      loop: while true {
        switch reader.next() {
        case .reply(let reply): seen.append("\(reply)")
        case .incomplete: break loop
        case .invalid(let problem):
          seen.append("invalid: \(problem)")
          return seen
        }
      }
    }
    return seen
  }

  @Test func readsEveryReplyTypeAcrossSplitInput() {
    let stream = "+OK\r\n-ERR bad\r\n:-42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$1\r\nx\r\n*1\r\n:7\r\n*0\r\n*-1\r\n"
    let whole = read([stream])
    #expect(
      whole == [
        "\(RedisReply.status("OK"))", "\(RedisReply.error("ERR bad"))", "\(RedisReply.integer(-42))",
        "\(RedisReply.bulk(Array("abc".utf8)))", "\(RedisReply.null)",
        "\(RedisReply.array([.bulk([0x78]), .array([.integer(7)])]))", "\(RedisReply.array([]))",
        "\(RedisReply.null)",
      ])
    // One byte at a time gives the same replies.
    #expect(read(stream.map { String($0) }) == whole)
  }

  @Test func garbageAndOversizedRepliesAreInvalid() {
    #expect(read(["?what\r\n"]).last?.hasPrefix("invalid: protocol error") == true)
    #expect(read([":12x\r\n"]).last?.hasPrefix("invalid") == true)
    let big = read(["$5000\r\n", String(repeating: "a", count: 3000)], limit: 1000)
    #expect(big.last?.contains("larger than 1000 bytes") == true)
    // Replies under the limit pass even when, together, they are far over it.
    let many = read(
      [String(repeating: "$500\r\n" + String(repeating: "b", count: 500) + "\r\n", count: 10)], limit: 600)
    #expect(many.count == 10 && !many.contains { $0.hasPrefix("invalid") })
  }

  @Test func outcomesForMetrics() {
    #expect(RedisReply.bulk([1]).outcome == .ok)
    #expect(RedisReply.null.outcome == .miss)
    #expect(RedisReply.error("ERR").outcome == .error)
    #expect(RedisReply.failure(.timedOut).outcome == .timeout)
    #expect(RedisReply.failure(.down).outcome == .down)
    #expect(RedisReply.failure(.disconnected("x")).outcome.label == "error")
  }
}

@Suite struct PendingCommandsTests {
  private func entry(_ deadline: UInt64, _ purpose: PendingCommands.Purpose = .caller) -> PendingCommands.Entry {
    .init(completion: { _ in }, purpose: purpose, sentAt: 0, deadline: deadline)
  }

  @Test func expiredEntriesKeepTheirPlaceUntilTheirRepliesCome() {
    var pending = PendingCommands()
    for deadline in [10, 20, 30] as [UInt64] { pending.append(entry(deadline)) }
    #expect(pending.nextDeadline == 10)
    let expired = pending.takeExpired(now: 25)
    #expect(expired.map(\.deadline) == [10, 20])
    #expect(pending.count == 3)
    #expect(pending.nextDeadline == 30)
    #expect(pending.popFirst()?.completion == nil)
    #expect(pending.popFirst()?.completion == nil)
    #expect(pending.popFirst()?.completion != nil)
    #expect(pending.isEmpty && pending.nextDeadline == nil)
  }

  @Test func compactsAsItGoes() {
    var pending = PendingCommands()
    for round in 0..<10 {
      for index in 0..<100 { pending.append(entry(UInt64(round * 100 + index))) }
      for _ in 0..<90 { _ = pending.popFirst() }
    }
    #expect(pending.count == 100)
    #expect(pending.first?.deadline == 900)
    _ = pending.takeExpired(now: 949)
    #expect(pending.nextDeadline == 950)
    #expect(pending.removeAll().count == 100)
    #expect(pending.isEmpty)
  }
}
