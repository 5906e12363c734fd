import CGatehouseLinux
import CGatehouseNghttp2
import CGatehouseOpenSSL
import CGatehouseSQLite
import CGatehouseZlib
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Proves that each C library module links and works, so a missing -dev package shows up here
/// and not deep inside a feature test.
@Suite struct CLibrariesTests {
  @Test func openSSLComputesSHA256OfKnownString() {
    let input: [UInt8] = Array("abc".utf8)
    var digest = [UInt8](repeating: 0, count: 32)
    let ok = input.withUnsafeBufferPointer { inBuf in
      digest.withUnsafeMutableBufferPointer { out in
        EVP_Digest(inBuf.baseAddress, inBuf.count, out.baseAddress, nil, EVP_sha256(), nil)
      }
    }
    #expect(ok == 1)
    let hex = digest.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
      .joined()
    #expect(hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  }

  @Test func sqliteRoundTripsInMemory() throws {
    var db: OpaquePointer?
    #expect(sqlite3_open(":memory:", &db) == SQLITE_OK)
    defer { sqlite3_close(db) }
    #expect(sqlite3_exec(db, "CREATE TABLE t(k TEXT PRIMARY KEY, v BLOB)", nil, nil, nil) == SQLITE_OK)
    var insert: OpaquePointer?
    #expect(sqlite3_prepare_v2(db, "INSERT INTO t VALUES (?, ?)", -1, &insert, nil) == SQLITE_OK)
    let blob: [UInt8] = [0, 1, 2, 250]
    sqlite3_bind_text(insert, 1, "key", -1, gh_sqlite_transient())
    blob.withUnsafeBytes { _ = sqlite3_bind_blob(insert, 2, $0.baseAddress, Int32($0.count), gh_sqlite_transient()) }
    #expect(sqlite3_step(insert) == SQLITE_DONE)
    sqlite3_finalize(insert)
    var select: OpaquePointer?
    #expect(sqlite3_prepare_v2(db, "SELECT v FROM t WHERE k = 'key'", -1, &select, nil) == SQLITE_OK)
    defer { sqlite3_finalize(select) }
    #expect(sqlite3_step(select) == SQLITE_ROW)
    let count = Int(sqlite3_column_bytes(select, 0))
    let pointer = sqlite3_column_blob(select, 0)!
    let back = Array(UnsafeRawBufferPointer(start: pointer, count: count))
    #expect(back == blob)
  }

  /// libnghttp2 links, and is new enough for the limits HTTP/2 connections set (1.52 with
  /// Debian's backports has `max_continuations`).
  @Test func nghttp2LinksAndHasTheLimitsWeSet() throws {
    let info = try #require(nghttp2_version(0))
    let version = info.pointee.version_num
    #expect(version >= 0x01_34_00, "nghttp2 \(String(version, radix: 16))")
    var option: OpaquePointer?
    #expect(nghttp2_option_new(&option) == 0)
    nghttp2_option_set_max_continuations(option, 8)
    nghttp2_option_del(option)
  }

  @Test func zlibCompressesAndRestores() {
    let input = [UInt8](repeating: 65, count: 4096)
    var compressedLength = compressBound(uLong(input.count))
    var compressed = [UInt8](repeating: 0, count: Int(compressedLength))
    #expect(compress(&compressed, &compressedLength, input, uLong(input.count)) == Z_OK)
    #expect(Int(compressedLength) < input.count / 10)
    var restoredLength = uLong(input.count)
    var restored = [UInt8](repeating: 0, count: input.count)
    #expect(uncompress(&restored, &restoredLength, compressed, compressedLength) == Z_OK)
    #expect(restored == input)
  }

  @Test func eventfdWakesEpoll() {
    let ep = gh_epoll_create()
    let efd = gh_eventfd(0, GH_EFD_NONBLOCK | GH_EFD_CLOEXEC)
    #expect(ep >= 0 && efd >= 0)
    defer {
      close(ep)
      close(efd)
    }
    #expect(gh_epoll_ctl(ep, GH_EPOLL_CTL_ADD, efd, GH_EPOLLIN, 42) == 0)
    var one: UInt64 = 1
    #expect(write(efd, &one, 8) == 8)
    var events = [gh_epoll_event](repeating: gh_epoll_event(), count: 4)
    let n = gh_epoll_wait(ep, &events, 4, 5000)
    #expect(n == 1)
    #expect(events[0].data == 42)
  }
}
