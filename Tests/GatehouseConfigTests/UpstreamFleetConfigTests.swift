import Testing

@testable import GatehouseConfig

/// A config with one upstream `api` (url `http://api.internal:8080/v1`) whose members are
/// extended by `upstream`, a route to it, and `extra` top-level members.
private func fleetJSON(_ upstream: String = "", url: String = "http://api.internal:8080/v1", extra: String = "")
  -> String
{
  """
  {
    "upstreams": { "api": { "url": "\(url)"\(upstream.isEmpty ? "" : ", " + upstream) } },
    "routes": [ { "name": "r", "match": { "path": "/" }, "upstream": "api" } ]
    \(extra.isEmpty ? "" : ", " + extra)
  }
  """
}

private func fleetWarnings(_ json: String) throws -> [String] {
  ConfigLint.warnings(for: try loadConfig(json)).map(\.description)
}

/// `upstreams.*.servers`, `balance`, `hash_by`, `resolve_s`, `outlier`, `retry` and the
/// top-level `resolver`: decoding, defaults, each error's `path: problem` line, lint and the
/// summary.
@Suite struct UpstreamFleetConfigTests {
  @Test func decodesEveryFleetKey() throws {
    let config = try loadConfig(
      fleetJSON(
        #"""
        "servers": [ { "address": "10.0.1.5:8080", "weight": 2 }, { "address": "api-b.internal:8080" } ],
        "balance": "hash", "hash_by": "header:X-Tenant", "resolve_s": 5,
        "outlier": { "failures": 3, "eject_ms": 2500, "max_ejected_percent": 30 },
        "retry": { "attempts": 3, "on": ["timeout", "502", "connect"], "budget_percent": 0 }
        """#,
        extra: #""resolver": { "servers": ["10.0.0.2:53", "10.0.0.3"], "timeout_ms": 500 }"#))
    let api = try #require(config.upstream(named: "api"))
    #expect(
      api.servers == [
        UpstreamServerConfig(address: ServerAddress(host: .ipv4("10.0.1.5"), port: 8080), weight: 2),
        UpstreamServerConfig(address: ServerAddress(host: .name("api-b.internal"), port: 8080)),
      ])
    #expect(api.balance == .hash)
    #expect(api.hashBy == .header("X-Tenant") && api.hashKey == .header("X-Tenant"))
    #expect(api.resolveSeconds == 5)
    #expect(api.outlier == OutlierConfig(failures: 3, ejectMilliseconds: 2500, maxEjectedPercent: 30))
    #expect(api.retry == RetryConfig(attempts: 3, on: [.timeout, .status502, .connect], budgetPercent: 0))
    #expect(api.url.host == "api.internal" && api.url.basePath == "/v1")
    #expect(config.resolver.servers?.map(\.description) == ["10.0.0.2:53", "10.0.0.3:53"])
    #expect(config.resolver.timeoutMilliseconds == 500)
  }

  @Test func absentKeysMeanTheDefaults() throws {
    let config = try loadConfig(fleetJSON())
    let api = try #require(config.upstream(named: "api"))
    #expect(api.servers == nil)
    #expect(api.balance == .leastRequest)
    #expect(api.hashBy == nil && api.hashKey == .client)
    #expect(api.resolveSeconds == 30)
    #expect(api.outlier == OutlierConfig(failures: 5, ejectMilliseconds: 10_000, maxEjectedPercent: 50))
    #expect(api.retry == RetryConfig(attempts: 2, on: [.connect, .reset, .status503], budgetPercent: 20))
    #expect(config.resolver == ResolverConfig(servers: nil, timeoutMilliseconds: 2000))
    // Empty blocks are their defaults too.
    let empty = try loadConfig(fleetJSON(#""outlier": {}, "retry": {}"#, extra: #""resolver": {}"#))
    #expect(empty.upstream(named: "api") == api)
    #expect(empty.resolver == .system)
    // `[]` is a valid `retry.on`: no failure is retried.
    #expect(try loadConfig(fleetJSON(#""retry": {"on": []}"#)).upstream(named: "api")?.retry.on == [])
  }

  /// The runtime reads these spellings (`BalancePolicy(configValue:)`,
  /// `HashKeySource(configValue:)`, `RetryConditions(configValues:)`); they must not drift.
  @Test func configValuesAreTheContractsSpellings() {
    #expect(UpstreamBalance.allCases.map(\.configValue) == ["least_request", "round_robin", "hash"])
    #expect(RetryCondition.allCases.map(\.configValue) == ["connect", "reset", "timeout", "502", "503", "504"])
    #expect(
      [UpstreamHashKey.client, .ip, .path, .header("X-Tenant")].map(\.configValue)
        == ["client", "ip", "path", "header:X-Tenant"])
  }

  @Test func serverAddressesHaveOneSpellingEach() throws {
    let config = try loadConfig(
      fleetJSON(
        #""servers": [{"address": "[2001:DB8:0::5]:8080"}, {"address": "API-B.Internal:80"}, "#
          + #"{"address": "localhost:3000"}, {"address": "[::ffff:10.0.0.1]:1"}]"#))
    let servers = try #require(config.upstream(named: "api")?.servers)
    #expect(
      servers.map(\.address.description) == [
        "[2001:db8::5]:8080", "api-b.internal:80", "localhost:3000", "[::ffff:10.0.0.1]:1",
      ])
    #expect(servers.map(\.address.isIPLiteral) == [true, false, false, true])
    #expect(servers[0].address.hostText == "2001:db8::5")
  }

  @Test func serversErrors() {
    func lines(_ servers: String) -> [String] { issueLines(fleetJSON(#""servers": "# + servers)) }
    #expect(
      lines("[]") == [
        "upstreams.api.servers: must list at least one server (leave servers out to use the url's host)"
      ])
    #expect(lines(#""10.0.1.5:80""#) == ["upstreams.api.servers: expected an array, got a string"])
    #expect(lines(#"["10.0.1.5:80"]"#) == ["upstreams.api.servers[0]: expected an object, got a string"])
    #expect(lines(#"[{"weight": 2}]"#) == ["upstreams.api.servers[0].address: missing required key"])
    #expect(lines(#"[{"address": ""}]"#) == ["upstreams.api.servers[0].address: must not be empty"])
    let address = "upstreams.api.servers[0].address: "
    let cases: [(String, String)] = [
      ("10.0.1.5", "expected host:port, such as 10.0.1.5:8080 or [2001:db8::5]:8080"),
      ("[2001:db8::5]", "expected host:port, such as 10.0.1.5:8080 or [2001:db8::5]:8080"),
      ("2001:db8::5", "an IPv6 address needs brackets and a port, such as [2001:db8::5]:8080"),
      ("[2001:db8::5", "missing ']' after the IPv6 address"),
      ("[2001:db8::zz]:80", #""2001:db8::zz" is not an IPv6 address"#),
      ("[2001:db8::5]80", "unexpected text after ']'"),
      ("a:b:80", "an IPv6 address needs brackets, such as 10.0.1.5:8080 or [2001:db8::5]:8080"),
      ("api_b.internal:8080", #"host must be an IP address or a DNS name, got "api_b.internal""#),
      ("10.0.1.256:80", #"host must be an IP address or a DNS name, got "10.0.1.256""#),
      ("10.0.1.5:0", "port must be from 1 to 65535, got 0"),
      ("10.0.1.5:http", #"port must be a number from 1 to 65535, got "http""#),
    ]
    for (text, problem) in cases {
      #expect(lines(#"[{"address": "\#(text)"}]"#) == [address + problem], "\(text)")
    }
    #expect(
      lines(#"[{"address": "h:80", "weight": 0}, {"address": "h:81", "weight": 101}]"#) == [
        "upstreams.api.servers[0].weight: must be at least 1, got 0",
        "upstreams.api.servers[1].weight: must be at most 100, got 101",
      ])
    #expect(
      lines(#"[{"address": "h:80", "wieght": 2}]"#) == [
        #"upstreams.api.servers[0].wieght: unknown key (did you mean "weight"?)"#
      ])
  }

  @Test func balanceAndHashByErrors() {
    func lines(_ members: String) -> [String] { issueLines(fleetJSON(members)) }
    #expect(
      lines(#""balance": "least_requests""#) == [
        #"upstreams.api.balance: unknown value "least_requests", expected one of "least_request", "round_robin", "#
          + #""hash" (did you mean "least_request"?)"#
      ])
    let expected = #"expected one of "client", "ip", "path", "header:NAME""#
    #expect(
      lines(#""hash_by": "clinet""#) == [
        #"upstreams.api.hash_by: unknown value "clinet", "# + expected + #" (did you mean "client"?)"#
      ])
    #expect(
      lines(#""hash_by": "headers:X-Tenant""#) == [
        #"upstreams.api.hash_by: unknown value "headers:X-Tenant", "# + expected
          + #" (did you mean "header:X-Tenant"?)"#
      ])
    #expect(
      lines(#""hash_by": "header""#) == [
        #"upstreams.api.hash_by: unknown value "header", "# + expected + #" (did you mean "header:NAME"?)"#
      ])
    #expect(lines(#""hash_by": "cookie""#) == [#"upstreams.api.hash_by: unknown value "cookie", "# + expected])
    #expect(
      lines(#""hash_by": "header:""#) == [
        #"upstreams.api.hash_by: header: needs a header name, such as "header:X-Tenant""#
      ])
    #expect(
      lines(#""hash_by": "header:X Tenant""#) == [
        #"upstreams.api.hash_by: invalid header name "X Tenant" (letters, digits and !#$%&'*+-.^_`|~ only)"#
      ])
    #expect(lines(#""balance": 1"#) == ["upstreams.api.balance: expected a string, got a number"])
    #expect(lines(#""resolve_s": 0"#) == ["upstreams.api.resolve_s: must be at least 1, got 0"])
    #expect(lines(#""resolve_s": 1.5"#) == ["upstreams.api.resolve_s: expected an integer, got 1.5"])
  }

  @Test func outlierErrors() {
    #expect(
      issueLines(fleetJSON(#""outlier": {"failures": 0, "eject_ms": 0, "max_ejected_percent": 101}"#)) == [
        "upstreams.api.outlier.failures: must be at least 1, got 0",
        "upstreams.api.outlier.eject_ms: must be at least 1, got 0",
        "upstreams.api.outlier.max_ejected_percent: must be at most 100, got 101",
      ])
    #expect(
      issueLines(fleetJSON(#""outlier": {"max_ejected_percent": -1, "consecutive_failures": 3}"#)) == [
        "upstreams.api.outlier.max_ejected_percent: must not be negative, got -1",
        #"upstreams.api.outlier.consecutive_failures: unknown key (did you mean "failures"?)"#,
      ])
    #expect(issueLines(fleetJSON(#""outlier": true"#)) == ["upstreams.api.outlier: expected an object, got a boolean"])
    #expect(
      issueLines(fleetJSON(#""outlier": {"max_ejected_percent": 0}"#)) == ["loaded"], "0 turns ejection off")
  }

  @Test func retryErrors() {
    func lines(_ retry: String) -> [String] { issueLines(fleetJSON(#""retry": "# + retry)) }
    #expect(
      lines(#"{"attempts": 0, "budget_percent": 101}"#) == [
        "upstreams.api.retry.attempts: must be at least 1, got 0",
        "upstreams.api.retry.budget_percent: must be at most 100, got 101",
      ])
    #expect(lines(#"{"attempts": 11}"#) == ["upstreams.api.retry.attempts: must be at most 10, got 11"])
    #expect(lines(#"{"on": "503"}"#) == ["upstreams.api.retry.on: expected an array, got a string"])
    #expect(
      lines(#"{"on": ["connect", 503, "rest", "503", "503"]}"#) == [
        #"upstreams.api.retry.on[1]: expected a string, got a number (write "503")"#,
        #"upstreams.api.retry.on[2]: unknown value "rest", expected one of "connect", "reset", "timeout", "502", "#
          + #""503", "504" (did you mean "reset"?)"#,
        "upstreams.api.retry.on[4]: 503 is listed twice",
      ])
    #expect(
      lines(#"{"max_attempts": 3, "retry_on": ["reset"]}"#) == [
        #"upstreams.api.retry.max_attempts: unknown key (did you mean "attempts"?)"#,
        #"upstreams.api.retry.retry_on: unknown key (did you mean "on"?)"#,
      ])
    #expect(
      issueLines(fleetJSON(#""retries": 3, "endpoints": []"#)) == [
        #"upstreams.api.retries: unknown key (did you mean "retry"?)"#,
        #"upstreams.api.endpoints: unknown key (did you mean "servers"?)"#,
      ])
  }

  @Test func resolver() throws {
    let config = try loadConfig(
      fleetJSON(
        extra: #""resolver": {"servers": ["10.0.0.2", "10.0.0.3:5353", "[2001:DB8::2]:53", "2001:db8::3", "#
          + #""[2001:db8::4]"]}"#))
    #expect(
      config.resolver.servers?.map(\.description) == [
        "10.0.0.2:53", "10.0.0.3:5353", "[2001:db8::2]:53", "[2001:db8::3]:53", "[2001:db8::4]:53",
      ])
    func lines(_ resolver: String) -> [String] { issueLines(fleetJSON(extra: #""resolver": "# + resolver)) }
    #expect(
      lines(#"{"servers": []}"#) == [
        "resolver.servers: must list at least one server (leave servers out to use /etc/resolv.conf)"
      ])
    #expect(
      lines(#"{"servers": ["dns.internal:53", "bad host", "10.0.0.2:0", "a:b:53", 53]}"#) == [
        #"resolver.servers[0]: must be an IP address, not a name, got "dns.internal""#,
        #"resolver.servers[1]: host must be an IP address, got "bad host""#,
        "resolver.servers[2]: port must be from 1 to 65535, got 0",
        "resolver.servers[3]: an IPv6 address needs brackets, such as 10.0.0.2:53 or [2001:db8::2]:53",
        "resolver.servers[4]: expected a string, got a number",
      ])
    #expect(lines(#"{"servers": "10.0.0.2"}"#) == ["resolver.servers: expected an array, got a string"])
    #expect(
      lines(#"{"timeout_ms": 0, "timeout": 5}"#) == [
        "resolver.timeout_ms: must be at least 1, got 0",
        #"resolver.timeout: unknown key (did you mean "timeout_ms"?)"#,
      ])
    #expect(
      issueLines(fleetJSON(extra: #""dns": {}"#)) == [#"dns: unknown key (did you mean "resolver"?)"#])
  }

  @Test func lintWarnsAboutHashByWithoutHashBalancing() throws {
    #expect(
      try fleetWarnings(fleetJSON(#""hash_by": "header:X-Tenant""#)) == [
        #"upstreams.api.hash_by: warning: "header:X-Tenant" does nothing: balance is "least_request", and only"#
          + #" "hash" uses hash_by"#
      ])
    #expect(
      try fleetWarnings(fleetJSON(#""balance": "round_robin", "hash_by": "client""#)) == [
        #"upstreams.api.hash_by: warning: "client" does nothing: balance is "round_robin", and only"#
          + #" "hash" uses hash_by"#
      ])
    #expect(try fleetWarnings(fleetJSON(#""balance": "hash", "hash_by": "ip""#)) == [])
    #expect(try fleetWarnings(fleetJSON(#""balance": "hash""#)) == [])
  }

  @Test func lintWarnsAboutServersListedTwice() throws {
    let json = fleetJSON(
      #""servers": [{"address": "10.0.1.5:8080", "weight": 2}, {"address": "[2001:db8::5]:80"}, "#
        + #"{"address": "10.0.1.5:8080"}, {"address": "[2001:DB8:0::5]:80"}, {"address": "10.0.1.5:8081"}, "#
        + #"{"address": "API.internal:8080"}, {"address": "api.internal:8080"}]"#)
    #expect(
      try fleetWarnings(json) == [
        "upstreams.api.servers[2].address: warning: 10.0.1.5:8080 is already listed at servers[0]; it is one"
          + " endpoint, with the first entry's weight",
        "upstreams.api.servers[3].address: warning: [2001:db8::5]:80 is already listed at servers[1]; it is one"
          + " endpoint, with the first entry's weight",
        "upstreams.api.servers[6].address: warning: api.internal:8080 is already listed at servers[5]; it is one"
          + " endpoint, with the first entry's weight",
      ])
  }

  @Test func lintWarnsWhenTheURLsAddressIsNotAServer() throws {
    #expect(
      try fleetWarnings(fleetJSON(#""servers": [{"address": "10.0.1.5:8080"}]"#, url: "http://127.0.0.1:3000"))
        == [
          "upstreams.api.url: warning: 127.0.0.1 is not among servers: with servers the url's host is only sent as"
            + " Host (and used as the TLS name), so it gets no requests"
        ])
    // The url's address among the servers (on any port), a url naming a host, or no
    // `servers` at all: nothing to say.
    #expect(
      try fleetWarnings(fleetJSON(#""servers": [{"address": "10.0.1.5:8080"}]"#, url: "http://10.0.1.5:9000")) == [])
    #expect(
      try fleetWarnings(fleetJSON(#""servers": [{"address": "[2001:db8::5]:80"}]"#, url: "http://[2001:DB8:0::5]"))
        == [])
    #expect(try fleetWarnings(fleetJSON(#""servers": [{"address": "10.0.1.5:8080"}]"#)) == [])
    #expect(try fleetWarnings(fleetJSON(url: "http://127.0.0.1:3000")) == [])
  }

  @Test func summaryShowsServersBalanceAndResolver() throws {
    let config = try loadConfig(
      fleetJSON(
        #""servers": [{"address": "10.0.1.5:8080", "weight": 2}, {"address": "api-b.internal:8080"}], "#
          + #""balance": "hash""#,
        extra: #""resolver": {"servers": ["10.0.0.2"]}"#))
    let lines = ConfigSummary.lines(for: config)
    #expect(
      lines.contains(
        "  api  http://api.internal:8080/v1  servers 10.0.1.5:8080 weight 2, api-b.internal:8080"
          + "  balance hash by client"),
      "\(lines)")
    #expect(lines.contains("resolver:  10.0.0.2:53 (timeout 2000ms)"), "\(lines)")
    let plain = ConfigSummary.lines(for: try loadConfig(fleetJSON()))
    #expect(plain.contains("  api  http://api.internal:8080/v1"), "\(plain)")
    #expect(!plain.contains { $0.hasPrefix("resolver:") })
  }
}
