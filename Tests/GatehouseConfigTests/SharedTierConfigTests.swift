import Testing

@testable import GatehouseConfig

/// `shared` (Docs/shared-tier.md): decoded with its defaults, every mistake a `path: problem` line, and
/// the password never in a message or a dump.
@Suite struct SharedTierConfigTests {
  @Test func absentMeansNoSharedTier() throws {
    #expect(try loadConfig(configJSON()).shared == nil)
  }

  @Test func defaultsAndValues() throws {
    let plain = try #require(try loadConfig(configJSON(extra: #""shared": {"url": "redis://10.0.0.7"}"#)).shared)
    #expect(plain.url.host == "10.0.0.7" && plain.url.port == 6379 && plain.url.database == 0)
    #expect(plain.prefix == "gatehouse:" && plain.timeout == .milliseconds(50))
    #expect(plain.maxEntryBytes == 1_048_576 && plain.password == nil && plain.caFile == nil)

    let full = try #require(
      try loadConfig(
        configJSON(
          extra: #""shared": {"url": "rediss://cache.internal:6380/2", "password": "${P}", "prefix": "gw1:", "#
            + #""timeout_ms": 20, "max_entry_bytes": 4096, "ca": "ca.pem"}"#), environment: ["P": "pa55"]
      ).shared)
    #expect(full.url.usesTLS && full.url.port == 6380 && full.url.database == 2)
    #expect(full.password?.value == "pa55" && full.prefix == "gw1:" && full.timeout == .milliseconds(20))
    #expect(full.maxEntryBytes == 4096 && full.caFile == "ca.pem")
  }

  @Test func mistakesArePathAndProblemLines() {
    #expect(
      issueLines(configJSON(extra: #""shared": {"url": "http://cache:6379"}"#)) == [
        "shared.url: the URL must start with redis:// or rediss:// (TLS)"
      ])
    #expect(issueLines(configJSON(extra: #""shared": {}"#)) == ["shared.url: missing required key"])
    #expect(
      issueLines(
        configJSON(
          extra: #""shared": {"url": "redis://h", "timeout_ms": 0, "max_entry_bytes": 99999999, "prefix": "a b", "#
            + #""ca": "x.pem", "tiemout_ms": 1}"#)) == [
          "shared.prefix: must not contain spaces or control characters",
          "shared.timeout_ms: must be at least 1, got 0",
          "shared.max_entry_bytes: must be at most 7340032, got 99999999",
          "shared.ca: is only used with rediss:// (TLS); the url is redis://",
          #"shared.tiemout_ms: unknown key (did you mean "timeout_ms"?)"#,
        ])
  }

  @Test func thePasswordIsNeverEchoed() throws {
    let secret = "hunter2-very-secret"
    let lines = issueLines(configJSON(extra: #""shared": {"url": "redis://:\#(secret)@host:99999"}"#))
    #expect(lines.count == 1)
    #expect(!lines.joined().contains(secret))
    let bad = issueLines(configJSON(extra: #""shared": {"url": "redis://user:%zz\#(secret)@host"}"#))
    #expect(bad.count == 1 && !bad.joined().contains(secret))

    let config = try loadConfig(
      configJSON(extra: #""shared": {"url": "redis://u:\#(secret)@host", "password": "\#(secret)x"}"#))
    var dumped = ""
    dump(config, to: &dumped)
    #expect(!dumped.contains(secret))
    #expect("\(try #require(config.shared))".contains(secret) == false)
  }
}
