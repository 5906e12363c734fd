import Testing

@testable import GatehouseConfig

@Suite struct NetworkAddressTests {
  @Test func listenAddressFamiliesAndLoopback() throws {
    let v4 = try ListenAddress.parse("127.0.0.2:80").get()
    #expect(v4.family == .ipv4 && v4.isLoopback && v4.description == "127.0.0.2:80")
    let any = try ListenAddress.parse("0.0.0.0:8080").get()
    #expect(!any.isLoopback)
    let v6 = try ListenAddress.parse("[::1]:9901").get()
    #expect(v6.family == .ipv6 && v6.host == "::1" && v6.isLoopback && v6.description == "[::1]:9901")
    let v6Any = try ListenAddress.parse("[::]:8080").get()
    #expect(!v6Any.isLoopback)
    let local = try ListenAddress.parse("localhost:65535").get()
    #expect(local.family == .localhost && local.isLoopback && local.port == 65535)
  }

  @Test func ipv4WithLeadingZerosIsRefused() {
    #expect(throws: AddressError.self) { try ListenAddress.parse("127.0.0.01:80").get() }
  }

  @Test func urlPartsAndHostHeader() throws {
    let plain = try HTTPURL.parse("http://api.internal").get()
    #expect(plain.port == 80 && plain.basePath == "" && plain.hostHeader == "api.internal")
    let https = try HTTPURL.parse("https://api.internal:443/").get()
    #expect(
      https.scheme == .https && https.port == 443 && https.basePath == ""
        && https.hostHeader == "api.internal")
    let custom = try HTTPURL.parse("https://api.internal:8443/a/b//").get()
    #expect(custom.basePath == "/a/b" && custom.hostHeader == "api.internal:8443")
    let v6 = try HTTPURL.parse("http://[::1]:3000/x").get()
    #expect(v6.host == "::1" && v6.port == 3000 && v6.hostHeader == "[::1]:3000")
    #expect(v6.description == "http://[::1]:3000/x")
    let mixedCase = try HTTPURL.parse("HTTP://API.Internal/Keep/Case").get()
    #expect(mixedCase.host == "api.internal" && mixedCase.basePath == "/Keep/Case")
  }

  @Test func urlHostIsLoopbackOnlyWhenItsSpellingSaysSo() throws {
    for local in [
      "http://localhost/", "http://LOCALHOST:8080/", "http://127.0.0.1/", "http://127.255.0.9:1/",
      "http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:127.0.0.1]/",
    ] {
      #expect(try HTTPURL.parse(local).get().hostIsLoopback, "\(local)")
    }
    for remote in [
      "http://auth.internal/", "http://localhost.example/", "http://128.0.0.1/", "http://10.0.0.1/",
      "http://0.0.0.0/", "http://[::]/", "http://[::2]/", "http://[::ffff:10.0.0.1]/", "http://127.example/",
    ] {
      #expect(try !HTTPURL.parse(remote).get().hostIsLoopback, "\(remote)")
    }
  }

  @Test func urlHostRules() {
    for bad in ["http://-a.b/", "http://a..b/", "http://1.2.3/", "http://a b/", "http://[::1/", "http://h:/"] {
      #expect(throws: AddressError.self, "\(bad)") { try HTTPURL.parse(bad).get() }
    }
    for bad in ["http://h/a b", "http://h/%zz", "http://h/é"] {
      #expect(throws: AddressError.self, "\(bad)") { try HTTPURL.parse(bad).get() }
    }
  }
}
