/// An HTTP/1.x protocol version as sent on the start line.
public struct HTTPVersion: Sendable, Hashable, CustomStringConvertible {
  public var major: UInt8
  public var minor: UInt8

  public init(major: UInt8, minor: UInt8) {
    self.major = major
    self.minor = minor
  }

  public static let http1_0 = HTTPVersion(major: 1, minor: 0)
  public static let http1_1 = HTTPVersion(major: 1, minor: 1)

  public var description: String { "HTTP/\(major).\(minor)" }
}
