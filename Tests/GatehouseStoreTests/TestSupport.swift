import Foundation
import Synchronization

@testable import GatehouseStore

/// A temporary directory under `FileManager.default.temporaryDirectory`, removed on deinit.
final class TemporaryDirectory {
  let url: URL
  var path: String { url.path }

  init() throws {
    url = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-store-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  }

  func file(_ name: String) -> String { url.appendingPathComponent(name).path }

  deinit { try? FileManager.default.removeItem(at: url) }
}

/// A clock tests move by hand.
final class ManualClock: Sendable {
  private let now: Atomic<Int64>
  init(_ start: Int64 = 1_700_000_000_000) { now = Atomic(start) }
  func advance(_ ms: Int64) { now.wrappingAdd(ms, ordering: .relaxed) }
  var millis: Int64 { now.load(ordering: .relaxed) }
  var function: @Sendable () -> Int64 { { self.now.load(ordering: .relaxed) } }
}

func makeStore(
  _ directory: TemporaryDirectory, name: String = "store.sqlite", maxBytes: Int64 = 1 << 24,
  secretKey: String? = nil, clock: ManualClock? = nil, configure: (inout Store.Configuration) -> Void = { _ in }
) throws -> Store {
  var configuration = Store.Configuration(path: directory.file(name), maxBytes: maxBytes, secretKey: secretKey)
  if let clock { configuration.clock = clock.function }
  configure(&configuration)
  return try Store.open(configuration)
}

func key(_ path: String, query: String = "") -> CacheKey {
  CacheKey(method: "GET", upstream: "api", path: path, query: query)
}

func fileBytes(_ path: String) -> [UInt8] {
  (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))) ?? []
}

func writeFile(_ path: String, _ bytes: some Sequence<UInt8>) throws {
  try Data(bytes).write(to: URL(fileURLWithPath: path))
}

func fileSize(_ path: String) -> Int? {
  (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
}

extension Array where Element == UInt8 {
  func contains(subsequence needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, count >= needle.count else { return false }
    for start in 0...(count - needle.count) where self[start] == needle[0] {
      if self[start..<start + needle.count].elementsEqual(needle) { return true }
    }
    return false
  }
}
