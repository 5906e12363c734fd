import Foundation
import GatehouseHTTP
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// The access line's operator fields: why the gateway answered itself, who the client was,
/// the upstream's time, the query (with secrets masked), the user agent and body bytes.
@Suite struct AccessLogFieldsTests {
  static func line(_ record: AccessRecord, mask: QueryMask = QueryMask(names: LogConfig.defaultMaskedQuery)) throws
    -> [String: Any]
  {
    var buffer = AccessLogBuffer(queryMask: mask)
    buffer.append(record)
    return try #require(JSONSerialization.jsonObject(with: Data(buffer.pending)) as? [String: Any])
  }

  @Test func aLocalAnswerCarriesItsReasonAndTheNewFields() throws {
    let line = try Self.line(
      AccessRecord(
        requestID: Array("r1".utf8), method: .get, path: ArraySlice("/a".utf8), query: ArraySlice("x=1".utf8),
        route: "a", upstream: "api", status: 502, upstreamStatus: nil, reason: .unhealthy, cache: nil,
        durationNanoseconds: 1_000_000, upstreamNanoseconds: 2_345_678, bytes: 180, bodyBytes: 55,
        client: ArraySlice("10.1.2.3".utf8), userAgent: ArraySlice("curl/8.5".utf8)))
    #expect(line["reason"] as? String == "unhealthy")
    #expect(line["upstream"] as? String == "api")
    #expect((line["upstream_ms"] as? Double).map { abs($0 - 2.345) < 0.0001 } == true)
    #expect(line["query"] as? String == "x=1")
    #expect(line["client"] as? String == "10.1.2.3")
    #expect(line["user_agent"] as? String == "curl/8.5")
    #expect(line["bytes"] as? Int == 180)
    #expect(line["body_bytes"] as? Int == 55)
  }

  @Test func anUpstreamAnswerHasNullsWhereNothingIsKnown() throws {
    let line = try Self.line(
      AccessRecord(
        requestID: Array("r2".utf8), method: .get, path: ArraySlice("/a".utf8), route: nil, status: 200,
        upstreamStatus: 200, cache: nil, durationNanoseconds: 0, bytes: 10))
    for key in ["reason", "upstream", "upstream_ms", "query", "user_agent"] {
      #expect(line[key] is NSNull, "\(key) should be null")
    }
    #expect(line["body_bytes"] as? Int == 0)
    #expect(line["client"] as? String == "")
  }

  @Test func reasonsAreSnakeCaseAndDistinct() {
    let names = LocalAnswerReason.allCases.map(\.rawValue)
    #expect(Set(names).count == names.count)
    for name in names {
      #expect(name.allSatisfy { $0.isLowercase || $0 == "_" }, "\(name)")
    }
    #expect(LocalAnswerReason.circuitOpen.rawValue == "circuit_open")
    #expect(LocalAnswerReason.connectRefused.rawValue == "connect_refused")
  }

  static func masked(_ query: String, names: [String] = LogConfig.defaultMaskedQuery) -> String {
    var out: [UInt8] = []
    QueryMask(names: names).appendJSONString(ArraySlice(query.utf8), to: &out)
    return String(decoding: out, as: UTF8.self)
  }

  @Test func sensitiveQueryValuesAreMasked() {
    #expect(Self.masked("user=7&token=abc") == #""user=7&token=***""#)
    #expect(Self.masked("access_token=a.b.c&page=2&sig=xyz") == #""access_token=***&page=2&sig=***""#)
    // Spelled another way, the backend still reads `token`.
    #expect(Self.masked("TOKEN=abc&%74oken=def&Api%5FKey=k") == #""TOKEN=***&%74oken=***&Api%5FKey=***""#)
    // Empty values, bare names and empty pairs stay as they were.
    #expect(Self.masked("token=&token&&a=1") == #""token=&token&&a=1""#)
    #expect(Self.masked("") == #""""#)
    // Only names match: a value that looks like a name is not masked, nor is a longer name.
    #expect(Self.masked("q=token&tokens=1") == #""q=token&tokens=1""#)
    // Quotes and controls are escaped as in any JSON string.
    #expect(Self.masked("q=\"x\"&key=\"y\"") == #""q=\"x\"&key=***""#)
  }

  @Test func theConfiguredListReplacesTheDefault() {
    #expect(Self.masked("token=abc&session=s1", names: ["Session"]) == #""token=abc&session=***""#)
    #expect(Self.masked("token=abc", names: []) == #""token=abc""#)
  }

  @Test func theClientIsTheForwardedHopOnlyBehindATrustedProxy() {
    let proxies = TrustedProxies(entries: ["10.0.0.0/8", "127.0.0.1", "fd00::/8"])
    func client(_ peer: String, _ forwarded: String?) -> String {
      String(
        decoding: proxies.client(peer: Array(peer.utf8), forwardedFor: forwarded.map { ArraySlice($0.utf8) }),
        as: UTF8.self)
    }
    #expect(client("127.0.0.1", "203.0.113.9, 10.0.0.2") == "203.0.113.9")
    #expect(client("10.200.1.1", " 2001:db8::1 ") == "2001:db8::1")
    #expect(client("fd12::5", "198.51.100.7") == "198.51.100.7")
    #expect(client("::ffff:10.0.0.1", "198.51.100.7") == "198.51.100.7")
    // An untrusted peer is the client, whatever it claims.
    #expect(client("192.0.2.1", "203.0.113.9") == "192.0.2.1")
    #expect(client("127.0.0.2", "203.0.113.9") == "127.0.0.2")
    // A first hop that is no address is not believed.
    #expect(client("127.0.0.1", "evil\\\", \"x") == "127.0.0.1")
    #expect(client("127.0.0.1", nil) == "127.0.0.1")
    #expect(
      TrustedProxies.none.client(peer: Array("127.0.0.1".utf8), forwardedFor: ArraySlice("1.2.3.4".utf8))
        == ArraySlice("127.0.0.1".utf8))
  }

  @Test func trustedProxyEntriesAreAddressesOrNetworks() {
    #expect(TrustedProxies.problem("10.0.0.0/8") == nil)
    #expect(TrustedProxies.problem("::1") == nil)
    #expect(TrustedProxies.problem("0.0.0.0/0") == nil)
    #expect(TrustedProxies.problem("10.0.0.0/33") != nil)
    #expect(TrustedProxies.problem("fd00::/129") != nil)
    #expect(TrustedProxies.problem("10.0.0.0/") != nil)
    #expect(TrustedProxies.problem("proxy.internal") != nil)
  }

  @Test func logSettingsAreValidatedWithTheirPath() throws {
    #expect(
      issueLines(configJSON(extra: #""log": {"trusted_proxies": ["10.0.0.0/8", "nope", 3], "mask_query": ["", "k"]}"#))
        == [
          "log.trusted_proxies[1]: must be an IP address or a network such as 10.0.0.0/8 or fd00::/8",
          "log.trusted_proxies[2]: expected a string, got a number",
          "log.mask_query[0]: must not be empty",
        ])
    let config = try? loadConfig(
      configJSON(extra: #""log": {"trusted_proxies": ["127.0.0.1"], "mask_query": ["session"]}"#))
    #expect(config?.log.trustedProxies == ["127.0.0.1"])
    #expect(config?.log.maskQuery == ["session"])
    #expect(try loadConfig(configJSON()).log.maskQuery == LogConfig.defaultMaskedQuery)
  }
}
