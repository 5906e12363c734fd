import Foundation
import Testing

/// `admin.tls`: the admin API over TLS only, `gatehouse admin --url https://…` verifying it,
/// and `check` loading its files (security audit: the admin token crossed the network in
/// clear when `admin.listen` was not loopback).
@Suite(.serialized) struct AdminTLSTests {
  typealias Certificates = TLSGatewayTests.Certificates

  static func config(_ certificates: Certificates, cert: String = "server.pem") -> [String: Any] {
    var config = TestConfig.passThrough(to: 3000)
    config["admin"] = [
      "listen": "127.0.0.1:0", "token": TestConfig.adminToken,
      "tls": ["cert": certificates.path + "/" + cert, "key": certificates.path + "/server.key"],
    ]
    return config
  }

  /// `curl` over https to the admin port; (exit status, HTTP status).
  static func curlStatus(_ port: UInt16, _ path: String, ca: String, token: String?) throws -> (Int32, String) {
    var arguments = ["--cacert", ca, "-o", "/dev/null", "-w", "%{http_code}"]
    if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
    return try TLSGatewayTests.curl(arguments + ["https://localhost:\(port)\(path)"])
  }

  @Test func theAdminAPIAnswersOverTLSOnlyWithAdminTLS() throws {
    let certificates = try Certificates()
    let gateway = try GatewayProcess(config: Self.config(certificates))
    defer { gateway.stopExpectingCleanExit() }
    let port = try #require(gateway.adminPort())
    let ca = certificates.path + "/ca.pem"

    let authorized = try Self.curlStatus(port, "/admin/status", ca: ca, token: TestConfig.adminToken)
    let unauthorized = try Self.curlStatus(port, "/admin/status", ca: ca, token: nil)
    // Plain HTTP to the TLS port is closed without an HTTP answer.
    let plain = try? send(
      "GET", "/admin/status", to: port, headers: [("Authorization", "Bearer \(TestConfig.adminToken)")], timeout: 5)

    #expect(authorized.0 == 0 && authorized.1 == "200", "\(authorized)")
    #expect(unauthorized.0 == 0 && unauthorized.1 == "401", "\(unauthorized)")
    #expect(plain == nil, "\(String(describing: plain?.status))")
  }

  @Test func theAdminCommandVerifiesAnHTTPSAdminListener() throws {
    let certificates = try Certificates()
    let gateway = try GatewayProcess(config: Self.config(certificates))
    defer { gateway.stopExpectingCleanExit() }
    let port = try #require(gateway.adminPort())
    let base = ["--url", "https://localhost:\(port)", "--token", TestConfig.adminToken]

    let trusted = try runAdmin(base + ["--ca", certificates.path + "/ca.pem", "--json", "status"])
    let untrusted = try runAdmin(base + ["status"])
    let otherCA = try runAdmin(base + ["--ca", certificates.path + "/other-ca.pem", "status"])
    let insecure = try runAdmin(base + ["--insecure", "--json", "status"])

    #expect(trusted.status == 0, "\(trusted.stderr)")
    #expect((try? trusted.json())?["version"] != nil, "\(trusted.stdout)")
    #expect(untrusted.status == 1)
    #expect(untrusted.stderr.contains("certificate verification failed"), "\(untrusted.stderr)")
    #expect(untrusted.stderr.contains("--ca FILE"), "\(untrusted.stderr)")
    #expect(otherCA.status == 1 && otherCA.stderr.contains("certificate verification failed"), "\(otherCA.stderr)")
    #expect(insecure.status == 0, "\(insecure.stderr)")
    #expect(insecure.stderr.contains("warning: --insecure"), "\(insecure.stderr)")
    #expect((try? insecure.json())?["version"] != nil, "\(insecure.stdout)")
  }

  /// The certificate is checked against the URL's host, for replicas reached by address
  /// too: 127.0.0.1 and localhost are in the test certificate, alt.test is not.
  @Test func theAdminCommandChecksTheHostName() throws {
    let certificates = try Certificates()
    let gateway = try GatewayProcess(config: Self.config(certificates))
    defer { gateway.stopExpectingCleanExit() }
    let port = try #require(gateway.adminPort())
    let ca = ["--ca", certificates.path + "/ca.pem", "--token", TestConfig.adminToken]

    let byAddress = try runAdmin(ca + ["--url", "https://127.0.0.1:\(port)", "status"])
    let replica = try runAdmin(
      ca + ["--url", "https://localhost:\(port)", "--replicas", "127.0.0.1:\(port)", "status"])
    let wrongName = try runAdmin(
      ca + ["--url", "https://alt.test:\(port)", "--replicas", "127.0.0.1:\(port)", "status"])

    #expect(byAddress.status == 0, "\(byAddress.stderr)")
    #expect(replica.status == 0, "\(replica.stderr)")
    #expect(wrongName.status == 1 && wrongName.stderr.contains("verification failed"), "\(wrongName.stderr)")
  }

  @Test func checkLoadsTheAdminCertificateFiles() throws {
    let certificates = try Certificates()
    func check(_ config: [String: Any]) throws -> (Int32, String) {
      let text = String(decoding: try JSONSerialization.data(withJSONObject: config), as: UTF8.self)
      let result = try LifecycleTests.runCheck(["--config", "config.json"], config: text)
      return (result.status, result.err)
    }
    var noCert = Self.config(certificates)
    noCert["admin"] = [
      "listen": "127.0.0.1:0", "token": TestConfig.adminToken, "tls": ["key": certificates.path + "/server.key"],
    ]

    let valid = try check(Self.config(certificates))
    let missingFile = try check(Self.config(certificates, cert: "none.pem"))
    let missingKey = try check(noCert)

    #expect(valid.0 == 0, "\(valid.1)")
    #expect(missingFile.0 == 1 && missingFile.1.hasPrefix("admin.tls: "), "\(missingFile.1)")
    #expect(missingFile.1.contains("none.pem"), "\(missingFile.1)")
    #expect(missingKey.0 == 1 && missingKey.1.hasPrefix("admin.tls.cert: "), "\(missingKey.1)")
  }

  /// A reload that adds `admin.tls` applies to the next admin connection.
  @Test func aReloadTurnsAdminTLSOn() throws {
    let certificates = try Certificates()
    let gateway = try GatewayProcess(config: TestConfig.withAdmin(TestConfig.passThrough(to: 3000)))
    defer { gateway.stopExpectingCleanExit() }
    let port = try #require(gateway.adminPort())

    try gateway.rewriteConfig(Self.config(certificates))
    let reloaded = try gateway.admin().request("POST", "/admin/reload")
    let overTLS = try Self.curlStatus(
      port, "/admin/status", ca: certificates.path + "/ca.pem", token: TestConfig.adminToken)

    #expect(reloaded.status == 200)
    #expect(overTLS.0 == 0 && overTLS.1 == "200", "\(overTLS)")
  }
}
