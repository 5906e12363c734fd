/// How a fleet spreads requests over its endpoints (`balance`).
enum BalancePolicy: Sendable, Hashable {
  /// `least_request` (the default): the less loaded, relative to its weight, of two
  /// endpoints drawn at random in proportion to their weights.
  case leastRequest
  /// `round_robin`: smooth weighted round robin, nginx's algorithm.
  case roundRobin
  /// `hash`: weighted rendezvous hashing of a key the caller computes (`hash_by`).
  case hash

  static let `default` = BalancePolicy.leastRequest

  init?(configValue: String) {
    switch configValue {
    case "least_request": self = .leastRequest
    case "round_robin": self = .roundRobin
    case "hash": self = .hash
    default: return nil
    }
  }

  var configValue: String {
    switch self {
    case .leastRequest: return "least_request"
    case .roundRobin: return "round_robin"
    case .hash: return "hash"
    }
  }
}

/// What the key of `balance: hash` is made of (`hash_by`). The caller computes the key from
/// the request (with `FleetHash.hash`) and passes it to `EndpointBalancer.pick`.
enum HashKeySource: Sendable, Hashable {
  /// The client's key, as rate limits identify clients.
  case client
  /// The client's IP address.
  case ip
  /// The request path.
  case path
  /// The value of a request header; the name is kept lowercased (names are
  /// case-insensitive).
  case header(String)

  /// Reads `client`, `ip`, `path` or `header:NAME` (NAME not empty).
  init?(configValue: String) {
    switch configValue {
    case "client": self = .client
    case "ip": self = .ip
    case "path": self = .path
    default:
      guard configValue.hasPrefix("header:") else { return nil }
      let name = configValue.dropFirst("header:".count)
      guard !name.isEmpty else { return nil }
      self = .header(name.lowercased())
    }
  }

  var configValue: String {
    switch self {
    case .client: return "client"
    case .ip: return "ip"
    case .path: return "path"
    case .header(let name): return "header:\(name)"
    }
  }
}

/// The endpoints one request has tried so far, which its retries avoid. Stored inline (no
/// allocation): the last `capacity` distinct endpoints are remembered, far more than
/// `retry.attempts` asks for in practice; past that the oldest are forgotten.
struct TriedEndpoints: Sendable, Hashable {
  static let capacity = 8
  /// Slots tried, -1 in the lanes not used yet (no slot is negative).
  private var lanes = SIMD8<Int32>(repeating: -1)
  /// Distinct endpoints inserted so far; the next goes to lane `insertions % capacity`.
  private var insertions = 0

  init() {}

  /// The endpoints of `attempts`.
  init(_ attempts: some Sequence<UpstreamAttempt>) {
    for attempt in attempts { insert(attempt.endpoint) }
  }

  /// Endpoints remembered.
  var count: Int { min(insertions, Self.capacity) }
  var isEmpty: Bool { insertions == 0 }

  mutating func insert(_ id: EndpointID) {
    guard !contains(id) else { return }
    lanes[insertions % Self.capacity] = Int32(id.slot)
    insertions += 1
  }

  @inline(__always)
  func contains(_ id: EndpointID) -> Bool {
    guard let slot = Int32(exactly: id.slot) else { return false }
    return any(lanes .== slot)
  }
}

/// The endpoint chosen for a try.
struct EndpointPick: Sendable, Hashable {
  let endpoint: EndpointID
  /// No endpoint was available (all unhealthy or ejected): the pick was made among every
  /// endpoint not draining. The caller logs and counts it.
  let panic: Bool
  /// Every candidate had been tried by this request already, so this one is tried again
  /// (a one-endpoint fleet's retry, say). The caller may prefer not to retry.
  let repeated: Bool
}

/// Chooses the endpoint of each try by the fleet's `balance`, as a value the caller keeps
/// (one per fleet and loop) beside its `EndpointSet`. Only smooth round robin has state of
/// its own (each endpoint's current weight); the other policies only read the set.
///
/// Candidates, in this order:
/// 1. The available endpoints (healthy, not ejected, not draining); when there is none,
///    every endpoint not draining (panic: better to try an endpoint that may be down than
///    to refuse every request while the checks or the ejections may be wrong). Draining
///    endpoints are never picked.
/// 2. Of those, the ones this request has not tried yet; when it has tried them all, all of
///    them again (`EndpointPick.repeated`).
///
/// A pick walks the slots a few times with fixed loops and allocates nothing (smooth round
/// robin's per-slot array is resized only after the set's membership changed).
struct EndpointBalancer: Sendable {
  let policy: BalancePolicy
  /// Smooth round robin's current weight by slot.
  private var currentWeights: [Int] = []
  /// The `EndpointSet.revision` `currentWeights` belongs to.
  private var revision = UInt64.max

  init(policy: BalancePolicy = .default) {
    self.policy = policy
  }

  /// The endpoint for the next try of a request that has tried `tried` so far, at `now`
  /// (monotonic ns; it decides which ejections are still in force). `hashKey` is the
  /// request's key for `balance: hash`; without one (the header is absent, say) the pick
  /// falls back to least request rather than sending every keyless request to one
  /// endpoint. Nil only when every endpoint is draining (or the set is empty).
  mutating func pick(
    from set: EndpointSet, excluding tried: TriedEndpoints = TriedEndpoints(), hashKey: UInt64? = nil,
    now: UInt64, using random: inout some RandomNumberGenerator
  ) -> EndpointPick? {
    guard let candidates = Candidates(set, tried: tried, now: now) else { return nil }
    let slot: Int
    switch policy {
    case .leastRequest:
      slot = Self.leastRequest(set, candidates, using: &random)
    case .roundRobin:
      slot = roundRobin(set, candidates)
    case .hash:
      if let hashKey {
        slot = Self.rendezvous(set, candidates, key: hashKey)
      } else {
        slot = Self.leastRequest(set, candidates, using: &random)
      }
    }
    return EndpointPick(endpoint: EndpointID(slot: slot), panic: candidates.panic, repeated: candidates.includesTried)
  }

  /// Which endpoints a pick chooses among (see the type's comment).
  private struct Candidates {
    let panic: Bool
    let includesTried: Bool
    let tried: TriedEndpoints
    let now: UInt64

    init?(_ set: EndpointSet, tried: TriedEndpoints, now: UInt64) {
      var available = false
      var availableUntried = false
      var present = false
      var presentUntried = false
      for slot in set.slots.indices {
        guard let endpoint = set.slots[slot], !endpoint.draining else { continue }
        let untried = !tried.contains(EndpointID(slot: slot))
        present = true
        presentUntried = presentUntried || untried
        if endpoint.isAvailable(now: now) {
          available = true
          availableUntried = availableUntried || untried
        }
      }
      guard present else { return nil }
      panic = !available
      includesTried = available ? !availableUntried : !presentUntried
      self.tried = tried
      self.now = now
    }

    @inline(__always)
    func admit(_ endpoint: FleetEndpoint?, slot: Int) -> FleetEndpoint? {
      guard let endpoint else { return nil }
      if panic {
        guard !endpoint.draining else { return nil }
      } else {
        guard endpoint.isAvailable(now: now) else { return nil }
      }
      guard includesTried || !tried.contains(EndpointID(slot: slot)) else { return nil }
      return endpoint
    }
  }

  // MARK: least_request

  /// Power of two choices: two distinct candidates drawn with probability proportional to
  /// weight; the one with fewer tries in flight per unit of weight wins, the first drawn on
  /// a tie. Why the first drawn and not the heavier: at rest every comparison is a tie
  /// (0 = 0), and the first draw alone then gives each endpoint exactly its weight's share,
  /// where preferring the heavier would starve the light ones.
  private static func leastRequest(
    _ set: EndpointSet, _ candidates: Candidates, using random: inout some RandomNumberGenerator
  ) -> Int {
    var totalWeight = 0
    var count = 0
    var last = -1
    for slot in set.slots.indices {
      guard let endpoint = candidates.admit(set.slots[slot], slot: slot) else { continue }
      totalWeight += endpoint.weight
      count += 1
      last = slot
    }
    guard count > 1 else { return last }
    let first = weightedSlot(set, candidates, at: Int(random.next(upperBound: UInt64(totalWeight))), skipping: -1)
    let firstEndpoint = set.slots[first]!
    let secondTarget = Int(random.next(upperBound: UInt64(totalWeight - firstEndpoint.weight)))
    let second = weightedSlot(set, candidates, at: secondTarget, skipping: first)
    let secondEndpoint = set.slots[second]!
    // inFlight / weight compared without division: a.inFlight × b.weight vs b.inFlight × a.weight.
    let firstLoad = firstEndpoint.counters.inFlight * secondEndpoint.weight
    let secondLoad = secondEndpoint.counters.inFlight * firstEndpoint.weight
    return secondLoad < firstLoad ? second : first
  }

  /// The candidate (other than `skipped`) whose share of the cumulative weight holds
  /// `target`, which is below the candidates' total weight (less `skipped`'s).
  private static func weightedSlot(_ set: EndpointSet, _ candidates: Candidates, at target: Int, skipping skipped: Int)
    -> Int
  {
    var remaining = target
    var last = -1
    for slot in set.slots.indices where slot != skipped {
      guard let endpoint = candidates.admit(set.slots[slot], slot: slot) else { continue }
      if remaining < endpoint.weight { return slot }
      remaining -= endpoint.weight
      last = slot
    }
    return last
  }

  // MARK: round_robin

  /// nginx's smooth weighted round robin: each candidate's current weight grows by its
  /// weight, the largest wins (the first on a tie) and gives back the candidates' total.
  /// Weights {5, 1, 1} give a a b a c a a: the heavy endpoint's turns are spread out, not
  /// sent in a burst. Endpoints that are not candidates for this pick keep their current
  /// weight untouched.
  private mutating func roundRobin(_ set: EndpointSet, _ candidates: Candidates) -> Int {
    if revision != set.revision || currentWeights.count != set.slots.count {
      // Membership changed: start over, as nginx does on a reload (a slot may now hold
      // another endpoint).
      currentWeights = Array(repeating: 0, count: set.slots.count)
      revision = set.revision
    }
    var total = 0
    var best = -1
    for slot in set.slots.indices {
      guard let endpoint = candidates.admit(set.slots[slot], slot: slot) else { continue }
      currentWeights[slot] += endpoint.weight
      total += endpoint.weight
      if best < 0 || currentWeights[slot] > currentWeights[best] { best = slot }
    }
    currentWeights[best] -= total
    return best
  }

  // MARK: hash

  /// Weighted rendezvous (highest random weight) hashing: the candidate with the highest
  /// `FleetHash.rendezvousScore` for the key. A key's endpoint depends only on the key and
  /// each candidate's address and weight, so an endpoint leaving (or being ejected, or tried
  /// already) moves only the keys it held, each to its second choice; they come back when
  /// it does. O(candidates) per pick, fine for fleets of a few hundred.
  private static func rendezvous(_ set: EndpointSet, _ candidates: Candidates, key: UInt64) -> Int {
    var best = -1
    var bestScore = -Double.infinity
    for slot in set.slots.indices {
      guard let endpoint = candidates.admit(set.slots[slot], slot: slot) else { continue }
      let score = FleetHash.rendezvousScore(key: key, identity: endpoint.identity, weight: endpoint.weight)
      if score > bestScore {
        best = slot
        bestScore = score
      }
    }
    return best
  }
}
