/// Bounds on what a peer may send before the parser refuses the message.
public struct HTTPLimits: Sendable, Hashable {
  /// The whole head: start line, header lines and the empty line (431 beyond it).
  public var maxHeaderBytes: Int
  /// Header fields in one head or trailer section (431 beyond it).
  public var maxHeaderCount: Int
  /// One start line (414 beyond it for requests) or header line (431).
  public var maxLineLength: Int
  /// Extensions on one chunk-size line.
  public var maxChunkExtensionBytes: Int
  /// Body bytes of one message, declared or chunked (413 beyond it); nil means no limit.
  public var maxBodyBytes: Int64?
  /// CONNECT and TRACE are refused with 501 while parsing (a proxy never forwards them);
  /// a server that routes them itself (the admin API answers 405 with `Allow`) turns it off.
  public var refusesConnectAndTrace: Bool

  public init(
    maxHeaderBytes: Int = 16384, maxHeaderCount: Int = 100, maxLineLength: Int = 8192,
    maxChunkExtensionBytes: Int = 1024, maxBodyBytes: Int64? = nil, refusesConnectAndTrace: Bool = true
  ) {
    self.maxHeaderBytes = maxHeaderBytes
    self.maxHeaderCount = maxHeaderCount
    self.maxLineLength = maxLineLength
    self.maxChunkExtensionBytes = maxChunkExtensionBytes
    self.maxBodyBytes = maxBodyBytes
    self.refusesConnectAndTrace = refusesConnectAndTrace
  }
}
