import Dispatch
import GatehouseConfig
import GatehouseLogging
import GatehouseNet
import GatehouseResolver
import Synchronization

/// Looks the names of upstream endpoints up again, on the control loop, with c-ares
/// (`DNSResolver`: asynchronous, driven by the loop, never a blocking `getaddrinfo`): at the
/// records' TTL (at least 1 s) or `resolve_s`, whichever is sooner. A changed address list is
/// handed to every request loop, whose pools join, keep and drain endpoints by address
/// (`EndpointSet.update`). A failed lookup keeps the name's last good addresses, logs a
/// warning and is counted; an answer without addresses counts as failed.
///
/// Control loop only.
final class UpstreamResolution {
  private let loop: EventLoop
  private let logger: Logger
  private let publish: (_ upstream: String, _ endpoints: [UpstreamEndpointPlan]) -> Void
  private var resolver: DNSResolver?
  private var resolverConfig: ResolverConfig?
  private var tracked: [Tracked] = []
  private var generation = 0
  /// Each name's last good addresses (ports left as the answer gave them: none), by
  /// lowercased name: what a failed lookup keeps and a reload starts from.
  private(set) var lastGood: [String: [SocketAddress]] = [:]
  /// `gatehouse_dns_resolutions_total{upstream,result}`.
  private(set) var counts: [ResolutionCountKey: UInt64] = [:]

  struct ResolutionCountKey: Hashable, Sendable {
    let upstream: String
    /// `success` or `failure`.
    let result: String
  }

  /// The admin API's view of one upstream's lookups.
  struct Times: Sendable {
    var resolvedAtMs: Int64?
    var nextAtMs: Int64?
  }

  private final class Tracked {
    let plan: UpstreamPlan
    /// The addresses of each source now (as `plan.sources`).
    var addresses: [[SocketAddress]]
    var endpoints: [UpstreamEndpointPlan]
    var times = Times()
    var timer: TimerHandle?

    init(plan: UpstreamPlan) {
      self.plan = plan
      addresses = plan.sources.map(\.addresses)
      endpoints = plan.endpoints
    }
  }

  init(
    loop: EventLoop, logger: Logger,
    publish: @escaping (_ upstream: String, _ endpoints: [UpstreamEndpointPlan]) -> Void
  ) {
    self.loop = loop
    self.logger = logger
    self.publish = publish
  }

  /// (Re)starts the lookups of `snapshot`'s upstreams whose endpoints come from names: the
  /// first at once (the load's answer came from the system resolver and had no TTLs).
  func apply(_ snapshot: GatewaySnapshot) {
    stop()
    generation += 1
    for plan in snapshot.upstreamPlans {
      for source in plan.sources where source.isName {
        lastGood[source.host] = source.addresses.map { $0.withPort(0) }
      }
    }
    tracked = snapshot.upstreamPlans.filter { $0.sources.contains(where: \.isName) }.map(Tracked.init)
    guard !tracked.isEmpty else { return }
    if resolver == nil || resolverConfig != snapshot.config.resolver {
      resolver?.close()
      resolver = nil
      let config = snapshot.config.resolver
      let settings = DNSResolver.Settings(
        servers: config.servers?.map(\.description), timeoutMs: config.timeoutMilliseconds, tries: 2)
      do {
        resolver = try DNSResolver(loop: loop, settings: settings)
        resolverConfig = config
      } catch {
        // The addresses of the load stay; a reload with a working `resolver` tries again.
        logger.error(
          "cannot set up the DNS resolver; upstream names keep the addresses they had when the config was loaded",
          ["error": .string(error.description)])
        return
      }
    }
    for entry in tracked { resolve(entry, generation: generation) }
  }

  func stop() {
    for entry in tracked {
      if let timer = entry.timer { loop.cancelTimer(timer) }
      entry.timer = nil
    }
  }

  /// When each tracked upstream was last looked up and will be next.
  func times() -> [String: Times] {
    Dictionary(tracked.map { ($0.plan.name, $0.times) }, uniquingKeysWith: { first, _ in first })
  }

  /// Looks `names` up with the servers of `config` and waits for the answers: for a config
  /// being loaded, whose names must have addresses before it runs. On a loop of its own (a
  /// thread made for it), so no serving loop waits; the caller does, at most about three
  /// times `timeout_ms`. A name without an answer is missing from the result.
  static func lookUpNow(_ names: Set<String>, with config: ResolverConfig) -> [String: [SocketAddress]] {
    guard !names.isEmpty, let group = try? EventLoopGroup(loopCount: 1) else { return [:] }
    defer { group.shutdown() }
    let loop = group.loops[0]
    let found = Mutex<[String: [SocketAddress]]>([:])
    let done = DispatchSemaphore(value: 0)
    let settings = DNSResolver.Settings(
      servers: config.servers?.map(\.description), timeoutMs: config.timeoutMilliseconds, tries: 2)
    let list = Array(names)
    loop.execute {
      guard let resolver = try? DNSResolver(loop: loop, settings: settings) else {
        done.signal()
        return
      }
      var remaining = list.count
      for name in list {
        resolver.resolve(host: name) { result in
          if case .success(let addresses) = result, !addresses.isEmpty {
            found.withLock { $0[name] = addresses.map { $0.socketAddress(port: 0) } }
          }
          remaining -= 1
          if remaining == 0 {
            resolver.close()
            done.signal()
          }
        }
      }
    }
    done.wait()
    return found.withLock { $0 }
  }

  private func resolve(_ entry: Tracked, generation: Int) {
    guard let resolver else { return }
    let names = Array(Set(entry.plan.sources.filter(\.isName).map(\.host)))
    var answers: [String: Result<[ResolvedAddress], DNSError>] = [:]
    for name in names {
      resolver.resolve(host: name) { [self] result in
        guard generation == self.generation else { return }
        answers[name] = result
        if answers.count == names.count { finish(entry, answers: answers, generation: generation) }
      }
    }
  }

  private func finish(
    _ entry: Tracked, answers: [String: Result<[ResolvedAddress], DNSError>], generation: Int
  ) {
    let plan = entry.plan
    var shortestTTL = UInt32(max(1, plan.resolveSeconds))
    var failures: [String] = []
    for (index, source) in plan.sources.enumerated() where source.isName {
      switch answers[source.host] {
      case .success(let found) where !found.isEmpty:
        entry.addresses[index] = found.map { $0.socketAddress(port: source.port) }
        lastGood[source.host] = found.map { $0.socketAddress(port: 0) }
        for address in found { if let ttl = address.ttl { shortestTTL = min(shortestTTL, ttl) } }
      case .success:
        failures.append("\(source.host): no addresses")
      case .failure(let error):
        failures.append("\(source.host): \(error)")
      case nil:
        break
      }
    }
    let result = failures.isEmpty ? "success" : "failure"
    counts[ResolutionCountKey(upstream: plan.name, result: result), default: 0] &+= 1
    if !failures.isEmpty {
      logger.warn(
        "upstream name lookup failed; its last known addresses stay",
        ["upstream": .string(plan.name), "error": .string(failures.joined(separator: "; "))])
    }
    let endpoints = UpstreamPlan.endpoints(of: plan.sources, addresses: entry.addresses)
    if endpoints != entry.endpoints, !endpoints.isEmpty {
      let before = Set(entry.endpoints.map(\.address))
      let after = Set(endpoints.map(\.address))
      logger.info(
        "upstream endpoints changed",
        [
          "upstream": .string(plan.name),
          "joined": .string(
            endpoints.map(\.address).filter { !before.contains($0) }.map(\.description).joined(separator: " ")),
          "left": .string(
            entry.endpoints.map(\.address).filter { !after.contains($0) }.map(\.description).joined(separator: " ")),
        ])
      entry.endpoints = endpoints
      publish(plan.name, endpoints)
    }
    // At least a second apart, however short the TTL.
    let delay = Duration.seconds(Int(max(1, shortestTTL)))
    let now = RFC3339.nowMilliseconds()
    entry.times = Times(resolvedAtMs: now, nextAtMs: now + Int64(max(1, shortestTTL)) * 1000)
    entry.timer = loop.scheduleTimer(after: delay) { [self] in
      guard generation == self.generation else { return }
      entry.timer = nil
      resolve(entry, generation: generation)
    }
  }
}

/// What `gatehouse check` says of the upstream names of a config: what each resolves to now,
/// looked up as the gateway would (c-ares, with `resolver`).
public enum UpstreamNameReport {
  /// One line per name, in config order: `upstreams.api: api.internal -> 10.0.0.5, 10.0.0.6`,
  /// or that it does not resolve now.
  public static func lines(for config: GatehouseConfig) -> [String] {
    var names: [(upstream: String, host: String)] = []
    for upstream in config.upstreams {
      for host in UpstreamPlan.writtenHosts(upstream) where EndpointSource.isName(host) {
        if !names.contains(where: { $0.upstream == upstream.name && $0.host == host }) {
          names.append((upstream.name, host))
        }
      }
    }
    let found = UpstreamResolution.lookUpNow(Set(names.map(\.host)), with: config.resolver)
    return names.map { name in
      guard let addresses = found[name.host] else {
        return "upstreams.\(name.upstream): \(name.host) does not resolve now (the gateway keeps trying)"
      }
      return "upstreams.\(name.upstream): \(name.host) -> \(addresses.map(\.hostText).joined(separator: ", "))"
    }
  }
}
