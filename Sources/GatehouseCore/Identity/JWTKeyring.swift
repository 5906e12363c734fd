import GatehouseConfig
import GatehouseHTTP
import GatehouseJWT
import GatehouseLogging
import GatehouseNet
import GatehouseStore

/// Fetches a JWKS document (Docs/jwt.md); `completion` runs once, on `loop`, never from inside
/// the call.
typealias JWKSFetch = (
  _ url: HTTPURL, _ loop: EventLoop, _ completion: @escaping (Result<[UInt8], URLFetchError>) -> Void
)
  -> Void

/// The identity providers' signing keys, on the control loop: fetched from `jwks_url` at
/// start, every `jwks_refresh_s` and on demand (`KeySetSchedule` decides when), kept in the
/// store so a restart while the provider is down still verifies, and published to every
/// loop as an immutable `JWTKeyValues`. Keys in the config (`keys`) are never fetched.
///
/// Confined to `loop`. Waiters are answered after the values that reflect the same fetch
/// were published (each loop runs its queue in order).
final class JWTKeyring {
  /// What `GET /admin/jwt` shows of a provider.
  struct Status: Sendable {
    let name: String
    let issuer: String?
    let source: String
    let keyIDs: [String]
    let keyCount: Int
    let fetchedAtMs: Int64?
    let lastError: String?
  }

  private final class Slot {
    var config: JWTProviderConfig
    var keys: JWTKeySet?
    /// The document `keys` came from: an unchanged one is not parsed or stored again.
    var document: [UInt8]?
    var generation: UInt64 = 0
    var schedule: KeySetSchedule
    var fetchedAtMs: Int64?
    var lastError: String?
    var waiters: [() -> Void] = []
    var timer: TimerHandle?

    init(config: JWTProviderConfig) {
      self.config = config
      schedule = KeySetSchedule(refreshMs: Int64(config.jwksRefresh.components.seconds) * 1000)
    }

    var url: HTTPURL? {
      if case .url(let url) = config.keySource { return url }
      return nil
    }
  }

  let loop: EventLoop
  private let store: Store?
  private let logger: Logger
  private let fetch: JWKSFetch
  private let publish: (JWTKeyValues) -> Void
  private let clock: () -> Int64
  private var slots: [Slot] = []
  private var nextGeneration: UInt64 = 1
  private var started = false
  private var stopped = false

  /// The largest JWKS document taken: a provider has a handful of keys, a few KiB.
  static let maxDocumentBytes = 512 << 10
  static let fetchLimits = HTTPOneShotClient.Limits(
    connectTimeout: .seconds(5), answerTimeout: .seconds(10), maxAnswerBytes: maxDocumentBytes)

  init(
    config: JWTConfig, loop: EventLoop, store: Store?, logger: Logger, fetch: JWKSFetch? = nil,
    clock: @escaping () -> Int64 = { RFC3339.nowMilliseconds() }, publish: @escaping (JWTKeyValues) -> Void
  ) {
    self.loop = loop
    self.store = store
    self.logger = logger
    self.fetch = fetch ?? JWTKeyring.defaultFetch()
    self.clock = clock
    self.publish = publish
    slots = config.providers.map(Slot.init)
  }

  /// Fetches over `URLFetcher`: a 200 answer's body, nothing else. Redirects are not
  /// followed (a JWKS that moves is a config change, and a redirect is where a hijacked
  /// provider would point the gateway elsewhere).
  static func defaultFetch() -> JWKSFetch {
    let client = URLFetcher(limits: fetchLimits) { host, port in try UpstreamPlan.resolve(host: host, port: port) }
    return { url, loop, completion in
      let request = HTTPOneShotClient.Request(
        method: .get, target: url.basePath.isEmpty ? "/" : url.basePath,
        headers: HTTPHeaders([
          ("Host", url.hostHeader), ("Accept", "application/jwk-set+json, application/json"), ("Connection", "close"),
        ]))
      client.send(request, to: url, on: loop) { result in
        switch result {
        case .failure(let error):
          completion(.failure(error))
        case .success(let answer) where answer.status == 200:
          completion(.success(answer.body))
        case .success(let answer) where (300..<400).contains(answer.status):
          completion(.failure(URLFetchError("answered \(answer.status): redirects are not followed")))
        case .success(let answer):
          completion(.failure(URLFetchError("answered \(answer.status)")))
        }
      }
    }
  }

  // MARK: Lifecycle

  /// Restores stored keys, reads the config's own, starts the fetches, and publishes.
  func start() {
    loop.assertInEventLoop()
    guard !started else { return }
    started = true
    let stored = (try? store?.loadKeySets()) ?? []
    for slot in slots { begin(slot, stored: stored) }
    publishValues()
  }

  /// A reload: a provider whose key source did not change keeps its keys and schedule.
  func apply(_ config: JWTConfig) {
    loop.assertInEventLoop()
    var next: [Slot] = []
    var fresh: [Slot] = []
    for provider in config.providers {
      if let slot = slots.first(where: { $0.config.name == provider.name && $0.config.keySource == provider.keySource })
      {
        slot.config = provider
        next.append(slot)
      } else {
        let slot = Slot(config: provider)
        next.append(slot)
        fresh.append(slot)
      }
    }
    for slot in slots where !next.contains(where: { $0 === slot }) { retire(slot) }
    slots = next
    if started {
      let stored = fresh.isEmpty ? [] : ((try? store?.loadKeySets()) ?? [])
      for slot in fresh { begin(slot, stored: stored) }
    }
    publishValues()
  }

  /// Cancels timers and answers every waiter; fetches still running are ignored.
  func stop() {
    loop.assertInEventLoop()
    stopped = true
    for slot in slots { retire(slot) }
  }

  private func begin(_ slot: Slot, stored: [StoredKeySet]) {
    switch slot.config.keySource {
    case .inline(let document):
      install(document, in: slot)
    case .url(let url):
      if let record = stored.first(where: { $0.provider == slot.config.name && $0.source == url.description }) {
        install(record.jwks, in: slot)
        slot.fetchedAtMs = record.fetchedAtMs
      }
      if slot.schedule.scheduledFetch(nowMs: clock()) == .fetch { startFetch(slot) }
    }
  }

  private func retire(_ slot: Slot) {
    if let timer = slot.timer { _ = loop.cancelTimer(timer) }
    slot.timer = nil
    let waiters = slot.waiters
    slot.waiters = []
    for waiter in waiters { waiter() }
  }

  // MARK: Requests from the loops and the admin API

  /// A request waits for `provider`'s keys (`unknownKey`: its token names a key the set
  /// lacks). `completion` runs on this loop once there is something new to try, or at once
  /// when nothing will come (too soon after the last fetch, keys written in the config).
  func waitForKeys(provider name: String, unknownKey: Bool, completion: @escaping () -> Void) {
    loop.assertInEventLoop()
    guard !stopped, let slot = slots.first(where: { $0.config.name == name }), slot.url != nil else {
      completion()
      return
    }
    // Keys came while the request was on its way here.
    if !unknownKey, slot.keys != nil {
      completion()
      return
    }
    switch slot.schedule.demand(nowMs: clock()) {
    case .fetch:
      slot.waiters.append(completion)
      startFetch(slot)
      publishValues()
    case .join:
      slot.waiters.append(completion)
    case .refuse:
      completion()
    }
  }

  /// `gatehouse admin jwt refresh NAME`: fetches now (or joins the fetch under way);
  /// `completion` gets the provider's status after it, or nil for an unknown name.
  func refresh(provider name: String, completion: @escaping (Status?) -> Void) {
    loop.assertInEventLoop()
    guard let slot = slots.first(where: { $0.config.name == name }) else {
      completion(nil)
      return
    }
    guard slot.url != nil, !stopped else {
      completion(status(of: slot))
      return
    }
    slot.waiters.append { [self] in completion(status(of: slot)) }
    if slot.schedule.scheduledFetch(nowMs: clock()) == .fetch {
      startFetch(slot)
      publishValues()
    }
  }

  func statuses() -> [Status] {
    loop.assertInEventLoop()
    return slots.map(status(of:))
  }

  private func status(of slot: Slot) -> Status {
    let source: String
    switch slot.config.keySource {
    case .url(let url): source = url.description
    case .inline: source = "config"
    }
    return Status(
      name: slot.config.name, issuer: slot.config.issuer, source: source, keyIDs: slot.keys?.keyIDs ?? [],
      keyCount: slot.keys?.count ?? 0, fetchedAtMs: slot.fetchedAtMs, lastError: slot.lastError)
  }

  // MARK: Fetching

  private func startFetch(_ slot: Slot) {
    guard let url = slot.url else { return }
    if let timer = slot.timer { _ = loop.cancelTimer(timer) }
    slot.timer = nil
    fetch(url, loop) { [weak self, weak slot] result in
      guard let self, let slot, !stopped, slots.contains(where: { $0 === slot }) else { return }
      fetched(result, for: slot, from: url)
    }
  }

  private func fetched(_ result: Result<[UInt8], URLFetchError>, for slot: Slot, from url: HTTPURL) {
    let now = clock()
    var success = false
    switch result {
    case .success(let document) where document == slot.document:
      success = true
    case .success(let document):
      if let problem = install(document, in: slot) {
        fail(slot, "jwks_url \(url): \(problem)")
      } else {
        success = true
        store?.saveKeySet(
          StoredKeySet(provider: slot.config.name, source: url.description, jwks: document, fetchedAtMs: now))
        logger.info(
          "signing keys fetched",
          ["provider": .string(slot.config.name), "keys": .int(slot.keys?.count ?? 0)])
      }
    case .failure(let error):
      fail(slot, "jwks_url \(url): \(error)")
    }
    if success {
      slot.fetchedAtMs = now
      slot.lastError = nil
    }
    let delay = slot.schedule.fetchEnded(success: success)
    slot.timer = loop.scheduleTimer(after: .milliseconds(delay)) { [weak self, weak slot] in
      guard let self, let slot else { return }
      slot.timer = nil
      if slot.schedule.scheduledFetch(nowMs: clock()) == .fetch {
        startFetch(slot)
        publishValues()
      }
    }
    publishValues()
    let waiters = slot.waiters
    slot.waiters = []
    for waiter in waiters { waiter() }
  }

  private func fail(_ slot: Slot, _ message: String) {
    slot.lastError = message
    // Keys at hand stay in use: a provider that is down or answers garbage must not lock
    // every user out.
    logger.warn(
      "signing keys not fetched",
      ["provider": .string(slot.config.name), "error": .string(message), "keys_kept": .int(slot.keys?.count ?? 0)])
  }

  /// Parses `document` and makes it the slot's keys; returns the problem instead when it
  /// holds no usable key (the keys at hand are kept then).
  @discardableResult
  private func install(_ document: [UInt8], in slot: Slot) -> String? {
    let keys: JWTKeySet
    do {
      keys = try JWTKeySet(jwks: document)
    } catch {
      return error.description
    }
    guard keys.count > 0 else {
      return "no usable signing key" + (keys.skipped.isEmpty ? "" : " (" + keys.skipped.joined(separator: "; ") + ")")
    }
    slot.keys = keys
    slot.document = document
    slot.generation = nextGeneration
    nextGeneration += 1
    return nil
  }

  private func publishValues() {
    publish(
      JWTKeyValues(
        providers: slots.map { slot in
          JWTKeyValues.Provider(
            name: slot.config.name, keys: slot.keys, generation: slot.generation, fetching: slot.schedule.fetching,
            unknownKeyRefreshAfterMs: slot.url == nil ? .max : slot.schedule.demandRefusedUntilMs)
        }))
  }
}

/// The keyring as the loops reach it: every call hops to the control loop and back.
final class JWTKeyBroker: @unchecked Sendable {
  /// Touched only on `control` (the keyring is confined to it).
  let keyring: JWTKeyring
  let control: EventLoop

  init(keyring: JWTKeyring, control: EventLoop) {
    self.keyring = keyring
    self.control = control
  }

  /// See `JWTKeyring.waitForKeys`; `completion` runs on `loop`.
  func waitForKeys(provider: String, unknownKey: Bool, replyOn loop: EventLoop, completion: @escaping () -> Void) {
    nonisolated(unsafe) let completion = completion
    nonisolated(unsafe) let keyring = self.keyring
    control.execute {
      keyring.waitForKeys(provider: provider, unknownKey: unknownKey) {
        loop.execute { completion() }
      }
    }
  }
}
