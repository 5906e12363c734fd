import CGatehouseOpenSSL
import Glibc

/// What a connection learned about its TLS session, for logs and headers (X-Forwarded-Proto, mTLS identity).
public struct TLSConnectionInfo: Sendable, Hashable {
  /// `TLSv1.3`, `TLSv1.2`.
  public let protocolVersion: String
  /// The OpenSSL name of the negotiated suite, e.g. `TLS_AES_128_GCM_SHA256`.
  public let cipher: String
  /// The ALPN protocol both sides agreed on, nil if none was negotiated.
  public let applicationProtocol: String?
  /// The SNI name: the one the client sent (server side) or the one we sent (client side).
  public let serverName: String?
  /// The peer certificate's subject (one line, OpenSSL format), nil when the peer sent none.
  public let peerCertificateSubject: String?
  /// True when the session was resumed (ticket or cache) rather than fully negotiated.
  public let sessionReused: Bool
}

/// What the socket BIO remembers between OpenSSL's calls into it: the descriptor to use and the system error
/// that made the last call fail, so a reset is reported as `.failed(SystemError)` rather than a TLS error.
struct SocketBIOState {
  var fileDescriptor: Int32
  var error: SystemError?
}

/// A BIO method that reads and writes a non-blocking socket through `Syscall` (EINTR retried, MSG_NOSIGNAL
/// so a vanished peer is EPIPE rather than SIGPIPE, bug errnos trapped). OpenSSL's own socket BIO uses
/// `write(2)`, which would raise SIGPIPE, and its errors would bypass our errno handling. Ciphertext goes
/// straight between the kernel and OpenSSL's record buffers: no extra copy, unlike memory BIOs.
struct SocketBIOMethod: @unchecked Sendable {
  /// `@unchecked Sendable`: the method table is immutable once built and OpenSSL only reads it.
  let method: OpaquePointer

  static let shared: SocketBIOMethod = {
    guard let method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "gatehouse socket") else {
      preconditionFailure("BIO_meth_new failed: \(TLSError.drainErrorQueue())")
    }
    _ = BIO_meth_set_read(method) { bio, buffer, length in
      guard let bio, let buffer, length > 0 else { return 0 }
      gh_BIO_clear_retry_flags(bio)
      let state = BIO_get_data(bio).assumingMemoryBound(to: SocketBIOState.self)
      guard state.pointee.fileDescriptor >= 0 else {
        state.pointee.error = SystemError(errno: ENOTCONN, syscall: "read")
        return -1
      }
      do throws(SystemError) {
        let target = UnsafeMutableRawBufferPointer(start: buffer, count: Int(length))
        switch try Syscall.read(state.pointee.fileDescriptor, into: target) {
        case .processed(let count):
          return Int32(count)
        case .wouldBlock:
          gh_BIO_set_retry_read(bio)
          return -1
        }
      } catch {
        state.pointee.error = error
        return -1
      }
    }
    _ = BIO_meth_set_write(method) { bio, buffer, length in
      guard let bio, let buffer, length > 0 else { return 0 }
      gh_BIO_clear_retry_flags(bio)
      let state = BIO_get_data(bio).assumingMemoryBound(to: SocketBIOState.self)
      guard state.pointee.fileDescriptor >= 0 else {
        state.pointee.error = SystemError(errno: ENOTCONN, syscall: "send")
        return -1
      }
      do throws(SystemError) {
        let source = UnsafeRawBufferPointer(start: buffer, count: Int(length))
        switch try Syscall.send(state.pointee.fileDescriptor, source) {
        case .processed(let count):
          return Int32(count)
        case .wouldBlock:
          gh_BIO_set_retry_write(bio)
          return -1
        }
      } catch {
        state.pointee.error = error
        return -1
      }
    }
    // OpenSSL flushes after each handshake flight; the socket has nothing buffered, so flush succeeds.
    // Every other control (kTLS queries, EOF, push/pop) is answered "not supported".
    _ = BIO_meth_set_ctrl(method) { _, command, _, _ in command == BIO_CTRL_FLUSH ? 1 : 0 }
    return SocketBIOMethod(method: method)
  }()
}

/// One TLS session over one socket: an `SSL` with the socket BIO, driven by `BufferedConnection`.
///
/// Owns its `SSL` (freed in deinit) and keeps its `TLSContext` alive, because OpenSSL callbacks reach the
/// context through an unretained pointer. Loop-confined like its connection; not Sendable on purpose.
final class TLSStream {
  /// Progress of a handshake or shutdown step.
  enum Step {
    case done
    /// Call again when the socket is readable.
    case wantRead
    /// Call again when the socket is writable.
    case wantWrite
    case failed(ConnectionCloseReason)
  }

  /// Outcome of one `SSL_read_ex` / `SSL_write_ex`.
  enum Transfer {
    case processed(Int)
    case wantRead
    case wantWrite
    /// The peer sent close_notify (or closed TCP without it): end of input.
    case endOfInput
    case failed(ConnectionCloseReason)
  }

  let context: TLSContext
  private let ssl: OpaquePointer
  private let bioState: UnsafeMutablePointer<SocketBIOState>
  let isClient: Bool
  private(set) var handshakeDone = false
  /// True once our close_notify has been handed to the kernel.
  private(set) var closeNotifySent = false

  /// A server-side session for an accepted socket.
  convenience init(server context: TLSContext, fileDescriptor: Int32) throws(TLSError) {
    precondition(!context.isClient, "an accepted connection needs a server context")
    try self.init(context: context, fileDescriptor: fileDescriptor, serverName: nil)
  }

  /// A client-side session that sends `options.serverName` and verifies the certificate against it.
  convenience init(client options: TLSClientOptions, fileDescriptor: Int32) throws(TLSError) {
    try self.init(context: options.context, fileDescriptor: fileDescriptor, serverName: options.serverName)
  }

  private init(context: TLSContext, fileDescriptor: Int32, serverName: String?) throws(TLSError) {
    ERR_clear_error()
    guard let ssl = SSL_new(context.handle) else {
      throw TLSError.fromErrorQueue(.configuration, "cannot create a TLS session")
    }
    guard let bio = BIO_new(SocketBIOMethod.shared.method) else {
      SSL_free(ssl)
      throw TLSError.fromErrorQueue(.configuration, "cannot create a socket BIO")
    }
    bioState = .allocate(capacity: 1)
    bioState.initialize(to: SocketBIOState(fileDescriptor: fileDescriptor, error: nil))
    BIO_set_data(bio, bioState)
    BIO_set_init(bio, 1)
    // One BIO for both directions: SSL_set_bio takes over its single reference.
    SSL_set_bio(ssl, bio, bio)
    self.ssl = ssl
    self.context = context
    isClient = context.isClient
    if let serverName {
      SSL_set_connect_state(ssl)
      try configureClient(serverName: serverName)
    } else {
      SSL_set_accept_state(ssl)
    }
  }

  deinit {
    SSL_free(ssl)  // frees the BIO too
    bioState.deinitialize(count: 1)
    bioState.deallocate()
  }

  /// SNI and the name to verify. IP literals are matched against IP SANs and not sent as SNI.
  private func configureClient(serverName: String) throws(TLSError) {
    if TLSStream.isIPAddress(serverName) {
      guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1 else {
        throw TLSError.fromErrorQueue(.configuration, "cannot verify against IP address \(serverName)")
      }
      return
    }
    guard gh_SSL_set_tlsext_host_name(ssl, serverName) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "invalid TLS server name \(serverName)")
    }
    // A wildcard matches one whole label (`*.example.com`), never part of one (`w*.example.com`).
    SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
    guard SSL_set1_host(ssl, serverName) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "cannot verify against server name \(serverName)")
    }
  }

  static func isIPAddress(_ text: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
  }

  /// The socket is closing: any later call fails instead of touching a descriptor number the process may
  /// already have given to someone else.
  func detachSocket() {
    bioState.pointee.fileDescriptor = -1
  }

  // MARK: Driving

  /// One step of the handshake.
  func handshake() -> Step {
    ERR_clear_error()
    bioState.pointee.error = nil
    let result = SSL_do_handshake(ssl)
    if result == 1 {
      handshakeDone = true
      return .done
    }
    switch SSL_get_error(ssl, result) {
    case SSL_ERROR_WANT_READ:
      return .wantRead
    case SSL_ERROR_WANT_WRITE:
      return .wantWrite
    case SSL_ERROR_SYSCALL:
      if let error = bioState.pointee.error {
        _ = TLSError.drainErrorQueue()
        return .failed(.failed(error))
      }
      return .failed(
        .tlsFailed(TLSError.fromErrorQueue(.handshakeFailed, "peer closed the connection during the handshake")))
    case SSL_ERROR_ZERO_RETURN:
      _ = TLSError.drainErrorQueue()
      return .failed(
        .tlsFailed(TLSError(kind: .handshakeFailed, message: "peer closed the connection during the handshake")))
    default:
      return .failed(.tlsFailed(handshakeError()))
    }
  }

  /// A failed handshake explained: the verification result when a certificate was the problem (it says
  /// "certificate has expired", which the error queue only calls "certificate verify failed").
  private func handshakeError() -> TLSError {
    let verifyResult = SSL_get_verify_result(ssl)
    let queued = TLSError.drainErrorQueue()
    if verifyResult != X509_V_OK {
      let reason = String(cString: X509_verify_cert_error_string(verifyResult))
      var message = "certificate verification failed: \(reason)"
      if isClient, let name = requestedServerName { message += " (server name \(name))" }
      return TLSError(kind: .certificateRejected, message: message)
    }
    // Certificate verify failures the peer reported by alert, or a client certificate that was required
    // and not sent, are still about certificates.
    let certificateWords = [
      "certificate required", "no certificate", "did not return a certificate", "bad certificate",
      "unknown ca", "certificate expired", "certificate unknown", "certificate verify failed",
    ]
    let kind: TLSError.Kind =
      certificateWords.contains { queued.contains($0) } ? .certificateRejected : .handshakeFailed
    return TLSError(kind: kind, message: queued.isEmpty ? "handshake failed" : queued)
  }

  private var requestedServerName: String? {
    guard let raw = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) else {
      let parameters = SSL_get0_param(ssl)
      guard let host = X509_VERIFY_PARAM_get0_host(parameters, 0) else { return nil }
      return String(cString: host)
    }
    return String(cString: raw)
  }

  /// Decrypts into `buffer`: at most one record's worth per call.
  @inline(__always)
  func read(into buffer: UnsafeMutableRawBufferPointer) -> Transfer {
    ERR_clear_error()
    bioState.pointee.error = nil
    var count = 0
    if SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count) == 1 { return .processed(count) }
    return failedTransfer(reading: true)
  }

  /// Encrypts and sends from `bytes`: one record per call (partial-write mode), so the return value says
  /// exactly how much of `bytes` is done. After `.wantWrite` the next call must pass at least as many of
  /// the same bytes (they may be at another address).
  @inline(__always)
  func write(_ bytes: UnsafeRawBufferPointer) -> Transfer {
    ERR_clear_error()
    bioState.pointee.error = nil
    var count = 0
    if SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &count) == 1 { return .processed(count) }
    return failedTransfer(reading: false)
  }

  private func failedTransfer(reading: Bool) -> Transfer {
    switch SSL_get_error(ssl, 0) {
    case SSL_ERROR_WANT_READ:
      return .wantRead
    case SSL_ERROR_WANT_WRITE:
      return .wantWrite
    case SSL_ERROR_ZERO_RETURN:
      _ = TLSError.drainErrorQueue()
      if reading { return .endOfInput }
      return .failed(.tlsFailed(TLSError(kind: .protocolFailure, message: "write after the TLS session closed")))
    case SSL_ERROR_SYSCALL:
      if let error = bioState.pointee.error {
        _ = TLSError.drainErrorQueue()
        return .failed(.failed(error))
      }
      // No errno: EOF. With SSL_OP_IGNORE_UNEXPECTED_EOF this is rare; treat it as the end of input.
      _ = TLSError.drainErrorQueue()
      if reading { return .endOfInput }
      return .failed(.failed(SystemError(errno: EPIPE, syscall: "send")))
    default:
      return .failed(.tlsFailed(TLSError.fromErrorQueue(.protocolFailure, reading ? "read failed" : "write failed")))
    }
  }

  /// Sends close_notify (once; call again after `.wantWrite`). Does not wait for the peer's.
  func shutdown() -> Step {
    guard handshakeDone, !closeNotifySent else { return .done }
    ERR_clear_error()
    bioState.pointee.error = nil
    let result = SSL_shutdown(ssl)
    if result >= 0 {
      closeNotifySent = true
      return .done
    }
    switch SSL_get_error(ssl, result) {
    case SSL_ERROR_WANT_WRITE:
      return .wantWrite
    default:
      // The peer is gone or the session broke: there is no one to tell, so the close goes ahead.
      _ = TLSError.drainErrorQueue()
      closeNotifySent = true
      return .done
    }
  }

  /// True when OpenSSL holds input (read ahead) that epoll cannot know about.
  var hasBufferedInput: Bool { SSL_has_pending(ssl) == 1 }

  // MARK: Information

  var info: TLSConnectionInfo {
    var alpnData: UnsafePointer<UInt8>?
    var alpnLength: UInt32 = 0
    SSL_get0_alpn_selected(ssl, &alpnData, &alpnLength)
    let alpn = alpnData.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(alpnLength)), as: UTF8.self) }
    var subject: String?
    if let certificate = SSL_get0_peer_certificate(ssl), let name = X509_get_subject_name(certificate) {
      subject = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 512) { buffer in
        X509_NAME_oneline(name, buffer.baseAddress, Int32(buffer.count)).map { String(cString: $0) }
      }
    }
    return TLSConnectionInfo(
      protocolVersion: String(cString: SSL_get_version(ssl)),
      cipher: SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? "",
      applicationProtocol: alpn,
      serverName: requestedServerName,
      peerCertificateSubject: subject,
      sessionReused: SSL_session_reused(ssl) == 1)
  }
}
