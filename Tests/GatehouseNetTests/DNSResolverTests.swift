import Dispatch
import Foundation
import GatehouseResolver
import Glibc
import Synchronization
import Testing

@testable import GatehouseNet

/// `DNSResolver` on a real event loop against a real `dnsmasq` on 127.0.0.1 (answering from a
/// hosts file of ours, TTL 1), a UDP port that swallows queries, and no server at all. Every
/// wait is bounded; each dnsmasq is killed when its test ends.
@Suite(.serialized, .timeLimit(.minutes(2))) struct DNSResolverTests {
  static let hosts = """
    127.0.0.2 api.test
    127.0.0.3 api.test
    ::1 api.test
    127.0.0.9 v4only.test

    """
  static let apiTest: Set = ["127.0.0.2", "127.0.0.3", "::1"]

  @Test func resolvesAAndAAAARecordsWithTheirTTLs() throws {
    let dnsmasq = try DnsmasqProcess(hosts: Self.hosts)
    defer { dnsmasq.stop() }
    let harness = try ResolverHarness(settings: dnsmasq.settings)
    defer { harness.shutdown() }
    let baseline = try harness.registrationCount()

    // dnsmasq turns the order of a name's addresses from one answer to the next; the resolver
    // keeps A records before AAAA records.
    let addresses = try harness.resolve("api.test").get()
    #expect(Set(addresses.map(\.text)) == Self.apiTest)
    #expect(addresses.map(\.family) == [.ipv4, .ipv4, .ipv6])
    #expect(addresses.allSatisfy { $0.ttl == 1 })
    #expect(addresses[0].socketAddress(port: 8080).description == "\(addresses[0].text):8080")
    #expect(addresses[2].socketAddress(port: 8080).description == "[::1]:8080")

    // A name with A records only: the AAAA query's empty answer does not fail the lookup.
    let v4only = try harness.resolve("v4only.test").get()
    #expect(v4only.map(\.text) == ["127.0.0.9"])

    // Idle again: no lookup pending, c-ares's sockets closed and deregistered, no timer left.
    #expect(try harness.pendingCount() == 0)
    #expect(waitUntil { (try? harness.registrationCount()) == baseline })

    // With /etc/hosts read first (the default), a name it lacks still goes to the server.
    var withHostsFile = dnsmasq.settings
    withHostsFile.usesHostsFile = true
    let second = try ResolverHarness(settings: withHostsFile)
    defer { second.shutdown() }
    #expect(Set(try second.resolve("api.test").get().map(\.text)) == Self.apiTest)
  }

  @Test func aChangedHostsFileIsSeenAfterSIGHUP() throws {
    let dnsmasq = try DnsmasqProcess(hosts: Self.hosts)
    defer { dnsmasq.stop() }
    let harness = try ResolverHarness(settings: dnsmasq.settings)
    defer { harness.shutdown() }

    #expect(Set(try harness.resolve("api.test").get().map(\.text)) == Self.apiTest)
    try dnsmasq.replaceHosts("127.0.0.4 api.test\n::2 api.test\n")
    let answer = try harness.resolve("api.test").get()
    #expect(answer.map(\.text) == ["127.0.0.4", "::2"])
    #expect(answer.allSatisfy { $0.ttl == 1 })
  }

  @Test func unknownAndRefusedNamesFailWithTheirErrors() throws {
    let dnsmasq = try DnsmasqProcess(hosts: Self.hosts)
    defer { dnsmasq.stop() }
    let harness = try ResolverHarness(settings: dnsmasq.settings)
    defer { harness.shutdown() }

    // dnsmasq answers NXDOMAIN under .test (`--local=/test/`) and REFUSED elsewhere (it has no
    // upstream). c-ares 1.18 takes a REFUSED (or SERVFAIL) answer as a reason to try the next
    // server, and when none is left reports that none could be contacted.
    #expect(harness.resolve("nope.test").error == .noRecords)
    let refused = harness.resolve("elsewhere.example").error
    guard case .serverFailure = refused else {
      Issue.record("a REFUSED answer gave \(String(describing: refused))")
      return
    }
  }

  @Test func aTruncatedAnswerIsFetchedAgainOverTCP() throws {
    // 60 A records do not fit the 512 bytes of a UDP answer without EDNS: dnsmasq sets TC and
    // c-ares asks again over TCP, a socket that first wants writing (the connect), then reading.
    let many = (1...60).map { "127.0.1.\($0) many.test\n" }.joined()
    let dnsmasq = try DnsmasqProcess(hosts: many)
    defer { dnsmasq.stop() }
    let harness = try ResolverHarness(settings: dnsmasq.settings)
    defer { harness.shutdown() }

    // All 60 can only have come over TCP: the UDP answer held as many as fit, with TC set.
    let addresses = try harness.resolve("many.test").get()
    #expect(addresses.count == 60)
    #expect(Set(addresses.map(\.text)) == Set((1...60).map { "127.0.1.\($0)" }))
  }

  @Test func aServerThatNeverAnswersTimesOutAfterItsTries() throws {
    let blackHole = try SilentUDPPort()
    defer { blackHole.close() }
    let settings = DNSResolver.Settings(
      servers: ["127.0.0.1:\(blackHole.port)"], timeoutMs: 200, tries: 2, searchDomains: [], usesHostsFile: false)
    let harness = try ResolverHarness(settings: settings)
    defer { harness.shutdown() }
    let baseline = try harness.registrationCount()

    let started = ContinuousClock.now
    let error = harness.resolve("slow.test").error
    let elapsed = ContinuousClock.now - started
    #expect(error == .timedOut)
    // 200 ms for the first try, 400 ms for the second (c-ares doubles each round): the timer
    // drove the retransmit, and nothing waited much longer.
    #expect(elapsed >= .milliseconds(550), "timed out after \(elapsed)")
    #expect(elapsed < .seconds(5), "timed out after \(elapsed)")
    // Two tries of the A and the AAAA query.
    #expect(blackHole.datagramsReceived() == 4)
    #expect(waitUntil { (try? harness.registrationCount()) == baseline })
  }

  @Test func ipLiteralsAndLocalhostNeedNoServer() throws {
    let settings = DNSResolver.Settings(
      servers: ["127.0.0.1:1"], timeoutMs: 5000, tries: 1, searchDomains: [], usesHostsFile: false)
    let harness = try ResolverHarness(settings: settings)
    defer { harness.shutdown() }
    let baseline = try harness.registrationCount()

    let v4 = try harness.resolve("10.1.2.3").get()
    #expect(v4 == [ResolvedAddress(address: try SocketAddress(parsing: "10.1.2.3:0"), family: .ipv4, ttl: nil)])
    #expect(try harness.resolve("::1").get().map(\.text) == ["::1"])
    #expect(try harness.resolve("[2001:db8::7]").get().map(\.text) == ["2001:db8::7"])
    #expect(try harness.resolve("2001:db8::7").get().first?.family == .ipv6)
    let localhost = try harness.resolve("LocalHost.").get()
    #expect(localhost.map(\.text) == ["127.0.0.1", "::1"])
    #expect(localhost.allSatisfy { $0.ttl == nil })
    // Names c-ares cannot encode fail before anything is sent.
    #expect(harness.resolve("").error == .badName)
    #expect(harness.resolve("a..b").error == .badName)
    #expect(harness.resolve(String(repeating: "x", count: 64) + ".test").error == .badName)
    #expect(try harness.registrationCount() == baseline)
    #expect(try harness.pendingCount() == 0)
  }

  @Test func closeAndReleaseCancelPendingLookups() throws {
    let blackHole = try SilentUDPPort()
    defer { blackHole.close() }
    let settings = DNSResolver.Settings(
      servers: ["127.0.0.1:\(blackHole.port)"], timeoutMs: 5000, tries: 3, searchDomains: [], usesHostsFile: false)
    let harness = try ResolverHarness(settings: settings)
    defer { harness.shutdown() }
    let baseline = try harness.registrationCount()

    // close(): the pending lookup completes with .cancelled, at once, and once.
    let closed = harness.startResolving("slow.test")
    #expect(waitUntil { blackHole.datagramsReceived() >= 2 })
    #expect(try harness.pendingCount() == 1)
    #expect(try harness.registrationCount() > baseline)
    try harness.close()
    #expect(closed.wait() == .failure(.cancelled))
    #expect(try harness.registrationCount() == baseline)
    #expect(harness.resolve("later.test").error == .cancelled)
    #expect(try harness.resolve("10.0.0.1").get().map(\.text) == ["10.0.0.1"])

    // Releasing a resolver with a lookup pending does the same.
    let second = try ResolverHarness(settings: settings)
    defer { second.shutdown() }
    let released = second.startResolving("slow.test")
    #expect(waitUntil { blackHole.datagramsReceived() >= 2 })
    try second.release()
    #expect(released.wait() == .failure(.cancelled))
    #expect(released.calls.load(ordering: .relaxed) == 1)
  }

  @Test func aStoppingLoopCancelsPendingLookups() throws {
    let blackHole = try SilentUDPPort()
    defer { blackHole.close() }
    let settings = DNSResolver.Settings(
      servers: ["127.0.0.1:\(blackHole.port)"], timeoutMs: 5000, tries: 3, searchDomains: [], usesHostsFile: false)
    let harness = try ResolverHarness(settings: settings)
    let pending = harness.startResolving("slow.test")
    #expect(waitUntil { blackHole.datagramsReceived() >= 2 })
    harness.shutdown()
    #expect(pending.wait() == .failure(.cancelled))
  }

  @Test func theDefaultServersAreResolvConfs() throws {
    let harness = try ResolverHarness(settings: DNSResolver.Settings())
    defer { harness.shutdown() }
    let text = (try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) ?? ""
    let named = text.split(separator: "\n").compactMap { line -> String? in
      let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
      guard words.count >= 2, words[0] == "nameserver" else { return nil }
      return words[1].contains(":") ? "[\(words[1])]:53" : "\(words[1]):53"
    }
    #expect(try harness.servers().map(\.description) == (named.isEmpty ? ["127.0.0.1:53"] : named))
  }

  @Test func settingsAreChecked() throws {
    #expect(throws: DNSResolverSetupError.self) {
      _ = try ResolverHarness(settings: DNSResolver.Settings(servers: ["dns.example:53"]))
    }
    #expect(throws: DNSResolverSetupError.self) {
      _ = try ResolverHarness(settings: DNSResolver.Settings(servers: []))
    }
    #expect(throws: DNSResolverSetupError.self) {
      _ = try ResolverHarness(settings: DNSResolver.Settings(timeoutMs: 0))
    }
    let harness = try ResolverHarness(settings: DNSResolver.Settings(servers: ["192.0.2.1", "[2001:db8::53]:5353"]))
    defer { harness.shutdown() }
    #expect(try harness.servers().map(\.description) == ["192.0.2.1:53", "[2001:db8::53]:5353"])
  }
}

// MARK: - Support

/// One resolution's outcome, filled in on the loop and waited for (at most 15 s) by the test.
final class ResolutionOutcome: Sendable {
  private let result = Mutex<Result<[ResolvedAddress], DNSError>?>(nil)
  let calls = Atomic<Int>(0)
  private let done = DispatchSemaphore(value: 0)

  func complete(_ outcome: Result<[ResolvedAddress], DNSError>) {
    result.withLock { $0 = outcome }
    calls.add(1, ordering: .relaxed)
    done.signal()
  }

  /// The result, or `.failed(status: -1)` if none came in time; waits only until the first.
  func wait() -> Result<[ResolvedAddress], DNSError> {
    if let known = result.withLock({ $0 }) { return known }
    guard done.wait(timeout: .now() + 15) == .success else {
      Issue.record("no completion within 15 s")
      return .failure(.failed(status: -1))
    }
    return result.withLock { $0 }!
  }

  var error: DNSError? {
    if case .failure(let error) = wait() { return error }
    return nil
  }
}

/// A `DNSResolver` on a loop of its own, with blocking helpers for tests.
final class ResolverHarness: Sendable {
  let group: EventLoopGroup
  let loop: EventLoop
  let resolver: LoopConfined<DNSResolver?>

  init(settings: DNSResolver.Settings) throws {
    group = try EventLoopGroup(loopCount: 1)
    loop = group.next()
    let loop = loop
    do {
      resolver = try onLoop(loop) { LoopConfined(try DNSResolver(loop: loop, settings: settings)) }
    } catch {
      group.shutdown()
      throw error
    }
  }

  func shutdown() {
    group.shutdown()
  }

  /// Starts a resolution on the loop; the outcome says when it completed.
  func startResolving(_ host: String) -> ResolutionOutcome {
    let outcome = ResolutionOutcome()
    let resolver = resolver
    loop.execute {
      guard let value = resolver.value else {
        outcome.complete(.failure(.failed(status: -2)))
        return
      }
      value.resolve(host: host) { outcome.complete($0) }
    }
    return outcome
  }

  func resolve(_ host: String) -> ResolutionOutcome {
    let outcome = startResolving(host)
    _ = outcome.wait()
    return outcome
  }

  func close() throws {
    let resolver = resolver
    try onLoop(loop) { resolver.value?.close() }
  }

  /// Drops the resolver on its loop, without closing it first.
  func release() throws {
    let resolver = resolver
    try onLoop(loop) { resolver.value = nil }
  }

  func pendingCount() throws -> Int {
    let resolver = resolver
    return try onLoop(loop) { resolver.value?.pendingCount ?? -1 }
  }

  func servers() throws -> [SocketAddress] {
    let resolver = resolver
    return try onLoop(loop) { resolver.value?.servers ?? [] }
  }

  func registrationCount() throws -> Int {
    let loop = loop
    return try onLoop(loop) { loop.registrationCount }
  }
}

extension ResolutionOutcome {
  /// The addresses, or the error thrown.
  func get() throws -> [ResolvedAddress] {
    try wait().get()
  }
}

/// A UDP socket on 127.0.0.1 that takes queries and never answers them (so they time out
/// instead of being refused with ICMP, as a closed port's would be).
final class SilentUDPPort: @unchecked Sendable {
  private(set) var fd: Int32
  let port: UInt16
  private let received = Mutex(0)

  init() throws {
    let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw TestFailure(description: "socket: \(errno)") }
    let bound = SocketAddress.loopback(port: 0).withSockAddr { bind(fd, $0, $1) }
    var storage = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    let named = withUnsafeMutablePointer(to: &storage) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    guard bound == 0, named == 0, let address = SocketAddress(storage: storage) else {
      Glibc.close(fd)
      throw TestFailure(description: "bind/getsockname: \(errno)")
    }
    self.fd = fd
    port = address.port
  }

  /// Datagrams that arrived so far (read, without blocking, and counted).
  func datagramsReceived() -> Int {
    received.withLock { count in
      var buffer = [UInt8](repeating: 0, count: 1500)
      while buffer.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }) >= 0 {
        count += 1
      }
      return count
    }
  }

  func close() {
    if fd >= 0 { Glibc.close(fd) }
    fd = -1
  }
}

/// A dnsmasq answering for the names in a hosts file of ours (TTL 1), NXDOMAIN for other names
/// under .test, REFUSED for the rest; killed by `stop()`.
final class DnsmasqProcess: @unchecked Sendable {
  static let binary = "/usr/sbin/dnsmasq"

  private(set) var port: UInt16 = 0
  let directory: String
  var hostsPath: String { directory + "/hosts" }
  var logPath: String { directory + "/dnsmasq.log" }
  private var pid: pid_t = 0

  init(hosts: String) throws {
    guard access(Self.binary, X_OK) == 0 else {
      throw TestFailure(
        description:
          "dnsmasq is not installed at \(Self.binary): apt-get install dnsmasq-base (Scripts/install-deps.sh does)"
      )
    }
    directory =
      FileManager.default.temporaryDirectory.path
      + "/gatehouse-dnsmasq-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try hosts.write(toFile: directory + "/hosts", atomically: true, encoding: .utf8)
    // The port is one the kernel just gave a UDP socket; by the time dnsmasq binds it (UDP and
    // TCP) another test's listener may hold it, and dnsmasq then exits at once. A few tries with
    // fresh ports; each failed try's log is kept for the report (the directory goes with stop()).
    var logs: [String] = []
    for _ in 0..<3 {
      let probe = try SilentUDPPort()
      port = probe.port
      probe.close()
      truncate(logPath, 0)
      pid = try spawn([
        Self.binary, "--no-daemon", "-C", "/dev/null", "--no-resolv", "--no-hosts", "--addn-hosts=\(hostsPath)",
        "--local-ttl=1", "--port=\(port)", "--listen-address=127.0.0.1", "--bind-interfaces", "--local=/test/",
        "--user=root", "--pid-file=", "--log-facility=-", "--log-queries",
      ])
      // Generous: on a loaded 2-core machine a process start can take seconds.
      let ready = waitUntil(timeout: .seconds(30)) { !isRunning || (hostsReads >= 1 && tcpAccepts(port: port)) }
      if ready, isRunning { return }
      logs.append("port \(port): \(log)")
      terminate()
    }
    try? FileManager.default.removeItem(atPath: directory)
    throw TestFailure(description: "dnsmasq did not start; its logs:\n\(logs.joined(separator: "\n"))")
  }

  /// Starts `arguments` with stdout and stderr into the log. Not Foundation's `Process`: it
  /// passes on the signal mask of the calling thread, and a test's thread (a dispatch worker)
  /// blocks SIGHUP and SIGTERM, which dnsmasq would then never see.
  private func spawn(_ arguments: [String]) throws -> pid_t {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var child: pid_t = 0
    let status = posix_spawn(&child, arguments[0], &actions, &attributes, argv, environ)
    guard status == 0 else { throw TestFailure(description: "posix_spawn \(arguments[0]): \(status)") }
    return child
  }

  var settings: DNSResolver.Settings {
    DNSResolver.Settings(
      servers: ["127.0.0.1:\(port)"], timeoutMs: 1000, tries: 3, searchDomains: [], usesHostsFile: false)
  }

  var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

  /// How often dnsmasq has read the hosts file (it logs each read).
  var hostsReads: Int { log.components(separatedBy: "read \(hostsPath)").count - 1 }

  /// Whether the child has not exited (reaping it if it has).
  private var isRunning: Bool {
    guard pid > 0 else { return false }
    var status: Int32 = 0
    if waitpid(pid, &status, WNOHANG) == 0 { return true }
    pid = 0
    return false
  }

  /// Writes a new hosts file, sends SIGHUP and waits until dnsmasq has read the file again.
  func replaceHosts(_ hosts: String) throws {
    let before = hostsReads
    try hosts.write(toFile: hostsPath, atomically: true, encoding: .utf8)
    kill(pid, SIGHUP)
    guard waitUntil(timeout: .seconds(30), { hostsReads > before }) else {
      throw TestFailure(description: "dnsmasq did not reread its hosts file; its log:\n\(log)")
    }
  }

  /// SIGTERM, then SIGKILL if it has not exited within 5 s; removes its files.
  func stop() {
    terminate()
    try? FileManager.default.removeItem(atPath: directory)
  }

  private func terminate() {
    if isRunning {
      kill(pid, SIGTERM)
      if !waitUntil(timeout: .seconds(5), { !isRunning }) {
        kill(pid, SIGKILL)
        waitUntil(timeout: .seconds(5)) { !isRunning }
      }
    }
  }
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` now (one attempt).
private func tcpAccepts(port: UInt16) -> Bool {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
  guard fd >= 0 else { return false }
  defer { close(fd) }
  return SocketAddress.loopback(port: port).withSockAddr { Glibc.connect(fd, $0, $1) } == 0
}
