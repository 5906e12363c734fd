/// An endpoint's place in its `EndpointSet`. It stays the same for as long as the endpoint
/// is in the set (through re-resolutions that keep its address, ejections and draining);
/// once a drained endpoint is removed, a later newcomer may be given the same slot.
struct EndpointID: Hashable, Comparable, Sendable, CustomStringConvertible {
  let slot: Int

  init(slot: Int) {
    self.slot = slot
  }

  static func < (lhs: EndpointID, rhs: EndpointID) -> Bool { lhs.slot < rhs.slot }

  var description: String { "#\(slot)" }
}

/// One address of a fleet as configured or resolved, with its weight.
struct EndpointAddress: Sendable, Hashable {
  /// How the endpoint is reached, `host:port` as the integrator spells it (`10.0.0.7:8080`,
  /// `[2001:db8::7]:8080`). It is the endpoint's identity: the same address in a later
  /// resolution is the same endpoint, and its hash places it for hash balancing.
  let address: String
  /// 1 to 100; values outside are clamped (the config check refuses them before).
  let weight: Int

  init(_ address: String, weight: Int = 1) {
    self.address = address
    self.weight = min(max(weight, EndpointSet.weightRange.lowerBound), EndpointSet.weightRange.upperBound)
  }
}

/// The admin API's counters of one endpoint.
struct EndpointCounters: Sendable, Equatable {
  /// Tries sent and not finished (`in_flight`).
  var inFlight = 0
  /// Tries started (`requests`), retries included.
  var requests: UInt64 = 0
  /// Tries that ended in one of the `AttemptFailure` kinds (`failures`).
  var failures: UInt64 = 0
  /// The last failure's text (`last_error`); kept after later successes so an operator can
  /// still see what went wrong last.
  var lastError: String?
}

/// How an endpoint stands, for the admin API and logs.
enum EndpointState: Sendable, Equatable {
  case available
  /// Active health checks fail.
  case unhealthy
  /// Passively ejected until the given monotonic time.
  case ejected(until: UInt64)
  /// No longer in the configured or resolved list: gets no new requests, closed once its
  /// last request is done.
  case draining
}

/// One member of a fleet: its address, weight and everything known about it.
struct FleetEndpoint: Sendable, Equatable {
  let address: String
  /// `FleetHash.hash(address)`: the endpoint's identity in rendezvous hashing. Derived
  /// from the address, not the slot, so a key keeps its endpoint whatever the order in
  /// which a resolver lists the addresses.
  let identity: UInt64
  var weight: Int
  /// The active health checks' verdict (true until they say otherwise, as `HealthState`).
  var healthy = true
  /// Left the list: no new requests; removed once `counters.inFlight` is 0.
  var draining = false
  var outlier = OutlierState()
  var counters = EndpointCounters()

  init(_ address: EndpointAddress) {
    self.address = address.address
    self.identity = FleetHash.hash(address.address)
    self.weight = address.weight
  }

  /// Whether passive ejection keeps it out at `now`.
  @inline(__always)
  func isEjected(now: UInt64) -> Bool {
    guard let until = outlier.ejectedUntil else { return false }
    return now < until
  }

  /// Whether it takes requests at `now` outside panic: healthy, not ejected, not draining.
  @inline(__always)
  func isAvailable(now: UInt64) -> Bool {
    healthy && !draining && !isEjected(now: now)
  }

  /// The admin API's `ejected_until` (monotonic ns); nil when not ejected at `now`.
  func ejectedUntil(now: UInt64) -> UInt64? {
    isEjected(now: now) ? outlier.ejectedUntil : nil
  }

  /// Draining first (it is on its way out whatever else holds), then ejection, then health.
  func state(now: UInt64) -> EndpointState {
    if draining { return .draining }
    if let until = ejectedUntil(now: now) { return .ejected(until: until) }
    return healthy ? .available : .unhealthy
  }
}

/// What `EndpointSet.update(to:)` changed, for the caller to act on and log.
struct EndpointSetChange: Sendable, Equatable {
  /// New addresses, in the order of the list (they start healthy, with empty counters).
  var joined: [EndpointID] = []
  /// Addresses no longer listed: now draining. Close each one's connections when its
  /// `inFlight` reaches 0 (`EndpointSet.drainedEndpoints`, `attemptFinished`'s answer),
  /// then `remove` it.
  var left: [EndpointID] = []
  /// Addresses listed before and now, with their state (ejection, counters) kept; their
  /// weight is the new list's.
  var kept: [EndpointID] = []
  /// Draining endpoints listed again before they were removed: back in service with their
  /// state kept. Not in `kept`.
  var rejoined: [EndpointID] = []
  /// The new list was empty and was not applied (see `EndpointSet.update(to:)`).
  var ignoredEmptyList = false

  var isEmpty: Bool { joined.isEmpty && left.isEmpty && rejoined.isEmpty }
}

/// The endpoints of one upstream fleet and their state, as a pure value: the caller reports
/// what happens (tries started and finished, health verdicts, new address lists) and reads
/// decisions back; nothing here does I/O or reads a clock.
///
/// Endpoints live in slots that never move while they are in the set, so an `EndpointID`
/// held by an in-flight try stays valid through updates. Pick with `EndpointBalancer`,
/// eject with `OutlierDetector`.
struct EndpointSet: Sendable {
  static let weightRange = 1...100

  /// The endpoints by slot; nil marks a slot freed by `remove` (reused by the next join).
  private(set) var slots: [FleetEndpoint?] = []
  private var slotByAddress: [String: Int] = [:]
  /// Changes on every membership change (update, remove), so a balancer can tell that its
  /// per-slot state (smooth round robin's) belongs to an older set.
  private(set) var revision: UInt64 = 0

  /// A set of `addresses` (duplicates after the first are ignored). An empty list gives an
  /// empty set.
  init(_ addresses: [EndpointAddress] = []) {
    _ = apply(addresses)
  }

  /// Endpoints in the set, draining ones included.
  var count: Int { slotByAddress.count }

  /// The ids of the endpoints in slot order (for the admin API; allocates).
  var ids: [EndpointID] {
    slots.indices.compactMap { slots[$0] == nil ? nil : EndpointID(slot: $0) }
  }

  /// The endpoint at `id`, which must be in the set.
  subscript(id: EndpointID) -> FleetEndpoint {
    guard let endpoint = slots[id.slot] else { preconditionFailure("no endpoint at \(id)") }
    return endpoint
  }

  /// Whether `id` names an endpoint in the set. Asked on every try: it reads one flag,
  /// where testing the optional slot would copy the endpoint out of the array.
  @inline(__always)
  func contains(_ id: EndpointID) -> Bool {
    id.slot >= 0 && id.slot < occupied.count && occupied[id.slot]
  }

  /// Whether each slot holds an endpoint (`contains`).
  private var occupied: [Bool] = []

  func id(forAddress address: String) -> EndpointID? {
    slotByAddress[address].map(EndpointID.init(slot:))
  }

  /// The passive-ejection state of `id`, for `OutlierDetector`.
  subscript(outlier id: EndpointID) -> OutlierState {
    get {
      precondition(contains(id), "no endpoint at \(id)")
      return slots[id.slot]!.outlier
    }
    set {
      precondition(contains(id), "no endpoint at \(id)")
      slots[id.slot]!.outlier = newValue
    }
  }

  // MARK: Membership

  /// Replaces the list of addresses with `addresses` (a config reload, a DNS answer):
  /// addresses already present keep their slot and state and take the new weight, new ones
  /// join, missing ones start draining, draining ones listed again come back.
  ///
  /// An empty list is not applied (`ignoredEmptyList`): a resolver that answers nothing is
  /// more likely broken than the fleet gone, and the last known addresses cost at most
  /// failed connects (which ejection and retries handle) where an empty fleet can only
  /// answer 503. The config check refuses an empty static list before it gets here.
  mutating func update(to addresses: [EndpointAddress]) -> EndpointSetChange {
    guard !addresses.isEmpty else {
      var change = EndpointSetChange()
      change.ignoredEmptyList = true
      return change
    }
    return apply(addresses)
  }

  private mutating func apply(_ addresses: [EndpointAddress]) -> EndpointSetChange {
    var change = EndpointSetChange()
    var listed = Set<Int>()
    for address in addresses {
      if let slot = slotByAddress[address.address] {
        // A duplicate of an address earlier in this list: the first one's weight stands.
        guard listed.insert(slot).inserted else { continue }
        slots[slot]!.weight = address.weight
        if slots[slot]!.draining {
          slots[slot]!.draining = false
          change.rejoined.append(EndpointID(slot: slot))
        } else {
          change.kept.append(EndpointID(slot: slot))
        }
      } else {
        let slot = occupied.firstIndex(of: false) ?? slots.count
        if slot == slots.count {
          slots.append(nil)
          occupied.append(false)
        }
        slots[slot] = FleetEndpoint(address)
        occupied[slot] = true
        slotByAddress[address.address] = slot
        listed.insert(slot)
        change.joined.append(EndpointID(slot: slot))
      }
    }
    for slot in slots.indices where !listed.contains(slot) {
      guard let endpoint = slots[slot], !endpoint.draining else { continue }
      slots[slot]!.draining = true
      change.left.append(EndpointID(slot: slot))
    }
    if !change.isEmpty { revision &+= 1 }
    return change
  }

  /// Draining endpoints with no try in flight: the caller closes their connections and
  /// calls `remove` for each.
  var drainedEndpoints: [EndpointID] {
    slots.indices.compactMap { slot in
      guard let endpoint = slots[slot], endpoint.draining, endpoint.counters.inFlight == 0 else { return nil }
      return EndpointID(slot: slot)
    }
  }

  /// Takes a drained endpoint (draining, nothing in flight) out of the set; its slot is
  /// free for a later newcomer. Returns the endpoint as it was, for a last log line.
  @discardableResult
  mutating func remove(_ id: EndpointID) -> FleetEndpoint {
    let endpoint = self[id]
    precondition(endpoint.draining && endpoint.counters.inFlight == 0, "only a drained endpoint can be removed")
    slots[id.slot] = nil
    occupied[id.slot] = false
    slotByAddress[endpoint.address] = nil
    // Trailing free slots are dropped so that a shrinking fleet's loops stay short.
    while let last = occupied.last, !last {
      slots.removeLast()
      occupied.removeLast()
    }
    revision &+= 1
    return endpoint
  }

  /// Takes over what `previous` (the set of the pool a reload replaced) knew of the
  /// endpoints both have: health, ejection and counters, but not tries in flight (those
  /// finish on the old pool's connections).
  mutating func adoptState(from previous: EndpointSet) {
    for slot in slots.indices {
      guard let endpoint = slots[slot], let old = previous.id(forAddress: endpoint.address) else { continue }
      let before = previous[old]
      slots[slot]!.healthy = before.healthy
      slots[slot]!.outlier = before.outlier
      slots[slot]!.counters = before.counters
      slots[slot]!.counters.inFlight = 0
    }
  }

  // MARK: Reports from the caller

  /// The active health checks' verdict on `id` changed (or was confirmed).
  mutating func setHealthy(_ id: EndpointID, _ healthy: Bool) {
    precondition(contains(id), "no endpoint at \(id)")
    slots[id.slot]!.healthy = healthy
  }

  /// A try on `id` is about to be sent (after the pick, before the connect).
  mutating func attemptStarted(_ id: EndpointID) {
    precondition(contains(id), "no endpoint at \(id)")
    slots[id.slot]!.counters.inFlight += 1
    slots[id.slot]!.counters.requests &+= 1
  }

  /// A try on `id` ended: with `outcome`, or nil when it ended without one that says
  /// anything about the endpoint (the client went away, the gateway is stopping).
  /// `error` is the failure's text for `last_error` (the kind's name when nil).
  ///
  /// Returns true when this was the last try in flight of a draining endpoint: the caller
  /// closes its connections and `remove`s it.
  mutating func attemptFinished(_ id: EndpointID, outcome: AttemptOutcome?, error: String? = nil) -> Bool {
    precondition(contains(id), "no endpoint at \(id)")
    precondition(slots[id.slot]!.counters.inFlight > 0, "attemptFinished without attemptStarted")
    slots[id.slot]!.counters.inFlight -= 1
    if case .failure(let failure) = outcome {
      slots[id.slot]!.counters.failures &+= 1
      slots[id.slot]!.counters.lastError = error ?? failure.configValue
    }
    // Fields read in place: a copy of the endpoint would cost its address's reference count.
    return slots[id.slot]!.draining && slots[id.slot]!.counters.inFlight == 0
  }
}
