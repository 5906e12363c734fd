/// The lowest severity written to the log.
public enum LogLevel: String, Sendable, Equatable, Comparable {
  case debug
  case info
  case warn
  case error

  /// 0 (debug) to 3 (error): the order the levels filter in.
  public var rank: Int {
    switch self {
    case .debug: 0
    case .info: 1
    case .warn: 2
    case .error: 3
    }
  }

  /// The levels by `rank`.
  public static let byRank: [LogLevel] = [.debug, .info, .warn, .error]

  public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rank < rhs.rank }
}
