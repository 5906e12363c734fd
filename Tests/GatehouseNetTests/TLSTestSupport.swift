import Foundation
import Glibc

@testable import GatehouseNet

/// Certificates for the TLS tests, made once per test process by the `openssl` command line in a temporary
/// directory: a test CA; server certificates for localhost/127.0.0.1 (valid, expired, wrong host, a wildcard
/// for SNI) signed by it; one from an unknown CA; a client certificate. All server certificates share a key.
final class TestCertificates: Sendable {
  let directory: String

  var caPath: String { directory + "/ca.pem" }
  var serverKeyPath: String { directory + "/server.key" }
  var serverCertificatePath: String { directory + "/server.pem" }
  var expiredCertificatePath: String { directory + "/expired.pem" }
  var wrongHostCertificatePath: String { directory + "/wronghost.pem" }
  var wildcardCertificatePath: String { directory + "/wildcard.pem" }
  var unknownCACertificatePath: String { directory + "/unknownca.pem" }
  var clientCertificatePath: String { directory + "/client.pem" }
  var clientKeyPath: String { directory + "/client.key" }

  private init(directory: String) {
    self.directory = directory
  }

  /// Made on first use; every test that needs certificates shares them.
  static let shared: Result<TestCertificates, TestFailure> = {
    var template = Array("/tmp/gatehouse-tls-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { return .failure(TestFailure(description: "mkdtemp: \(errno)")) }
    let directory = String(cString: made)
    // EC P-256 keys: quick to make, and what modern deployments use.
    let script = """
      set -e
      cd '\(directory)'
      key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
      ca() {
        key "$1.key"
        openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 30 -subj "/CN=$2" \\
          -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
      }
      sign() {  # out, key, subject, ca, days, extensions
        openssl req -new -key "$2" -out "$1.csr" -subj "/CN=$3" 2>/dev/null
        printf '%b' "$6" > "$1.ext"
        openssl x509 -req -in "$1.csr" -CA "$4.pem" -CAkey "$4.key" -CAcreateserial -days "$5" \\
          -extfile "$1.ext" -out "$1" 2>/dev/null
      }
      ca ca 'Gatehouse Test CA'
      ca otherca 'Unknown Test CA'
      key server.key
      key client.key
      SERVER='subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n'
      sign server.pem server.key localhost ca 30 "$SERVER"
      sign expired.pem server.key localhost ca -1 "$SERVER"
      sign unknownca.pem server.key localhost otherca 30 "$SERVER"
      sign wronghost.pem server.key wrong.example ca 30 \\
        'subjectAltName=DNS:wrong.example\\nextendedKeyUsage=serverAuth\\n'
      sign wildcard.pem server.key '*.sni.test' ca 30 \\
        'subjectAltName=DNS:*.sni.test\\nextendedKeyUsage=serverAuth\\n'
      sign client.pem client.key test-client ca 30 'extendedKeyUsage=clientAuth\\n'
      """
    let (status, output) = runShell(script)
    guard status == 0 else {
      return .failure(TestFailure(description: "making certificates failed (\(status)): \(output)"))
    }
    return .success(TestCertificates(directory: directory))
  }()

  static func get() throws -> TestCertificates {
    try shared.get()
  }
}

/// Runs `/bin/sh -c script`, returning its exit status and combined output. Scripts bound their own run time
/// (`timeout`), so this wait is bounded too.
func runShell(_ script: String) -> (status: Int32, output: String) {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: "/bin/sh")
  process.arguments = ["-c", script]
  let pipe = Pipe()
  process.standardOutput = pipe
  process.standardError = pipe
  process.standardInput = FileHandle.nullDevice
  do {
    try process.run()
  } catch {
    return (-1, "cannot run /bin/sh: \(error)")
  }
  let data = pipe.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// One line describing a connection's TLS session, for assertions: `alpn|sni|subject|version`.
func describe(_ info: TLSConnectionInfo?) -> String {
  guard let info else { return "none" }
  return "\(info.applicationProtocol ?? "-")|\(info.serverName ?? "-")|\(info.peerCertificateSubject ?? "-")|"
    + info.protocolVersion
}

/// A TLS echo server on `loop`: each accepted connection handshakes with `context`, echoes, and logs
/// "accept", "info:<describe>" at its first read, and the usual `RecordingDelegate` entries.
func startTLSEchoServer(
  on loop: EventLoop, context: TLSContext, log: EventLog,
  configure: (@Sendable (RecordingDelegate) -> Void)? = nil
) throws -> (port: UInt16, listener: LoopConfined<TCPListener>) {
  let listener = try TCPListener(address: .loopback(port: 0))
  let port = listener.localPort
  let box = LoopConfined(listener)
  let contextBox = LoopConfined(context)
  try onLoop(loop) {
    try box.value.startAccepting(on: loop) { socket in
      let delegate = RecordingDelegate(log: log)
      delegate.echo = true
      delegate.keepBytes = false
      var logged = false
      delegate.onRead = { connection, _ in
        if !logged {
          logged = true
          log.append("info:" + describe(connection.tlsInfo))
        }
      }
      configure?(delegate)
      do {
        _ = try BufferedConnection(socket: socket, loop: loop, delegate: delegate, tls: contextBox.value)
        log.append("accept")
      } catch {
        log.append("accept-failed")
      }
    }
  }
  return (port, box)
}

/// Connects a TLS client on `loop` that sends `payload` once connected, collects `expectedBack` bytes (kept
/// in `log`), then closes. Logs "connect", "info:<describe>" and the close reason.
func startTLSClient(
  on loop: EventLoop, port: UInt16, options: TLSClientOptions, log: EventLog, payload: [UInt8],
  expectedBack: Int, keepBytes: Bool = true
) throws {
  let optionsBox = LoopConfined(options)
  try onLoop(loop) {
    let delegate = RecordingDelegate(log: log)
    delegate.keepBytes = keepBytes
    delegate.onConnect = { connection in
      log.append("info:" + describe(connection.tlsInfo))
      if !payload.isEmpty { connection.write(payload) }
    }
    delegate.onRead = { connection, total in
      if total >= expectedBack { connection.close() }
    }
    _ = try BufferedConnection.connect(
      to: .loopback(port: port), on: loop, timeout: .seconds(10), delegate: delegate, tls: optionsBox.value)
  }
}

/// A deterministic payload of `count` bytes.
func pattern(_ count: Int, seed: Int = 7) -> [UInt8] {
  (0..<count).map { UInt8(truncatingIfNeeded: $0 &* seed &+ $0 >> 8) }
}
