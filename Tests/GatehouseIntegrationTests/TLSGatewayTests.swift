import Foundation
import Testing

/// TLS through the real binary (issue: TLS on both sides): certificates made at test time
/// with the `openssl` command line, `curl` as the TLS client, `openssl s_server` as an https
/// upstream.
@Suite(.serialized) struct TLSGatewayTests {
  /// A test CA and certificates for localhost, made in a temp directory.
  final class Certificates {
    let directory: URL
    var path: String { directory.path }

    init() throws {
      directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-tls-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      try run(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=Gatehouse Test CA")
      try run(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-ca.key", "-out",
        "other-ca.pem", "-days", "2", "-subj", "/CN=Another CA")
      try FileManager.default.createDirectory(atPath: path + "/x", withIntermediateDirectories: true)
      try Data("subjectAltName=DNS:localhost,IP:127.0.0.1".utf8).write(to: directory.appendingPathComponent("ext.cnf"))
      try run(
        "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
      try run(
        "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
      try Data("subjectAltName=DNS:alt.test".utf8).write(to: directory.appendingPathComponent("alt.cnf"))
      try run(
        "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "alt.key", "-out", "alt.csr", "-subj",
        "/CN=alt.test")
      try run(
        "openssl", "x509", "-req", "-in", "alt.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "alt.pem", "-days", "2", "-extfile", "alt.cnf")
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    /// The `tls` member of a listener serving the localhost certificate.
    var serverTLS: [String: String] {
      ["cert": path + "/server.pem", "key": path + "/server.key"]
    }

    /// A `listen` list of one TLS listener on a free port, with `extra` members.
    func tlsListen(_ extra: [String: Any] = [:]) -> [[String: Any]] {
      var listener: [String: Any] = ["address": "127.0.0.1:0", "tls": serverTLS]
      for (key, value) in extra { listener[key] = value }
      return [listener]
    }

    func run(_ arguments: String...) throws {
      let process = Process()
      process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
      process.arguments = arguments
      process.currentDirectoryURL = directory
      process.standardOutput = FileHandle.nullDevice
      process.standardError = FileHandle.nullDevice
      try process.run()
      process.waitUntilExit()
      guard process.terminationStatus == 0 else {
        throw TestSocketError.malformed("\(arguments.joined(separator: " ")) failed")
      }
    }
  }

  /// Runs `curl` and returns (exit status, body).
  static func curl(_ arguments: [String]) throws -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["curl", "-s", "-m", "10"] + arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
  }

  /// `check` reads the certificate, key and CA files `serve` would load, so a pre-flight
  /// `check` catches a file that would stop the gateway from starting.
  @Test func checkLoadsTheCertificateFilesServeWould() throws {
    let certificates = try Certificates()
    func check(listenTLS: [String: String]?, upstreamCA: String? = nil) throws -> (Int32, String) {
      var config = TestConfig.passThrough(to: 3000)
      var listen: [String: Any] = ["address": "127.0.0.1:0"]
      if let listenTLS { listen["tls"] = listenTLS }
      config["listen"] = [listen]
      if let upstreamCA {
        config["upstreams"] = ["api": ["url": "https://127.0.0.1:3000", "tls": ["ca": upstreamCA]]]
      }
      let text = String(decoding: try JSONSerialization.data(withJSONObject: config), as: UTF8.self)
      let result = try LifecycleTests.runCheck(["--config", "config.json"], config: text)
      return (result.status, result.err)
    }
    let good = certificates.serverTLS

    let valid = try check(listenTLS: good, upstreamCA: certificates.path + "/ca.pem")
    let missing = try check(listenTLS: ["cert": certificates.path + "/none.pem", "key": good["key"]!])
    let mismatched = try check(listenTLS: ["cert": good["cert"]!, "key": certificates.path + "/alt.key"])
    let missingCA = try check(listenTLS: nil, upstreamCA: certificates.path + "/no-ca.pem")

    #expect(valid.0 == 0, "\(valid.1)")
    #expect(missing.0 == 1 && missing.1.hasPrefix("listen[0].tls: "), "\(missing.1)")
    #expect(mismatched.0 == 1 && mismatched.1.hasPrefix("listen[0].tls: "), "\(mismatched.1)")
    #expect(missingCA.0 == 1 && missingCA.1.hasPrefix("upstreams.api.tls: "), "\(missingCA.1)")
  }

  /// A reload whose certificate cannot be loaded is refused with the error `check` prints
  /// for it (`listen[0].tls: …`), and the old certificate goes on serving.
  @Test func aReloadWithAMissingCertificateIsRefusedInCheckStyle() throws {
    let certificates = try Certificates()
    let backend = try TestBackend(always: .respond(.text("ok")))
    defer { backend.stop() }
    func config(certificate: String) -> [String: Any] {
      var config = TestConfig.withAdmin(TestConfig.passThrough(to: backend.port))
      config["listen"] = [
        ["address": "127.0.0.1:0", "tls": ["cert": certificate, "key": certificates.path + "/server.key"]]
      ]
      return config
    }
    let gateway = try GatewayProcess(config: config(certificate: certificates.path + "/server.pem"))
    defer { gateway.stopExpectingCleanExit() }

    try gateway.rewriteConfig(config(certificate: certificates.path + "/none.pem"))
    let refused = try gateway.admin(token: TestConfig.adminToken).request("POST", "/admin/reload")

    #expect(refused.status == 400)
    let errors = (try refused.jsonObject())["errors"] as? [String] ?? []
    #expect(errors.count == 1 && errors[0].hasPrefix("listen[0].tls: "), "\(errors)")
    let served = try Self.curl(["-k", "https://127.0.0.1:\(gateway.port)/after"])
    #expect(served.0 == 0 && served.1 == "ok", "\(served)")
  }

  @Test func tlsListenerServesAndPlaintextToItIsClosedCleanly() throws {
    let certificates = try Certificates()
    let backend = try TestBackend(always: .respond(.text("hello over tls")))
    defer { backend.stop() }
    var config = TestConfig.passThrough(to: backend.port)
    config["listen"] = certificates.tlsListen()
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let (status, body) = try Self.curl([
      "--cacert", certificates.path + "/ca.pem", "https://localhost:\(gateway.port)/x",
    ])
    #expect(status == 0)
    #expect(body == "hello over tls")
    #expect(backend.requests.last?.head.value("X-Forwarded-Proto") == "https")

    // Plain HTTP to the TLS port: refused without an answer, and the next TLS client is fine.
    // (The gateway answers the bytes that are not a TLS hello by closing: no HTTP answer.)
    let plain = try? send("GET", "/x", to: gateway.port, timeout: 5)
    #expect(plain == nil || plain?.status != 200)
    let (again, _) = try Self.curl(["--cacert", certificates.path + "/ca.pem", "https://localhost:\(gateway.port)/x"])
    #expect(again == 0)
  }

  @Test func sniChoosesTheCertificateForTheRequestedName() throws {
    let certificates = try Certificates()
    let backend = try TestBackend(always: .respond(.text("named")))
    defer { backend.stop() }
    var config = TestConfig.passThrough(to: backend.port)
    config["listen"] = [
      [
        "address": "127.0.0.1:0",
        "tls": [
          "cert": certificates.path + "/server.pem", "key": certificates.path + "/server.key",
          "sni": [
            ["names": ["alt.test"], "cert": certificates.path + "/alt.pem", "key": certificates.path + "/alt.key"]
          ],
        ],
      ]
    ]
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let ca = certificates.path + "/ca.pem"
    // curl checks the certificate against the name it asked for: each succeeds only when the
    // gateway picked the matching certificate.
    let (alt, altBody) = try Self.curl([
      "--cacert", ca, "--resolve", "alt.test:\(gateway.port):127.0.0.1", "https://alt.test:\(gateway.port)/x",
    ])
    #expect(alt == 0)
    #expect(altBody == "named")
    let (main, _) = try Self.curl(["--cacert", ca, "https://localhost:\(gateway.port)/x"])
    #expect(main == 0)
  }

  /// An https upstream: another gateway with a TLS listener (the test CA's localhost
  /// certificate) and a stub route answering `{"over":"tls"}`.
  static func httpsUpstream(_ certificates: Certificates) throws -> GatewayProcess {
    var config = TestConfig.make(routes: [
      ["name": "hello", "match": ["path": "/*"], "stub": ["mode": "always", "body": ["over": "tls"]]]
    ])
    config["listen"] = certificates.tlsListen()
    return try GatewayProcess(config: config)
  }

  /// A background refresh that fails the upstream's certificate check names the cause in
  /// `/admin/upstreams`, as a client's exchange does (it used to say `reset`).
  @Test func aBackgroundRefreshThatFailsTLSNamesTheCause() throws {
    let certificates = try Certificates()
    let upstream = try Self.httpsUpstream(certificates)
    defer { upstream.stopExpectingCleanExit() }
    func config(ca: String) -> [String: Any] {
      var config = TestConfig.withAdmin(
        TestConfig.make(
          routes: [
            TestConfig.route(
              "swr", match: "/*", upstream: "secure",
              extra: ["cache": ["fresh_s": 0, "stale_while_revalidate_s": 60]])
          ],
          upstreams: ["secure": ["url": "https://localhost:\(upstream.port)", "tls": ["ca": certificates.path + ca]]]))
      config["store"] = ["path": "var/store.sqlite"]
      return config
    }
    let gateway = try GatewayProcess(config: config(ca: "/ca.pem"))
    defer { gateway.stopExpectingCleanExit() }
    let admin = try gateway.admin(token: TestConfig.adminToken)
    #expect(try send("GET", "/doc", to: gateway.port).status == 200)
    #expect(admin.waitForStoredEntries(1))

    // The upstream's certificate no longer verifies: the refresh behind the stale answer fails.
    try gateway.rewriteConfig(config(ca: "/other-ca.pem"))
    #expect(try admin.request("POST", "/admin/reload").status == 200)
    let stale = try send("GET", "/doc", to: gateway.port)
    #expect(stale.head.value("X-Gatehouse-Cache") == "STALE")
    var lastError = ""
    let named = waitUntil(timeout: 10) {
      let upstreams = (try? admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]]) ?? []
      lastError = upstreams.first { $0["name"] as? String == "secure" }?["last_error"] as? String ?? ""
      return !lastError.isEmpty
    }
    #expect(named)
    #expect(lastError.hasPrefix("TLS: "), "\(lastError)")
  }

  @Test func httpsUpstreamIsVerifiedAndABadCertificateIs502() throws {
    let certificates = try Certificates()
    let upstream = try Self.httpsUpstream(certificates)
    defer { upstream.stopExpectingCleanExit() }
    let port = upstream.port
    let config = TestConfig.withAdmin(
      TestConfig.make(
        routes: [
          TestConfig.route("good", match: "/good", upstream: "good", rewrite: "/"),
          TestConfig.route("unknown-ca", match: "/unknown-ca", upstream: "unknownCA", rewrite: "/"),
          TestConfig.route("wrong-name", match: "/wrong-name", upstream: "wrongName", rewrite: "/"),
          TestConfig.route("unverified", match: "/unverified", upstream: "unverified", rewrite: "/"),
        ],
        upstreams: [
          "good": ["url": "https://localhost:\(port)", "tls": ["ca": certificates.path + "/ca.pem"]],
          "unknownCA": ["url": "https://localhost:\(port)", "tls": ["ca": certificates.path + "/other-ca.pem"]],
          "wrongName": [
            "url": "https://127.0.0.1:\(port)",
            "tls": ["ca": certificates.path + "/ca.pem", "server_name": "other.example"],
          ],
          "unverified": ["url": "https://localhost:\(port)", "tls": ["verify": false]],
        ]))
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let good = try send("GET", "/good", to: gateway.port)
    #expect(good.status == 200)
    #expect(good.text.contains(#""over":"tls""#))
    for path in ["/unknown-ca", "/wrong-name"] {
      let refused = try send("GET", path, to: gateway.port)
      #expect(refused.status == 502, "\(path)")
      #expect(isErrorEnvelope(refused, status: 502, message: "upstream unavailable"), "\(path)")
      #expect(ErrorTests.loggedReason(gateway, path: path) == "tls_failed", "\(path)")
    }
    #expect(try send("GET", "/unverified", to: gateway.port).status == 200)
    #expect(gateway.stdoutText.contains("TLS certificate verification is off"))
    #expect(gateway.stdoutText.contains("upstream TLS failed"))
    // The admin API names the cause, not only the outcome the metrics count.
    let admin = try gateway.admin(token: TestConfig.adminToken)
    let upstreams = try admin.json("/admin/upstreams")["upstreams"] as? [[String: Any]] ?? []
    for name in ["unknownCA", "wrongName"] {
      let entry = upstreams.first { $0["name"] as? String == name }
      let lastError = entry?["last_error"] as? String ?? ""
      #expect(lastError.hasPrefix("TLS: "), "\(name): \(lastError)")
    }
  }
}
