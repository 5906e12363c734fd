// The store's crash-test workload (see Scripts/store-crash-test.sh and CrashTests.swift).
//
//   GatehouseStoreCrashWriter write <db> <run>            heavy writes until killed; prints
//                                                         "committed <seq>" after each flush
//   GatehouseStoreCrashWriter verify <db> <run> <seq>     exit 0 and "ok ..." when the file is
//                                                         sound and entries up to <seq> of
//                                                         <run>'s last batch read back intact
//   GatehouseStoreCrashWriter open <db>                   opens and closes the store, printing
//                                                         "opened", its warnings, or "error <...>"
//                                                         (the store tests run it as another user)
import GatehouseStore

#if canImport(Glibc)
  import Glibc
#endif

let batchSize = 50

func key(run: Int, seq: Int) -> CacheKey {
  CacheKey(method: "GET", upstream: "crash", path: "/crash/\(run)/\(seq)", query: "n=\(seq)")
}

/// A body that depends on (run, seq) only, so the verifier can rebuild it.
func body(run: Int, seq: Int) -> [UInt8] {
  let count = 200 + (seq &* 7919 + run &* 104_729) % 4000
  return (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seq &+ run &* 7) }
}

func configuration(_ path: String) -> Store.Configuration {
  var configuration = Store.Configuration(path: path, maxBytes: 8 << 20, secretKey: "crash-test-secret")
  configuration.idleCheckpointMs = 200
  return configuration
}

func fail(_ message: String) -> Never {
  print("FAIL \(message)")
  fflush(nil)  // nil: all streams (the `stdout` global is not concurrency-safe)
  exit(1)
}

func write(path: String, run: Int) -> Never {
  let store: Store
  do { store = try Store.open(configuration(path)) } catch { fail("open: \(error)") }
  for warning in store.warnings { print("warning: \(warning)") }
  var seq = 0
  while true {
    var accepted = true
    for _ in 0..<batchSize {
      accepted =
        store.remember(
          key: key(run: run, seq: seq), status: 200,
          headers: [("Content-Type", "application/json"), ("X-Seq", "\(seq)")],
          body: body(run: run, seq: seq)) && accepted
      seq += 1
    }
    try? store.saveToken(
      name: "crash", value: "token-\(run)-\(seq)", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    store.flush()
    // Only claim what was accepted and committed; a dropped write would not be readable.
    if accepted { print("committed \(seq - 1)") } else { print("dropped \(seq - 1)") }
    fflush(nil)  // nil: all streams (the `stdout` global is not concurrency-safe)
  }
}

func verify(path: String, run: Int, lastSeq: Int) -> Never {
  let store: Store
  do { store = try Store.open(configuration(path)) } catch { fail("open: \(error)") }
  defer { store.close() }
  if !store.warnings.isEmpty { fail("store was damaged: \(store.warnings)") }
  do {
    let check = try store.checkIntegrity()
    if check != ["ok"] { fail("integrity_check: \(check)") }
  } catch { fail("integrity_check: \(error)") }

  // The whole last committed batch must be there, byte for byte.
  let reader: StoreReader
  do { reader = try store.makeReader() } catch { fail("reader: \(error)") }
  var checked = 0
  if lastSeq >= 0 {
    for seq in max(0, lastSeq - batchSize + 1)...lastSeq {
      guard let found = reader.lookup(key(run: run, seq: seq)) else { fail("run \(run) seq \(seq) missing") }
      if found.body != body(run: run, seq: seq) || found.status != 200 { fail("run \(run) seq \(seq) differs") }
      checked += 1
    }
  }
  // Every entry still present (any run, eviction may have removed old ones) must be intact.
  var cursor: String? = nil
  var present = 0
  repeat {
    do {
      let page = try store.list(prefix: "/crash/", limit: 500, cursor: cursor)
      for summary in page.entries {
        let parts = summary.path.split(separator: "/")
        guard parts.count == 3, let entryRun = Int(parts[1]), let seq = Int(parts[2]) else {
          fail("unexpected path \(summary.path)")
        }
        guard let detail = try store.entry(id: summary.id) else { fail("\(summary.path) listed but not found") }
        if detail.body != body(run: entryRun, seq: seq) { fail("\(summary.path) body differs") }
        present += 1
      }
      cursor = page.nextCursor
    } catch { fail("list: \(error)") }
  } while cursor != nil
  print("ok run=\(run) last=\(lastSeq) checked=\(checked) present=\(present)")
  fflush(nil)  // nil: all streams (the `stdout` global is not concurrency-safe)
  exit(0)
}

func openOnce(path: String) -> Never {
  do {
    let store = try Store.open(configuration(path))
    print("opened")
    for warning in store.warnings { print("warning: \(warning)") }
    store.close()
  } catch {
    print("error \(error)")
  }
  fflush(nil)  // nil: all streams (the `stdout` global is not concurrency-safe)
  exit(0)
}

let arguments = CommandLine.arguments
switch arguments.count >= 3 ? arguments[1] : "" {
case "open":
  openOnce(path: arguments[2])
case "write":
  guard arguments.count >= 4, let run = Int(arguments[3]) else { fail("bad run") }
  write(path: arguments[2], run: run)
case "verify":
  guard arguments.count >= 5, let run = Int(arguments[3]), let seq = Int(arguments[4]) else { fail("bad arguments") }
  verify(path: arguments[2], run: run, lastSeq: seq)
default:
  print("usage: GatehouseStoreCrashWriter write <db> <run> | verify <db> <run> <last-seq> | open <db>")
  exit(2)
}
