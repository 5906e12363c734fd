import CGatehouseCares

/// Why a resolution gave no addresses.
public enum DNSError: Error, Sendable, Hashable, CustomStringConvertible {
  /// The name does not exist (NXDOMAIN), or it has neither A nor AAAA records.
  case noRecords
  /// No server answered before the last try's timeout.
  case timedOut
  /// The servers gave no usable answer: SERVFAIL, REFUSED, a malformed reply, or no server
  /// listening. c-ares 1.18 takes SERVFAIL and REFUSED as a cue to try the next server, and when
  /// none is left reports `ARES_ECONNREFUSED` ("Could not contact DNS servers"), as it does for
  /// a port nobody listens on. `status` is c-ares's code, which `description` spells out for logs.
  case serverFailure(status: Int32)
  /// The text cannot be a DNS name (empty, a NUL byte, an empty label, a label over 63 bytes).
  case badName
  /// The resolver was closed (or released) before an answer came.
  case cancelled
  /// Anything else c-ares reports (out of memory, an unreadable hosts file); `status` as above.
  case failed(status: Int32)

  /// Classifies a c-ares status other than `ARES_SUCCESS`.
  init(caresStatus status: Int32) {
    switch status {
    case ARES_ENOTFOUND, ARES_ENODATA:
      self = .noRecords
    case ARES_ETIMEOUT:
      self = .timedOut
    case ARES_ESERVFAIL, ARES_EREFUSED, ARES_EFORMERR, ARES_ENOTIMP, ARES_EBADRESP, ARES_ECONNREFUSED, ARES_EOF:
      self = .serverFailure(status: status)
    case ARES_EBADNAME:
      self = .badName
    case ARES_ECANCELLED, ARES_EDESTRUCTION:
      self = .cancelled
    default:
      self = .failed(status: status)
    }
  }

  public var description: String {
    switch self {
    case .noRecords: "no such name, or no A or AAAA records"
    case .timedOut: "no name server answered in time"
    case .serverFailure(let status): "the name servers gave no usable answer: \(DNSError.text(of: status))"
    case .badName: "not a valid host name"
    case .cancelled: "cancelled: the resolver was closed"
    case .failed(let status): "resolution failed: \(DNSError.text(of: status))"
    }
  }

  /// c-ares's own words for a status ("DNS server returned answer with no data", …).
  private static func text(of status: Int32) -> String {
    String(cString: ares_strerror(status))
  }
}

/// Settings a resolver cannot be made with, or a c-ares channel that could not be set up.
public struct DNSResolverSetupError: Error, Sendable, Equatable, CustomStringConvertible {
  public let description: String

  public init(_ description: String) {
    self.description = description
  }
}
