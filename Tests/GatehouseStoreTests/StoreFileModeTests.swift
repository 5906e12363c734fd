import Foundation
import Testing

@testable import GatehouseStore

/// The store holds answers and token values: files it creates are for its owner alone.
@Suite struct StoreFileModeTests {
  /// The permission bits of `path`, or nil when it does not exist.
  private func mode(_ path: String) -> mode_t? {
    var info = stat()
    return stat(path, &info) == 0 ? info.st_mode & 0o777 : nil
  }

  private func writeOne(_ store: Store) throws {
    store.remember(key: key("/a"), status: 200, headers: [], body: [1, 2, 3])
    try store.saveToken(name: "api", value: "tok", expiresAtMs: nil, refreshedAtMs: nil, state: "valid", lastError: nil)
    store.flush()
  }

  // Mode bits are checked even as root, who could read the files anyway: they are what
  // every other user of the machine gets.
  @Test func aNewStoreCreatesItsFilesOwnerOnly() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    let store = try makeStore(directory)
    defer { store.close() }
    try writeOne(store)
    for file in [path, path + "-wal", path + "-shm", path + ".lock"] {
      #expect(mode(file) == 0o600, "\(file): \(mode(file).map { String($0, radix: 8) } ?? "missing")")
    }
  }

  @Test func aStoreMovedAsideIsRecreatedOwnerOnly() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    try writeFile(path, [UInt8](repeating: 0x33, count: 4096))  // not a database
    let store = try makeStore(directory)
    defer { store.close() }
    #expect(store.warnings.contains { $0.contains("moved it to") }, "\(store.warnings)")
    try writeOne(store)
    for file in [path, path + "-wal", path + "-shm"] {
      #expect(mode(file) == 0o600, "\(file): \(mode(file).map { String($0, radix: 8) } ?? "missing")")
    }
  }

  /// Only new files: a file the operator set up keeps its mode (SQLite gives `-wal` and
  /// `-shm` the database's), and so does an existing lock file.
  @Test func existingFilesKeepTheirMode() throws {
    let directory = try TemporaryDirectory()
    let path = directory.file("store.sqlite")
    for file in [path, path + ".lock"] {
      let descriptor = open(file, O_WRONLY | O_CREAT | O_EXCL, 0o640)
      #expect(descriptor >= 0)
      close(descriptor)
      #expect(chmod(file, 0o640) == 0)  // whatever the umask
    }
    let store = try makeStore(directory)
    defer { store.close() }
    try writeOne(store)
    for file in [path, path + "-wal", path + "-shm", path + ".lock"] {
      #expect(mode(file) == 0o640, "\(file): \(mode(file).map { String($0, radix: 8) } ?? "missing")")
    }
  }
}
