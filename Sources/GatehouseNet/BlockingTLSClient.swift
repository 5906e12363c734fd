import Glibc

/// Why a `BlockingTLSClient` call failed.
public struct BlockingTLSFailure: Error, Sendable, CustomStringConvertible {
  /// True when the socket's receive or send timeout ran out (nothing else went wrong).
  public let timedOut: Bool
  /// Set when TLS itself failed (handshake, certificate verification, a broken session).
  public let tlsError: TLSError?
  public let description: String

  init(_ reason: ConnectionCloseReason) {
    timedOut = false
    switch reason {
    case .tlsFailed(let error):
      tlsError = error
      description = error.description
    case .failed(let error):
      tlsError = nil
      description = error.description
    case .closedByOwner, .hangup, .connectTimedOut, .loopStopped:
      tlsError = nil
      description = "the connection closed"
    }
  }

  init(timedOut operation: String) {
    timedOut = true
    tlsError = nil
    description = "timed out while \(operation)"
  }
}

/// A client TLS session over a connected, blocking socket, for command-line tools that make
/// one call and exit (`gatehouse admin`). It drives the same `TLSStream` (and so the same
/// versions, ciphers, SNI and name checks) as upstream connections; with a blocking socket
/// every call runs to completion, and "would block" can only mean that the socket's
/// SO_RCVTIMEO / SO_SNDTIMEO ran out. The socket stays the caller's to close.
public final class BlockingTLSClient {
  private let stream: TLSStream

  /// Makes the session and runs the handshake, verifying the server as `options` says.
  public init(options: TLSClientOptions, fileDescriptor: Int32) throws(BlockingTLSFailure) {
    do {
      stream = try TLSStream(client: options, fileDescriptor: fileDescriptor)
    } catch {
      throw BlockingTLSFailure(.tlsFailed(error))
    }
    while true {
      switch stream.handshake() {
      case .done: return
      case .wantRead, .wantWrite: throw BlockingTLSFailure(timedOut: "waiting for the TLS handshake")
      case .failed(let reason): throw BlockingTLSFailure(reason)
      }
    }
  }

  /// Sends every byte of `bytes`.
  public func write(_ bytes: [UInt8]) throws(BlockingTLSFailure) {
    var offset = 0
    while offset < bytes.count {
      let step = bytes.withUnsafeBytes { raw in stream.write(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
      switch step {
      case .processed(let count): offset += count
      case .wantRead, .wantWrite: throw BlockingTLSFailure(timedOut: "sending")
      case .endOfInput: throw BlockingTLSFailure(.hangup)
      case .failed(let reason): throw BlockingTLSFailure(reason)
      }
    }
  }

  /// Reads what arrives next into `buffer`; 0 at the end of input.
  public func read(into buffer: UnsafeMutableRawBufferPointer) throws(BlockingTLSFailure) -> Int {
    switch stream.read(into: buffer) {
    case .processed(let count): return count
    case .endOfInput: return 0
    case .wantRead, .wantWrite: throw BlockingTLSFailure(timedOut: "reading")
    case .failed(let reason): throw BlockingTLSFailure(reason)
    }
  }

  /// Sends close_notify; failures are ignored (the caller is done with the connection).
  public func shutdown() {
    _ = stream.shutdown()
  }
}
