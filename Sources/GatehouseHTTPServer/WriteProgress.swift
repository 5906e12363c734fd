import GatehouseNet

/// Whether a client with output queued is reading it, judged by what the kernel saw it
/// acknowledge since a write deadline was armed. (A shrinking queue would not do: the
/// kernel's send buffer can grow and take queued bytes while the client reads nothing.)
struct WriteProgress {
  /// What the client had acknowledged when the deadline was armed, or one of the markers.
  private var mark: Int64 = WriteProgress.nothingQueued
  /// Nothing was queued when the deadline was armed: a deadline that finds output queued
  /// gives one more period.
  static let nothingQueued: Int64 = -1
  /// The kernel could not say: a deadline that finds output queued cuts, as a plain timeout.
  static let unknown: Int64 = -2

  /// Asked of the kernel only with output queued: it costs a syscall, and most answers leave
  /// nothing queued.
  mutating func arm(_ connection: BufferedConnection?) {
    guard let connection, connection.queuedByteCount > 0 else {
      mark = Self.nothingQueued
      return
    }
    mark = connection.peerAcknowledgedBytes ?? Self.unknown
  }

  /// At the deadline: whether the client, with output still queued, took some since `arm`.
  func clientTookOutput(_ connection: BufferedConnection) -> Bool {
    guard connection.queuedByteCount > 0 else { return false }
    switch mark {
    case Self.nothingQueued: return true
    case Self.unknown: return false
    default: return (connection.peerAcknowledgedBytes ?? mark) > mark
    }
  }
}
