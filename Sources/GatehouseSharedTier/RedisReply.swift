/// One command's outcome: a RESP2 reply from the server, or why there is none. Each command's
/// completion receives exactly one.
public enum RedisReply: Sendable, Equatable {
  /// A simple string (`+OK`, `+PONG`).
  case status(String)
  /// An error reply (`-ERR …`, `-WRONGTYPE …`): the server answered, and refused.
  case error(String)
  case integer(Int64)
  /// A bulk string: a value, kept as bytes.
  case bulk([UInt8])
  /// A null bulk string or null array (`GET` of a missing key).
  case null
  case array([RedisReply])
  /// No reply: the command timed out, the connection was down or lost, or too many were waiting.
  case failure(RedisFailure)

  /// The result class a caller counts in `gatehouse_shared_requests_total{op,result}`.
  public var outcome: RedisOutcome {
    switch self {
    case .status, .integer, .bulk, .array: .ok
    case .null: .miss
    case .error: .error
    case .failure(let failure): failure.outcome
    }
  }

  /// The bytes of a bulk reply; nil for anything else.
  public var bytes: [UInt8]? {
    if case .bulk(let bytes) = self { return bytes }
    return nil
  }
}

/// Why a command got no reply.
public enum RedisFailure: Error, Sendable, Equatable, CustomStringConvertible {
  /// No reply within the command timeout (`shared.timeout_ms`). A late reply is dropped.
  case timedOut
  /// Not connected (connecting, authenticating or waiting to reconnect): failed at once.
  case down
  /// The connection was lost or reset while the command waited; the text says why.
  case disconnected(String)
  /// As many commands as allowed were waiting for replies already.
  case tooManyInFlight
  /// The command had no arguments.
  case emptyCommand
  /// The owner stopped the connection.
  case stopped

  public var description: String {
    switch self {
    case .timedOut: "no reply within the timeout"
    case .down: "the shared tier is down"
    case .disconnected(let problem): "connection lost: \(problem)"
    case .tooManyInFlight: "too many commands waiting for replies"
    case .emptyCommand: "empty command"
    case .stopped: "the connection was stopped"
    }
  }

  public var outcome: RedisOutcome {
    switch self {
    case .timedOut: .timeout
    case .down, .stopped: .down
    case .disconnected, .tooManyInFlight, .emptyCommand: .error
    }
  }
}

/// A reply's class for metrics and logs, independent of the operation.
public enum RedisOutcome: String, Sendable, CaseIterable {
  /// A value or an acknowledgement.
  case ok
  /// A null reply (a missing key).
  case miss
  /// An error reply, a lost connection, or a command refused for lack of room.
  case error
  case timeout
  case down

  /// The `result` label.
  public var label: String { rawValue }
}
