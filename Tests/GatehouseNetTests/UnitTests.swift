import Glibc
import Testing

@testable import GatehouseNet

@Suite struct AddressParsingTests {
  @Test func ipv4Literal() throws {
    let address = try SocketAddress(parsing: "127.0.0.1:8080")
    #expect(address.port == 8080)
    #expect(address.hostText == "127.0.0.1")
    #expect(address.description == "127.0.0.1:8080")
    #expect(address == .loopback(port: 8080))
  }

  @Test func bracketedIPv6() throws {
    let address = try SocketAddress(parsing: "[::1]:443")
    #expect(address.port == 443)
    #expect(address.hostText == "::1")
    #expect(address.description == "[::1]:443")
    #expect(address.family == AF_INET6)
  }

  @Test func localhostMeansIPv4Loopback() throws {
    #expect(try SocketAddress(parsing: "localhost:0") == .loopback(port: 0))
  }

  @Test(arguments: [
    "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:+1", "::1:80",
    "[::1]80", "[::1", "example.com:80", "300.1.1.1:80", ":80",
  ])
  func rejects(_ text: String) {
    #expect(throws: AddressParseError.self) { try SocketAddress(parsing: text) }
  }

  @Test func withPortKeepsTheHost() throws {
    let address = try SocketAddress(parsing: "[fe80::1]:1").withPort(9)
    #expect(address.description == "[fe80::1]:9")
  }
}

@Suite struct TimerQueueTests {
  @Test func popsInDeadlineOrderWithTiesInSchedulingOrder() {
    var queue = TimerQueue<String>()
    _ = queue.schedule(deadline: 30, "c")
    _ = queue.schedule(deadline: 10, "a")
    _ = queue.schedule(deadline: 20, "b1")
    _ = queue.schedule(deadline: 20, "b2")
    _ = queue.schedule(deadline: 50, "e")
    #expect(queue.nearestDeadline == 10)
    var fired: [String] = []
    while let action = queue.popExpired(now: 40) { fired.append(action) }
    #expect(fired == ["a", "b1", "b2", "c"])
    #expect(queue.popExpired(now: 49) == nil)
    #expect(queue.popExpired(now: 50) == "e")
    #expect(queue.isEmpty)
  }

  @Test func cancelRemovesAtOnceAndStaleHandlesMiss() {
    var queue = TimerQueue<Int>()
    var handles: [TimerHandle] = []
    for deadline in [50, 10, 40, 20, 30, 60, 5] {
      handles.append(queue.schedule(deadline: UInt64(deadline), deadline))
    }
    let cancelledForty = queue.cancel(handles[2])
    let cancelledFive = queue.cancel(handles[6])
    let cancelledFiveAgain = queue.cancel(handles[6])
    #expect(cancelledForty && cancelledFive && !cancelledFiveAgain)
    #expect(queue.count == 5)
    var fired: [Int] = []
    while let action = queue.popExpired(now: 100) { fired.append(action) }
    #expect(fired == [10, 20, 30, 50, 60])
    // Slots are reused; old handles must not cancel the new occupants.
    let fresh = queue.schedule(deadline: 1, 1)
    let cancelledStale = queue.cancel(handles[0])
    #expect(!cancelledStale)
    #expect(queue.count == 1)
    let cancelledFresh = queue.cancel(fresh)
    #expect(cancelledFresh)
  }

  @Test func manyRandomOperationsKeepHeapOrder() {
    var queue = TimerQueue<UInt64>()
    var generator = SystemRandomNumberGenerator()
    var live: [(TimerHandle, UInt64)] = []
    for _ in 0..<2_000 {
      let deadline = UInt64.random(in: 0..<10_000, using: &generator)
      live.append((queue.schedule(deadline: deadline, deadline), deadline))
      if Bool.random(using: &generator), !live.isEmpty {
        let index = Int.random(in: 0..<live.count, using: &generator)
        let cancelled = queue.cancel(live[index].0)
        #expect(cancelled)
        live.remove(at: index)
      }
    }
    var fired: [UInt64] = []
    while let deadline = queue.popExpired(now: .max) { fired.append(deadline) }
    #expect(fired == live.map(\.1).sorted())
  }
}

@Suite struct SyscallTests {
  @Test func emptyNonBlockingReadWouldBlock() throws {
    let fd = try Syscall.eventFD()
    defer { Syscall.close(fd) }
    var scratch = [UInt8](repeating: 0, count: 8)
    let result = try scratch.withUnsafeMutableBytes { try Syscall.read(fd, into: $0) }
    #expect(result == .wouldBlock)
    try Syscall.signalEventFD(fd)
    let again = try scratch.withUnsafeMutableBytes { try Syscall.read(fd, into: $0) }
    #expect(again == .processed(8))
  }

  @Test func errorsCarryErrnoAndCallName() {
    let error = SystemError(errno: ECONNREFUSED, syscall: "connect")
    #expect(error.description.contains("connect failed"))
    #expect(error.description.contains("refused"))
    #expect(error.description.contains("errno \(ECONNREFUSED)"))
  }

  @Test func otherErrnosAreThrown() {
    // Binding a listener to an address of this host that is already taken: EADDRINUSE, not a crash.
    #expect(throws: SystemError.self) {
      let first = try TCPListener(address: .loopback(port: 0), reusePort: false)
      _ = try TCPListener(address: .loopback(port: first.localPort), reusePort: false)
    }
  }

  @Test func durationsConvertToNanoseconds() {
    #expect(EventLoop.nanoseconds(.milliseconds(1500)) == 1_500_000_000)
    #expect(EventLoop.nanoseconds(.zero) == 0)
    #expect(EventLoop.nanoseconds(.milliseconds(-5)) == 0)
  }
}
