import Foundation
import GatehouseHTTP
import GatehouseStore
import Testing

@testable import GatehouseCore
@testable import GatehouseLogging

@Suite struct LoggingTests {
  @Test func rfc3339FormatsKnownInstants() {
    #expect(RFC3339.string(seconds: 0) == "1970-01-01T00:00:00Z")
    #expect(RFC3339.string(seconds: 951_782_400) == "2000-02-29T00:00:00Z")
    #expect(RFC3339.string(seconds: 1_795_986_245) == "2026-11-29T21:04:05Z")
    var out: [UInt8] = []
    RFC3339.append(seconds: 1_795_986_245, milliseconds: 7, to: &out)
    #expect(String(decoding: out, as: UTF8.self) == "2026-11-29T21:04:05.007Z")
  }

  @Test func accessLinesAreJSONWithTheSpecFields() throws {
    var buffer = AccessLogBuffer()
    buffer.append(
      AccessRecord(
        requestID: Array("abc".utf8), method: .get, path: ArraySlice("/users/\"1\"".utf8), route: "users",
        status: 200, upstreamStatus: 200, cache: "MISS", durationNanoseconds: 1_234_567, bytes: 42))
    buffer.append(
      AccessRecord(
        requestID: Array("def".utf8), method: .post, path: ArraySlice("/x".utf8), route: nil, status: 404,
        upstreamStatus: nil, cache: nil, durationNanoseconds: 5_000, bytes: 0))
    let lines = String(decoding: buffer.pending, as: UTF8.self).split(separator: "\n")
    #expect(lines.count == 2)
    let first = try #require(
      JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
    #expect(first["level"] as? String == "info")
    #expect(first["msg"] as? String == "access")
    #expect(first["request_id"] as? String == "abc")
    #expect(first["method"] as? String == "GET")
    #expect(first["path"] as? String == "/users/\"1\"")
    #expect(first["route"] as? String == "users")
    #expect(first["status"] as? Int == 200)
    #expect(first["upstream_status"] as? Int == 200)
    #expect(first["cache"] as? String == "MISS")
    #expect((first["duration_ms"] as? Double).map { abs($0 - 1.234) < 0.0001 } == true)
    #expect(first["bytes"] as? Int == 42)
    #expect((first["ts"] as? String)?.hasSuffix("Z") == true)
    let second = try #require(JSONSerialization.jsonObject(with: Data(lines[1].utf8)) as? [String: Any])
    #expect(second["route"] is NSNull)
    #expect(second["upstream_status"] is NSNull)
  }

  @Test func loggerWritesOneJSONObjectPerLineAndHonoursLevel() throws {
    var fds: [Int32] = [0, 0]
    #expect(pipe(&fds) == 0)
    let logger = Logger(level: .warn, fileDescriptor: fds[1])
    logger.info("hidden")
    logger.warn("shown", ["count": .int(3), "name": .string("a\nb")])
    logger.log(.info, "hidden too", fields: [("x", .int(1))])
    logger.log(.error, "built", fields: [("target", .string("all")), ("id", .null)])
    close(fds[1])
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
      let n = read(fds[0], &chunk, chunk.count)
      if n <= 0 { break }
      bytes.append(contentsOf: chunk[0..<n])
    }
    close(fds[0])
    let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
    #expect(lines.count == 2)
    let object = try #require(JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
    #expect(object["msg"] as? String == "shown")
    #expect(object["level"] as? String == "warn")
    #expect(object["count"] as? Int == 3)
    #expect(object["name"] as? String == "a\nb")
    let built = try #require(JSONSerialization.jsonObject(with: Data(lines[1].utf8)) as? [String: Any])
    #expect(built["msg"] as? String == "built")
    #expect(built["level"] as? String == "error")
    #expect(built["target"] as? String == "all")
    #expect(built["id"] is NSNull)
  }

  /// The store's writer reports through events; each becomes one line at its level.
  @Test func storeWriteEventsBecomeOneLineEach() throws {
    let lines = try captured { logger in
      GatewayServer.log(.writesFailing(error: "database or disk is full", pendingTokenWrites: 1), to: logger)
      GatewayServer.log(.writesRecovered(failedCommits: 7), to: logger)
      GatewayServer.log(.tokenWritesLost(names: ["api", "billing"]), to: logger)
    }

    #expect(lines.map { $0["level"] as? String } == ["warn", "info", "error"])
    #expect((lines[0]["msg"] as? String)?.hasPrefix("store writes are failing") == true)
    #expect(lines[0]["error"] as? String == "database or disk is full")
    #expect(lines[0]["pending_token_writes"] as? Int == 1)
    #expect(lines[1]["msg"] as? String == "store writes work again")
    #expect(lines[1]["failed_commits"] as? Int == 7)
    #expect(lines[2]["tokens"] as? String == "api,billing")
  }

  /// The JSON objects `body` logs at level info and above.
  func captured(_ body: (Logger) -> Void) throws -> [[String: Any]] {
    var fds: [Int32] = [0, 0]
    #expect(pipe(&fds) == 0)
    body(Logger(level: .info, fileDescriptor: fds[1]))
    close(fds[1])
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
      let n = read(fds[0], &chunk, chunk.count)
      if n <= 0 { break }
      bytes.append(contentsOf: chunk[0..<n])
    }
    close(fds[0])
    return try String(decoding: bytes, as: UTF8.self).split(separator: "\n").map { line in
      try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }
  }
}
