/// The passive-ejection state of one endpoint, kept in its `FleetEndpoint` so that it
/// survives re-resolutions that keep the address. Only `OutlierDetector` changes it.
struct OutlierState: Sendable, Equatable {
  /// Failed tries since the last success (or the last ejection).
  var consecutiveFailures = 0
  /// Ejections that count towards the next one's length: 1 for the first ejection (the base
  /// time), up to `OutlierDetector.maximumRepeat`. It decays: see `OutlierDetector`.
  var repeatCount = 0
  /// When the current ejection ends (monotonic ns). Set from ejection until the detector
  /// notices the end and reports `.returned`; whether it is still in force is
  /// `FleetEndpoint.isEjected(now:)`.
  var ejectedUntil: UInt64?
  /// Since when `repeatCount` has been decaying: the end of the last ejection, moved on by
  /// one ejection time per step taken off.
  var calmSince: UInt64 = 0
}

/// What passive ejection did, for the caller to log (and count).
enum OutlierEvent: Sendable, Equatable {
  /// The endpoint gets no requests (outside panic) until `until` (monotonic ns).
  case ejected(EndpointID, until: UInt64)
  /// Its ejection time is over: it takes requests again.
  case returned(EndpointID)
}

/// Passive outlier ejection (`outlier`): an endpoint whose tries fail `failures` times in a
/// row is taken out of balancing for a while, longer each time it comes back failing.
///
/// - Ejection lasts `eject_ms × min(2^(n-1), 10)` for the n-th ejection in a row: 1×, 2×,
///   4×, 8×, then 10× at most. `n` (`OutlierState.repeatCount`) decays by one for every
///   full `eject_ms` the endpoint spends not ejected (Envoy lowers its multiplier once per
///   detection interval it finds the host in). So an endpoint that fails once a day starts
///   at the base time every time, and one that flaps keeps getting longer breaks.
/// - At most `max_ejected_percent` of the endpoints (draining ones left out of the count)
///   are ejected at a time, rounded down but at least one as soon as the fleet has two;
///   a single endpoint is never ejected (it would only send every request through panic
///   anyway). An endpoint that reaches `failures` while that limit is reached stays at the
///   threshold, so its next failure is ejected as soon as there is room.
/// - Failures of tries that end while the endpoint is ejected (sent before it was, or in
///   panic) neither extend nor renew the ejection.
/// - A success resets the consecutive count. A returning endpoint starts again from zero
///   failures.
///
/// Returns are reported by `sweep` (and by `record` on its way): call `sweep` now and then
/// (each second, say) so that a return is logged even when no try finishes. Balancing does
/// not wait for it: an endpoint is available again as soon as `now` passes `ejectedUntil`.
struct OutlierDetector: Sendable {
  /// The repeat count at which the multiplier reaches its cap of 10 (2^4 = 16 > 10); it is
  /// not counted higher, so that the decay after a long outage takes a few steps, not one
  /// per ejection ever made.
  static let maximumRepeat = 5
  static let maximumMultiplier: UInt64 = 10

  /// Consecutive failures that eject (`failures`); 0 turns ejection off.
  let failures: Int
  /// The base ejection time (`eject_ms`) in nanoseconds.
  let ejectNanoseconds: UInt64
  /// `max_ejected_percent`; 0 turns ejection off.
  let maxEjectedPercent: Int
  /// The earliest `ejectedUntil` not yet reported as returned (`.max` when none), so
  /// `record` finds out in O(1) that nothing is due. It starts at 0 so that the first call
  /// looks: a detector made anew (a reload that changed `outlier`) may be handed a set
  /// with ejections in it.
  private var nextReturn: UInt64 = 0

  init(failures: Int = 5, ejectMilliseconds: Int = 10_000, maxEjectedPercent: Int = 50) {
    self.failures = max(0, failures)
    let (nanoseconds, overflow) = UInt64(max(0, ejectMilliseconds)).multipliedReportingOverflow(by: 1_000_000)
    self.ejectNanoseconds = overflow ? .max : nanoseconds
    self.maxEjectedPercent = max(0, maxEjectedPercent)
  }

  /// How long the `repeatCount`-th ejection in a row lasts: `eject_ms × min(2^(n-1), 10)`.
  func ejectionNanoseconds(repeatCount: Int) -> UInt64 {
    let exponent = min(max(repeatCount, 1), Self.maximumRepeat) - 1
    let multiplier = min(UInt64(1) << UInt64(exponent), Self.maximumMultiplier)
    let (duration, overflow) = ejectNanoseconds.multipliedReportingOverflow(by: multiplier)
    return overflow ? .max : duration
  }

  /// How many of `endpointCount` endpoints may be ejected at once.
  func maximumEjected(endpointCount: Int) -> Int {
    guard failures > 0, maxEjectedPercent > 0, endpointCount >= 2 else { return 0 }
    return min(endpointCount, max(1, endpointCount * maxEjectedPercent / 100))
  }

  /// The repeat count of `state` at `now`, after its decay: one step off for each full
  /// ejection time spent not ejected since `calmSince`.
  func decayed(_ state: OutlierState, now: UInt64) -> OutlierState {
    var state = state
    guard state.repeatCount > 0, state.ejectedUntil == nil, ejectNanoseconds > 0, now > state.calmSince else {
      return state
    }
    let steps = (now - state.calmSince) / ejectNanoseconds
    guard steps > 0 else { return state }
    if steps >= UInt64(state.repeatCount) {
      state.repeatCount = 0
      state.calmSince = now
    } else {
      state.repeatCount -= Int(steps)
      state.calmSince += steps * ejectNanoseconds
    }
    return state
  }

  /// Records how a try on `id` ended at `now` (nil outcomes are not reported here) and
  /// returns what that did: the returns that were due, then the endpoint's ejection if
  /// this failure ejected it. Usually empty (no allocation).
  mutating func record(
    _ outcome: AttemptOutcome, for id: EndpointID, in set: inout EndpointSet, now: UInt64
  ) -> [OutlierEvent] {
    var events: [OutlierEvent] = []
    if now >= nextReturn { events = sweep(&set, now: now) }
    guard set.contains(id) else { return events }
    var state = set[outlier: id]
    guard case .failure = outcome else {
      if state.consecutiveFailures != 0 {
        state.consecutiveFailures = 0
        set[outlier: id] = state
      }
      return events
    }
    let endpoint = set[id]
    guard failures > 0, !endpoint.isEjected(now: now) else { return events }
    state.consecutiveFailures += 1
    defer { set[outlier: id] = state }
    // A draining endpoint gets no new requests anyway; ejecting it would only use up room
    // under the percentage.
    guard state.consecutiveFailures >= failures, !endpoint.draining else { return events }
    let (present, ejected) = Self.census(set, now: now)
    guard ejected < maximumEjected(endpointCount: present) else { return events }
    state = decayed(state, now: now)
    state.repeatCount = min(state.repeatCount + 1, Self.maximumRepeat)
    let (until, overflow) = now.addingReportingOverflow(ejectionNanoseconds(repeatCount: state.repeatCount))
    state.ejectedUntil = overflow ? .max : until
    state.consecutiveFailures = 0
    nextReturn = min(nextReturn, state.ejectedUntil!)
    events.append(.ejected(id, until: state.ejectedUntil!))
    return events
  }

  /// Ends the ejections that are over at `now` and reports them, in slot order.
  mutating func sweep(_ set: inout EndpointSet, now: UInt64) -> [OutlierEvent] {
    guard now >= nextReturn else { return [] }
    var events: [OutlierEvent] = []
    var next = UInt64.max
    for slot in set.slots.indices {
      guard let endpoint = set.slots[slot], let until = endpoint.outlier.ejectedUntil else { continue }
      guard now >= until else {
        next = min(next, until)
        continue
      }
      let id = EndpointID(slot: slot)
      var state = endpoint.outlier
      state.ejectedUntil = nil
      state.consecutiveFailures = 0
      // The decay counts from the moment the endpoint was back, not from when this sweep
      // happened to run.
      state.calmSince = until
      set[outlier: id] = state
      events.append(.returned(id))
    }
    nextReturn = next
    return events
  }

  /// Endpoints that count for the percentage (all but the draining) and how many of them
  /// are ejected at `now`.
  private static func census(_ set: EndpointSet, now: UInt64) -> (present: Int, ejected: Int) {
    var present = 0
    var ejected = 0
    for endpoint in set.slots {
      guard let endpoint, !endpoint.draining else { continue }
      present += 1
      if endpoint.isEjected(now: now) { ejected += 1 }
    }
    return (present, ejected)
  }
}
