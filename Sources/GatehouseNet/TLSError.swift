import CGatehouseOpenSSL

/// Why TLS setup or a TLS connection failed, with OpenSSL's own words for it.
///
/// A struct over a private enum, so new kinds can be added without breaking the gateway's switches; owners
/// compare `kind` against the static members and log `description`. Messages come from the OpenSSL error
/// queue and from certificate verification results: they name files, reasons and server names, never key
/// material.
public struct TLSError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What went wrong, coarsely: enough for an owner to choose a status code or a log level.
  public struct Kind: Sendable, Hashable, CustomStringConvertible {
    private enum Base: Hashable {
      case configuration
      case handshakeFailed
      case certificateRejected
      case handshakeTimedOut
      case protocolFailure
    }

    private let base: Base
    private init(_ base: Base) { self.base = base }

    /// A context could not be built: unreadable or mismatched certificate and key, bad CA file.
    public static let configuration = Kind(.configuration)
    /// The handshake failed for a reason other than the certificate: no common protocol or cipher, an alert
    /// from the peer, plaintext sent to a TLS port, the peer closing mid-handshake.
    public static let handshakeFailed = Kind(.handshakeFailed)
    /// The peer's certificate did not verify (unknown CA, expired, wrong host, missing client certificate).
    public static let certificateRejected = Kind(.certificateRejected)
    /// The handshake did not finish within its deadline.
    public static let handshakeTimedOut = Kind(.handshakeTimedOut)
    /// After the handshake: a corrupt record, a fatal alert, a refused renegotiation turned fatal.
    public static let protocolFailure = Kind(.protocolFailure)

    public var description: String {
      switch base {
      case .configuration: "TLS configuration error"
      case .handshakeFailed: "TLS handshake failed"
      case .certificateRejected: "TLS certificate rejected"
      case .handshakeTimedOut: "TLS handshake timed out"
      case .protocolFailure: "TLS protocol error"
      }
    }
  }

  public let kind: Kind
  /// Details for logs: OpenSSL reason strings joined with "; ", or a verification result.
  public let message: String

  public init(kind: Kind, message: String) {
    self.kind = kind
    self.message = message
  }

  public var description: String {
    message.isEmpty ? kind.description : "\(kind): \(message)"
  }

  /// Takes every entry off this thread's OpenSSL error queue and joins their texts. Always drains, so the
  /// next TLS call on this thread starts with an empty queue, which `SSL_get_error` needs to be reliable.
  static func drainErrorQueue() -> String {
    var messages: [String] = []
    // 256 bytes is what the OpenSSL docs call enough for any error string.
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: 256) { buffer in
      while true {
        let code = ERR_get_error()
        if code == 0 { break }
        ERR_error_string_n(code, buffer.baseAddress, buffer.count)
        let text = String(cString: buffer.baseAddress!)
        // The same failure is often pushed twice on the way up the stack.
        if messages.last != text { messages.append(text) }
      }
    }
    return messages.joined(separator: "; ")
  }

  /// An error of `kind` whose message is `context` followed by what OpenSSL queued.
  static func fromErrorQueue(_ kind: Kind, _ context: String) -> TLSError {
    let queued = drainErrorQueue()
    return TLSError(kind: kind, message: queued.isEmpty ? context : "\(context): \(queued)")
  }
}
