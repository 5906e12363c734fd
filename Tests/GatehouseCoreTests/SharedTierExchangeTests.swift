import GatehouseStore
import Testing

@testable import GatehouseCore

/// The exchange machine's shared-tier phase (Docs/shared-tier.md), event by event: asked once, on an
/// upstream failure with nothing stored here, before the fallback stub and the error answer.
@Suite struct SharedTierExchangeTests {
  typealias Machine = ExchangeMachine
  typealias Base = ExchangeMachineTests

  static func shared(stub: Machine.RouteFacts.Stub = .off) -> Machine.RouteFacts {
    var route = Base.cached()
    route.usesSharedTier = true
    route.stub = stub
    return route
  }

  @Test func aFailureWithNothingStoredAsksTheSharedTierThenServesItsAnswerStale() {
    var machine = Base.forwardedGET(Self.shared())
    #expect(machine.handle(Base.failed(.unavailable)) == [.discardUpstream, .lookUpSharedTier])
    #expect(machine.phase == .waiting(.sharedTier))
    // Bounded by the connection's command timeout, not by a deadline of the machine.
    #expect(machine.deadline == .none)
    #expect(machine.handle(.sharedTierLookedUp(found: true)) == [.serveStored(.stale), .finish])
    #expect(machine.phase == .done)
  }

  @Test func aMissGivesTheUsualAnswerAndTheTierIsAskedOnce() {
    var machine = Base.forwardedGET(Self.shared())
    _ = machine.handle(Base.failed(.timedOut))
    #expect(machine.handle(.sharedTierLookedUp(found: false)) == [.answerLocally(.upstream(.timedOut)), .finish])
    // A late or repeated reply changes nothing.
    #expect(machine.handle(.sharedTierLookedUp(found: true)) == [])

    var stubbed = Base.forwardedGET(Self.shared(stub: .fallback))
    _ = stubbed.handle(Base.failed(.closed, received: true))
    #expect(stubbed.handle(.sharedTierLookedUp(found: false)) == [.serveStub, .finish])
  }

  @Test func aLocalStaleAnswerOrARouteWithoutTheTierNeverAsks() {
    var local = Base.forwardedGET(Self.shared())
    #expect(local.handle(Base.failed(.unavailable, stale: true)) == [.discardUpstream, .serveStored(.stale), .finish])
    var plain = Base.forwardedGET(Base.cached())
    #expect(
      plain.handle(Base.failed(.unavailable)) == [.discardUpstream, .answerLocally(.upstream(.unavailable)), .finish])
  }

  @Test func theBreakersRefusingAlsoAsks() {
    var machine = Machine()
    _ = machine.handle(.started(Base.get(Self.shared())))
    #expect(machine.handle(.storeLookedUp(.miss)) == [.askBreakers(retry: false)])
    #expect(machine.handle(Base.failed(.circuitOpen)) == [.lookUpSharedTier])
    #expect(machine.handle(.sharedTierLookedUp(found: false)) == [.answerLocally(.upstream(.circuitOpen)), .finish])
  }

  /// Waiters share their leader's lookup: the leader kept what it found locally before it
  /// let them go, so a waiter does not ask again.
  @Test func collapsedWaitersShareTheLeadersLookup() {
    var waiter = Machine()
    _ = waiter.handle(.started(Base.get(Self.shared())))
    _ = waiter.handle(.storeLookedUp(.joinedCollapsed))
    #expect(
      waiter.handle(.collapsedEnded(.failed(.unavailable, staleAvailable: false)))
        == [.answerLocally(.upstream(.unavailable)), .finish])
    var served = Machine()
    _ = served.handle(.started(Base.get(Self.shared())))
    _ = served.handle(.storeLookedUp(.joinedCollapsed))
    #expect(
      served.handle(.collapsedEnded(.failed(.unavailable, staleAvailable: true))) == [.serveStored(.stale), .finish])
  }

  @Test func theClientLeavingOrItsBodyWhileWaiting() {
    var machine = Base.forwardedGET(Self.shared())
    _ = machine.handle(Base.failed(.unavailable))
    #expect(machine.handle(.clientBody(count: 3)) == [.dropBody])
    #expect(machine.handle(.clientGone) == [.finish])
    #expect(machine.handle(.sharedTierLookedUp(found: true)) == [])
  }
}

/// The shared tier's record: round trips, sealed and not, and refuses garbage without
/// trapping (random bytes, truncations, flipped bytes).
@Suite struct SharedTierRecordTests {
  static let answer = StoredAnswer(
    status: 200, headers: [("Content-Type", "application/json"), ("ETag", "\"v1\"")],
    body: Array(#"{"id":1}"#.utf8), storedAtMs: 1_700_000_000_123)

  static func refusal(_ result: Result<StoredAnswer, SharedTierRecord.Refusal>) -> SharedTierRecord.Refusal? {
    if case .failure(let refusal) = result { return refusal }
    return nil
  }

  static func same(_ left: StoredAnswer, _ right: StoredAnswer) -> Bool {
    left.status == right.status && left.body == right.body && left.storedAtMs == right.storedAtMs
      && left.headers.map { "\($0.name): \($0.value)" } == right.headers.map { "\($0.name): \($0.value)" }
  }

  @Test func roundTripsPlainAndSealed() throws {
    let plain = try #require(SharedTierRecord.encode(Self.answer, id: "k1", sealer: nil))
    let decoded = try SharedTierRecord.decode(plain, id: "k1", sealer: nil, maxBytes: 1 << 20).get()
    #expect(Self.same(decoded, Self.answer))

    let sealer = SharedRecordSealer(secret: "a-secret-of-some-length-0123456789")
    let sealed = try #require(SharedTierRecord.encode(Self.answer, id: "k1", sealer: sealer))
    #expect(!sealed.containsSubsequence(Array(#""id":1"#.utf8)))
    #expect(
      Self.same(try SharedTierRecord.decode(sealed, id: "k1", sealer: sealer, maxBytes: 1 << 20).get(), Self.answer))
    // Another key's id, another secret, no secret, or a plain record where a secret is set: refused.
    #expect(Self.refusal(SharedTierRecord.decode(sealed, id: "k2", sealer: sealer, maxBytes: 1 << 20)) == .seal)
    let other = SharedRecordSealer(secret: "another-secret-of-some-length-012345")
    #expect(Self.refusal(SharedTierRecord.decode(sealed, id: "k1", sealer: other, maxBytes: 1 << 20)) == .seal)
    #expect(Self.refusal(SharedTierRecord.decode(sealed, id: "k1", sealer: nil, maxBytes: 1 << 20)) == .seal)
    #expect(Self.refusal(SharedTierRecord.decode(plain, id: "k1", sealer: sealer, maxBytes: 1 << 20)) == .seal)
    // Larger than the reader's bound.
    #expect(Self.refusal(SharedTierRecord.decode(plain, id: "k1", sealer: nil, maxBytes: 8)) == .notARecord)
  }

  /// A plain record names the key it was written under: copied to another key it is refused,
  /// as a sealed one is (the seal's additional data is the id too). A record of the format
  /// before the id (version 1) is another version: a miss, never read as if it had one.
  /// A stored time no gateway writes (before the epoch, past the year 9999) is a malformed
  /// record: ages worked out from the extremes overflowed and stopped the process.
  @Test func aRecordFromAnImpossibleTimeIsRefused() throws {
    let id = String(repeating: "a", count: 64)
    for storedAt: Int64 in [Int64.min, Int64.min + 1, -5, 253_402_300_800_000, Int64.max] {
      var answer = Self.answer
      answer.storedAtMs = storedAt
      let record = try #require(SharedTierRecord.encode(answer, id: id, sealer: nil))
      #expect(Self.refusal(SharedTierRecord.decode(record, id: id, sealer: nil, maxBytes: 1 << 20)) == .malformed)
    }
    var latest = Self.answer
    latest.storedAtMs = 253_402_300_799_999
    let record = try #require(SharedTierRecord.encode(latest, id: id, sealer: nil))
    #expect(
      try SharedTierRecord.decode(record, id: id, sealer: nil, maxBytes: 1 << 20).get().storedAtMs == latest.storedAtMs)
    // Ages from stored times far from now saturate.
    #expect(StoreEntryRules.servedAge(initialAge: 0, storedAtMs: Int64.min, nowMs: 1_000) > 0)
    #expect(StoreEntryRules.servedAge(initialAge: Int64.max, storedAtMs: 0, nowMs: Int64.max) > 0)
    #expect(StoreEntryRules.elapsedMs(since: Int64.min, nowMs: 5) == Int64.max)
    #expect(StoreEntryRules.elapsedMs(since: Int64.max, nowMs: -5) == Int64.min)
  }

  @Test func aRecordIsBoundToItsKey() throws {
    let id = String(repeating: "a", count: 64)
    let other = String(repeating: "b", count: 64)
    let plain = try #require(SharedTierRecord.encode(Self.answer, id: id, sealer: nil))
    #expect(Self.same(try SharedTierRecord.decode(plain, id: id, sealer: nil, maxBytes: 1 << 20).get(), Self.answer))
    #expect(Self.refusal(SharedTierRecord.decode(plain, id: other, sealer: nil, maxBytes: 1 << 20)) == .otherKey)
    // A prefix or an extension of the id is another id.
    #expect(
      Self.refusal(SharedTierRecord.decode(plain, id: String(id.dropLast()), sealer: nil, maxBytes: 1 << 20))
        == .otherKey)
    #expect(Self.refusal(SharedTierRecord.decode(plain, id: id + "a", sealer: nil, maxBytes: 1 << 20)) == .otherKey)
    let sealer = SharedRecordSealer(secret: "a-secret-of-some-length-0123456789")
    let sealed = try #require(SharedTierRecord.encode(Self.answer, id: id, sealer: sealer))
    #expect(Self.refusal(SharedTierRecord.decode(sealed, id: other, sealer: sealer, maxBytes: 1 << 20)) == .seal)
    #expect(
      Self.same(try SharedTierRecord.decode(sealed, id: id, sealer: sealer, maxBytes: 1 << 20).get(), Self.answer))

    // Version 1, as written before records named their key: status first, no id.
    var old: [UInt8] = [0x47, 0x48, 1, 0, 0, 200]
    old += [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2] + Array("{}".utf8)
    #expect(Self.refusal(SharedTierRecord.decode(old, id: id, sealer: nil, maxBytes: 1 << 20)) == .unknownVersion)
    #expect(SharedTierRecord.Refusal.unknownVersion.label == "version")
    #expect(SharedTierRecord.Refusal.otherKey.label == "key")
    #expect(SharedTierRecord.encode(Self.answer, id: String(repeating: "x", count: 256), sealer: nil) == nil)
  }

  @Test func garbageIsRefusedNeverTrusted() throws {
    let plain = try #require(SharedTierRecord.encode(Self.answer, id: "k", sealer: nil))
    // Every truncation.
    for length in 0..<plain.count {
      #expect(
        (try? SharedTierRecord.decode(Array(plain.prefix(length)), id: "k", sealer: nil, maxBytes: 1 << 20).get())
          == nil)
    }
    // Trailing bytes.
    #expect(Self.refusal(SharedTierRecord.decode(plain + [0], id: "k", sealer: nil, maxBytes: 1 << 20)) == .malformed)
    // A header that would smuggle a line.
    var smuggled = Self.answer
    smuggled.headers = [("X-A", "a\r\nSet-Cookie: x=1")]
    let bad = try #require(SharedTierRecord.encode(smuggled, id: "k", sealer: nil))
    #expect(Self.refusal(SharedTierRecord.decode(bad, id: "k", sealer: nil, maxBytes: 1 << 20)) == .malformed)
    // Random bytes and random flips: any result, but no trap, and every accepted record is in bounds.
    var random = SplitMix64(seed: 28)
    for round in 0..<4000 {
      var bytes: [UInt8]
      if round % 2 == 0 {
        bytes = (0..<Int(random.next() % 200)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        if round % 4 == 0, bytes.count >= 4 {
          bytes[0] = 0x47
          bytes[1] = 0x48
          bytes[2] = SharedTierRecord.version
          bytes[3] = 0
        }
      } else {
        bytes = plain
        for _ in 0..<(1 + Int(random.next() % 4)) {
          bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
        }
      }
      if case .success(let answer) = SharedTierRecord.decode(bytes, id: "k", sealer: nil, maxBytes: 1 << 20) {
        #expect((100...599).contains(answer.status))
        #expect(answer.headers.count <= SharedTierRecord.maxHeaders)
      }
    }
  }
}

extension Array where Element == UInt8 {
  fileprivate func containsSubsequence(_ needle: [UInt8]) -> Bool {
    guard needle.count <= count else { return false }
    for start in 0...(count - needle.count) where self[start..<start + needle.count].elementsEqual(needle) {
      return true
    }
    return false
  }
}
