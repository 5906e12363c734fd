import GatehouseJSON
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

extension LogLevel {
  /// The level's name as written in config files and log lines.
  public var name: String { rawValue }
}

/// A value in a log line. Only what callers pass is logged: secrets are never handed in.
public enum LogValue: Sendable {
  case string(String)
  case int(Int)
  case double(Double)
  case bool(Bool)
  case null
}

/// One member of a log line after `ts`, `level` and `msg`.
public typealias LogField = (key: String, value: LogValue)

/// Writes one JSON object per line (Docs/logs.md) to a file descriptor (stdout by default).
/// Lines are assembled off the lock and written with one `write` each, so lines from
/// several threads never interleave.
public final class Logger: Sendable {
  /// The lowest level written. A reload may change it (`setLevel`): an operator lowers or
  /// raises it during an incident without a restart.
  public var level: LogLevel { LogLevel.byRank[levelRank.load(ordering: .relaxed)] }
  private let levelRank: Atomic<Int>
  let fileDescriptor: Int32
  private let writeLock = Mutex(())

  public init(level: LogLevel = .info, fileDescriptor: Int32 = 1) {
    levelRank = Atomic(level.rank)
    self.fileDescriptor = fileDescriptor
  }

  public func setLevel(_ level: LogLevel) {
    levelRank.store(level.rank, ordering: .relaxed)
  }

  public func isEnabled(_ level: LogLevel) -> Bool { level.rank >= levelRank.load(ordering: .relaxed) }

  public func debug(_ msg: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.debug, msg, fields) }
  public func info(_ msg: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.info, msg, fields) }
  public func warn(_ msg: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.warn, msg, fields) }
  public func error(_ msg: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.error, msg, fields) }

  public func log(_ level: LogLevel, _ msg: String, _ fields: KeyValuePairs<String, LogValue>) {
    write(level, msg, fields)
  }

  /// `log` with fields built at run time (a `KeyValuePairs` can only be a literal).
  public func log(_ level: LogLevel, _ msg: String, fields: [LogField]) {
    write(level, msg, fields)
  }

  private func write<Fields: Sequence<LogField>>(_ level: LogLevel, _ msg: String, _ fields: Fields) {
    guard isEnabled(level) else { return }
    var line: [UInt8] = []
    line.reserveCapacity(128)
    Self.appendPrefix(level: level, msg: msg, to: &line)
    for (key, value) in fields {
      line.append(0x2C)
      JSONText.appendString(key, to: &line)
      line.append(0x3A)
      Self.append(value, to: &line)
    }
    line.append(contentsOf: "}\n".utf8)
    writeLine(line)
  }

  /// Writes bytes that already hold whole lines (batched access log lines).
  public func writeLine(_ bytes: [UInt8]) {
    writeLock.withLock { _ in
      bytes.withUnsafeBytes { raw in
        var offset = 0
        while offset < raw.count {
          let n = Glibc.write(fileDescriptor, raw.baseAddress! + offset, raw.count - offset)
          if n > 0 {
            offset += n
          } else if n < 0 && errno == EINTR {
            continue
          } else {
            return  // a closed stdout must not take the gateway down
          }
        }
      }
    }
  }

  /// `{"ts":"…","level":"…","msg":"…"` without the closing brace.
  public static func appendPrefix(level: LogLevel, msg: String, to line: inout [UInt8]) {
    let now = RFC3339.now()
    line.append(contentsOf: #"{"ts":""#.utf8)
    RFC3339.append(seconds: now.seconds, milliseconds: now.milliseconds, to: &line)
    line.append(contentsOf: #"","level":""#.utf8)
    line.append(contentsOf: level.name.utf8)
    line.append(contentsOf: #"","msg":"#.utf8)
    JSONText.appendString(msg, to: &line)
  }

  static func append(_ value: LogValue, to line: inout [UInt8]) {
    switch value {
    case .string(let text): JSONText.appendString(text, to: &line)
    case .int(let number): line.append(contentsOf: String(number).utf8)
    case .double(let number): line.append(contentsOf: (number.isFinite ? String(number) : "null").utf8)
    case .bool(let flag): line.append(contentsOf: (flag ? "true" : "false").utf8)
    case .null: line.append(contentsOf: "null".utf8)
    }
  }
}
