/// Every failure the store reports: what kind of failure, SQLite's result code and message
/// where SQLite produced it, and the SQL that was running.
///
/// A struct over a closed set of kinds (rather than a public enum) so kinds can be added
/// later without breaking callers' exhaustive switches.
public struct StoreError: Error, Sendable, CustomStringConvertible {
  /// The category of a failure; compare with the static members.
  public struct Kind: Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
      case sqlite
      case cannotOpen
      case corrupt
      case unsupportedSchema
      case closed
      case invalidCursor
      case invalidArgument
      case crypto
    }
    private let base: Base
    private init(_ base: Base) { self.base = base }

    /// SQLite returned an error code while running a statement.
    public static let sqlite = Kind(.sqlite)
    /// The store file or its directory cannot be opened or created (permissions, missing
    /// directory, path is not a regular file, file locked by another process).
    public static let cannotOpen = Kind(.cannotOpen)
    /// The file is damaged or is not an SQLite database.
    public static let corrupt = Kind(.corrupt)
    /// The file was written by a newer Gatehouse (its schema version is unknown to us).
    public static let unsupportedSchema = Kind(.unsupportedSchema)
    /// The store was closed.
    public static let closed = Kind(.closed)
    /// A listing cursor that this store did not produce.
    public static let invalidCursor = Kind(.invalidCursor)
    /// An argument out of range (negative limit, oversized value...).
    public static let invalidArgument = Kind(.invalidArgument)
    /// OpenSSL failed (random bytes, cipher setup).
    public static let crypto = Kind(.crypto)

    public var description: String {
      switch base {
      case .sqlite: return "sqlite"
      case .cannotOpen: return "cannotOpen"
      case .corrupt: return "corrupt"
      case .unsupportedSchema: return "unsupportedSchema"
      case .closed: return "closed"
      case .invalidCursor: return "invalidCursor"
      case .invalidArgument: return "invalidArgument"
      case .crypto: return "crypto"
      }
    }
  }

  /// What went wrong.
  public let kind: Kind
  /// SQLite's extended result code, or 0 when the error did not come from SQLite.
  public let resultCode: Int32
  /// SQLite's message (`sqlite3_errmsg`) or our own explanation.
  public let message: String
  /// The statement that failed, if any. Statements never carry token values: those are
  /// always bound as parameters.
  public let sql: String?
  /// The operating system's `errno` behind an I/O-class SQLite failure (`ENOSPC` for a full
  /// disk, `EACCES`...), or 0 when there was none or SQLite did not report it.
  public let systemErrno: Int32

  public init(kind: Kind, resultCode: Int32 = 0, message: String, sql: String? = nil, systemErrno: Int32 = 0) {
    self.kind = kind
    self.resultCode = resultCode
    self.message = message
    self.sql = sql
    self.systemErrno = systemErrno
  }

  public var description: String {
    var text = "store error (\(kind)"
    if resultCode != 0 { text += ", sqlite code \(resultCode)" }
    text += "): \(message)"
    if let sql { text += " [sql: \(sql)]" }
    return text
  }
}
