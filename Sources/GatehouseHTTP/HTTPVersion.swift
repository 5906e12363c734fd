/// An HTTP protocol version: as sent on an HTTP/1.x start line, or HTTP/2 for a request
/// that came as an HTTP/2 stream.
public struct HTTPVersion: Sendable, Hashable, CustomStringConvertible {
  public var major: UInt8
  public var minor: UInt8

  public init(major: UInt8, minor: UInt8) {
    self.major = major
    self.minor = minor
  }

  public static let http1_0 = HTTPVersion(major: 1, minor: 0)
  public static let http1_1 = HTTPVersion(major: 1, minor: 1)
  public static let http2 = HTTPVersion(major: 2, minor: 0)

  /// `HTTP/1.1`, and `HTTP/2` (RFC 9113 has no minor version).
  public var description: String { major == 2 ? "HTTP/2" : "HTTP/\(major).\(minor)" }
}
