import CGatehouseOpenSSL
import Glibc

/// Certificate, key and client-certificate policy for a TLS listener (`listen[].tls`).
public struct TLSServerConfiguration: Sendable, Hashable {
  /// PEM file: the server certificate first, then the intermediates up to (not including) the root.
  public var certificateChainPath: String
  /// PEM file with the private key for that certificate; unencrypted (there is no one to ask for a passphrase).
  public var privateKeyPath: String
  /// PEM bundle of CAs that client certificates must chain to; nil: client certificates are not asked for.
  public var clientCAPath: String?
  /// With `clientCAPath`: true refuses clients without a certificate (mTLS); false asks but lets them in.
  public var requireClientCertificate: Bool
  /// How long an accepted connection may take to finish its handshake before it is dropped.
  public var handshakeTimeout: Duration
  /// ALPN picks `h2` when the client offers it, before `http/1.1`.
  public var offersHTTP2: Bool

  public init(
    certificateChainPath: String, privateKeyPath: String, clientCAPath: String? = nil,
    requireClientCertificate: Bool = true, handshakeTimeout: Duration = .seconds(10), offersHTTP2: Bool = false
  ) {
    self.offersHTTP2 = offersHTTP2
    self.certificateChainPath = certificateChainPath
    self.privateKeyPath = privateKeyPath
    self.clientCAPath = clientCAPath
    self.requireClientCertificate = requireClientCertificate
    self.handshakeTimeout = handshakeTimeout
  }
}

/// Trust and identity for outbound TLS (`upstreams.*.tls`).
public struct TLSClientConfiguration: Sendable, Hashable {
  /// PEM bundle of trusted CAs; nil: the system trust store.
  public var caPath: String?
  /// False accepts any certificate and any name. For tests only; the caller should log a warning.
  public var verify: Bool
  /// Client certificate chain and key for mutual TLS; both or neither.
  public var certificateChainPath: String?
  public var privateKeyPath: String?

  public init(
    caPath: String? = nil, verify: Bool = true, certificateChainPath: String? = nil, privateKeyPath: String? = nil
  ) {
    self.caPath = caPath
    self.verify = verify
    self.certificateChainPath = certificateChainPath
    self.privateKeyPath = privateKeyPath
  }
}

/// Per-connection settings for an outbound TLS connection.
public struct TLSClientOptions: Sendable {
  /// A client context (trust store, client certificate); share one per upstream.
  public var context: TLSContext
  /// Sent as SNI and checked against the certificate. An IP literal is checked against IP SANs and is not
  /// sent as SNI (RFC 6066 allows host names only).
  public var serverName: String
  /// How long the handshake may take once TCP is connected (the connect timeout covers TCP only).
  public var handshakeTimeout: Duration

  public init(context: TLSContext, serverName: String, handshakeTimeout: Duration = .seconds(10)) {
    precondition(context.isClient, "TLSClientOptions needs a client context")
    self.context = context
    self.serverName = serverName
    self.handshakeTimeout = handshakeTimeout
  }
}

/// An OpenSSL `SSL_CTX`: protocol policy, certificates and trust, shared by every connection made from it.
///
/// `@unchecked Sendable` because an `SSL_CTX` is safe to share between threads once configured (OpenSSL
/// locks its session cache and reference counts), and this class never changes it after `init`; that lets
/// one context serve every loop. Each `TLSStream` keeps its context alive, since the C callbacks reach the
/// Swift object through an unretained pointer.
public final class TLSContext: @unchecked Sendable {
  /// TLS 1.2 suites: forward secrecy (ECDHE) and AEAD only, strongest-and-fastest first because the server's
  /// order wins. TLS 1.3 suites are OpenSSL's defaults, which are all AEAD.
  static let tls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    + "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

  /// ALPN wire format: a length byte, then the name.
  static let alpnHTTP11: [UInt8] = [8] + Array("http/1.1".utf8)

  let handle: OpaquePointer
  /// True for contexts made with `init(client:)`.
  public let isClient: Bool
  /// Server contexts: the deadline for an accepted connection's handshake.
  public let handshakeTimeout: Duration
  /// Server contexts: certificates chosen by SNI, keyed by lowercased name (`*.example.com` for wildcards).
  private let serverNameContexts: [String: TLSContext]

  /// A server context from PEM files. `serverNames` maps SNI host names (exact, or `*.example.com` for one
  /// label) to other server contexts whose certificate is used instead; a client that sends no name or an
  /// unknown one gets this context's certificate. Only the certificate and the client-certificate policy
  /// follow the SNI choice; protocol versions and ciphers are the same everywhere anyway.
  public init(server configuration: TLSServerConfiguration, serverNames: [String: TLSContext] = [:])
    throws(TLSError)
  {
    for context in serverNames.values { precondition(!context.isClient, "SNI contexts must be server contexts") }
    handle = try TLSContext.makeContext(method: TLS_server_method())
    isClient = false
    handshakeTimeout = configuration.handshakeTimeout
    var names: [String: TLSContext] = [:]
    for (name, context) in serverNames { names[name.lowercased()] = context }
    serverNameContexts = names
    // From here on deinit frees `handle` if a step throws.
    try configureServer(configuration)
  }

  /// A client context. Verification of the server's certificate and name is on unless `verify` is false.
  public init(client configuration: TLSClientConfiguration) throws(TLSError) {
    handle = try TLSContext.makeContext(method: TLS_client_method())
    isClient = true
    handshakeTimeout = .seconds(10)
    serverNameContexts = [:]
    try configureClient(configuration)
  }

  deinit {
    SSL_CTX_free(handle)
  }

  // MARK: Building

  private static func makeContext(method: OpaquePointer?) throws(TLSError) -> OpaquePointer {
    ERR_clear_error()
    guard let context = SSL_CTX_new(method) else {
      throw TLSError.fromErrorQueue(.configuration, "cannot create a TLS context")
    }
    return context
  }

  /// What both sides share: versions, ciphers, options and I/O modes.
  private func configureCommon() throws(TLSError) {
    guard gh_SSL_CTX_set_min_proto_version(handle, TLS1_2_VERSION) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "cannot require TLS 1.2 or later")
    }
    guard SSL_CTX_set_cipher_list(handle, TLSContext.tls12Ciphers) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "cannot set the TLS 1.2 cipher list")
    }
    // Renegotiation is a DoS lever and never needed for HTTP/1.1; compression invites CRIME. A peer that
    // closes TCP without close_notify is treated like a plain EOF, as browsers and nginx do: HTTP framing
    // (Content-Length, chunked) is what detects truncation.
    var options = gh_SSL_OP_NO_RENEGOTIATION() | gh_SSL_OP_NO_COMPRESSION() | gh_SSL_OP_IGNORE_UNEXPECTED_EOF()
    if !isClient { options |= gh_SSL_OP_CIPHER_SERVER_PREFERENCE() }
    SSL_CTX_set_options(handle, options)
    // Partial writes let the connection consume its queue record by record; a moving buffer lets a retry
    // after WANT_WRITE come from a different (copied or coalesced) buffer with the same bytes. Idle
    // keep-alive connections give their 34 KB of record buffers back.
    _ = gh_SSL_CTX_set_mode(
      handle,
      Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS))
    // Read ahead: one read system call takes several records instead of a header and a body read per record.
    // The connection then checks SSL_has_pending, since epoll cannot see bytes OpenSSL already holds.
    _ = gh_SSL_CTX_set_read_ahead(handle, 1)
    // An encrypted key would make OpenSSL prompt on the terminal; fail instead with a clear error.
    SSL_CTX_set_default_passwd_cb(handle) { _, _, _, _ in 0 }
  }

  private func configureServer(_ configuration: TLSServerConfiguration) throws(TLSError) {
    try configureCommon()
    try loadIdentity(certificate: configuration.certificateChainPath, key: configuration.privateKeyPath)
    // Sessions resumed through the cache or tickets must belong to this service; OpenSSL refuses to resume
    // with client verification on unless a session id context is set.
    let sessionContext = Array("gatehouse".utf8)
    _ = SSL_CTX_set_session_id_context(handle, sessionContext, UInt32(sessionContext.count))
    _ = gh_SSL_CTX_set_session_cache_mode(handle, Int(SSL_SESS_CACHE_SERVER))
    // Tickets stay on (OpenSSL's default, with keys generated per context and rotated): resumption without
    // server-side state, which matters when several loops share one context.
    // The callback's argument says whether h2 is offered (any non-nil pointer): no state to
    // keep alive for OpenSSL.
    SSL_CTX_set_alpn_select_cb(
      handle,
      { _, selected, selectedLength, offered, offeredLength, argument in
        TLSContext.selectProtocol(selected, selectedLength, offered, offeredLength, http2: argument != nil)
      }, configuration.offersHTTP2 ? UnsafeMutableRawPointer(bitPattern: 1) : nil)
    if let caPath = configuration.clientCAPath {
      guard SSL_CTX_load_verify_locations(handle, caPath, nil) == 1 else {
        throw TLSError.fromErrorQueue(.configuration, "cannot load client CA file \(caPath)")
      }
      guard let names = SSL_load_client_CA_file(caPath) else {
        throw TLSError.fromErrorQueue(.configuration, "no CA names in \(caPath)")
      }
      SSL_CTX_set_client_CA_list(handle, names)
      var mode = SSL_VERIFY_PEER
      if configuration.requireClientCertificate { mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT }
      SSL_CTX_set_verify(handle, mode, nil)
    }
    if !serverNameContexts.isEmpty {
      _ = gh_SSL_CTX_set_tlsext_servername_arg(handle, Unmanaged.passUnretained(self).toOpaque())
      _ = gh_SSL_CTX_set_tlsext_servername_callback(handle) { ssl, _, argument in
        guard let ssl, let argument else { return SSL_TLSEXT_ERR_OK }
        let context = Unmanaged<TLSContext>.fromOpaque(argument).takeUnretainedValue()
        context.switchCertificate(of: ssl)
        return SSL_TLSEXT_ERR_OK
      }
    }
  }

  private func configureClient(_ configuration: TLSClientConfiguration) throws(TLSError) {
    try configureCommon()
    if configuration.verify {
      if let caPath = configuration.caPath {
        guard SSL_CTX_load_verify_locations(handle, caPath, nil) == 1 else {
          throw TLSError.fromErrorQueue(.configuration, "cannot load CA file \(caPath)")
        }
      } else {
        guard SSL_CTX_set_default_verify_paths(handle) == 1 else {
          throw TLSError.fromErrorQueue(.configuration, "cannot load the system trust store")
        }
      }
      SSL_CTX_set_verify(handle, SSL_VERIFY_PEER, nil)
    } else {
      SSL_CTX_set_verify(handle, SSL_VERIFY_NONE, nil)
    }
    switch (configuration.certificateChainPath, configuration.privateKeyPath) {
    case (let certificate?, let key?):
      try loadIdentity(certificate: certificate, key: key)
    case (nil, nil):
      break
    case (_?, nil), (nil, _?):
      throw TLSError(kind: .configuration, message: "a client certificate needs both a certificate and a key")
    }
    // Note the inverted convention: 0 is success for this one call.
    guard SSL_CTX_set_alpn_protos(handle, TLSContext.alpnHTTP11, UInt32(TLSContext.alpnHTTP11.count)) == 0 else {
      throw TLSError.fromErrorQueue(.configuration, "cannot offer ALPN http/1.1")
    }
  }

  private func loadIdentity(certificate: String, key: String) throws(TLSError) {
    guard SSL_CTX_use_certificate_chain_file(handle, certificate) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "cannot load certificate chain \(certificate)")
    }
    guard SSL_CTX_use_PrivateKey_file(handle, key, SSL_FILETYPE_PEM) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "cannot load private key \(key)")
    }
    guard SSL_CTX_check_private_key(handle) == 1 else {
      throw TLSError.fromErrorQueue(.configuration, "private key \(key) does not match certificate \(certificate)")
    }
  }

  // MARK: Callbacks

  /// ALPN: pick h2 when it is offered here and by the client, else http/1.1 when the client offers it
  /// (http/1.0 as a courtesy). A client that offers only other protocols gets the `no_application_protocol`
  /// alert RFC 7301 asks for, rather than a connection on which it would speak a protocol we do not.
  private static func selectProtocol(
    _ selected: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, _ selectedLength: UnsafeMutablePointer<UInt8>?,
    _ offered: UnsafePointer<UInt8>?, _ offeredLength: UInt32, http2: Bool
  ) -> Int32 {
    guard let selected, let selectedLength, let offered else { return SSL_TLSEXT_ERR_NOACK }
    var http11: (UnsafePointer<UInt8>, UInt8)?
    var fallback: (UnsafePointer<UInt8>, UInt8)?
    var index = 0
    let total = Int(offeredLength)
    while index < total {
      let length = Int(offered[index])
      let start = index + 1
      guard length > 0, start + length <= total else { return SSL_TLSEXT_ERR_ALERT_FATAL }
      let name = UnsafeBufferPointer(start: offered + start, count: length)
      if http2 && name.elementsEqual("h2".utf8) {
        selected.pointee = offered + start
        selectedLength.pointee = UInt8(length)
        return SSL_TLSEXT_ERR_OK
      }
      if name.elementsEqual("http/1.1".utf8) { http11 = (offered + start, UInt8(length)) }
      if name.elementsEqual("http/1.0".utf8) { fallback = (offered + start, UInt8(length)) }
      index = start + length
    }
    if let (name, length) = http11 ?? fallback {
      selected.pointee = name
      selectedLength.pointee = length
      return SSL_TLSEXT_ERR_OK
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL
  }

  /// The SNI context for `name`: an exact entry, else a wildcard for its parent domain.
  func context(forServerName name: String) -> TLSContext? {
    let lowered = name.lowercased()
    if let exact = serverNameContexts[lowered] { return exact }
    guard let dot = lowered.firstIndex(of: ".") else { return nil }
    return serverNameContexts["*" + lowered[dot...]]
  }

  /// Servername callback: move the handshake to the chosen context. `SSL_set_SSL_CTX` swaps the certificate
  /// but keeps the verify mode from the original context, so that is copied across explicitly.
  private func switchCertificate(of ssl: OpaquePointer) {
    guard let raw = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name),
      let chosen = context(forServerName: String(cString: raw))
    else { return }
    _ = SSL_set_SSL_CTX(ssl, chosen.handle)
    SSL_set_verify(ssl, SSL_CTX_get_verify_mode(chosen.handle), nil)
  }
}
