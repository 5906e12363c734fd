import Foundation
import Glibc

@testable import GatehouseNet

/// A TCP relay for TLS tests that makes the server see the client's Finished and its first application data
/// in one read: it passes the ClientHello and everything from the server at once, but holds what the client
/// sends afterwards until `holdUntil` bytes have gathered, then hands them over with one send.
/// `@unchecked Sendable`: its thread reads only the `let`s set before it starts.
final class CoalescingRelay: @unchecked Sendable {
  let port: UInt16
  private let listenFD: Int32
  private let target: UInt16
  private let holdUntil: Int

  init(to target: UInt16, holdUntil: Int) throws {
    let listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    self.listenFD = listenFD
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
        bind(listenFD, pointer, length) == 0 && listen(listenFD, 4) == 0 && getsockname(listenFD, pointer, &length) == 0
      }
    }
    guard bound else { throw TestFailure(description: "relay: \(errno)") }
    // A bounded accept, so the relay thread ends even when no client comes.
    var timeout = timeval(tv_sec: 30, tv_usec: 0)
    setsockopt(listenFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    port = UInt16(bigEndian: address.sin_port)
    self.target = target
    self.holdUntil = holdUntil
    Thread { [self] in run() }.start()
  }

  private func run() {
    defer { close(listenFD) }
    let client = accept(listenFD, nil, nil)
    guard client >= 0, let server = try? BlockingClient(port: target) else { return }
    defer { close(client) }
    var buffer = [UInt8](repeating: 0, count: 65536)
    var sentHello = false
    var held: [UInt8] = []
    var clientOpen = true
    while true {
      var fds = [
        pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: server.fd, events: Int16(POLLIN), revents: 0),
      ]
      if !clientOpen { fds[0].fd = -1 }
      guard poll(&fds, 2, 30_000) > 0 else { return }
      if fds[1].revents != 0 {
        let got = buffer.withUnsafeMutableBytes { recv(server.fd, $0.baseAddress, $0.count, 0) }
        if got <= 0 { return }
        _ = buffer.withUnsafeBytes { send(client, $0.baseAddress, got, Int32(MSG_NOSIGNAL)) }
      }
      if clientOpen, fds[0].revents != 0 {
        let got = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
        if got <= 0 {
          clientOpen = false
          server.shutdownWrite()
          continue
        }
        if !sentHello {
          sentHello = true
          try? server.send(Array(buffer[0..<got]))
        } else if held.count < holdUntil {
          held += buffer[0..<got]
          if held.count >= holdUntil { try? server.send(held) }
        } else {
          try? server.send(Array(buffer[0..<got]))
        }
      }
    }
  }
}
