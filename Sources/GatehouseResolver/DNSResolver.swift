import CGatehouseCares
import GatehouseNet
import Glibc

/// c-ares wants `ares_library_init` once per process before any channel is made. A global's
/// initializer runs exactly once, on first use, whichever thread gets there first.
private let caresLibraryStatus: Int32 = ares_library_init(ARES_LIB_INIT_ALL)

/// Asynchronous A and AAAA lookups with c-ares, on one `EventLoop`: no thread, and no blocking
/// `getaddrinfo`, ever.
///
/// How the loop drives c-ares: the channel is made with `ARES_OPT_SOCK_STATE_CB`, so c-ares
/// says which of its sockets (UDP, and TCP for truncated answers) it wants read or written, and
/// the resolver registers, modifies and deregisters each with the loop (level-triggered). When
/// one is ready, `ares_process_fd` reads or writes it. After every call into c-ares a loop timer
/// is set from `ares_timeout`, and firing it calls `ares_process_fd` with no descriptor, which
/// is how c-ares retransmits and times queries out. c-ares closes its sockets when no query is
/// left, so an idle resolver holds no descriptor and no timer.
///
/// Completions are always called later on the loop (`executeLater`), never inside `resolve` or
/// inside a c-ares call: c-ares calls back from within `ares_getaddrinfo`, `ares_process_fd` and
/// `ares_destroy`, and a completion that resolved again or closed the resolver right there would
/// re-enter the channel in the middle of its own bookkeeping (`ares_destroy` from a callback is
/// undefined).
///
/// Loop-confined: make, use, close and release it on its loop's thread.
public final class DNSResolver {
  /// What a resolution delivers: the addresses, IPv4 first, or why there are none.
  public typealias Completion = (Result<[ResolvedAddress], DNSError>) -> Void

  /// Where a resolver sends its queries and how patiently.
  public struct Settings: Sendable, Hashable {
    /// Name servers as `ip:port` (`[v6]:port`); a bare IP means port 53. nil: the `nameserver`
    /// lines of /etc/resolv.conf, read once when the resolver is made (127.0.0.1:53 if it has
    /// none).
    public var servers: [String]?
    /// How long the first query to a server waits for its answer, in milliseconds. c-ares
    /// doubles it in each later round over the servers, so one server and `tries` 2 give up
    /// after 3 × `timeoutMs`. Applies whatever /etc/resolv.conf's `options timeout:` says.
    public var timeoutMs: Int
    /// Rounds over all the servers before a lookup times out (resolv.conf's `attempts`, which
    /// this replaces).
    public var tries: Int
    /// Domains appended to a name with fewer dots than resolv.conf's `ndots` (then tried as
    /// given). nil: /etc/resolv.conf's `search` list; `[]`: names are asked as given only.
    public var searchDomains: [String]?
    /// Whether /etc/hosts is read before DNS is asked, in the system's order (nsswitch.conf),
    /// as getaddrinfo does. c-ares reads the file on the loop at each lookup: cheap for the
    /// usual few lines in the page cache, but a hosts file of many thousand lines would stall
    /// the loop, and then this is better off.
    public var usesHostsFile: Bool

    public init(
      servers: [String]? = nil, timeoutMs: Int = 2000, tries: Int = 2, searchDomains: [String]? = nil,
      usesHostsFile: Bool = true
    ) {
      self.servers = servers
      self.timeoutMs = timeoutMs
      self.tries = tries
      self.searchDomains = searchDomains
      self.usesHostsFile = usesHostsFile
    }
  }

  public let loop: EventLoop
  public let settings: Settings
  /// The servers queries go to, in order, as c-ares took them from `settings` or resolv.conf.
  public private(set) var servers: [SocketAddress] = []
  /// Lookups c-ares has not finished yet (a finished one's completion may still be queued).
  public private(set) var pendingCount = 0

  /// nil once closed: callbacks that c-ares makes while it tears the channel down see that.
  private var channel: ares_channel?
  /// c-ares's open sockets by descriptor, each registered with the loop.
  private var sockets: [Int32: CaresSocket] = [:]
  private var timer: TimerHandle?

  /// Makes a c-ares channel with `settings`; nothing is sent until the first `resolve`. Reads
  /// /etc/resolv.conf (and nsswitch.conf) once, here, unless `settings` name everything.
  public init(loop: EventLoop, settings: Settings = Settings()) throws(DNSResolverSetupError) {
    self.loop = loop
    self.settings = settings
    guard caresLibraryStatus == ARES_SUCCESS else {
      throw DNSResolverSetupError(
        "c-ares could not be initialized: \(String(cString: ares_strerror(caresLibraryStatus)))")
    }
    guard settings.timeoutMs > 0, settings.tries > 0 else {
      throw DNSResolverSetupError("the DNS timeout and tries must be at least 1")
    }
    let explicitServers = try settings.servers.map { texts throws(DNSResolverSetupError) in
      try texts.map { text throws(DNSResolverSetupError) in try DNSResolver.serverAddress(text) }
    }
    if let explicitServers, explicitServers.isEmpty {
      throw DNSResolverSetupError("the list of DNS servers is empty")
    }
    channel = try makeChannel()
    if let explicitServers {
      try useServers(explicitServers)
    }
    servers = currentServers()
  }

  deinit {
    close()
  }

  /// Whether `close()` has run; a closed resolver fails every lookup with `.cancelled`.
  public var isClosed: Bool { channel == nil }

  // MARK: Resolving

  /// Looks `host` up for A and AAAA records at once and calls `completion` later on the loop with
  /// every address (A records first, each family in the server's order), or the error.
  ///
  /// An IP literal (`10.0.0.1`, `::1`, `[::1]`) is its own answer, and `localhost` is 127.0.0.1
  /// and ::1 (RFC 6761): no query, no server needed, and a nil TTL. When only one of the two
  /// queries has records, its addresses are the answer, even if the other timed out or failed:
  /// c-ares 1.18 does not say which. Each address carries its own record's TTL; the A and the
  /// AAAA records are separate sets whose TTLs may differ, so whoever keeps the whole answer
  /// keeps it for the smallest.
  public func resolve(host: String, completion: @escaping Completion) {
    loop.assertInEventLoop()
    if let literal = ResolvedAddress(literal: host) {
      loop.executeLater { completion(.success([literal])) }
      return
    }
    if ResolvedAddress.isLocalhost(host) {
      // c-ares 1.18 never sends localhost to a server (RFC 6761) and finds it only in
      // /etc/hosts, so with `usesHostsFile` off it would fail the name.
      loop.executeLater { completion(.success(ResolvedAddress.localhost)) }
      return
    }
    guard let channel else {
      loop.executeLater { completion(.failure(.cancelled)) }
      return
    }
    guard !host.isEmpty, !host.utf8.contains(0) else {
      loop.executeLater { completion(.failure(.badName)) }
      return
    }
    let lookup = PendingLookup(loop: loop, resolver: self, completion: completion)
    pendingCount += 1
    var hints = ares_addrinfo_hints()
    hints.ai_family = AF_UNSPEC
    // NOSORT: c-ares would otherwise order the answer by RFC 6724, which means a connect() on
    // a new UDP socket per address, outside the loop's knowledge. We order by family instead.
    hints.ai_flags = ARES_AI_NOSORT
    // The lookup is retained for c-ares and released by the callback, which c-ares calls
    // exactly once per ares_getaddrinfo, whatever happens (also on destroy, with EDESTRUCTION).
    let argument = Unmanaged.passRetained(lookup).toOpaque()
    host.withCString { name in
      ares_getaddrinfo(
        channel, name, nil, &hints,
        { argument, status, _, info in
          let lookup = Unmanaged<PendingLookup>.fromOpaque(argument!).takeRetainedValue()
          lookup.finish(status: status, info: info)
          if let info { ares_freeaddrinfo(info) }
        }, argument)
    }
    rescheduleTimer()
  }

  /// Cancels every pending lookup (their completions get `.cancelled`, later on the loop),
  /// deregisters and closes c-ares's sockets and destroys the channel. Later lookups of names
  /// fail with `.cancelled` (IP literals and localhost still answer). Idempotent; `deinit` does
  /// the same, and so does the loop when it stops (the sockets hear `.loopStopping`). Loop
  /// thread only. Completions of lookups cancelled after the loop has stopped are not called.
  public func close() {
    guard let channel else { return }
    // First, so that what ares_destroy calls back with (closing sockets, EDESTRUCTION) finds
    // the resolver closed.
    self.channel = nil
    for socket in sockets.values {
      loop.deregister(socket.registration)
    }
    sockets.removeAll()
    if let timer {
      loop.cancelTimer(timer)
      self.timer = nil
    }
    ares_destroy(channel)
  }

  // MARK: Driving c-ares

  /// c-ares's sock_state_cb: `fileDescriptor` is to be watched for reading and/or writing, or,
  /// with neither, is about to be closed. Called from inside c-ares calls only.
  fileprivate func socketStateChanged(_ fileDescriptor: Int32, readable: Bool, writable: Bool) {
    guard channel != nil else { return }
    var interest: IOInterest = []
    if readable { interest.insert(.read) }
    if writable { interest.insert(.write) }
    if interest.isEmpty {
      // c-ares calls this before it closes the descriptor, as the loop requires.
      if let socket = sockets.removeValue(forKey: fileDescriptor) {
        loop.deregister(socket.registration)
      }
      return
    }
    if let socket = sockets[fileDescriptor] {
      guard socket.interest != interest else { return }
      do {
        try loop.modify(socket.registration, interest: interest)
        socket.interest = interest
      } catch {
        // c-ares cannot be told. Its queries on this socket end by timeout instead, and the
        // same holds below.
        assertionFailure("epoll_ctl(MOD) on a c-ares socket: \(error)")
      }
      return
    }
    let socket = CaresSocket(resolver: self, fileDescriptor: fileDescriptor, interest: interest)
    do {
      socket.registration = try loop.register(fileDescriptor: fileDescriptor, interest: interest, handler: socket)
      sockets[fileDescriptor] = socket
    } catch {
      assertionFailure("epoll_ctl(ADD) of a c-ares socket: \(error)")
    }
  }

  /// The loop's report on one of c-ares's sockets.
  fileprivate func socketReady(_ socket: CaresSocket, events: IOEvents) {
    guard let channel else { return }
    if events.contains(.loopStopping) {
      close()
      return
    }
    // An error or hang-up is handed to c-ares as readability: its read meets the error and it
    // closes the socket and moves the query on; with level triggering, not consuming it would
    // wake the loop again at once.
    let readFD = events.isDisjoint(with: [.readable, .hangup, .error]) ? ARES_SOCKET_BAD : socket.fileDescriptor
    let wantsWrite = events.contains(.writable) || (events.contains(.error) && socket.interest.contains(.write))
    let writeFD = wantsWrite ? socket.fileDescriptor : ARES_SOCKET_BAD
    ares_process_fd(channel, readFD, writeFD)
    rescheduleTimer()
  }

  private func timerFired() {
    timer = nil
    guard let channel else { return }
    ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD)
    rescheduleTimer()
  }

  /// Sets the loop timer to c-ares's next retransmit or timeout, or clears it when no query is
  /// pending. Called after every call into c-ares that can start, answer or end a query.
  private func rescheduleTimer() {
    if let timer {
      loop.cancelTimer(timer)
      self.timer = nil
    }
    guard let channel else { return }
    var wait = timeval()
    let pending = withUnsafeMutablePointer(to: &wait) { ares_timeout(channel, nil, $0) != nil }
    guard pending else { return }
    // ares_timeout truncates to whole milliseconds; one more keeps the timer from firing just
    // before c-ares's deadline and then spinning at 0 ms until the deadline really passes.
    let milliseconds = Int(wait.tv_sec) * 1000 + Int(wait.tv_usec) / 1000 + 1
    timer = loop.scheduleTimer(after: .milliseconds(milliseconds)) { [weak self] in
      self?.timerFired()
    }
  }

  /// The c-ares lookup has ended (`pendingCount` counts it no more).
  fileprivate func lookupEnded() {
    pendingCount -= 1
  }

  // MARK: Setup

  private func makeChannel() throws(DNSResolverSetupError) -> ares_channel {
    var options = ares_options()
    var mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES
    options.timeout = Int32(clamping: settings.timeoutMs)
    options.tries = Int32(clamping: settings.tries)
    // Unretained: the channel never outlives the resolver, which destroys it in close/deinit.
    options.sock_state_cb_data = Unmanaged.passUnretained(self).toOpaque()
    options.sock_state_cb = { data, fileDescriptor, readable, writable in
      Unmanaged<DNSResolver>.fromOpaque(data!).takeUnretainedValue()
        .socketStateChanged(fileDescriptor, readable: readable != 0, writable: writable != 0)
    }
    // c-ares copies the strings during ares_init_options; these copies are freed after it.
    var domains = (settings.searchDomains ?? []).map { strdup($0) }
    defer { domains.forEach { free($0) } }
    let lookups = strdup("b")
    defer { free(lookups) }
    if !settings.usesHostsFile {
      mask |= ARES_OPT_LOOKUPS
      options.lookups = lookups
    }
    var channel: ares_channel?
    let status = domains.withUnsafeMutableBufferPointer { domainList in
      if settings.searchDomains != nil {
        mask |= ARES_OPT_DOMAINS
        options.domains = domainList.baseAddress
        options.ndomains = Int32(domainList.count)
      }
      return ares_init_options(&channel, &options, mask)
    }
    guard status == ARES_SUCCESS, let channel else {
      throw DNSResolverSetupError("c-ares could not set up a resolver: \(String(cString: ares_strerror(status)))")
    }
    return channel
  }

  /// Parses one of `Settings.servers`.
  private static func serverAddress(_ text: String) throws(DNSResolverSetupError) -> SocketAddress {
    if let bare = ResolvedAddress(literal: text) {
      return bare.socketAddress(port: 53)
    }
    do {
      return try SocketAddress(parsing: text)
    } catch {
      throw DNSResolverSetupError("DNS server: \(error.description)")
    }
  }

  /// Replaces the servers c-ares found in resolv.conf with `addresses`, UDP and TCP on each one's port.
  private func useServers(_ addresses: [SocketAddress]) throws(DNSResolverSetupError) {
    guard let channel else { return }
    var nodes = addresses.map(DNSResolver.serverNode(for:))
    let status = nodes.withUnsafeMutableBufferPointer { list in
      for index in list.indices.dropLast() {
        list[index].next = list.baseAddress! + index + 1
      }
      return ares_set_servers_ports(channel, list.baseAddress)
    }
    guard status == ARES_SUCCESS else {
      throw DNSResolverSetupError("c-ares refused the DNS servers: \(String(cString: ares_strerror(status)))")
    }
  }

  /// The channel's servers as c-ares holds them.
  private func currentServers() -> [SocketAddress] {
    guard let channel else { return [] }
    var list: UnsafeMutablePointer<ares_addr_port_node>?
    guard ares_get_servers_ports(channel, &list) == ARES_SUCCESS else { return [] }
    defer { ares_free_data(list) }
    var result: [SocketAddress] = []
    var node = list
    while let current = node {
      if let address = DNSResolver.serverAddress(of: current.pointee) { result.append(address) }
      node = current.pointee.next
    }
    return result
  }

  /// c-ares's form of a server: family, the address in the node's union, the port twice.
  private static func serverNode(for address: SocketAddress) -> ares_addr_port_node {
    var node = ares_addr_port_node()
    address.withSockAddr { pointer, _ in
      let raw = UnsafeRawPointer(pointer)
      node.family = Int32(pointer.pointee.sa_family)
      withUnsafeMutableBytes(of: &node.addr) { target in
        if node.family == AF_INET {
          withUnsafeBytes(of: raw.loadUnaligned(as: sockaddr_in.self).sin_addr) { target.copyMemory(from: $0) }
        } else {
          withUnsafeBytes(of: raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr) { target.copyMemory(from: $0) }
        }
      }
    }
    node.udp_port = Int32(address.port)
    node.tcp_port = Int32(address.port)
    return node
  }

  /// A server c-ares holds, as an address (port 0 there means the default, 53).
  private static func serverAddress(of node: ares_addr_port_node) -> SocketAddress? {
    let port = UInt16(truncatingIfNeeded: node.udp_port == 0 ? 53 : node.udp_port)
    var storage = sockaddr_storage()
    withUnsafeBytes(of: node.addr) { source in
      if node.family == AF_INET {
        var ipv4 = sockaddr_in()
        ipv4.sin_family = sa_family_t(AF_INET)
        ipv4.sin_port = port.bigEndian
        withUnsafeMutableBytes(of: &ipv4.sin_addr) {
          $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[..<4]))
        }
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: ipv4, as: sockaddr_in.self) }
      } else if node.family == AF_INET6 {
        var ipv6 = sockaddr_in6()
        ipv6.sin6_family = sa_family_t(AF_INET6)
        ipv6.sin6_port = port.bigEndian
        withUnsafeMutableBytes(of: &ipv6.sin6_addr) {
          $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[..<16]))
        }
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: ipv6, as: sockaddr_in6.self) }
      }
    }
    return SocketAddress(storage: storage)
  }
}

/// One of c-ares's sockets as the loop sees it.
private final class CaresSocket: IOEventHandler {
  /// Weak: the loop keeps handlers alive, and must not keep the resolver alive through them.
  weak var resolver: DNSResolver?
  let fileDescriptor: Int32
  var interest: IOInterest
  var registration: IORegistration!

  init(resolver: DNSResolver, fileDescriptor: Int32, interest: IOInterest) {
    self.resolver = resolver
    self.fileDescriptor = fileDescriptor
    self.interest = interest
  }

  func handleIOEvents(_ events: IOEvents) {
    resolver?.socketReady(self, events: events)
  }
}

/// A lookup c-ares holds (retained through its callback argument) until it calls back.
private final class PendingLookup {
  let loop: EventLoop
  /// Weak so that a resolver released with lookups pending still deinitializes; during its
  /// deinit this reads nil, which counts as closed.
  weak var resolver: DNSResolver?
  let completion: DNSResolver.Completion

  init(loop: EventLoop, resolver: DNSResolver, completion: @escaping DNSResolver.Completion) {
    self.loop = loop
    self.resolver = resolver
    self.completion = completion
  }

  /// c-ares's answer, turned into the result; the completion is queued on the loop.
  func finish(status: Int32, info: UnsafeMutablePointer<ares_addrinfo>?) {
    let resolver = resolver
    resolver?.lookupEnded()
    let result: Result<[ResolvedAddress], DNSError>
    if resolver?.isClosed ?? true {
      result = .failure(.cancelled)
    } else if status == ARES_SUCCESS {
      let addresses = info.map { PendingLookup.addresses(in: $0) } ?? []
      result = addresses.isEmpty ? .failure(.noRecords) : .success(addresses)
    } else {
      result = .failure(DNSError(caresStatus: status))
    }
    // After the loop has stopped there is no turn left to call it on (a resolver released then
    // cancels what it still had, from whatever thread).
    guard loop.inEventLoop else { return }
    let completion = completion
    loop.executeLater { completion(result) }
  }

  /// The nodes as addresses, A records first. The two queries' answers arrive in either order,
  /// and c-ares lists nodes as they arrived; a fixed order keeps the answer (and whoever takes
  /// the first, or turns through them) from changing with a race.
  static func addresses(in info: UnsafeMutablePointer<ares_addrinfo>) -> [ResolvedAddress] {
    // c-ares gives each address its own record's TTL; a CNAME on the way with a shorter TTL
    // bounds how long the alias, and so the address, holds. Negative means the top bit was
    // set, which RFC 2181 §8 says to read as 0.
    var aliasTTL = Int32.max
    var cname = info.pointee.cnames
    while let current = cname {
      aliasTTL = min(aliasTTL, current.pointee.ttl)
      cname = current.pointee.next
    }
    var ipv4: [ResolvedAddress] = []
    var ipv6: [ResolvedAddress] = []
    var node = info.pointee.nodes
    while let current = node {
      node = current.pointee.ai_next
      guard let socketAddress = current.pointee.ai_addr else { continue }
      var storage = sockaddr_storage()
      let length = min(Int(current.pointee.ai_addrlen), MemoryLayout<sockaddr_storage>.size)
      withUnsafeMutableBytes(of: &storage) {
        $0.copyMemory(from: UnsafeRawBufferPointer(start: socketAddress, count: length))
      }
      guard let address = SocketAddress(storage: storage) else { continue }
      let ttl = UInt32(max(0, min(current.pointee.ai_ttl, aliasTTL)))
      if current.pointee.ai_family == AF_INET6 {
        ipv6.append(ResolvedAddress(address: address, family: .ipv6, ttl: ttl))
      } else {
        ipv4.append(ResolvedAddress(address: address, family: .ipv4, ttl: ttl))
      }
    }
    return ipv4 + ipv6
  }
}
