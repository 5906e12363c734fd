import GatehouseNet

#if canImport(Glibc)
  import Glibc
#endif

/// How `gatehouse admin` checks an https admin listener (`--url https://…`): the trust
/// (system store, `--ca FILE`, or none with `--insecure`) and the name the certificate must
/// carry (the `--url` host, also sent as SNI).
struct AdminTLS {
  let context: TLSContext
  let serverName: String
  /// True when the system's CAs are the trust (no `--ca`, no `--insecure`): only then does a
  /// rejected certificate get the hint about `--ca`.
  let systemTrust: Bool
}

/// One connected admin socket, plain or inside a TLS session: what `AdminHTTPClient` sends
/// its request through and reads its answer from.
struct AdminConnection {
  let socket: Int32
  let tls: BlockingTLSClient?
  /// `host:port`, for messages.
  let endpoint: String
  let timeoutSeconds: Int

  /// Runs the handshake on `socket` when `tls` is given.
  init(socket: Int32, tls: AdminTLS?, endpoint: String, timeoutSeconds: Int) throws(AdminClientError) {
    self.socket = socket
    self.endpoint = endpoint
    self.timeoutSeconds = timeoutSeconds
    guard let tls else {
      self.tls = nil
      return
    }
    let options = TLSClientOptions(context: tls.context, serverName: tls.serverName)
    do {
      self.tls = try BlockingTLSClient(options: options, fileDescriptor: socket)
    } catch {
      var message = "TLS with \(endpoint) failed: \(error)"
      if error.tlsError?.kind == .certificateRejected && tls.systemTrust {
        message += " (give --ca FILE to trust the CA that signed the admin certificate)"
      }
      throw AdminClientError(description: message)
    }
  }

  func sendAll(_ bytes: [UInt8]) throws(AdminClientError) {
    if let tls {
      do {
        try tls.write(bytes)
      } catch {
        throw AdminClientError(description: "cannot send to \(endpoint): \(error)")
      }
      return
    }
    var offset = 0
    while offset < bytes.count {
      let sent = bytes.withUnsafeBytes { raw in
        Glibc.send(socket, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
      }
      if sent < 0 {
        if errno == EINTR { continue }
        throw AdminClientError(description: "cannot send to \(endpoint): \(AdminHTTPClient.describe(errno))")
      }
      offset += sent
    }
  }

  /// Reads what arrives next; 0 at the end of input.
  func receive(into buffer: UnsafeMutableRawBufferPointer) throws(AdminClientError) -> Int {
    if let tls {
      do {
        return try tls.read(into: buffer)
      } catch {
        if error.timedOut {
          throw AdminClientError(description: "no answer from \(endpoint) within \(timeoutSeconds) s")
        }
        throw AdminClientError(description: "cannot read from \(endpoint): \(error)")
      }
    }
    while true {
      let count = recv(socket, buffer.baseAddress, buffer.count, 0)
      if count >= 0 { return count }
      if errno == EINTR { continue }
      if errno == EAGAIN || errno == EWOULDBLOCK {
        throw AdminClientError(description: "no answer from \(endpoint) within \(timeoutSeconds) s")
      }
      throw AdminClientError(description: "cannot read from \(endpoint): \(AdminHTTPClient.describe(errno))")
    }
  }

  /// Ends the TLS session (close_notify) and closes the socket.
  func close() {
    tls?.shutdown()
    _ = Glibc.close(socket)
  }
}
