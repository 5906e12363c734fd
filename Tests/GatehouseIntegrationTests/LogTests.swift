import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The logs (Docs/logs.md): access lines carry the cache result, and credentials never appear in
/// stdout or stderr, whatever path a request takes.
@Suite struct LogTests {
  @Test func accessLinesCarryTheCacheResult() throws {
    let backend = try ModalBackend()
    var config = StoreTests.config(port: backend.port, cache: ["fresh_s": 60])
    config["routes"] = [
      TestConfig.route("cached", match: "/cached", extra: ["cache": ["fresh_s": 60]]),
      TestConfig.route("plain", match: "/plain"),
    ]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    for path in ["/cached", "/cached", "/plain"] { _ = try send("GET", path, to: gateway.port) }
    _ = try send("POST", "/cached", to: gateway.port, body: [])
    #expect(waitUntil { gateway.accessLines().count >= 4 })
    let lines = gateway.accessLines()

    #expect(lines.map { $0["path"] as? String } == ["/cached", "/cached", "/plain", "/cached"])
    #expect(lines.map { $0["cache"] as? String } == ["MISS", "HIT", nil, "BYPASS"])
    #expect(lines[2]["cache"] is NSNull)
    #expect(lines.map { $0["route"] as? String } == ["cached", "cached", "plain", "cached"])
    #expect(lines[0]["upstream_status"] as? Int == 200)
    #expect(lines[1]["upstream_status"] is NSNull)
    for line in lines {
      for key in ["ts", "level", "request_id", "method", "status", "duration_ms", "bytes"] {
        #expect(line[key] != nil, "\(key) missing in \(line)")
      }
      #expect(line["status"] as? Int == 200)
    }
  }

  /// Each state-changing admin call leaves one `admin action` line with its request id,
  /// what it aimed at and how it ended (a purge: how many); reads and refused tokens leave
  /// none, and no token value or request body is written.
  @Test func everyStateChangingAdminCallLogsOneLine() throws {
    let backend = try ModalBackend()
    defer { backend.stop() }
    var config = StoreTests.config(port: backend.port, cache: ["fresh_s": 60])
    config["tokens"] = ["api": ["type": "static", "value": "upstream-token-CANARY-5a5a"]]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin()
    for path in ["/a/1", "/a/2", "/b/1", "/c/1"] { _ = try send("GET", path, to: gateway.port) }
    try #require(admin.waitForStoredEntries(4))
    let cID = try #require(try admin.allEntries().first { $0["path"] as? String == "/c/1" }?["id"] as? String)

    let answers = [
      try admin.request("DELETE", "/admin/cache/entries/\(cID)"),
      try admin.request("DELETE", "/admin/cache/entries?prefix=/a/"),
      try admin.request("DELETE", "/admin/cache"),
      try admin.request("DELETE", "/admin/cache?prefix=/b/"),
      try admin.request("POST", "/admin/reload"),
      try admin.setToken("api", value: "set-token-CANARY-6b6b"),
      try admin.refresh("api"),
      try admin.invalidate("api"),
    ]
    // Reads and unauthorized calls leave no such line.
    for path in ["/admin/cache", "/admin/tokens", "/admin/cache/entries?prefix=/b/"] {
      _ = try admin.request("GET", path)
    }
    _ = try admin.request("DELETE", "/admin/cache", credential: .none)
    _ = try admin.request("POST", "/admin/reload", credential: .header("Bearer wrong"))
    let marker = try admin.request("DELETE", "/admin/cache/entries?prefix=/marker/")
    let expectedCount = answers.count + 1
    #expect(
      waitUntil { gateway.logLines().filter { $0["msg"] as? String == "admin action" }.count >= expectedCount })
    let lines = gateway.logLines().filter { $0["msg"] as? String == "admin action" }

    #expect(lines.count == expectedCount)
    #expect(lines.allSatisfy { $0["level"] as? String == "info" })
    #expect(
      lines.map { $0["action"] as? String } == [
        "cache purge", "cache purge", "cache purge", "cache purge", "reload", "token set", "token refresh",
        "token invalidate", "cache purge",
      ])
    #expect(lines.map { $0["target"] as? String } == ["id", "prefix", "all", "all", nil, nil, nil, nil, "prefix"])
    #expect(lines[0]["id"] as? String == cID)
    #expect(lines[1]["prefix"] as? String == "/a/")
    #expect(lines.map { $0["purged"] as? Int } == [1, 2, 1, nil, nil, nil, nil, nil, 0])
    #expect(lines[5...7].allSatisfy { $0["token"] as? String == "api" })
    // The set is named by the new value's fingerprint, as `GET /admin/tokens` shows it; the
    // token manager adds no second line of its own for an operator's call.
    #expect(lines[5]["fingerprint"] as? String == (try answers[5].jsonObject())["fingerprint"] as? String)
    #expect(lines[5]["fingerprint"] != nil)
    #expect(!gateway.logLines().contains { ($0["msg"] as? String)?.hasSuffix("by operator") == true })
    for (line, answer) in zip(lines, answers + [marker]) {
      #expect(line["status"] as? Int == answer.status, "\(line)")
      #expect(line["request_id"] as? String == answer.head.value("X-Request-Id"), "\(line)")
    }
    #expect(answers[3].status == 400)
    #expect(!gateway.stdoutText.contains("CANARY"))
    #expect(!gateway.stdoutText.contains(#""value""#))
  }

  @Test func credentialsNeverReachTheLogs() throws {
    let canaries = [
      "upstreamToken": "upstream-token-CANARY-11aa",
      "clientBearer": "client-bearer-CANARY-22bb",
      "cookie": "cookie-CANARY-33cc",
      "setCookie": "set-cookie-CANARY-44dd",
      "clientKey": "client-key-CANARY-55ee",
      "wrongKey": "wrong-key-CANARY-66ff",
      "adminWrong": "admin-wrong-CANARY-7788",
      "badToken": "bad-admin-token-CANARY-99aa",
    ]
    let backend = try TestBackend { request in
      jsonAnswer(
        #"{"path":"\#(request.path)"}"#,
        headers: [("Set-Cookie", "sid=\(canaries["setCookie"]!); HttpOnly"), ("Cache-Control", "no-store")])
    }
    defer { backend.stop() }
    var config = StoreTests.config(port: backend.port, envelope: ["enabled": true])
    var routes = config["routes"] as! [[String: Any]]
    routes[0]["token"] = "api"
    config["routes"] = routes
    config["tokens"] = ["api": ["type": "static", "value": canaries["upstreamToken"]!]]
    config["clients"] = [
      "required": false,
      "keys": [["id": "app", "sha256": try ExternalTool.sha256Hex(canaries["clientKey"]!)]],
    ]
    config["log"] = ["level": "debug", "access": "stdout", "format": "json"]
    let gateway = try GatewayProcess(config: config)
    let admin = try gateway.admin(token: TestConfig.adminToken)

    let secretHeaders: [(String, String)] = [
      ("Authorization", "Bearer \(canaries["clientBearer"]!)"), ("Cookie", "session=\(canaries["cookie"]!)"),
      ("X-Api-Key", canaries["clientKey"]!),
    ]
    // Proxied, answered with Set-Cookie.
    let proxied = try send("GET", "/secret", to: gateway.port, headers: secretHeaders)
    _ = try send("GET", "/secret", to: gateway.port, headers: [("Authorization", "ApiKey \(canaries["clientKey"]!)")])
    // Refused keys.
    _ = try send("GET", "/secret", to: gateway.port, headers: [("X-Api-Key", canaries["wrongKey"]!)])
    _ = try send(
      "GET", "/secret", to: gateway.port, headers: [("Authorization", "ApiKey \(canaries["wrongKey"]!)")])
    // A request the parser refuses.
    let client = try RawClient(port: gateway.port)
    try client.send("GET /bad HTTP/1.1\r\nAuthorization: Bearer \(canaries["clientBearer"]!)\r\nBroken\r\n\r\n")
    _ = client.readUntilEnd(timeout: 5)
    // The admin API: wrong and right tokens, a refused reload of a file with a bad token.
    _ = try admin.request("GET", "/admin/status", credential: .header("Bearer \(canaries["adminWrong"]!)"))
    _ = try admin.request("GET", "/admin/status")
    _ = try admin.request("GET", "/metrics")
    var badConfig = config
    badConfig["admin"] = ["listen": "127.0.0.1:0", "token": "\(canaries["badToken"]!)\r\nX: y"]
    badConfig["tokens"] = ["api": ["type": "static", "value": "\(canaries["upstreamToken"]!)\n"]]
    try gateway.rewriteConfig(badConfig)
    let refusedReload = try admin.request("POST", "/admin/reload")
    // SIGHUP with the same bad file, then an outage.
    gateway.send(signal: SIGHUP)
    #expect(gateway.waitForLogLine { ($0["msg"] as? String)?.contains("reload refused") == true })
    backend.stop()
    _ = try send("GET", "/secret", to: gateway.port, headers: secretHeaders)
    gateway.stopExpectingCleanExit()

    #expect(proxied.status == 200)
    #expect(proxied.head.values("Set-Cookie").contains { $0.contains(canaries["setCookie"]!) })
    #expect(backend.requests.first?.head.values("Authorization") == ["Bearer \(canaries["upstreamToken"]!)"])
    #expect(refusedReload.status == 400)
    #expect(!refusedReload.text.contains("CANARY"), "the refusal repeats a secret: \(refusedReload.text)")
    #expect(gateway.accessLines().count >= 6)
    let output = gateway.stdoutText + gateway.stderrText
    for (name, canary) in canaries {
      #expect(!output.contains(canary), "\(name) appears in the gateway's output")
    }
    #expect(!output.contains("CANARY"), "a canary appears in the gateway's output")
    #expect(!output.contains(TestConfig.adminToken))
  }
}
