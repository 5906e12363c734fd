/// The public state of one named token (Docs/behaviour.md), as the admin API and metrics show it.
public enum TokenState: String, Sendable, Hashable, CaseIterable {
  /// Usable, and not yet inside `refresh_before_s` of its expiry.
  case valid
  /// Usable, inside `refresh_before_s` of its expiry (oauth2 only): a background refresh is due or running.
  case expiring
  /// Its expiry has passed; requests cannot use it.
  case expired
  /// A backend rejected it, or an operator invalidated it; requests cannot use it.
  case invalid
  /// A refresh is in flight (requests use the previous value while it is still usable).
  case refreshing
  /// No value: an empty static value, an empty file, or an oauth2 token never fetched.
  case missing
  /// The last refresh or read failed (`last_error`); requests use the previous value until it expires.
  case error
}

/// Why a token value cannot be used. Only for admin `PUT` answers and for refusing bad values from a file or
/// a token endpoint; the text never quotes the value.
public enum TokenValueProblem: Error, Sendable, Equatable, CustomStringConvertible {
  case empty
  /// CR, LF or NUL: the value would split or truncate the header it is injected into.
  case lineBreakOrNUL
  /// Another control character (or DEL): the header serializer would refuse it.
  case controlCharacter
  /// Leading or trailing space or tab: it would be lost when the header is parsed.
  case surroundingWhitespace

  public var description: String {
    switch self {
    case .empty: "token value is empty"
    case .lineBreakOrNUL: "token value must not contain CR, LF or NUL"
    case .controlCharacter: "token value must not contain control characters"
    case .surroundingWhitespace: "token value must not start or end with whitespace"
    }
  }

  /// The first problem with `value` as a header value, or nil when it can be sent.
  public static func check(_ value: String) -> TokenValueProblem? {
    if value.isEmpty { return .empty }
    var sawControl = false
    for byte in value.utf8 {
      switch byte {
      case 0x0D, 0x0A, 0x00: return .lineBreakOrNUL
      case 0x09: continue
      case 0x01..<0x20, 0x7F: sawControl = true
      default: continue
      }
    }
    if sawControl { return .controlCharacter }
    let first = value.utf8.first!
    let last = value.utf8.last!
    if first == 0x20 || first == 0x09 || last == 0x20 || last == 0x09 { return .surroundingWhitespace }
    return nil
  }
}

/// A token value handed to the request path, with the serial that identifies this exact value (so a
/// rejection reported for an older value does not invalidate a newer one).
public struct TokenGrant: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
  CustomReflectable
{
  /// The value's bytes, ready to be rendered into the token header.
  public let bytes: [UInt8]
  /// Increases by one each time the token gets a new value.
  public let serial: UInt64
  /// The forms an answer echoing the value is masked in, made when the value was set and
  /// shared by every grant of it (made here only when the caller has none).
  public let spellings: SecretSpellings

  public init(bytes: [UInt8], serial: UInt64, spellings: SecretSpellings? = nil) {
    self.bytes = bytes
    self.serial = serial
    self.spellings = spellings ?? SecretSpellings(bytes)
  }

  /// The value and its serial: the spellings follow from the value.
  public static func == (left: TokenGrant, right: TokenGrant) -> Bool {
    left.bytes == right.bytes && left.serial == right.serial
  }

  public var description: String { "TokenGrant(serial: \(serial), bytes: <redacted>)" }
  public var debugDescription: String { description }
  public var customMirror: Mirror { Mirror(self, children: ["serial": serial]) }
}

/// Why a request cannot get a token; the caller answers with a 401 envelope. `reason` is safe to log.
public struct TokenUnavailable: Error, Sendable, Equatable, CustomStringConvertible {
  /// The token's state when the request gave up.
  public let state: TokenState
  public let reason: String

  public init(state: TokenState, reason: String) {
    self.state = state
    self.reason = reason
  }

  public var description: String { "token \(state.rawValue): \(reason)" }
}

/// What a request waiting for a token gets.
public enum TokenOutcome: Sendable, Equatable {
  case available(TokenGrant)
  case unavailable(TokenUnavailable)
}
