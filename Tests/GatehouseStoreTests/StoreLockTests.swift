import Foundation
import Synchronization
import Testing

@testable import GatehouseStore

/// Two stores on one file stand for two gateways: `flock` locks belong to an open file, so
/// two opens in one process conflict exactly as two processes do.
@Suite struct StoreLockTests {
  /// Collects what a store reports after opening.
  final class Reports: Sendable {
    private let messages = Mutex<[String]>([])
    var all: [String] { messages.withLock { $0 } }
    var sink: @Sendable (String) -> Void { { message in self.messages.withLock { $0.append(message) } } }
  }

  private func seed(_ store: Store, _ paths: [String]) {
    for path in paths { store.remember(key: key(path), status: 200, headers: [], body: Array(path.utf8)) }
    store.flush()
  }

  @Test func theWatchWarnsOnceAfterTheGracePeriodAndNotesATakeOver() {
    var watch = SharedFileWatch(sinceMs: 1000, graceMs: 500)
    #expect(watch.observe(acquired: false, nowMs: 1000) == .none)
    #expect(watch.observe(acquired: false, nowMs: 1499) == .none)
    #expect(watch.observe(acquired: false, nowMs: 1500) == .warnShared)
    #expect(watch.observe(acquired: false, nowMs: 90_000) == .none)  // said once
    #expect(watch.observe(acquired: true, nowMs: 90_001) == .tookOver(afterWarning: true))

    var overlap = SharedFileWatch(sinceMs: 0, graceMs: 500)
    #expect(overlap.observe(acquired: false, nowMs: 100) == .none)
    #expect(overlap.observe(acquired: true, nowMs: 200) == .tookOver(afterWarning: false))

    var immediate = SharedFileWatch(sinceMs: 0, graceMs: 0)
    #expect(immediate.observe(acquired: false, nowMs: 0) == .warnShared)
  }

  @Test func aSecondStoreOnTheFileIsReportedOnceTheGracePeriodIsOver() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let first = try makeStore(directory, clock: clock)
    defer { first.close() }
    let reports = Reports()
    let second = try makeStore(directory, clock: clock) {
      $0.sharedFileGraceMs = 15_000
      $0.onWarning = reports.sink
    }
    defer { second.close() }
    #expect(second.warnings.isEmpty)
    second.flush()
    #expect(reports.all.isEmpty)

    clock.advance(15_000)
    second.flush()
    #expect(reports.all.count == 1)
    let warning = reports.all.first ?? ""
    #expect(warning.contains("is also used by another process (pid \(getpid()))"), "\(warning)")
    #expect(warning.contains(directory.file("store.sqlite.lock")))
    clock.advance(60_000)
    second.flush()
    #expect(reports.all.count == 1)

    // The second store still serves and stores: sharing costs accounting, not the store.
    seed(second, ["/second"])
    #expect(try second.makeReader().lookup(key("/second")) != nil)
  }

  @Test func aRestartOverlapIsSilentAndTheNewStoreTakesTheLockWithExactTotals() throws {
    let directory = try TemporaryDirectory()
    let clock = ManualClock()
    let old = try makeStore(directory, clock: clock)
    let reports = Reports()
    let new = try makeStore(directory, clock: clock) {
      $0.sharedFileGraceMs = 15_000
      $0.onWarning = reports.sink
    }
    defer { new.close() }
    seed(old, ["/old/1", "/old/2"])  // the draining gateway still writes
    seed(new, ["/new/1"])
    old.close()

    new.flush()  // takes the lock and counts the rows the old process wrote
    #expect(new.stats().entries == 3)
    clock.advance(60_000)
    new.flush()
    #expect(reports.all.isEmpty)
    #expect(new.warnings.isEmpty)

    // The lock is the new store's now: a third one sees it taken (grace 0: said at open).
    let third = try makeStore(directory, clock: clock) { $0.sharedFileGraceMs = 0 }
    defer { third.close() }
    #expect(third.warnings.count == 1 && third.warnings[0].contains("another process"), "\(third.warnings)")
  }

  @Test func aDamagedFileAnotherProcessHoldsIsLeftInPlace() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let garbage = [UInt8](repeating: 0x33, count: 4096)
    try writeFile(path, garbage)
    let descriptor = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
    #expect(descriptor >= 0)
    defer { close(descriptor) }
    #expect(flock(descriptor, LOCK_EX | LOCK_NB) == 0)
    #expect {
      try makeStore(directory) { $0.sharedFileGraceMs = 0 }
    } throws: { error in
      guard let error = error as? StoreError else { return false }
      return error.message.contains("looks damaged") && error.message.contains("another process holds")
    }
    let same = fileBytes(path) == garbage  // a Bool: a failure does not print the bytes
    #expect(same, "the file changed")
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains(".corrupt-") }
        .isEmpty)
  }
}
