/// A request method. The common ones are cases so matching them costs no string compare.
public enum HTTPMethod: Sendable, Hashable, CustomStringConvertible {
  case get, head, post, put, delete, options, patch, trace, connect
  case other(String)

  public init(_ name: String) {
    switch name {
    case "GET": self = .get
    case "HEAD": self = .head
    case "POST": self = .post
    case "PUT": self = .put
    case "DELETE": self = .delete
    case "OPTIONS": self = .options
    case "PATCH": self = .patch
    case "TRACE": self = .trace
    case "CONNECT": self = .connect
    default: self = .other(name)
    }
  }

  /// Methods whose requests may be repeated without changing the outcome (RFC 9110 §9.2.2).
  public var isIdempotent: Bool {
    switch self {
    case .get, .head, .put, .delete, .options, .trace: return true
    case .post, .patch, .connect, .other: return false
    }
  }

  public var name: String {
    switch self {
    case .get: return "GET"
    case .head: return "HEAD"
    case .post: return "POST"
    case .put: return "PUT"
    case .delete: return "DELETE"
    case .options: return "OPTIONS"
    case .patch: return "PATCH"
    case .trace: return "TRACE"
    case .connect: return "CONNECT"
    case .other(let name): return name
    }
  }

  public var description: String { name }

  /// Recognizes a method from the bytes of a request line; tokens were validated before.
  @usableFromInline
  static func parse(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int) -> HTTPMethod {
    let length = end - start
    // Methods are case-sensitive (RFC 9110 §9.1), so the compare is exact.
    @inline(__always) func matches(_ literal: StaticString) -> Bool {
      guard literal.utf8CodeUnitCount == length else { return false }
      let expected = literal.utf8Start
      for i in 0..<length where bytes[start + i] != expected[i] { return false }
      return true
    }
    switch length {
    case 3:
      if matches("GET") { return .get }
      if matches("PUT") { return .put }
    case 4:
      if matches("POST") { return .post }
      if matches("HEAD") { return .head }
    case 5:
      if matches("PATCH") { return .patch }
      if matches("TRACE") { return .trace }
    case 6:
      if matches("DELETE") { return .delete }
    case 7:
      if matches("OPTIONS") { return .options }
      if matches("CONNECT") { return .connect }
    default:
      break
    }
    return .other(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self))
  }
}
